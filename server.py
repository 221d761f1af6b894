"""tpu-devops MCP server: a thin, readable list of tools, grouped by area. No logic lives here.

Each tool's docstring is its MCP description. Logic lives in ``tpu_devops/`` and is imported when a
tool first runs (heavy clients such as google-cloud and openai later still), and the tool schemas are
cached between starts (`tpu_devops.host.tool_cache`), so ``initialize`` and ``tools/list`` stay fast.
Run with ``tpu-devops-mcp`` or ``./mcp-run.sh``.
"""

from __future__ import annotations

if __name__ == "__main__":  # `python server.py`: the entry point validates settings before importing us
    from tpu_devops.main import main

    raise SystemExit(main())

from pathlib import Path
from typing import Annotated, Any

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver.resolve import Resolve
from pydantic import BeforeValidator, Field

# Submodules of tpu_devops load on first use (PEP 562): with cached schemas, listing the tools imports
# no logic module; each loads when one of its tools is first called.
import tpu_devops
from tpu_devops import __version__, logs, serving
from tpu_devops.config import (
    GPU_MEMORY_UTILIZATION_RANGE,
    MAX_MODEL_LEN_RANGE,
    MAX_NUM_BATCHED_TOKENS_RANGE,
    get_settings,
)
from tpu_devops.host.registration import Registrar
from tpu_devops.host.results import MAX_EVIDENCE_TOKENS
from tpu_devops.host.tool_cache import open_schema_cache

settings = get_settings()
# Tools are declared below and served by the MCPServer built at the end of this file.
tools = Registrar(
    read_only=settings.read_only, schema_cache=open_schema_cache(settings.cache_dir, Path(__file__))
)
READ = dict(read_only=True, destructive=False, idempotent=True)


# ---- Help -------------------------------------------------------------------------------------------


# Claude Code defers MCP tools behind a search step; alwaysLoad keeps this one loaded from the first turn
# (read by Claude Code; other hosts ignore _meta; see anthropics/claude-code#56551, colbymchenry/codegraph#1697).
HELP_META = {"anthropic/alwaysLoad": True, "anthropic/searchHint": "tpu-devops help start here"}


@tools.tool(title="Help: configuration and tools", open_world=False, meta=HELP_META, **READ)
async def get_help() -> tpu_devops.host.tooldocs.HelpResult:
    """Start here: tpu-devops (Gemma 4 on Cloud TPU, vLLM): configuration, errors, tools.

    Tools marked read-only never change anything in the cloud.
    """
    return tpu_devops.host.tooldocs.build_help(settings, await mcp.list_tools())


# ---- Planning (no cloud account needed) ---------------------------------------------------------
# Sizing, flag lint, the startup script and boot-log diagnosis: pure computation on local inputs.


ImageOverride = Annotated[str | None, Field()]
ModelNameOverride = Annotated[str | None, Field()]
MaxLenOverride = Annotated[
    int | None,
    Field(
        ge=MAX_MODEL_LEN_RANGE[0],
        le=MAX_MODEL_LEN_RANGE[1],
    ),
]
UtilOverride = Annotated[
    float | None,
    Field(
        ge=GPU_MEMORY_UTILIZATION_RANGE[0],
        le=GPU_MEMORY_UTILIZATION_RANGE[1],
    ),
]
BatchedOverride = Annotated[
    int | None,
    Field(
        ge=MAX_NUM_BATCHED_TOKENS_RANGE[0],
        le=MAX_NUM_BATCHED_TOKENS_RANGE[1],
    ),
]


@tools.tool(title="Plan capacity: HBM budget and KV cache", open_world=True, **READ)
def plan_capacity(
    model: Annotated[
        str | None,
        Field(description="config.json or repo id"),
    ] = None,
    accelerator_type: Annotated[
        str | None,
        Field(description="e.g. v5litepod-1"),
    ] = None,
    gpu_memory_utilization: UtilOverride = None,
    max_model_len: MaxLenOverride = None,
    tensor_parallel_size: Annotated[
        int | None,
        Field(ge=1, le=256),
    ] = None,
    weights_gib: Annotated[
        float | None,
        Field(ge=0.01, le=4096),
    ] = None,
    clients: Annotated[
        int | None,
        Field(ge=1, le=100_000),
    ] = None,
    context_tokens: Annotated[
        int | None,
        Field(ge=1, le=MAX_MODEL_LEN_RANGE[1]),
    ] = None,
    kv_cache_dtype: Annotated[str, Field()] = "bfloat16",
) -> tpu_devops.planning.sizing.PlanResult:
    """HBM and KV-cache budget: KV bytes/token, pool tokens, max concurrency.

    What a deployment holds before you pay for it: KV bytes per token from the model's config geometry
    (per layer group: cache-owning vs KV-shared layers, sliding vs full attention, head_dim, KV heads and
    their replication under tensor parallelism), the HBM budget (total, cap, weights, KV pool, the
    remainder outside the cap that holds compiled programs), KV tokens in whole blocks, max concurrency at
    max_model_len, and whether clients x context_tokens fits. Without a known weight size it
    still gives every figure that needs no weights (KV bytes per token, the cap, KV tokens per GiB of pool,
    the KV one request needs) and says what the weights would add. Gemma 4 E2B on v5litepod-1 at 0.92 and 16,384:
    18,432 B/token, 321,376 tokens."""
    return tpu_devops.planning.sizing.plan_capacity_with_defaults(
        settings,
        model=model,
        accelerator_type=accelerator_type,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        tensor_parallel_size=tensor_parallel_size,
        weights_gib=weights_gib,
        clients=clients,
        context_tokens=context_tokens,
        kv_cache_dtype=kv_cache_dtype,
    )


