"""Bench (opt-in): price a deployment, measure the endpoint under load (clients x prompt length) and price
it, or import `vllm bench serve` results into the same table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

import tpu_devops
from tpu_devops.config import get_settings
from tpu_devops.host.toolsets import LOADS, READ, Toolset
from tpu_devops.tools.args import (
    SANE,
    AcceleratorType,
    BenchmarkSweep,
    EndpointRef,
    ProvisioningModel,
    Region,
    ServedModel,
    UsdPerChipHour,
)

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.planning.pricing
    import tpu_devops.serving.benchmark

toolset = Toolset(
    "bench",
    "price a deployment; benchmark the endpoint (tok/s, TTFT, TPOT, $/M) or import results",
    default=False,
)
tool = toolset.tool
toolset.renamed("import_benchmark_results", "run_benchmark with results_path=<the JSON file or directory>")

ResultsDir = Annotated[str | None, Field(max_length=4096, description="directory for CSV, JSON, PNG"), SANE]


@tool(title="Benchmark the endpoint (or import results)", kind=LOADS, open_world=True)
async def run_benchmark(
    sweep: BenchmarkSweep,
    endpoint: EndpointRef,
    model: ServedModel = None,
    provisioning_model: Annotated[ProvisioningModel, Field(description="price at this model's rate")] = None,
    results_dir: ResultsDir = None,
    results_path: Annotated[
        str | None, Field(max_length=4096, description="vllm bench JSON to import instead"), SANE
    ] = None,
) -> tpu_devops.serving.benchmark.BenchmarkAnswer:
    """Job: benchmark tok/s, TTFT, TPOT, $/M; or import results.

    Start a benchmark sweep (concurrency x prompt length) as a job and return its id at once. Per cell:
    output tok/s, median and p99 TTFT, median TPOT, per-stream tok/s, failures, $/M output tokens at the live
    price, and a warning where clients x context exceeds the KV pool. Writes CSV, JSON and a PNG heatmap.
    Read-only towards the cloud, but it loads the endpoint. With results_path it sends no load: it reads
    `vllm bench serve` JSON results into the same table, priced, at once."""
    return await tpu_devops.serving.benchmark.run_or_import(
        get_settings(),
        results_path=results_path,
        provisioning_model=provisioning_model,
        results_dir_path=results_dir,
        model=model,
        **sweep.values(),
        **endpoint.values(),
    )


@tool(title="Estimate deployment cost", kind=READ, open_world=True)
async def estimate_deployment_cost(
    accelerator_type: AcceleratorType = None,
    provisioning_model: ProvisioningModel = None,
    region: Region = None,
    tokens_per_s: Annotated[
        float | None, Field(ge=0.01, le=10_000_000, description="output tok/s for $/M tokens")
    ] = None,
    duration_hours: Annotated[float | None, Field(ge=0.01, le=8760, description="hours to price")] = None,
    usd_per_chip_hour: UsdPerChipHour = None,
) -> tpu_devops.planning.pricing.CostEstimate:
    """Price a deployment: $/hour, $/month, $/M tokens.

    Price a deployment from the live Cloud Billing Catalog (a dated fallback table if unreachable; the
    answer says which): $/hour, $/month at 24/7, a given duration, $/M output tokens at a given throughput,
    one preemption (a cold start at this rate) and a forgotten weekend."""
    return await tpu_devops.planning.pricing.estimate_cost(
        get_settings(),
        accelerator_type=accelerator_type,
        region=region,
        provisioning_model=provisioning_model,
        tokens_per_s=tokens_per_s,
        duration_hours=duration_hours,
        usd_per_chip_hour=usd_per_chip_hour,
    )
