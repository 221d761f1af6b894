"""Every tool argument, described once: the shared argument types and the parameter groups.

An argument that means the same in several tools is declared here once, with its description (hosts show
the model nothing else to choose by), its bounds and its rule (a validator from `tpu_devops.types` or the
domain module that owns the rule), and every tool that takes it uses this declaration: a fix here covers
every tool. Arguments that travel together are a `ParamGroup` (`tpu_devops.host.params`): a queued-resource
reference, a TPU request's options, the serving overrides, an endpoint reference, a log query, a GKE target,
a benchmark sweep and a deletion's confirmation.

A left-out argument takes its value from the server's configuration (``tpu.env``), and the descriptions say
so with the variable's name. Descriptions state bounds in words too: some hosts (Codex) strip ``minimum``,
``maximum`` and length keywords from schemas before the model sees them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from tpu_devops import types
from tpu_devops.config import GPU_MEMORY_UTILIZATION_RANGE, MAX_MODEL_LEN_RANGE, MAX_NUM_BATCHED_TOKENS_RANGE
from tpu_devops.host.params import ParamGroup
from tpu_devops.host.schemas import sanity_bounds

# Appended to an argument whose bounds are sanity limits: checked, not published (`tpu_devops.host.schemas`).
SANE = Field(json_schema_extra=sanity_bounds())

# ---- shared argument types ----------------------------------------------------------------------------


def _zone(value: str | None) -> str | None:
    return None if value is None else types.check_zone(value)


def _zone_or_all(value: str | None) -> str | None:
    if value is None or value.strip().lower() == "all":
        return value
    return types.check_zone(value)


def _zones(value: list[str] | None) -> list[str] | None:
    return None if value is None else [types.check_zone(z, "zones") for z in value]


def _resource_id(value: str | None) -> str | None:
    return None if value is None else types.check_resource_id(value)


def _node(value: str | None) -> str | None:
    return None if value is None else types.check_node_id(value)


def _provisioning_model(value: str | None) -> str | None:
    return None if value is None else types.check_provisioning_model(value)


def _model_id(value: str | None) -> str | None:
    from tpu_devops import names

    return None if value is None else names.check_model_id(value, "model_name")


def _vllm_image(value: str | None) -> str | None:
    """An image of an allowed repository (`tpu_devops.names.check_image`, ``VLLM_IMAGE_REPOSITORIES``)."""
    if value is None:
        return None
    from tpu_devops import names
    from tpu_devops.config import get_settings

    names.check_image(value, get_settings().image_repositories, "vllm_image")
    return value


def _time(field: str):  # type: ignore[no-untyped-def]
    def check(value: str | None) -> str | None:
        if value is not None:
            from tpu_devops.logs.filters import parse_time

            parse_time(value, field_name=field)
        return value

    return check


Zone = Annotated[str | None, AfterValidator(_zone), Field(description="zone, e.g. us-west4-a")]
ZoneOrAll = Annotated[
    str | None,
    AfterValidator(_zone_or_all),
    Field(description="a zone, or 'all'"),
]
Zones = Annotated[
    list[str] | None,
    AfterValidator(_zones),
    Field(max_length=100, description="zones to try, in order"),
    SANE,
]
ProvisioningModel = Annotated[
    str | None,
    AfterValidator(_provisioning_model),
    Field(description="flex-start, spot or on-demand"),
]
AcceleratorType = Annotated[str | None, Field(description="TPU type, e.g. v5litepod-1")]
Region = Annotated[str | None, Field(description="region, e.g. us-west4")]
UsdPerChipHour = Annotated[
    float | None, Field(ge=0.001, le=1000, description="$ per chip-hour instead of the catalog")
]
QueuedResourceId = Annotated[
    str | None, AfterValidator(_resource_id), Field(description="queued resource id")
]
Node = Annotated[
    str | None,
    AfterValidator(_node),
    Field(description="TPU node id"),
]
ServedModel = Annotated[str | None, Field(description="served model id")]
PollInterval = Annotated[float, Field(ge=0.05, le=600, description="seconds between polls"), SANE]
WaitTimeout = Annotated[float, Field(ge=1, le=86400, description="max seconds to wait"), SANE]
Since = Annotated[
    str | None, AfterValidator(_time("since")), Field(description="start: 6h, 2d ago or RFC 3339")
]
Until = Annotated[str | None, AfterValidator(_time("until")), Field(description="end, same forms as since")]
Severity = Annotated[str | None, Field(description="minimum severity, e.g. ERROR")]
JobId = Annotated[str, Field(max_length=64, description="job_id a tool returned"), SANE]
DryRun = Annotated[bool, Field(description="show the change, make none")]
OpenToInternet = Annotated[bool, Field(description="allow ranges wider than /16")]


# ---- parameter groups -----------------------------------------------------------------------------------


class QueuedResourceRef(ParamGroup):
    """Which queued resource a call is about (this rig's own when left out)."""

    zone: Zone = None
    queued_resource_id: QueuedResourceId = None


class TpuRequest(ParamGroup):
    """The options of a TPU queued resource request: how it is provisioned and who may reach it."""

    provisioning_model: ProvisioningModel = None
    max_run_duration_s: Annotated[
        int | None,
        Field(ge=600, le=7 * 86400, description="flex-start run time, 600 s-7 days"),
        SANE,
    ] = None
    valid_until_duration_s: Annotated[
        int | None,
        Field(ge=60, le=30 * 86400, description="max wait for capacity, 60 s-30 days"),
        SANE,
    ] = None
    allowed_source_ranges: Annotated[
        list[str] | None,
        Field(max_length=32, description="IPv4 CIDRs that may reach vLLM"),
        SANE,
    ] = None
    open_to_internet: OpenToInternet = False
    allow_unsupported_image: Annotated[bool, Field(description="accept a too-old vLLM image")] = False


class ServingOverrides(ParamGroup):
    """vLLM settings for this call instead of tpu.env's (the same rules as the settings)."""

    model_name: Annotated[str | None, AfterValidator(_model_id), Field(description="HF repo id")] = None
    max_model_len: Annotated[
        int | None,
        Field(
            ge=MAX_MODEL_LEN_RANGE[0],
            le=MAX_MODEL_LEN_RANGE[1],
            description="tokens per request",
        ),
    ] = None
    gpu_memory_utilization: Annotated[
        float | None,
        Field(
            ge=GPU_MEMORY_UTILIZATION_RANGE[0],
            le=GPU_MEMORY_UTILIZATION_RANGE[1],
            description="HBM share vLLM may use",
        ),
    ] = None
    max_num_batched_tokens: Annotated[
        int | None,
        Field(
            ge=MAX_NUM_BATCHED_TOKENS_RANGE[0],
            le=MAX_NUM_BATCHED_TOKENS_RANGE[1],
            description="tokens per step, a power of two",
        ),
        SANE,
    ] = None
    vllm_image: Annotated[str | None, AfterValidator(_vllm_image), Field(description="pinned vLLM image")] = (
        None
    )


def _base_url(value: str | None) -> str | None:
    if value is not None:
        from tpu_devops.serving.egress import parse

        parse(value, "base_url")  # a plain http(s) URL: no user info, query, fragment or control characters
    return value


class EndpointRef(ParamGroup):
    """Which OpenAI-compatible endpoint a call talks to (`tpu_devops.serving.egress` holds the rule): this
    rig's own (VLLM_URL, else the discovered node) when left out or named; any other URL is a host the
    caller names, and gets probes only (health, models, metrics, version): a prompt, log evidence, benchmark
    load or the API key never goes there, whatever the tool (refused with the fix: the operator sets
    VLLM_URL)."""

    base_url: Annotated[
        str | None,
        Field(max_length=2048, description="endpoint URL; default this rig's"),
        AfterValidator(_base_url),
        SANE,
    ] = None


class LogWindow(ParamGroup):
    """The time window and minimum severity of a Cloud Logging read."""

    since: Since = None
    until: Until = None
    severity: Severity = None


class LogQuery(LogWindow):
    """Which log entries a summary or an analysis reads: an exported file, or a Cloud Logging query."""

    path: Annotated[
        str | None, Field(max_length=4096, description="log file (text or JSON export)"), SANE
    ] = None
    filter: Annotated[str | None, Field(max_length=20_000, description="Cloud Logging filter"), SANE] = None
    node: Node = None
    max_entries: Annotated[int, Field(ge=1, le=200_000, description="max entries read"), SANE] = 20000


class GkeTarget(ParamGroup):
    """Which GKE cluster and namespace a call works in. The cluster is reached through the GKE API; a
    kubeconfig, when given, is data (`tpu_devops.gke.connect`: exec and auth-provider are refused)."""

    cluster: Annotated[str, Field(max_length=100, description="GKE cluster"), SANE]
    location: Annotated[str | None, Field(description="cluster's region or zone")] = None
    namespace: Annotated[str, Field(max_length=63, description="namespace"), SANE] = "default"
    kubeconfig: Annotated[
        str | None, Field(max_length=4096, description="kubeconfig (data only); default GKE API"), SANE
    ] = None
    context: Annotated[str | None, Field(description="kubeconfig context")] = None


class GkeShape(ParamGroup):
    """How many vLLM replicas a GKE deployment runs and how it is reached."""

    replicas: Annotated[int, Field(ge=1, le=256, description="replicas, one chip each"), SANE] = 1
    max_replicas: Annotated[int | None, Field(ge=1, le=256, description="autoscaler max replicas"), SANE] = (
        None
    )
    queue_target: Annotated[int, Field(ge=1, le=1000, description="autoscaler target queue per replica")] = 2
    service_type: Annotated[str, Field(description="ClusterIP or LoadBalancer")] = "ClusterIP"
    source_ranges: Annotated[
        list[str] | None, Field(max_length=32, description="CIDRs a LoadBalancer admits"), SANE
    ] = None
    open_to_internet: OpenToInternet = False


class BenchmarkSweep(ParamGroup):
    """The cells of a benchmark: concurrent clients x prompt length, each with its request count."""

    concurrency: Annotated[
        list[Annotated[int, Field(ge=1, le=1024)]] | None,
        Field(max_length=16, description="clients per cell"),
    ] = None
    prompt_lengths: Annotated[
        list[Annotated[int, Field(ge=1, le=MAX_MODEL_LEN_RANGE[1])]] | None,
        Field(max_length=16, description="prompt tokens per cell"),
    ] = None
    output_len: Annotated[int, Field(ge=1, le=32_768, description="output tokens per request")] = 128
    requests_per_cell: Annotated[int | None, Field(ge=1, le=10_000, description="requests per cell")] = None


class Confirmation(ParamGroup):
    """How a deletion is confirmed (`tpu_devops.host.confirmation`): a dry run first, then confirm=true, and a
    person's answer when the host asks; a token only counts where the operator allowed unattended deletions."""

    dry_run: Annotated[bool | None, Field(description="list what would be deleted")] = None
    confirm: Annotated[bool, Field(description="delete now; a person confirms")] = False
    confirm_token: Annotated[
        str | None, Field(max_length=200, description="token from the dry run"), SANE
    ] = None
