"""Scale-out (opt-in): size a throughput or latency target on one multi-chip host, GKE nodes or one
tensor-parallel engine, ranked by cost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

import tpu_devops
from tpu_devops.config import MAX_MODEL_LEN_RANGE, get_settings
from tpu_devops.host.toolsets import READ, Toolset
from tpu_devops.tools.args import SANE, ProvisioningModel, Region, UsdPerChipHour

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.planning.scaleout

toolset = Toolset("scaleout", "compare engines per host, GKE nodes and TP for a tok/s target", default=False)
tool = toolset.tool


@tool(title="Plan scale-out: engines, chips, shape and cost", kind=READ, open_world=True)
async def plan_scale_out(
    target_output_tokens_per_s: Annotated[
        float | None, Field(ge=1, le=10_000_000, description="target output tok/s")
    ] = None,
    streams: Annotated[int | None, Field(ge=1, le=100_000, description="or concurrent streams"), SANE] = None,
    ttft_ms: Annotated[
        float | None, Field(ge=1, le=600_000, description="median TTFT goal, ms"), SANE
    ] = None,
    tpot_ms: Annotated[
        float | None, Field(ge=0.1, le=60_000, description="median TPOT goal, ms"), SANE
    ] = None,
    curve: Annotated[
        str | None, Field(max_length=4096, description="measured one-chip curve JSON"), SANE
    ] = None,
    prompt_tokens: Annotated[
        int | None, Field(ge=1, le=MAX_MODEL_LEN_RANGE[1], description="prompt tokens")
    ] = None,
    chips: Annotated[int | None, Field(ge=1, le=256, description="chips per host"), SANE] = None,
    model: Annotated[str | None, Field(description="config.json path or repo id")] = None,
    provisioning_model: ProvisioningModel = None,
    region: Region = None,
    usd_per_chip_hour: UsdPerChipHour = None,
) -> tpu_devops.planning.scaleout.ScaleOutPlan:
    """Rank scale-out shapes (engines, GKE nodes, TP) by cost.

    Size a target (output tok/s, or N streams within TTFT / TPOT objectives) on each shape: N one-chip
    engines on one multi-chip host, N single-chip GKE nodes, one tensor-parallel engine (with its KV-cache
    replication). Per shape: engines, chips, hosts or nodes, tok/s, TPOT, TTFT, $/h, $/M output tokens;
    ranked, with the winner and why. Built on a measured one-chip curve and a stated step-time model."""
    return await tpu_devops.planning.scaleout.plan_scale_out(
        get_settings(),
        target_output_tokens_per_s=target_output_tokens_per_s,
        streams=streams,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        curve=curve,
        prompt_tokens=prompt_tokens,
        chips=chips,
        model=model,
        provisioning_model=provisioning_model,
        region=region,
        usd_per_chip_hour=usd_per_chip_hour,
    )
