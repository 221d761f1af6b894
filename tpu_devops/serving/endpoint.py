"""Endpoint discovery (DESIGN §3): ``VLLM_URL`` if set, else our ACTIVE queued resource's node IP.

Discovery lists queued resources in every zone (or only the zone asked for: find_tpu may have landed
anywhere, and a second TPU of the rig may have any id), keeps those labelled ``managed-by=tpu-devops``
and ``rig=<RESOURCE_ID>``, and for the single ACTIVE one reads its node's
``networkEndpoints[0].accessConfig.externalIp``: ``http://IP:VLLM_PORT``. The IP changes with every
recreate, so it is never cached or hard-coded. Clear answers for none / still provisioning / several.

Whether this machine reaches that endpoint is `tpu_devops.serving.reachability` (check_setup).
"""

from __future__ import annotations

from typing import Any

from tpu_devops.config import Settings
from tpu_devops.host.results import ToolResult


class EndpointResult(ToolResult):
    """``status``: configured (VLLM_URL), discovered, none, pending (no TPU yet, but a sweep or create of
    this rig is making one), not_ready (ours exists but is not ACTIVE), several (more than one ACTIVE of
    ours), no_ip (ACTIVE but no external IP). ``url`` is set for the first two only. ``jobs_running``: the
    jobs working for the rig (a reconfigure replacing the container, a sweep), named in ``next_step``
    with when to look again."""

    status: str
    url: str | None = None
    source: str
    zone: str | None = None
    queued_resource_id: str | None = None
    state: str | None = None
    candidates: list[str] = []
    jobs_running: list[str] = []
    next_step: str

    def headline(self) -> str:
        if self.url:
            return f"vLLM endpoint: {self.url} ({self.source})"
        return f"no endpoint ({self.status}): {self.next_step}"


async def get_vllm_endpoint(
    settings: Settings, zone: str | None = None, *, state: Any = None
) -> EndpointResult:
    """The vLLM base URL (no ``/v1``), or a clear reason there is none.

    ``zone``: None (the configured zone, then every zone), a zone (only that one), or ``"all"``
    (every zone at once, as `list_queued_resources` accepts). An explicitly empty zone is an error.
    Discovery reads the rig's state (`tpu_devops.provisioning.rig.rig_state`; ``state`` when the caller
    has read it already), so a sweep or create that is making the TPU, or a reconfigure replacing its
    container, is named with when to look again.

    Raises:
        ConfigError: discovery needed but no project configured; a bad or empty zone.
        CloudError: listing queued resources failed.
    """
    if settings.vllm_url:
        return EndpointResult(
            status="configured",
            url=settings.vllm_url,
            source="VLLM_URL",
            next_step="verify_model_health checks it answers",
        )
    from tpu_devops.config import require_project
    from tpu_devops.provisioning.cloud import node_external_ip
    from tpu_devops.provisioning.requests import or_default
    from tpu_devops.provisioning.rig import next_step_for, rig_state
    from tpu_devops.types import check_zone

    require_project(settings)
    explicit = zone is not None
    zone = or_default(zone, settings.zone, "zone")
    everywhere = zone.strip().lower() == "all"
    if everywhere or not explicit:
        # find_tpu may have landed in another zone, and a second TPU of the rig may be anywhere under any
        # id: look in every zone (concurrently), whatever the configured zone holds.
        state = state or await rig_state(settings)
        ours = state.queued_resources
        zone = ours[0].zone if ours else ("all" if everywhere else check_zone(zone))
    else:
        zone = check_zone(zone)
        state = await rig_state(settings, zone=zone)
        if state.unlisted:  # the one zone asked for: its failure is the answer
            from tpu_devops.errors import CloudError

            raise CloudError(
                f"could not list queued resources in {zone}: {state.unlisted[zone]}", field="zone", value=zone,
                fix="try again shortly, or omit zone to search every zone",
            )  # fmt: skip
        ours = state.queued_resources
    active = [q for q in ours if q.state == "ACTIVE"]
    jobs = [j.line() for j in state.jobs]
    if not any(q.live for q in ours) and state.making():
        return EndpointResult(
            status="pending", source="discovery", zone=zone, jobs_running=jobs,
            next_step=f"no TPU of rig '{settings.resource_id}' yet: {state.in_flight()}; do not create another",
        )  # fmt: skip
    if not ours:
        return EndpointResult(
            status="none", source="discovery", zone=zone, jobs_running=jobs,
            next_step=f"no TPU of rig '{settings.resource_id}' in {zone} or any other zone: create one (find_tpu / create_tpu_queued_resource) or set VLLM_URL",
        )  # fmt: skip
    if not active:
        q = next((q for q in ours if q.live), ours[0])
        working = state.in_flight(q)
        return EndpointResult(
            status="not_ready", source="discovery", zone=zone, queued_resource_id=q.id, state=q.state,
            jobs_running=jobs, next_step=f"{working}. {next_step_for(q.state)}" if working else next_step_for(q.state),
        )  # fmt: skip
    if len(active) > 1:
        return EndpointResult(
            status="several", source="discovery", zone=zone, candidates=[f"{q.id} ({q.zone})" for q in active],
            next_step="several ACTIVE TPUs of this rig: set VLLM_URL to the one you mean, or destroy the extras",
        )  # fmt: skip
    q = active[0]
    zone = q.zone
    ip, node = await node_external_ip(settings, zone, q.node_id or q.id)
    if not ip:
        return EndpointResult(
            status="no_ip", source="discovery", zone=zone, queued_resource_id=q.id, state=q.state,
            jobs_running=jobs, next_step=_internal_only_step(settings, q.id, zone, node),
        )  # fmt: skip
    working = state.in_flight(q)
    step = "verify_model_health checks it answers (boot takes ~10-15 min)"
    return EndpointResult(
        status="discovered", url=f"http://{ip}:{settings.vllm_port}", source="discovery", zone=zone,
        queued_resource_id=q.id, state=q.state, jobs_running=jobs,
        next_step=f"{working}: it may not answer until that ends; {step}" if working else step,
    )  # fmt: skip


def _internal_only_step(settings: Settings, qr_id: str, zone: str, node: dict[str, Any] | None) -> str:
    """What to do about a node without an external IP: reach its internal address from inside the VPC, or
    tunnel through IAP (README "No external IP"); why it has none (TPU_EXTERNAL_IP=0 or the network)."""
    internal = next(
        (ep.get("ipAddress") for ep in (node or {}).get("networkEndpoints", []) or [] if ep.get("ipAddress")),
        None,
    )
    why = (
        "TPU_EXTERNAL_IP=0: the node has an internal address only"
        if not settings.external_ip
        else "the node has no external IP (an internal-only network, or an organisation policy)"
    )
    inside = (
        f"VLLM_URL=http://{internal}:{settings.vllm_port}" if internal else "VLLM_URL=http://INTERNAL_IP:PORT"
    )
    return (
        f"{why}; from a machine in the VPC set {inside}, or keep an IAP tunnel open (gcloud compute tpus "
        f"queued-resources ssh {qr_id} --zone={zone} --tunnel-through-iap -- -N -L "
        f"{settings.vllm_port}:localhost:{settings.vllm_port}) and set VLLM_URL=http://127.0.0.1:{settings.vllm_port}"
    )