@tools.tool(title="Plan scale-out: engines, chips, shape and cost", open_world=True, **READ)
async def plan_scale_out(
    target_output_tokens_per_s: Annotated[
        float | None,
        Field(ge=1, le=10_000_000),
    ] = None,
    streams: Annotated[
        int | None,
        Field(ge=1, le=100_000),
    ] = None,
    ttft_ms: Annotated[float | None, Field(ge=1, le=600_000)] = None,
    tpot_ms: Annotated[float | None, Field(ge=0.1, le=60_000)] = None,
    curve: Annotated[
        str | None,
        Field(),
    ] = None,
    prompt_tokens: Annotated[
        int | None,
        Field(ge=1, le=MAX_MODEL_LEN_RANGE[1]),
    ] = None,
    chips: Annotated[
        int | None,
        Field(ge=1, le=256),
    ] = None,
    model: Annotated[str | None, Field()] = None,  # a config.json path or a repo id, as plan_capacity's
    provisioning_model: Annotated[str | None, Field(description="flex-start, spot or on-demand")] = None,
    region: Annotated[str | None, Field()] = None,
    usd_per_chip_hour: Annotated[float | None, Field(ge=0.001, le=1000)] = None,
) -> tpu_devops.planning.scaleout.ScaleOutPlan:
    """Compare scale-out shapes (engines per host, GKE nodes, TP) for a tok/s target.

    Size a target (output tok/s, or N streams within TTFT / TPOT objectives) on each shape: N one-chip
    engines on one multi-chip host, N single-chip GKE nodes, one tensor-parallel engine (with its KV-cache
    replication). Per shape: engines, chips, hosts or nodes, tok/s, TPOT, TTFT, $/h, $/M output tokens;
    ranked, with the winner and why. Built on a measured one-chip curve and a stated step-time model."""
    return await tpu_devops.planning.scaleout.plan_scale_out(
        settings,
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


@tools.tool(title="Lint vLLM serve flags for TPU", open_world=False, **READ)
def lint_vllm_flags(
    command: Annotated[
        str | None,
        Field(
            max_length=8_000,
        ),
    ] = None,
    flags: Annotated[
        dict[str, Any] | None,
        Field(
            max_length=100,
            description="instead of command",
        ),
    ] = None,
    accelerator_type: Annotated[str | None, Field()] = None,
    model: Annotated[str | None, Field()] = None,
    image: Annotated[str | None, Field()] = None,
    health_check_path: Annotated[str | None, Field()] = None,
    engines: Annotated[
        int,
        Field(ge=1, le=64),
    ] = 1,
) -> tpu_devops.planning.lint.LintResult:
    """Check vllm serve flags for known TPU traps, with fixes.

    Check vLLM-on-TPU flags for the known traps before a boot fails: memory utilization above 0.92 on
    v5e, fp8 or invalid KV cache dtypes, non-power-of-two or too-small max-num-batched-tokens, pinned
    block size, tensor parallelism beyond the chips or with one KV head, chips paid for and idle (engines x
    TP below the slice's chips), missing tool-calling flags,
    /v1/completions health checks on -it models, unpinned images, no compile-cache mount. Each finding:
    severity, flag, value, what happens, why, source, fix."""
    return tpu_devops.planning.lint.lint_with_defaults(
        settings,
        command=command,
        flags=flags,
        accelerator_type=accelerator_type,
        model=model,
        image=image,
        health_check_path=health_check_path,
        engines=engines,
    )


@tools.tool(title="Render the TPU VM startup script", open_world=False, **READ)
def render_startup_script(
    model_name: ModelNameOverride = None,
    max_model_len: MaxLenOverride = None,
    gpu_memory_utilization: UtilOverride = None,
    vllm_image: ImageOverride = None,
    max_num_batched_tokens: BatchedOverride = None,
) -> tpu_devops.planning.startup.RenderedScript:
    """The TPU VM startup script from tpu.env (with overrides). Runs nothing.

    Render the startup script a TPU VM runs at boot (from tpu.env, with optional overrides): fetch the
    Hugging Face token from Secret Manager with the VM's service account (retrying up to 30 min; the
    token is never in the script), pull the pinned vLLM image, mount the compile cache, ship container
    logs to Cloud Logging, record the serving flags and progress in guest attributes. Nothing is run."""
    return tpu_devops.planning.startup.render_startup_script(
        tpu_devops.planning.startup.apply_overrides(
            settings,
            model_name=model_name,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            vllm_image=vllm_image,
            max_num_batched_tokens=max_num_batched_tokens,
        )
    )


@tools.tool(title="Show the vLLM deployment as commands", open_world=False, **READ)
async def get_vllm_deployment_config(
    model_name: ModelNameOverride = None,
    max_model_len: MaxLenOverride = None,
    gpu_memory_utilization: UtilOverride = None,
    vllm_image: ImageOverride = None,
) -> tpu_devops.planning.deployment.DeploymentConfig:
    """The deployment as commands: vllm serve, docker run, gcloud. Runs nothing.

    The deployment as human-readable commands: the vllm serve line (built by the same function as the
    startup script), the docker run line, the equivalent gcloud commands (secret, IAM grant, queued
    resource create/describe/delete, logs) and a chat-completions health check. Nothing is run."""
    return await tpu_devops.planning.deployment.deployment_config(
        tpu_devops.planning.startup.apply_overrides(
            settings,
            model_name=model_name,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            vllm_image=vllm_image,
        )
    )


@tools.tool(title="Diagnose a vLLM boot log", open_world=True, **READ)
async def diagnose_vllm_boot(
    log_text: Annotated[str | None, Field(max_length=1_000_000)] = None,
    path: Annotated[str | None, Field(max_length=4096)] = None,
    node: Annotated[str | None, Field()] = None,
    since: Annotated[str, Field(description="with node: 30m/6h/2d")] = "24h",
) -> logs.boot.BootDiagnosis:
    """Why vLLM did or did not boot (log, file or node): cause and fix.

    Why did (or didn't) vLLM boot? Parses the vLLM version, non-default args, phase timeline (weights,
    memory statistics, KV init, compile seconds, startup complete), the logged HBM budget and KV tokens
    cross-checked against plan_capacity, and classifies failures with cause, fix and the numbers read out:
    program allocation / HBM / VMEM / SMEM OOM, KV cache smaller than one request, unsupported weight
    quantization, TP not dividing the model, torchax path failures, image pull failures and startup-script
    exits, Hugging Face 401/403/404/429 and unreachable, invalid flags and parsers. A line no rule explains
    is an "unrecognised failure" with its line number, never dropped; harmless noise (vllm._C, Triton,
    metadata 404s) is counted, never a root cause. Boot state is apart from serving problems (a server that
    started and rejects requests is "boot OK, but requests fail"). With node, the container log is read from
    Cloud Logging (redacted) instead of being pasted. With a project configured, it also says whether a warm
    compile cache and staged weights exist for the deployment and the expected boot time (seed measurement)."""
    run = tpu_devops.gcp.common.run_blocking
    if node:
        logs.boot.refuse_two_sources(node, log_text, path)
        log_text = await run(logs.sources.fetch_container_log_text, settings, node, since=since)
    diagnosis = await run(logs.boot.diagnose_vllm_boot, log_text=log_text, path=path, settings=settings)
    return await tpu_devops.planning.warmboot.annotate(settings, diagnosis)


# ---- Capacity and provisioning (Google Cloud) --------------------------------------------------


CLOUD_WRITE = dict(read_only=False, destructive=False)
ZoneArg = Annotated[str | None, Field()]
QrIdArg = Annotated[str | None, Field()]
PmArg = Annotated[str | None, Field(description="flex-start, spot or on-demand")]
MaxRunArg = Annotated[
    int | None,
    Field(
        ge=600,
        le=7 * 86400,
        description="flex-start only",
    ),
]
ValidUntilArg = Annotated[
    int | None,
    Field(
        ge=60,
        le=30 * 86400,
        description="max wait for capacity",
    ),
]
SourceRangesArg = Annotated[
    list[str] | None,
    Field(description="source CIDRs"),
]
OpenToInternetArg = Annotated[
    bool,
    Field(description="allow 0.0.0.0/0"),
]


@tools.tool(title="Zones with TPU quota", open_world=True, **READ)
async def get_zones_with_available_quota(
    provisioning_model: PmArg = None,
    accelerator_type: Annotated[str | None, Field()] = None,
) -> tpu_devops.provisioning.quota.QuotaScan:
    """TPU quota per zone for the provisioning model, with flex-start support.

    Per-zone and per-region TPU quota limits for the quota family the provisioning model really uses
    (on-demand: TPUV5sLitepod...; spot and flex-start: the Preemptible family), next to Google's documented
    flex-start zones and this project's own attempt history. Quota is a limit, not free capacity, and not a
    promise that the zone accepts the provisioning model."""
    return await tpu_devops.provisioning.quota.zones_with_quota(
        settings, provisioning_model, accelerator_type
    )


@tools.tool(title="Plan a queued resource (dry run)", open_world=True, **READ)
async def plan_queued_resource(
    zone: ZoneArg = None,
    provisioning_model: PmArg = None,
    max_run_duration_s: MaxRunArg = None,
    valid_until_duration_s: ValidUntilArg = None,
    queued_resource_id: QrIdArg = None,
    allowed_source_ranges: SourceRangesArg = None,
    open_to_internet: OpenToInternetArg = False,
) -> tpu_devops.provisioning.plan.QueuedResourcePlan:
    """Dry run of create_tpu_queued_resource: request, gcloud, price, billing stop.

    Show exactly what create_tpu_queued_resource would send (REST JSON, startup script summarised), the
    equivalent gcloud command, the hourly price, when billing stops (or a loud warning that spot and
    on-demand never stop by themselves), the firewall rule that will admit vLLM's port (your public IPv4,
    detected now: check it) and warnings. Creates nothing: the dry run gcloud does not have."""
    return await tpu_devops.provisioning.plan.plan_queued_resource(
        settings, zone=zone, provisioning_model=provisioning_model, max_run_duration_s=max_run_duration_s,
        valid_until_duration_s=valid_until_duration_s, queued_resource_id=queued_resource_id,
        allowed_source_ranges=allowed_source_ranges, open_to_internet=open_to_internet,
    )  # fmt: skip


AllowOldImageArg = Annotated[
    bool,
    Field(description="allow an old image"),
]


@tools.tool(title="Create a TPU queued resource", open_world=True, idempotent=True, **CLOUD_WRITE)
async def create_tpu_queued_resource(
    zone: ZoneArg = None,
    provisioning_model: PmArg = None,
    max_run_duration_s: MaxRunArg = None,
    valid_until_duration_s: ValidUntilArg = None,
    queued_resource_id: QrIdArg = None,
    wait: Annotated[bool, Field(description="job waits for ACTIVE")] = False,
    wait_timeout_s: Annotated[float, Field(ge=1, le=86400)] = 3600,
    poll_interval_s: Annotated[float, Field(ge=0.05, le=600)] = 15,
    allow_second: Annotated[
        bool,
        Field(description="allow a 2nd live TPU"),
    ] = False,
    allow_unsupported_image: AllowOldImageArg = False,
    allowed_source_ranges: SourceRangesArg = None,
    open_to_internet: OpenToInternetArg = False,
) -> tpu_devops.provisioning.queued.CreateResult:
    """Create our TPU queued resource (+ API key, firewall rule); returns at once.

    Create one queued resource (flex-start by default, or spot / on-demand) labelled managed-by=tpu-devops
    and rig=<RESOURCE_ID> whatever its id, with the rendered startup script. Touches only its own id: if it
    exists, reports it (and whose it is) instead. First puts the endpoint's access in place: the vLLM API key
    in Secret Manager (generated when missing) and the rig's firewall rule admitting vLLM's port from your
    public IPv4 only (or allowed_source_ranges). Refuses when the Hugging Face token secret is missing, when
    the rig already has a live queued resource under any id in any zone (unless allow_second=true), when any
    zone cannot be listed to check that, and when VLLM_IMAGE is too old for the model (unless
    allow_unsupported_image=true). If a concurrent create of the rig (another server) got there first, this
    one deletes its request at once and says so. Returns at once; waiting is a job (wait=true: poll get_job
    with the returned job_id)."""
    return await tpu_devops.provisioning.queued.create_with_optional_wait(
        settings, zone=zone, provisioning_model=provisioning_model, max_run_duration_s=max_run_duration_s,
        valid_until_duration_s=valid_until_duration_s, queued_resource_id=queued_resource_id, wait=wait,
        wait_timeout_s=wait_timeout_s, poll_interval_s=poll_interval_s, allow_second=allow_second,
        allow_unsupported_image=allow_unsupported_image,
        allowed_source_ranges=allowed_source_ranges, open_to_internet=open_to_internet,
    )  # fmt: skip


@tools.tool(title="Describe a queued resource", open_world=True, **READ)
async def describe_queued_resource(
    zone: ZoneArg = None, queued_resource_id: QrIdArg = None
) -> tpu_devops.provisioning.queued.QueuedResourceView:
    """One queued resource: state, provisioning model, owner, failure.

    One queued resource: state, provisioning model, labels, failure with its reach, and whose it is: ours
    only with this rig's labels (managed-by=tpu-devops, rig=<RESOURCE_ID>), else another rig's or not
    tpu-devops'; who created it (created-by, when it is not these credentials)."""
    return await tpu_devops.provisioning.queued.describe_queued_resource(settings, zone, queued_resource_id)


@tools.tool(title="List queued resources", open_world=True, **READ)
async def list_queued_resources(
    zone: Annotated[str | None, Field(description="a zone or 'all'")] = None,
    only_ours: Annotated[bool, Field()] = False,
) -> tpu_devops.provisioning.queued.QueuedResourceList:
    """Queued resources in a zone or all, owners and failed ones marked.

    Queued resources in one zone or all zones (concurrent, bounded), each with its owner (ours = this rig's
    labels managed-by=tpu-devops and rig=<RESOURCE_ID>; another rig's; not tpu-devops'; created by someone
    else), FAILED/SUSPENDED requests that still hold quota, and zones whose listing failed."""
    return await tpu_devops.provisioning.queued.list_queued_resources(settings, zone, only_ours=only_ours)


@tools.tool(title="Reservation status", open_world=True, **READ)
async def get_reservation_status(
    zone: ZoneArg = None, queued_resource_id: QrIdArg = None
) -> tpu_devops.provisioning.queued.ReservationStatus:
    """Our TPU now: state, endpoint, expiry, cost so far, next step.

    Our queued resource's state, time in state, node, external IP and endpoint URL, flex-start expiry
    countdown and cost so far, with the next step. Lists every live queued resource of the rig in any zone
    and warns when there are several (each one bills)."""
    return await tpu_devops.provisioning.queued.reservation_status(settings, zone, queued_resource_id)


@tools.tool(title="Find a TPU (zone sweep job)", open_world=True, idempotent=False, **CLOUD_WRITE)
async def find_tpu(
    provisioning_model: PmArg = None,
    zones: Annotated[
        list[str] | None,
        Field(),
    ] = None,
    zone_budget_s: Annotated[float, Field(ge=0.1, le=86400)] = 900,
    poll_interval_s: Annotated[float, Field(ge=0.05, le=600)] = 15,
    max_zones: Annotated[int, Field(ge=1, le=100)] = 10,
    max_run_duration_s: MaxRunArg = None,
    valid_until_duration_s: ValidUntilArg = None,
    allow_unsupported_image: AllowOldImageArg = False,
    allowed_source_ranges: SourceRangesArg = None,
    open_to_internet: OpenToInternetArg = False,
) -> tpu_devops.provisioning.sweep.SweepStarted:
    """Job: sweep zones for a TPU, one create at a time. Poll get_job.

    Start a job that sweeps zones for a TPU, one create at a time (never two TPUs held): known support and
    past outcomes first, a bounded wait per zone, each failure classified by reach (zone / region /
    model-in-zone / configuration) and recorded in tpu_zones_status.md. A configuration error (network not
    found, permission denied, bad accelerator) stops the sweep at once. Arguments are checked before the job
    starts; only one sweep per rig runs at a time (a second call names the running job), and the sweep stops
    instead of creating when the rig already has a live queued resource in any zone (or a zone cannot be
    listed). Before the first create it puts the endpoint's access in place (API key secret, firewall rule for
    your public IPv4 or allowed_source_ranges). Each request carries validUntilDuration = its zone budget, so
    one abandoned by a server that died expires by itself; the next sweep adopts a waiting find_tpu request of
    these credentials (waits on it, then deletes it) instead of leaving it. Poll get_job."""
    model = tpu_devops.provisioning.requests.check_provisioning_model(provisioning_model, settings)
    return await tpu_devops.provisioning.sweep.start_sweep(
        settings,
        tpu_devops.provisioning.sweep.SweepOptions(
            provisioning_model=model, zones=zones, zone_budget_s=zone_budget_s, poll_interval_s=poll_interval_s,
            max_zones=max_zones, max_run_duration_s=max_run_duration_s, valid_until_duration_s=valid_until_duration_s,
            allow_unsupported_image=allow_unsupported_image,
            allowed_source_ranges=allowed_source_ranges, open_to_internet=open_to_internet,
        ),
    )  # fmt: skip


DryRunArg = Annotated[bool | None, Field()]
ConfirmArg = Annotated[bool, Field()]
ConfirmTokenArg = Annotated[str | None, Field()]


@tools.tool(
    title="Destroy our queued resource", open_world=True, read_only=False, destructive=True, idempotent=True
)
async def destroy_queued_resource(
    confirmation: Annotated[
        ElicitationResult[tpu_devops.host.confirmation.Confirmation],
        Resolve(tpu_devops.provisioning.teardown.resolve_destroy_confirmation),
    ],
    zone: Annotated[str | None, Field()] = None,
    queued_resource_id: Annotated[str | None, Field()] = None,
    dry_run: DryRunArg = None,
    confirm: ConfirmArg = False,
    confirm_token: ConfirmTokenArg = None,
) -> tpu_devops.provisioning.teardown.TeardownResult:
    """Tear down this rig's TPU in any zone (dry run by default).

    Every queued resource labelled managed-by=tpu-devops and rig=<RESOURCE_ID> (any id) in every zone, or the
    zone / id named; node first, then the request, then the rig's firewall rule with its last TPU. Never
    touches another rig's or anyone else's resources. Without confirm it is a dry run that lists the steps and
    returns a confirmation token with the exact call to make; deleting needs confirm=true plus your answer when
    the host can ask you (elicitation), else plus that token (single use, 10 min, bound to that plan)."""
    return await tpu_devops.provisioning.teardown.destroy_confirmed(
        settings, confirmation, zone=zone, queued_resource_id=queued_resource_id, dry_run=dry_run,
        confirm=confirm, confirm_token=confirm_token,
    )  # fmt: skip


@tools.tool(
    title="Clean up our queued resources", open_world=True, read_only=False, destructive=True, idempotent=True
)
async def manage_queued_resource(
    confirmation: Annotated[
        ElicitationResult[tpu_devops.host.confirmation.Confirmation],
        Resolve(tpu_devops.provisioning.teardown.resolve_manage_confirmation),
    ],
    action: Annotated[
        str,
        Field(description="cleanup (failed ones) or delete_all"),
    ] = "cleanup",
    zone: Annotated[str | None, Field(description="a zone or 'all'")] = "all",
    dry_run: DryRunArg = None,
    confirm: ConfirmArg = False,
    confirm_token: ConfirmTokenArg = None,
) -> tpu_devops.provisioning.teardown.TeardownResult:
    """Bulk teardown of this rig's queued resources (cleanup or delete_all); dry run default.

    Bulk teardown of this rig's queued resources (any id) across zones, never touching resources without this
    rig's labels (listed as left alone). cleanup: FAILED/SUSPENDED requests (they hold quota); delete_all:
    every one. Same confirmation as destroy_queued_resource: a dry run by default, with a confirmation token;
    deleting needs confirm=true plus your answer when the host can ask, else the token."""
    return await tpu_devops.provisioning.teardown.manage_confirmed(
        settings, confirmation, action=action, zone=zone, dry_run=dry_run, confirm=confirm,
        confirm_token=confirm_token,
    )  # fmt: skip


@tools.tool(title="Save the Hugging Face token", open_world=True, idempotent=False, **CLOUD_WRITE)
async def save_hf_token(
    token: Annotated[
        str,
        BeforeValidator(tpu_devops.setup_check.withhold_non_string),
        Field(description="hf_..."),
    ],
) -> tpu_devops.setup_check.SecretSaved:
    """Store the Hugging Face token in Secret Manager (never echoed).

    Store the Hugging Face token in Secret Manager (HF_SECRET_ID): creates the secret if missing and adds
    a version. Checks its shape; never echoes, logs or returns it. The TPU VM reads it at boot."""
    return await tpu_devops.setup_check.save_hf_token(settings, token)


@tools.tool(title="Reconfigure vLLM on the running TPU", open_world=True, idempotent=False, **CLOUD_WRITE)
async def reconfigure_vllm(
    model_name: ModelNameOverride = None,
    max_model_len: MaxLenOverride = None,
    gpu_memory_utilization: UtilOverride = None,
    vllm_image: ImageOverride = None,
    max_num_batched_tokens: BatchedOverride = None,
    dry_run: bool = False,
) -> tpu_devops.provisioning.reconfigure.ReconfigureResult:
    """Job: new vLLM flags on the same TPU. Poll get_job.

    Takes the same overrides as render_startup_script, linted first (blocking findings refuse); dry_run
    shows the old and new vllm serve lines side by side and changes nothing. Writes the new flags to the node's metadata
    (nodes.patch, updateMask=metadata, the whole map kept); the VM's watcher replaces the container
    (serving stops for one engine start, ~8 min on v5e-1) and reports each stage in guest attributes. The
    job ends when /health answers and /v1/models shows the new max_model_len, or when the new flags failed
    to boot: then the failed container's log is diagnosed and the last flags that served serve again. Only
    this rig's node (labels) is changed; a second call while one runs is refused with the running job's id."""
    return await tpu_devops.provisioning.reconfigure.reconfigure_vllm(
        settings, model_name=model_name, max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization, vllm_image=vllm_image,
        max_num_batched_tokens=max_num_batched_tokens, dry_run=dry_run,
    )  # fmt: skip


@tools.tool(title="Check cloud setup", open_world=True, **READ)
async def check_setup() -> tpu_devops.setup_check.SetupReport:
    """Is the project ready (credentials, APIs, secret, quota, endpoint)? With fixes.

    Check credentials, project, TPU and Cloud Quotas APIs, the Hugging Face secret, quota for the configured
    model in the configured zone, and our current TPUs with cost so far. Each failure comes with its fix."""
    return await tpu_devops.setup_check.check_setup(settings)


@tools.tool(title="Get the vLLM endpoint", open_world=True, **READ)
async def get_vllm_endpoint(
    zone: Annotated[
        str | None,
        Field(description="a zone or 'all'"),
    ] = None,
) -> serving.endpoint.EndpointResult:
    """vLLM base URL (VLLM_URL or our ACTIVE TPU's IP), or why there is none.

    The vLLM base URL: VLLM_URL if set, else our ACTIVE queued resource's node external IP
    (http://IP:VLLM_PORT). Says clearly when there is none, it is still provisioning, or there are several."""
    return await serving.endpoint.get_vllm_endpoint(settings, zone)


@tools.tool(title="System status dashboard", open_world=True, **READ)
async def get_system_status() -> tpu_devops.setup_check.SystemStatus:
    """Dashboard: our TPU, endpoint, jobs, recent zone attempts, problems.

    One dashboard: configuration, our reservation (state, IP, expiry, cost), the endpoint, running jobs
    and the latest zone attempts. A failing part is listed under problems."""
    return await tpu_devops.setup_check.system_status(settings)


ConcurrencyArg = Annotated[
    list[Annotated[int, Field(ge=1, le=1024)]] | None,
    Field(max_length=16),
]
PromptLengthsArg = Annotated[
    list[Annotated[int, Field(ge=1, le=MAX_MODEL_LEN_RANGE[1])]] | None,
    Field(max_length=16),
]
OutputLenArg = Annotated[int, Field(ge=1, le=32_768)]
RequestsPerCellArg = Annotated[int | None, Field(ge=1, le=10_000)]


# ---- GKE: many one-chip nodes past one host ------------------------------------------------------


ClusterArg = Annotated[str, Field()]
GkeLocationArg = Annotated[str | None, Field()]
KubeconfigArg = Annotated[
    str | None,
    Field(),
]
KubeContextArg = Annotated[str | None, Field()]
NamespaceArg = Annotated[str, Field()]
ReplicasArg = Annotated[int, Field(ge=1, le=256)]
MaxReplicasArg = Annotated[
    int | None,
    Field(ge=1, le=256),
]
ServiceTypeArg = Annotated[str, Field()]
LbSourceRangesArg = Annotated[list[str] | None, Field()]
QueueTargetArg = Annotated[int, Field(ge=1, le=1000)]


@tools.tool(title="Plan a GKE deployment (dry run)", open_world=True, **READ)
async def plan_gke_deployment(
    cluster: ClusterArg,
    location: GkeLocationArg = None,
    replicas: ReplicasArg = 1,
    max_replicas: MaxReplicasArg = None,
    namespace: NamespaceArg = "default",
    service_type: ServiceTypeArg = "ClusterIP",
    source_ranges: LbSourceRangesArg = None,
    queue_target: QueueTargetArg = 2,
    kubeconfig: KubeconfigArg = None,
    context: KubeContextArg = None,
) -> tpu_devops.gke.manifests.GkePlan:
    """Render and dry-run the GKE deployment (node pool, vLLM, Service, autoscaler).

    Render the GKE deployment from the same flags as the startup script: a TPU v5e node pool request
    (ct5lp-hightpu-1t, spot or flex-start), a vLLM Deployment (pinned image, google.com/tpu, GKE TPU node
    selectors, key and token from a Secret, /health probes sized for a cold boot), a Service, a PodMonitoring
    and an autoscaler on vllm:num_requests_waiting. Every manifest is validated offline against the
    Kubernetes schemas; with a kubeconfig, the API server dry-runs each object too. Changes nothing."""
    return await tpu_devops.gke.deploy.plan_gke_deployment(
        settings, cluster=cluster, location=location, replicas=replicas, max_replicas=max_replicas,
        namespace=namespace, service_type=service_type, source_ranges=source_ranges, queue_target=queue_target,
        kubeconfig=kubeconfig, context=context,
    )  # fmt: skip


@tools.tool(title="Deploy vLLM on GKE", open_world=True, idempotent=True, **CLOUD_WRITE)
async def apply_gke_deployment(
    cluster: ClusterArg,
    kubeconfig: KubeconfigArg = None,
    context: KubeContextArg = None,
    location: GkeLocationArg = None,
    replicas: ReplicasArg = 1,
    max_replicas: MaxReplicasArg = None,
    namespace: NamespaceArg = "default",
    service_type: ServiceTypeArg = "ClusterIP",
    source_ranges: LbSourceRangesArg = None,
    queue_target: QueueTargetArg = 2,
    create_node_pool: Annotated[bool, Field()] = True,
    wait_timeout_s: Annotated[float, Field(ge=1, le=86400)] = 3600,
    poll_interval_s: Annotated[float, Field(ge=0.05, le=600)] = 15,
) -> tpu_devops.gke.deploy.GkeApplyResult:
    """Job: create the GKE TPU node pool, apply plan_gke_deployment's manifests.

    Create the TPU node pool and apply the manifests of plan_gke_deployment (server-side apply, labelled
    managed-by=tpu-devops and the rig). Checks first and changes nothing if the Secret is missing, an object
    or node pool of the same name is not ours, or the dry run fails. Returns a job that waits for the pods."""
    return await tpu_devops.gke.deploy.apply_gke_deployment(
        settings, cluster=cluster, kubeconfig=kubeconfig, context=context, location=location, replicas=replicas,
        max_replicas=max_replicas, namespace=namespace, service_type=service_type, source_ranges=source_ranges,
        queue_target=queue_target, create_node_pool=create_node_pool, wait_timeout_s=wait_timeout_s,
        poll_interval_s=poll_interval_s,
    )  # fmt: skip


@tools.tool(
    title="Tear down our GKE deployment", open_world=True, read_only=False, destructive=True, idempotent=True
)
async def teardown_gke_deployment(
    confirmation: Annotated[
        ElicitationResult[tpu_devops.host.confirmation.Confirmation],
        Resolve(tpu_devops.gke.deploy.resolve_gke_teardown_confirmation),
    ],
    cluster: ClusterArg,
    kubeconfig: KubeconfigArg = None,
    context: KubeContextArg = None,
    location: GkeLocationArg = None,
    namespace: NamespaceArg = "default",
    delete_node_pool: Annotated[bool, Field()] = True,
    dry_run: DryRunArg = None,
    confirm: ConfirmArg = False,
    confirm_token: ConfirmTokenArg = None,
) -> tpu_devops.gke.deploy.GkeTeardownResult:
    """Delete our GKE deployment, found by our labels (dry run by default).

    Delete what apply_gke_deployment created, found by our labels only (managed-by=tpu-devops and this rig;
    the node pool by its resource labels), never by a name alone. Confirmed as destroy_queued_resource: a
    dry run with a confirmation token unless confirm=true; deleting needs your answer when the host can ask
    you, else that token (single use, 10 min, bound to that plan)."""
    return await tpu_devops.gke.deploy.teardown_gke_deployment(
        settings, confirmation, cluster=cluster, kubeconfig=kubeconfig, context=context, location=location,
        namespace=namespace, delete_node_pool=delete_node_pool, dry_run=dry_run, confirm=confirm,
        confirm_token=confirm_token,
    )  # fmt: skip


@tools.tool(
    title="Benchmark the GKE deployment", open_world=True, read_only=True, destructive=False, idempotent=False
)
async def benchmark_gke_deployment(
    kubeconfig: KubeconfigArg = None,
    context: KubeContextArg = None,
    namespace: NamespaceArg = "default",
    base_url: Annotated[
        str | None,
        Field(),
    ] = None,
    concurrency: ConcurrencyArg = None,
    prompt_lengths: PromptLengthsArg = None,
    output_len: OutputLenArg = 128,
    requests_per_cell: RequestsPerCellArg = None,
) -> tpu_devops.serving.benchmark.BenchmarkStarted:
    """Benchmark our GKE Service, priced for the whole deployment; a job.

    run_benchmark's sweep driven at our GKE Service: total output tok/s, TTFT, TPOT and $/M output tokens
    for the whole deployment (ready replicas x chip price + the GKE cluster fee), and each replica's own
    share from its token counter (read through the pod proxy). A job: poll get_job."""
    return await tpu_devops.gke.deploy.benchmark_gke_deployment(
        settings, kubeconfig=kubeconfig, context=context, namespace=namespace, base_url=base_url,
        concurrency=concurrency, prompt_lengths=prompt_lengths, output_len=output_len,
        requests_per_cell=requests_per_cell,
    )  # fmt: skip


# ---- Serving: health, speed, cost -------------------------------------------------------------
# Endpoint: the base_url argument, else VLLM_URL, else discovery of the ACTIVE TPU this rig owns.


BaseUrlArg = Annotated[
    str | None,
    Field(),
]
ModelArg = Annotated[
    str | None,
    Field(),
]
ProvisioningArg = Annotated[str | None, Field()]


@tools.tool(title="Verify model health", open_world=True, **READ)
async def verify_model_health(
    model: ModelArg = None,
    check_tool_calling: Annotated[bool, Field()] = True,
    base_url: BaseUrlArg = None,
) -> serving.health.HealthResult:
    """Check the endpoint end to end (health, models, chat, tool call), with fixes.

    Check the serving endpoint end to end: /health, /v1/models, one short chat, one tool call.

    Each probe is timed. A failure is the answer, classified with its fix: no_endpoint,
    connection_refused (nothing listens yet: booting, or vLLM exited), unresolvable_host (DNS), booting
    (503), timeout (firewall or VM down; or a busy server), unauthorized (401: no key sent, or a key vLLM
    does not hold), not_found (404: wrong path or port), redirect, refused_target (metadata or link-local
    address), model_mismatch, empty_content, tool_parser_missing, tool_call_unparsed, tool_not_called,
    not_openai_api (another service on that port), http_error. The API key goes only to this rig's
    endpoint (VLLM_URL or the discovered node).
    """
    return await serving.health.verify_health(
        settings, model=model, base_url=base_url, tools=check_tool_calling
    )


@tools.tool(title="Ask Gemma", open_world=True, **READ)
async def query_gemma(
    prompt: Annotated[str, Field(max_length=100_000)],
    system: Annotated[str | None, Field(max_length=20_000)] = None,
    max_tokens: Annotated[int, Field(ge=1, le=32_768)] = 512,
    temperature: Annotated[float | None, Field(ge=0, le=2)] = None,
    model: ModelArg = None,
    base_url: BaseUrlArg = None,
) -> serving.chat.ChatResult:
    """Ask the self-hosted Gemma one question (its answer is untrusted text).

    Ask the self-hosted Gemma one question (streamed chat completion) and return its answer."""
    return await serving.chat.query(
        settings,
        prompt,
        system=system,
        max_tokens=max_tokens,
        temperature=temperature,
        model=model,
        base_url=base_url,
    )


@tools.tool(title="Ask Gemma with speed stats", open_world=True, **READ)
async def query_gemma_with_stats(
    prompt: Annotated[str, Field(max_length=100_000)],
    system: Annotated[str | None, Field(max_length=20_000)] = None,
    max_tokens: Annotated[int, Field(ge=1, le=32_768)] = 512,
    temperature: Annotated[float | None, Field(ge=0, le=2)] = None,
    model: ModelArg = None,
    base_url: BaseUrlArg = None,
) -> serving.chat.ChatResult:
    """Ask Gemma one question and measure TTFT, TPOT, tok/s and stalls.

    Ask Gemma one question and measure the stream: TTFT, mean and median TPOT, output tok/s, prompt
    and completion tokens (the server's usage), and the largest gap between chunks after the first
    (a stalled stream is how KV-cache preemption shows from outside)."""
    return await serving.chat.query(
        settings,
        prompt,
        system=system,
        max_tokens=max_tokens,
        temperature=temperature,
        model=model,
        base_url=base_url,
        with_stats=True,
    )


@tools.tool(title="vLLM metrics summary", open_world=True, **READ)
async def get_metrics(base_url: BaseUrlArg = None) -> serving.metrics.MetricsResult:
    """vLLM /metrics: KV-cache use, queue, preemptions, TTFT and TPOT.

    Read vLLM's Prometheus /metrics and summarise it: KV-cache usage, running / waiting requests,
    preemptions (total and since the last call), prompt / generation token totals, TTFT and TPOT
    quantiles from the histograms."""
    return await serving.metrics.get_metrics(settings, base_url)


@tools.tool(title="Per-engine status of a multi-engine host", open_world=True, **READ)
async def get_engine_status(
    base_url: BaseUrlArg = None,
    engines: Annotated[
        int | None,
        Field(ge=1, le=64),
    ] = None,
) -> serving.engines.EngineStatusResult:
    """Each vLLM engine behind the host's load balancer, and totals.

    Each vLLM engine behind the host's load balancer (one per chip): health and its latency, running and
    waiting requests, KV-cache usage, generated tokens and tok/s since the last call; then the totals. An
    engine that is down is reported, not fatal."""
    return await serving.engines.get_engine_status(settings, base_url, engines)


@tools.tool(title="Served model details", open_world=True, **READ)
async def get_model_details(base_url: BaseUrlArg = None) -> serving.details.ModelDetails:
    """What the endpoint serves: model, max length, version, cache config.

    What the endpoint serves: model id, max model length, vLLM version, the engine's cache config
    (block size, KV blocks, memory utilization) and the serving flags this rig's startup script renders."""
    return await serving.details.get_details(settings, base_url)


@tools.tool(
    title="Benchmark the endpoint", open_world=True, read_only=True, destructive=False, idempotent=False
)
async def run_benchmark(
    concurrency: ConcurrencyArg = None,
    prompt_lengths: PromptLengthsArg = None,
    output_len: OutputLenArg = 128,
    requests_per_cell: RequestsPerCellArg = None,
    provisioning_model: ProvisioningArg = None,
    results_dir: Annotated[str | None, Field(max_length=4096)] = None,
    model: ModelArg = None,
    base_url: BaseUrlArg = None,
) -> serving.benchmark.BenchmarkStarted:
    """Job: benchmark clients x prompt length (tok/s, TTFT, TPOT, $/M). Poll get_job.

    Start a benchmark sweep (concurrency x prompt length) as a job and return its id at once.

    Per cell: output tok/s, median and p99 TTFT, median TPOT, per-stream tok/s, failures, $/M output
    tokens at the live price, and a warning where clients x context exceeds the KV pool. Writes CSV,
    JSON and a PNG heatmap. Read-only towards the cloud, but it loads the endpoint: poll get_job.
    """
    return await serving.benchmark.start_benchmark(
        settings,
        concurrency=concurrency,
        prompt_lengths=prompt_lengths,
        output_len=output_len,
        requests_per_cell=requests_per_cell,
        provisioning_model=provisioning_model,
        results_dir_path=results_dir,
        model=model,
        base_url=base_url,
    )


@tools.tool(title="Import vllm bench serve results", open_world=True, **READ)
async def import_benchmark_results(
    results_path: Annotated[str, Field(max_length=4096)],
    provisioning_model: ProvisioningArg = None,
    results_dir: Annotated[
        str | None,
        Field(max_length=4096),
    ] = None,
) -> serving.benchmark.BenchmarkResult:
    """vllm bench serve JSON results as run_benchmark's table, priced.

    Read vllm bench serve JSON results into run_benchmark's table: tok/s, TTFT, TPOT, $/M output tokens,
    KV- pool warnings.

    Read `vllm bench serve` JSON results and compute the same table as run_benchmark: output tok/s,
    TTFT, TPOT, per-stream tok/s, failures, $/M output tokens at the live price, KV-pool warnings."""
    return await serving.benchmark.import_results(
        settings, results_path, provisioning_model=provisioning_model, results_dir_path=results_dir
    )


@tools.tool(title="Estimate deployment cost", open_world=True, **READ)
async def estimate_deployment_cost(
    accelerator_type: Annotated[str | None, Field()] = None,
    provisioning_model: ProvisioningArg = None,
    region: Annotated[str | None, Field()] = None,
    tokens_per_s: Annotated[
        float | None,
        Field(ge=0.01, le=10_000_000),
    ] = None,
    duration_hours: Annotated[float | None, Field(ge=0.01, le=8760)] = None,
    usd_per_chip_hour: Annotated[float | None, Field(ge=0.001, le=1000)] = None,
) -> tpu_devops.planning.pricing.CostEstimate:
    """Price a deployment (live catalog): $/hour, $/month, $/M output tokens.

    Price a deployment from the live Cloud Billing Catalog (a dated fallback table if unreachable;
    the answer says which): $/hour, $/month at 24/7, a given duration, $/M output tokens at a given
    throughput, one preemption (a cold start at this rate) and a forgotten weekend."""
    return await tpu_devops.planning.pricing.estimate_cost(
        settings,
        accelerator_type=accelerator_type,
        region=region,
        provisioning_model=provisioning_model,
        tokens_per_s=tokens_per_s,
        duration_hours=duration_hours,
        usd_per_chip_hour=usd_per_chip_hour,
    )


# ---- Logs: Cloud Logging reads, template summaries, the Gemma analyst ---------------------------
# Log text is redacted (tokens, keys, emails, IPs, project numbers) before any of it leaves the process.


SinceArg = Annotated[str | None, Field(description="30m/6h/2d or RFC 3339")]
UntilArg = Annotated[str | None, Field()]
SeverityArg = Annotated[str | None, Field()]  # the minimum severity: the tools say so
RawFilterArg = Annotated[
    str | None,
    Field(
        max_length=20_000,  # Cloud Logging's own limit on a filter
    ),
]
NodeArg = Annotated[str | None, Field()]
PathArg = Annotated[
    str | None,
    Field(
        max_length=4096,
    ),
]
PageTokenArg = Annotated[str | None, Field()]


@tools.tool(title="Read Cloud Logging entries", open_world=True, **READ)
def get_cloud_logging_logs(
    filter: RawFilterArg = None,
    since: SinceArg = None,
    until: UntilArg = None,
    severity: SeverityArg = None,
    resource_type: Annotated[str | None, Field()] = None,
    log_id: Annotated[str | None, Field()] = None,
    text: Annotated[str | None, Field()] = None,
    limit: Annotated[int, Field(ge=1, le=500)] = 50,
    page_token: PageTokenArg = None,
    order: Annotated[str, Field()] = "desc",
) -> logs.sources.LogsPage:
    """Cloud Logging entries, newest first, redacted, paged.

    Read log entries from Cloud Logging, newest first, in a compact redacted form (timestamp,
    severity, short log name, resource labels, message, insertId). Says when more entries match and
    returns the page token to continue."""
    return logs.sources.get_cloud_logging_logs(
        settings,
        filter=filter,
        since=since,
        until=until,
        severity=severity,
        resource_type=resource_type,
        log_id=log_id,
        text=text,
        limit=limit,
        page_token=page_token,
        order=order,
    )


@tools.tool(title="vLLM container logs", open_world=True, **READ)
def get_vllm_docker_logs(
    node: NodeArg = None,
    since: Annotated[str, Field(description="30m/6h/2d or RFC 3339")] = "24h",
    severity: SeverityArg = None,
    text: Annotated[str | None, Field()] = None,
    limit: Annotated[int, Field(ge=1, le=500)] = 100,
    page_token: PageTokenArg = None,
) -> logs.sources.LogsPage:
    """Our TPU node's vLLM container log from Cloud Logging, redacted.

    The vLLM container's log on our TPU node, from Cloud Logging (Docker gcplogs driver; no SSH),
    newest first, redacted."""
    return logs.sources.get_node_logs(
        settings,
        "container",
        node=node,
        since=since,
        severity=severity,
        text=text,
        limit=limit,
        page_token=page_token,
    )


@tools.tool(title="TPU VM system logs", open_world=True, **READ)
def get_tpu_system_logs(
    node: NodeArg = None,
    since: Annotated[str, Field(description="30m/6h/2d or RFC 3339")] = "24h",
    severity: SeverityArg = None,
    limit: Annotated[int, Field(ge=1, le=500)] = 100,
    page_token: PageTokenArg = None,
) -> logs.sources.LogsPage:
    """Our TPU node's system log (startup, preemption, maintenance), redacted.

    Our TPU node's system logs from Cloud Logging: the startup script (google_metadata_script_runner),
    syslog, and audit activity / system events such as preemption and maintenance. Newest first, redacted."""
    return logs.sources.get_node_logs(
        settings, "system", node=node, since=since, severity=severity, limit=limit, page_token=page_token
    )


@tools.tool(title="Summarize logs", open_world=True, **READ)
def summarize_logs(
    path: PathArg = None,
    filter: RawFilterArg = None,
    since: SinceArg = None,
    until: UntilArg = None,
    severity: SeverityArg = None,
    node: Annotated[str | None, Field()] = None,
    max_entries: Annotated[int, Field(ge=1, le=200_000)] = 20000,
    token_budget: Annotated[int, Field(ge=500, le=MAX_EVIDENCE_TOKENS)] = 6000,
) -> logs.evidence.SummaryResult:
    """Summarize logs (Cloud Logging or a file): root cause first, with fixes.

    Summarize logs (a Cloud Logging query or an exported file) into templates, root cause first: per
    template the count, severity, first/last seen, rate and two exemplar insertIds; plus the failures read
    by the same rules as diagnose_vllm_boot (vLLM boot failures, OOMs, preemption / maintenance, Hugging
    Face, image pulls, quota and capacity) with their fix, failures no rule explains listed as
    unrecognised, and known noise that is never a root cause. Triage is by content as well as severity (a
    failure logged at INFO counts). Secrets and personal data are redacted."""
    return logs.evidence.summarize_logs(
        settings,
        path=path,
        filter=filter,
        since=since,
        until=until,
        severity=severity,
        node=node,
        max_entries=max_entries,
        token_budget=token_budget,
    )


@tools.tool(title="Ask Gemma about the logs", open_world=True, **READ)
async def analyze_cloud_logging(
    question: Annotated[str, Field(max_length=4000)],
    path: PathArg = None,
    filter: RawFilterArg = None,
    since: SinceArg = None,
    until: UntilArg = None,
    severity: SeverityArg = None,
    node: Annotated[str | None, Field()] = None,
    max_entries: Annotated[int, Field(ge=1, le=200_000)] = 20000,
    max_steps: Annotated[int, Field(ge=1, le=8)] = 4,
    token_budget: Annotated[
        int,
        Field(ge=500, le=32_000),
    ] = 6000,
    base_url: BaseUrlArg = None,
) -> logs.analyst.AnalysisResult:
    """Ask the self-hosted Gemma about the logs (citations checked).

    Answer a question about the logs with the self-hosted Gemma: it reads a redacted evidence summary
    and may search logs, fetch an entry by insertId or count by a field (read-only tools only). Every
    citation is checked against the logs. Without a reachable model the deterministic summary is
    returned and the answer says the model was not consulted."""
    return await logs.analyst.analyze_logs(
        settings,
        question,
        base_url=base_url,
        max_steps=max_steps,
        token_budget=token_budget,
        path=path,
        filter=filter,
        since=since,
        until=until,
        severity=severity,
        node=node,
        max_entries=max_entries,
    )


# ---- Jobs: long operations (zone sweeps, waits for ACTIVE, benchmarks) --------------------------------


@tools.tool(title="Get job status", open_world=False, **READ)
def get_job(job_id: str) -> tpu_devops.host.jobs.JobView:
    """Poll a job by the job_id its tool returned.

    Poll a long operation (zone sweep, wait for ACTIVE, benchmark) by the id its tool returned.

    Returns its state (running / succeeded / failed / cancelled), progress so far, and the result.
    """
    return tpu_devops.host.jobs.JobView.of(tpu_devops.host.jobs.JOBS.get(job_id))


@tools.tool(title="List jobs", open_world=False, **READ)
def list_jobs() -> tpu_devops.host.jobs.JobList:
    """Jobs this server process started, newest first.

    List the long operations started by this server process, newest first."""
    return tpu_devops.host.jobs.JobList(
        jobs=[tpu_devops.host.jobs.JobView.of(r) for r in tpu_devops.host.jobs.JOBS.list()]
    )


# Kept in read-only mode: it only stops jobs this server started, and read-only mode still starts benchmarks.
@tools.tool(
    title="Cancel a job",
    open_world=False,
    read_only=False,
    destructive=False,
    idempotent=True,
    keep_in_read_only=True,
)
async def cancel_job(job_id: str) -> tpu_devops.host.jobs.JobView:
    """Cancel a running job.

    Cancel a running job. A zone sweep stops and deletes the request it was waiting on (nothing is left
    queued); a TPU it already found ACTIVE stays (destroy_queued_resource tears it down)."""
    return tpu_devops.host.jobs.JobView.of(await tpu_devops.host.jobs.JOBS.cancel(job_id))


# ---- The server ------------------------------------------------------------------------------------

mcp = tools.build_server(
    name=settings.server_name,
    version=__version__,
    instructions=(
        "DevOps/SRE tools for self-hosted Gemma 4 on Google Cloud TPU with vLLM. Start with get_help. "
        "Planning tools need no cloud account. Long operations return a job id: poll get_job."
    ),
)
