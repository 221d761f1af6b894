"""The Compute Engine quota a GKE TPU node pool draws, and whether it covers the plan.

GKE TPU nodes are Compute Engine VMs: they draw the regional Compute Engine quota
(``compute.googleapis.com``) of their machine type, not the TPU API quota (``tpu.googleapis.com``) a
queued resource uses (GKE "Troubleshoot TPUs in GKE"; metric names in `tpu_devops.catalog`). Compute
Engine's ``regions.get`` reports each metric's limit and current usage, so the check is free room
(limit - usage) against the chips the node pool asks for: ``replicas`` nodes at once (flex-start: as
soon as pods wait) and up to ``max_replicas`` under the autoscaler. Chips per node come from the
machine type (``ct5lp-hightpu-1t``: one chip).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.catalog import resolve_accelerator_type
from tpu_devops.config import Settings
from tpu_devops.errors import TpuDevopsError


class ComputeQuotaCheck(BaseModel):
    """The Compute Engine quota of the node pool's nodes. Counts are chips; ``free`` = limit - usage.

    ``verdict``: ``enough`` (covers max_replicas), ``enough_for_replicas`` (covers replicas, not the
    autoscaler's ceiling), ``short`` (not even replicas: the nodes would never come), ``unchecked``
    (no metric known for this generation, or the API refused: ``detail`` says which).
    """

    service: str = "compute.googleapis.com"
    metric: str | None = Field(description="Compute Engine regional quota metric, e.g. TPU_LITE_PODSLICE_V5")
    region: str
    limit: float | None = None
    usage: float | None = None
    free: float | None = None
    needed_for_replicas: int
    needed_for_max_replicas: int
    verdict: str
    detail: str

    def fix(self) -> str:
        """What to do about a short quota."""
        return (
            f"request more {self.metric} quota for {self.region} (Compute Engine API, "
            "console: IAM & Admin > Quotas), or lower replicas; the TPU API quota does not apply to GKE nodes"
        )


def chips_per_node(settings: Settings) -> int:
    """TPU chips of one node of the pool (its machine type is the one-chip host of the generation)."""
    gen = resolve_accelerator_type(settings.accelerator_type).generation
    return 1 if 1 in gen.machine_types else min(gen.machine_types)


def node_pool_quota(settings: Settings, *, zone: str, replicas: int, max_replicas: int) -> ComputeQuotaCheck:
    """Read and judge the Compute Engine quota the node pool in ``zone`` draws (blocking: run it through
    `tpu_devops.gcp.common.run_blocking`). A refused read is reported (verdict ``unchecked``), not raised:
    the plan stands without it."""
    from tpu_devops.gcp.compute import ComputeApi

    accel = resolve_accelerator_type(settings.accelerator_type)
    metric = accel.compute_quota_metric_for(settings.provisioning_model)
    region = zone.rsplit("-", 1)[0]
    per_node = chips_per_node(settings)
    need_min, need_max = replicas * per_node, max_replicas * per_node
    base: dict[str, Any] = {
        "metric": metric,
        "region": region,
        "needed_for_replicas": need_min,
        "needed_for_max_replicas": need_max,
    }
    if metric is None:
        return ComputeQuotaCheck(
            **base, verdict="unchecked",
            detail=f"no Compute Engine quota metric is documented for {accel.generation.name} GKE nodes: check the "
            f"Quotas page of compute.googleapis.com in {region}",
        )  # fmt: skip
    try:
        quotas = ComputeApi(settings).region_quotas(region)
    except TpuDevopsError as exc:
        return ComputeQuotaCheck(
            **base, verdict="unchecked",
            detail=f"could not read {metric} in {region} ({exc.message}); GKE nodes draw it, not the TPU API quota",
        )  # fmt: skip
    if metric not in quotas:
        return ComputeQuotaCheck(
            **base, limit=0, usage=0, free=0, verdict="short",
            detail=f"{region} reports no {metric} quota (limit 0): no {accel.generation.name} GKE node can start",
        )  # fmt: skip
    limit, usage = quotas[metric]
    free = limit - usage
    if free >= need_max:
        verdict, how = "enough", f"covers max_replicas ({need_max} chip(s))"
    elif free >= need_min:
        verdict, how = (
            "enough_for_replicas",
            f"covers replicas ({need_min}) but not max_replicas ({need_max}): the autoscaler stops at {int(free // per_node)}",
        )
    else:
        verdict, how = "short", f"short of replicas ({need_min} chip(s)): the nodes would never start"
    return ComputeQuotaCheck(
        **base, limit=limit, usage=usage, free=free, verdict=verdict,
        detail=f"Compute Engine quota {metric} in {region}: limit {limit:g}, in use {usage:g}, free {free:g}; {how}",
    )  # fmt: skip
