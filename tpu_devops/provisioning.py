"""Queued resources: plan, create, describe, list, reservation status, and error classification.

Two blast radii (DESIGN §2): creating touches only the id it was given and is never destructive;
deleting lives in `tpu_devops.teardown`. Every create labels the node ``managed-by=tpu-devops`` and
``rig=<resource id>`` (`Settings.rig_labels`), which is how ownership is recognised later.

The request body is the v2alpha1 REST JSON of a QueuedResource (field names from the TPU REST
reference, ``projects.locations.queuedResources``): ``tpu.nodeSpec[].{parent,nodeId,node}``, the node's
``acceleratorType``, ``runtimeVersion``, ``labels``, ``metadata["startup-script"]``, ``networkConfig``,
``schedulingConfig``; the queued resource's ``queueingPolicy.validUntilDuration``; the ``spot`` tier
for spot; and for flex-start ``schedulingConfig.provisioningModel = "FLEX_START"`` plus
``runDuration.maxRunDuration`` (v2alpha1 only; see `tpu_devops.gcp.tpu`). Durations are sent as
protobuf JSON durations (``"14400s"``).

Errors are classified by reach, after SkyPilot's TPU failover handler (DESIGN §3):

- ``zone``: no capacity / stockout / insufficient reserved capacity, or a request that waited out
  its budget: try another zone; expires.
- ``region``: quota exhausted in a region: skip the region's zones; expires.
- ``model``: the provisioning model is not offered for this accelerator in this zone: never retry
  that (zone, model, accelerator) triple.
- ``config``: network / subnetwork not found, permission denied, invalid accelerator or runtime,
  any other 4xx: a flag is wrong; stop the whole sweep ("failed in every zone" must never hide a typo).
- ``transient``: 429 / 5xx left after retries: try the zone later.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shlex
import time
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
from pydantic import BaseModel, Field

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import CloudError, ConfigError, NotFoundError, TpuDevopsError
from tpu_devops.results import ToolResult

# Listing many zones at once: bounded so 44 zones finish in about one call's latency.
MAX_CONCURRENT_CALLS = 48
_LIMITERS: weakref.WeakKeyDictionary[Any, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()

TERMINAL_STATES = ("FAILED", "SUSPENDED")
WAITING_STATES = ("CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES")

# States in which a queued resource of ours holds (or will hold) a TPU that bills: not finished, not
# on its way out. A rig with more than one of these bills twice.
NOT_LIVE_STATES = ("FAILED", "SUSPENDED", "SUSPENDING", "DELETING")

API_PROVISIONING = {"flex-start": "FLEX_START", "spot": "SPOT", "on-demand": "STANDARD"}


# ---------------------------------------------------------------------------------------------
# Error classification
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A classified provisioning failure. ``reach`` in zone / region / model / config / transient."""

    reach: str
    reason: str  # stockout, quota, unsupported_model, network, permission, accelerator, runtime, ...
    message: str
    fix: str


_ZONE_PATTERNS = (
    (re.compile(r"no more capacity|stockout|out of capacity|insufficient capacity", re.I), "stockout"),
    (re.compile(r"insufficient reserved capacity", re.I), "reserved_capacity"),
    (re.compile(r"validUntilDuration|could not be fulfilled before", re.I), "expired_in_queue"),
)
_REGION_PATTERN = re.compile(r"quota\b.*\b(exhausted|exceeded)|QUOTA_EXCEEDED|limit \d+ in region", re.I)
_MODEL_PATTERN = re.compile(
    r"provisioning model is not supported|is not supported for provisioning model", re.I
)
_CONFIG_PATTERNS = (
    (re.compile(r"subnetworks?/\S+'? was not found|subnetwork\S* .*not found", re.I), "subnetwork"),
    (re.compile(r"networks?/\S+'? was not found|network\S* .*not found", re.I), "network"),
    (re.compile(r"accelerator type", re.I), "accelerator"),
    (re.compile(r"runtime version", re.I), "runtime"),
)


def classify_failure(message: str, *, status: str | None = None, http_code: int | None = None) -> Failure:
    """Classify a create error or a FAILED request's ``failedData.error.message`` by reach.

    Args:
        message: Google's error message.
        status: canonical status (``INVALID_ARGUMENT``, ``PERMISSION_DENIED``, ...) when known.
        http_code: HTTP status when known (``failedData.error.code`` is a gRPC code, not HTTP).
    """
    text = message or ""
    if _MODEL_PATTERN.search(text):
        return Failure(
            "model",
            "unsupported_model",
            text,
            "the provisioning model is not offered here; try another zone or model",
        )
    for pattern, reason in _ZONE_PATTERNS:
        if pattern.search(text):
            return Failure("zone", reason, text, "capacity is a zone matter: try another zone or later")
    if _REGION_PATTERN.search(text):
        return Failure(
            "region",
            "quota",
            text,
            "quota is exhausted in this region: try another region, delete held requests, or ask for more quota",
        )
    if status in ("PERMISSION_DENIED", "UNAUTHENTICATED") or http_code in (401, 403):
        return Failure(
            "config",
            "permission",
            text,
            "grant the caller roles/tpu.admin and enable tpu.googleapis.com; check the project id",
        )
    for pattern, reason in _CONFIG_PATTERNS:
        if pattern.search(text):
            fixes = {
                "network": "TPU_NETWORK names a VPC that does not exist in this project: fix it or leave it empty for 'default'",
                "subnetwork": "TPU_SUBNETWORK does not exist in this region: fix it or leave it empty",
                "accelerator": "check ACCELERATOR_TYPE (TPU API spelling, e.g. v5litepod-1) and that the zone offers it",
                "runtime": "check TPU_RUNTIME_VERSION (v5e: v2-alpha-tpuv5-lite)",
            }
            return Failure("config", reason, text, fixes[reason])
    if (
        status in ("UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED")
        or (http_code or 0) >= 500
        or http_code == 429
    ):
        return Failure(
            "transient", "unavailable", text, "the API was unavailable after retries: try again shortly"
        )
    if status in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND") or (
        http_code is not None and 400 <= http_code < 500
    ):
        return Failure(
            "config",
            "invalid_request",
            text,
            "the request was refused as invalid: check the settings named in the message",
        )
    return Failure(
        "zone", "unknown", text, "unclassified failure: treated as a zone problem; check the message"
    )


def classify_exception(exc: TpuDevopsError) -> Failure:
    """`classify_failure` for an error raised by `tpu_devops.gcp.tpu` (uses its Google fields)."""
    return classify_failure(
        getattr(exc, "google_message", None) or exc.message,
        status=getattr(exc, "status", None),
        http_code=getattr(exc, "http_code", None),
    )


# ---------------------------------------------------------------------------------------------
# Views of queued resources
# ---------------------------------------------------------------------------------------------


def node_specs(qr: dict[str, Any]) -> list[dict[str, Any]]:
    """``tpu.nodeSpec`` of a queued resource JSON (empty list when absent)."""
    return list(qr.get("tpu", {}).get("nodeSpec", []) or [])


def labels_of(qr: dict[str, Any]) -> dict[str, str]:
    """Labels of the first node spec (the rig puts one node per request)."""
    specs = node_specs(qr)
    return dict(specs[0].get("node", {}).get("labels", {}) or {}) if specs else {}


def is_ours(qr: dict[str, Any], resource_id: str | None = None) -> bool:
    """True when every node spec carries ``managed-by=tpu-devops`` (and ``rig=resource_id`` if given)."""
    specs = node_specs(qr)
    if not specs:
        return False
    for spec in specs:
        labels = spec.get("node", {}).get("labels", {}) or {}
        if labels.get("managed-by") != "tpu-devops":
            return False
        if resource_id is not None and labels.get("rig") != resource_id:
            return False
    return True


def state_of(qr: dict[str, Any]) -> str:
    """The queued resource's state name (``UNKNOWN`` when missing)."""
    state = qr.get("state", {}).get("state")
    return str(state) if state else "UNKNOWN"


def provisioning_model_of(qr: dict[str, Any]) -> str:
    """flex-start / spot / on-demand as this server names them (read from the request JSON)."""
    specs = node_specs(qr)
    sched = specs[0].get("node", {}).get("schedulingConfig", {}) if specs else {}
    if sched.get("provisioningModel") == "FLEX_START" or "runDuration" in qr:
        return "flex-start"
    if "spot" in qr or sched.get("spot") or sched.get("provisioningModel") == "SPOT":
        return "spot"
    return "on-demand"


def _seconds(duration: str | None) -> float | None:
    if not duration:
        return None
    try:
        return float(str(duration).rstrip("s"))
    except ValueError:
        return None


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class QueuedResourceView(BaseModel):
    """One queued resource as tools show it. Times are Unix seconds / seconds; ``ours`` means our labels."""

    id: str
    zone: str
    state: str
    provisioning_model: str
    accelerator_type: str | None = None
    node_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    ours: bool = False
    rig: str | None = None
    created_at: str | None = None
    age_s: float | None = None
    max_run_duration_s: float | None = None
    failed_error: str | None = None
    failure_reach: str | None = None
    holds_quota: bool = False

    @classmethod
    def of(cls, qr: dict[str, Any], zone: str, resource_id: str | None = None) -> QueuedResourceView:
        specs = node_specs(qr)
        node = specs[0].get("node", {}) if specs else {}
        state = state_of(qr)
        failed = qr.get("state", {}).get("failedData", {}).get("error", {}) or {}
        created = _parse_time(qr.get("createTime"))
        labels = labels_of(qr)
        failure = classify_failure(failed.get("message", "")) if failed.get("message") else None
        return cls(
            id=str(qr.get("name", "")).rsplit("/", 1)[-1],
            zone=zone,
            state=state,
            provisioning_model=provisioning_model_of(qr),
            accelerator_type=node.get("acceleratorType"),
            node_id=specs[0].get("nodeId") if specs else None,
            labels=labels,
            ours=is_ours(qr),
            rig=labels.get("rig"),
            created_at=qr.get("createTime"),
            age_s=None if created is None else round(time.time() - created, 1),
            max_run_duration_s=_seconds(qr.get("runDuration", {}).get("maxRunDuration")),
            failed_error=failed.get("message"),
            failure_reach=failure.reach if failure else None,
            holds_quota=state in TERMINAL_STATES,
        )


# ---------------------------------------------------------------------------------------------
# Building the request
# ---------------------------------------------------------------------------------------------


def _zone_settings(settings: Settings, zone: str) -> Settings:
    region = zone.rsplit("-", 1)[0]
    return settings.model_copy(update={"zone": zone, "region": region})


def or_default(value: str | None, default: str, field: str) -> str:
    """``value``, or ``default`` when it is None (omitted). An explicitly empty string is an error:
    it used to turn silently into the default, which hid typos in scripts.

    Raises:
        ConfigError: ``value`` is empty or only spaces (names ``field``).
    """
    if value is None:
        return default
    if not str(value).strip():
        raise ConfigError(
            "empty value", field=field, value=value,
            fix=f"omit {field} to use the default ({default}), or give a value",
        )  # fmt: skip
    return value


def check_zone(zone: str, field: str = "zone") -> str:
    """Validate a zone name (``us-west4-a``). Raises `ConfigError` naming the field."""
    z = (zone or "").strip()
    if not re.match(r"^[a-z]+-[a-z]+\d+-[a-z]$", z):
        raise ConfigError(
            "not a zone (region-letter)", field=field, value=zone, fix="use a zone such as us-west4-a"
        )
    return z


def check_provisioning_model(model: str | None, settings: Settings) -> str:
    """Normalise a provisioning model argument (None -> the configured one). Raises `ConfigError`."""
    if model is None:
        return settings.provisioning_model
    or_default(model, settings.provisioning_model, "provisioning_model")
    m = model.strip().lower().replace("_", "-")
    m = {
        "flexstart": "flex-start",
        "preemptible": "spot",
        "ondemand": "on-demand",
        "standard": "on-demand",
    }.get(m, m)
    if m not in API_PROVISIONING:
        raise ConfigError(
            "unknown provisioning model",
            field="provisioning_model",
            value=model,
            fix="use flex-start, spot or on-demand",
        )
    return m


def render_startup_script(settings: Settings) -> str:
    """The VM startup script text, rendered by `tpu_devops.startup` (imported lazily).

    Raises:
        ConfigError: a setting cannot go into the script, or the template is missing.
    """
    from tpu_devops.startup import render_startup_script as render

    return render(settings).script


def build_request(
    settings: Settings,
    *,
    zone: str,
    qr_id: str,
    provisioning_model: str,
    max_run_duration_s: int | None = None,
    valid_until_duration_s: int | None = None,
    startup_script: str | None = None,
) -> dict[str, Any]:
    """The QueuedResource REST JSON (v2alpha1 field names) that a create sends. See the module docstring.

    ``startup_script`` None renders it with `render_startup_script` for the zone.
    """
    project = require_project(settings)
    zs = _zone_settings(settings, zone)
    script = startup_script if startup_script is not None else render_startup_script(zs)
    node: dict[str, Any] = {
        "acceleratorType": settings.accelerator_type,
        "runtimeVersion": settings.runtime_version,
        "labels": dict(settings.rig_labels) | {"rig": qr_id},
        "metadata": {"startup-script": script},
        "networkConfig": {"enableExternalIps": True},
    }
    if settings.network:
        node["networkConfig"]["network"] = settings.network
    if settings.subnetwork:
        node["networkConfig"]["subnetwork"] = settings.subnetwork
    body: dict[str, Any] = {
        "tpu": {
            "nodeSpec": [{"parent": f"projects/{project}/locations/{zone}", "nodeId": qr_id, "node": node}]
        }
    }
    if provisioning_model == "flex-start":
        node["schedulingConfig"] = {"provisioningModel": "FLEX_START"}
        body["runDuration"] = {"maxRunDuration": f"{int(max_run_duration_s or settings.max_run_duration_s)}s"}
    elif provisioning_model == "spot":
        body["spot"] = {}
    valid = valid_until_duration_s if valid_until_duration_s is not None else settings.valid_until_duration_s
    if valid:
        body["queueingPolicy"] = {"validUntilDuration": f"{int(valid)}s"}
    return body


def redacted_request(body: dict[str, Any]) -> dict[str, Any]:
    """The request with the startup script replaced by its size and sha256 (for plans and logs)."""
    import copy

    out = copy.deepcopy(body)
    for spec in node_specs(out):
        meta = spec.get("node", {}).get("metadata", {})
        script = meta.get("startup-script")
        if script is not None:
            digest = hashlib.sha256(script.encode()).hexdigest()[:16]
            meta["startup-script"] = (
                f"<startup script: {len(script.encode())} bytes, {script.count(chr(10)) + 1} lines, sha256:{digest}>"
            )
    return out


def gcloud_command(
    settings: Settings, *, zone: str, qr_id: str, provisioning_model: str, body: dict[str, Any]
) -> str:
    """The equivalent ``gcloud alpha compute tpus queued-resources create`` command line."""
    node = node_specs(body)[0]["node"]
    parts = [
        "gcloud alpha compute tpus queued-resources create",
        shlex.quote(qr_id),
        f"--project={shlex.quote(settings.project)}",
        f"--zone={zone}",
        f"--node-id={shlex.quote(qr_id)}",
        f"--accelerator-type={node['acceleratorType']}",
        f"--runtime-version={node['runtimeVersion']}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in node["labels"].items()),
        "--metadata-from-file=startup-script=startup_script.sh",
    ]
    if provisioning_model == "flex-start":
        parts += [
            "--provisioning-model=flex-start",
            f"--max-run-duration={body['runDuration']['maxRunDuration']}",
        ]
    elif provisioning_model == "spot":
        parts.append("--spot")
    if "queueingPolicy" in body:
        parts.append(f"--valid-until-duration={body['queueingPolicy']['validUntilDuration']}")
    net = node.get("networkConfig", {})
    if net.get("network"):
        parts.append(f"--network={shlex.quote(net['network'])}")
    if net.get("subnetwork"):
        parts.append(f"--subnetwork={shlex.quote(net['subnetwork'])}")
    return " \\\n  ".join(parts)


async def hourly_price(settings: Settings, provisioning_model: str, zone: str) -> tuple[float | None, str]:
    """(USD per hour for the whole slice in ``zone``'s region, source label).

    Uses `tpu_devops.pricing.get_price` for the zone's region (live Cloud Billing Catalog, else its
    dated fallback table), the same answer ``estimate_deployment_cost`` gives. When it has no price
    for that region the result is ``(None, "price unknown for <region>: <why>")``: another region's
    figure is never shown in its place.
    """
    from tpu_devops import pricing

    region = zone.rsplit("-", 1)[0]
    try:
        quote = await pricing.get_price(settings, region=region, provisioning_model=provisioning_model)
    except TpuDevopsError as exc:
        return None, f"price unknown for {region} ({provisioning_model}): {exc.message}"
    return round(float(quote.usd_per_hour), 4), f"{region}: {quote.label()}"


# ---------------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------------


class QueuedResourcePlan(ToolResult):
    """What `create_tpu_queued_resource` would send, without sending it. Prices in USD."""

    queued_resource_id: str
    zone: str
    provisioning_model: str
    accelerator_type: str
    request_url: str
    request: dict[str, Any]
    gcloud_command: str
    usd_per_hour: float | None
    price_source: str
    stops_billing: str
    max_cost_usd: float | None
    warnings: list[str]

    def headline(self) -> str:
        price = f"${self.usd_per_hour:.2f}/h" if self.usd_per_hour is not None else "price unknown"
        return (
            f"plan: {self.provisioning_model} {self.accelerator_type} '{self.queued_resource_id}' in {self.zone}, "
            f"{price}; {self.stops_billing}; {len(self.warnings)} warning(s)"
        )


async def plan_queued_resource(
    settings: Settings,
    *,
    zone: str | None = None,
    provisioning_model: str | None = None,
    max_run_duration_s: int | None = None,
    valid_until_duration_s: int | None = None,
    queued_resource_id: str | None = None,
    store: Any = None,
) -> QueuedResourcePlan:
    """Build the exact create request, gcloud equivalent, price and warnings. Makes no cloud call.

    Raises:
        ConfigError: bad zone / model / durations, or no startup-script renderer.
    """
    from tpu_devops import capacity

    zone = check_zone(or_default(zone, settings.zone, "zone"))
    model = check_provisioning_model(provisioning_model, settings)
    max_run, valid = check_durations(model, max_run_duration_s, valid_until_duration_s, settings)
    no_project = not settings.project
    if no_project:  # a dry run is useful before a project exists; the placeholder makes that visible
        settings = settings.model_copy(update={"project": PLACEHOLDER_PROJECT})
    if store is None:
        try:
            store = capacity.open_store(settings)
        except ConfigError:
            store = None
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    body = build_request(
        settings,
        zone=zone,
        qr_id=qr_id,
        provisioning_model=model,
        max_run_duration_s=max_run,
        valid_until_duration_s=valid,
    )
    per_hour, source = await hourly_price(settings, model, zone)
    warnings: list[str] = []
    if per_hour is None:
        warnings.append(source)
    if model == "flex-start":
        assert max_run is not None
        stops = f"stops by itself after max_run_duration = {max_run}s ({max_run / 3600:.1f} h): SUSPENDED, node deleted"
        max_cost = None if per_hour is None else round(per_hour * max_run / 3600, 2)
        support = capacity.known_support(settings.accelerator_type, model, zone, store=store)
        if support.refused:
            warnings.append(
                f"zone {zone} is known to refuse flex-start for {settings.accelerator_type}: {support.note}"
            )
        elif not support.documented and not support.accepted:
            warnings.append(
                f"zone {zone} is not in Google's documented flex-start list for {settings.accelerator.generation.name} "
                f"({', '.join(support.documented_zones) or 'none'}); expect 'not supported'"
            )
    else:
        stops = (
            f"WARNING: {model} never stops by itself: it bills "
            f"{'$' + format(per_hour, '.2f') + '/h' if per_hour is not None else 'by the hour'} until you delete it "
            "(destroy_queued_resource)"
        )
        max_cost = None
        warnings.append(
            f"{model} keeps billing until deleted; set a reminder or prefer flex-start with a max run duration"
        )
        if model == "spot":
            warnings.append("spot TPUs can be preempted at any time")
    if settings.network or settings.subnetwork:
        warnings.append(
            f"network set (network={settings.network or 'default'!r}, subnetwork={settings.subnetwork or '-'!r}): "
            "it must exist in this project and region, or every zone fails with 'not found'"
        )
    if settings.tensor_parallel_size != settings.accelerator.chips:
        warnings.append(
            f"TENSOR_PARALLEL_SIZE={settings.tensor_parallel_size} but {settings.accelerator_type} has "
            f"{settings.accelerator.chips} chip(s): vLLM uses only {settings.tensor_parallel_size}"
        )
    if valid is None:
        warnings.append("no valid_until_duration: the request can wait in WAITING_FOR_RESOURCES indefinitely")
    warnings.extend(settings.notices)
    if no_project:
        warnings.append(
            f"GOOGLE_CLOUD_PROJECT is not set: the request shows {PLACEHOLDER_PROJECT}; "
            "set it in tpu.env before create_tpu_queued_resource"
        )
    from tpu_devops.gcp.common import base_url

    version = "v2alpha1" if model == "flex-start" else "v2"
    url = f"{base_url(settings, 'tpu')}/{version}/projects/{settings.project}/locations/{zone}/queuedResources?queuedResourceId={qr_id}"
    return QueuedResourcePlan(
        queued_resource_id=qr_id,
        zone=zone,
        provisioning_model=model,
        accelerator_type=settings.accelerator_type,
        request_url=url,
        request=redacted_request(body),
        gcloud_command=gcloud_command(settings, zone=zone, qr_id=qr_id, provisioning_model=model, body=body),
        usd_per_hour=per_hour,
        price_source=source,
        stops_billing=stops,
        max_cost_usd=max_cost,
        warnings=warnings,
    )


_ID = re.compile(r"^[a-z](?:[-a-z0-9]{0,59}[a-z0-9])?$")
PLACEHOLDER_PROJECT = "YOUR_PROJECT_ID"


def check_resource_id(value: str, field: str = "queued_resource_id") -> str:
    """Validate a queued resource / node id. Raises `ConfigError` naming the field."""
    v = (value or "").strip()
    if not _ID.match(v):
        raise ConfigError(
            "not a valid TPU resource id",
            field=field,
            value=value,
            fix="lowercase letters, digits, hyphens; start with a letter; max 61",
        )
    return v


VALID_UNTIL_MIN_S = 60  # as VALID_UNTIL_DURATION in config.py
VALID_UNTIL_MAX_S = 30 * 86400  # no documented maximum; longer than a month is a unit mistake


def check_valid_until(value: int | None, settings: Settings) -> int | None:
    """``queueingPolicy.validUntilDuration`` in seconds (None: the configured VALID_UNTIL_DURATION).

    Google's QueueingPolicy reference: "a relative time after which resources should not be created;
    if the request cannot be fulfilled by this time the request will be failed". Allowed here: 60 s
    to 30 days. Raises `ConfigError` naming ``valid_until_duration_s`` (e.g. for -1, which used to be
    sent as ``"-1s"``).
    """
    if value is None:
        return settings.valid_until_duration_s
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (VALID_UNTIL_MIN_S <= value <= VALID_UNTIL_MAX_S)
    ):
        raise ConfigError(
            "the time a request may wait for capacity must be between 1 minute and 30 days",
            field="valid_until_duration_s",
            value=value,
            fix=f"use {VALID_UNTIL_MIN_S} to {VALID_UNTIL_MAX_S} seconds (e.g. 3600), or omit it for VALID_UNTIL_DURATION",
        )
    return int(value)


def check_durations(
    model: str, max_run_duration_s: int | None, valid_until_duration_s: int | None, settings: Settings
) -> tuple[int | None, int | None]:
    """(max run seconds or None, valid-until seconds or None) for ``model``, validated.

    ``max_run_duration_s`` is a flex-start setting (``runDuration.maxRunDuration``): given explicitly
    with spot or on-demand it is refused instead of silently dropped, since those never stop by
    themselves. Raises `ConfigError` naming the field.
    """
    if model != "flex-start" and max_run_duration_s is not None:
        raise ConfigError(
            f"max_run_duration_s only applies to flex-start; a {model} TPU never stops by itself",
            field="max_run_duration_s",
            value=max_run_duration_s,
            fix="omit max_run_duration_s (and delete the TPU with destroy_queued_resource when done), "
            "or use provisioning_model=flex-start",
        )
    max_run = check_max_run(max_run_duration_s, settings) if model == "flex-start" else None
    return max_run, check_valid_until(valid_until_duration_s, settings)


def check_max_run(value: int | None, settings: Settings) -> int:
    """Flex-start run duration in seconds, 10 min to 7 days (DESIGN §3). Raises `ConfigError`."""
    v = settings.max_run_duration_s if value is None else int(value)
    if not 600 <= v <= 7 * 86400:
        raise ConfigError(
            "flex-start runs between 10 minutes and 7 days",
            field="max_run_duration_s",
            value=value,
            fix="use 600 to 604800 seconds (default 4h = 14400)",
        )
    return v


# ---------------------------------------------------------------------------------------------
# Cloud calls (async wrappers)
# ---------------------------------------------------------------------------------------------


def _limiter() -> anyio.CapacityLimiter:
    """One limiter per event loop (a limiter must not be shared across loops)."""
    import asyncio

    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(MAX_CONCURRENT_CALLS)
    return limiter


async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking adapter call in a worker thread from our own bounded pool."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_limiter())


def api(settings: Settings) -> Any:
    """The TPU adapter for these settings."""
    from tpu_devops.gcp.tpu import TpuApi

    return TpuApi(settings)


async def get_queued(settings: Settings, zone: str, qr_id: str) -> dict[str, Any] | None:
    """The queued resource JSON, or None when it does not exist."""
    try:
        return await call(api(settings).get_queued_resource, zone, qr_id)
    except NotFoundError:
        return None


async def node_external_ip(
    settings: Settings, zone: str, node_id: str
) -> tuple[str | None, dict[str, Any] | None]:
    """(external IP of the node's first endpoint, node JSON); (None, None) when the node is gone."""
    try:
        node = await call(api(settings).get_node, zone, node_id)
    except NotFoundError:
        return None, None
    for ep in node.get("networkEndpoints", []) or []:
        ip = (ep.get("accessConfig") or {}).get("externalIp")
        if ip:
            return ip, node
    return None, node


class CreateResult(ToolResult):
    """Outcome of a create: ``created`` False when the id already existed (then ``state`` is its state)."""

    queued_resource_id: str
    zone: str
    provisioning_model: str
    created: bool
    state: str
    operation: str | None = None
    usd_per_hour: float | None = None
    stops_billing: str
    wait_job_id: str | None = None
    job_id: str | None = None  # the same wait job, under the name other job-starting tools use
    next_step: str
    warnings: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        verb = "created" if self.created else "already exists"
        loud = "".join(f" WARNING: {w}." for w in self.warnings if w.startswith("SECOND TPU"))
        return f"queued resource '{self.queued_resource_id}' in {self.zone}: {verb}, state {self.state}.{loud} {self.next_step}"


async def ensure_hf_secret(settings: Settings) -> None:
    """Refuse to create a TPU whose boot would fail: the HF token secret must exist with an ENABLED version.

    Raises:
        ConfigError: the secret is missing, has no version, or its latest version is not enabled.
        PermissionError_: the secret cannot be read by the caller.
    """
    from tpu_devops.gcp import secrets

    status = await call(secrets.secret_status, settings, settings.hf_secret_id)
    if not status.exists:
        raise ConfigError(
            "the Hugging Face token secret does not exist",
            field="HF_SECRET_ID",
            value=settings.hf_secret_id,
            fix="run save_hf_token first (the VM reads the token from Secret Manager at boot)",
        )
    if status.latest_version is None or status.state != "ENABLED":
        raise ConfigError(
            f"the secret has no enabled version (latest: {status.state or 'none'})",
            field="HF_SECRET_ID",
            value=settings.hf_secret_id,
            fix="run save_hf_token to add a version",
        )


async def rig_queued_resources(settings: Settings, qr_id: str | None = None) -> list[QueuedResourceView]:
    """Every live queued resource of the rig ``qr_id`` (labels ``managed-by=tpu-devops``, ``rig=qr_id``;
    default RESOURCE_ID) in every zone, listed concurrently. "Live": not in `NOT_LIVE_STATES`, i.e. it
    holds or will hold a TPU that bills. Zones whose listing failed are skipped (logged).

    Raises:
        CloudError: the zone list itself failed.
    """
    rig = qr_id or settings.resource_id
    listing = await list_queued_resources(settings, "all", only_ours=True)
    if listing.errors:
        import logging

        logging.getLogger(__name__).warning("listing failed in %s", ", ".join(sorted(listing.errors)))
    return [q for q in listing.queued_resources if q.rig == rig and q.state not in NOT_LIVE_STATES]


def describe_others(others: list[QueuedResourceView]) -> str:
    """``"gemma4-e2b in us-west4-b (ACTIVE, flex-start), ..."``."""
    return ", ".join(f"{q.id} in {q.zone} ({q.state}, {q.provisioning_model})" for q in others)


async def create_queued_resource(
    settings: Settings,
    *,
    zone: str | None = None,
    provisioning_model: str | None = None,
    max_run_duration_s: int | None = None,
    valid_until_duration_s: int | None = None,
    queued_resource_id: str | None = None,
    check_secret: bool = True,
    allow_second: bool = False,
    check_other_zones: bool = True,
) -> CreateResult:
    """Create the queued resource (non-destructive: touches only its own id) and return at once.

    If the id already exists in the zone, reports it (with its own provisioning model and price)
    instead of failing. If the rig already has a live queued resource in another zone, refuses unless
    ``allow_second`` (then creates with a loud warning): two TPUs of one rig bill twice.
    ``check_other_zones=False`` skips that listing (the sweep does its own check before each create).

    Raises:
        ConfigError: bad arguments (empty values, durations, max_run_duration_s with spot /
            on-demand), missing HF secret, missing startup-script renderer.
        ConfigError: also when the rig already has a live queued resource in another zone (field
            ``zone``; fix: use or delete it, or ``allow_second=true``).
        CloudError (and subclasses): the API refused; ``classify_exception`` gives its reach.
    """
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    model = check_provisioning_model(provisioning_model, settings)
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    max_run, valid = check_durations(model, max_run_duration_s, valid_until_duration_s, settings)
    existing = await get_queued(settings, zone, qr_id)
    if existing is not None:
        view = QueuedResourceView.of(existing, zone)
        owner = "ours" if view.ours else "NOT ours (no managed-by=tpu-devops label)"
        per_hour, _ = await hourly_price(settings, view.provisioning_model, zone)
        note = (
            f"; you asked for {model} but the existing one is {view.provisioning_model}"
            if view.provisioning_model != model
            else ""
        )
        return CreateResult(
            queued_resource_id=qr_id,
            zone=zone,
            provisioning_model=view.provisioning_model,
            created=False,
            state=view.state,
            usd_per_hour=per_hour,
            stops_billing=_stops_text(view.provisioning_model, view.max_run_duration_s),
            next_step=f"it already exists ({owner}{note}); use get_reservation_status, or destroy_queued_resource first to recreate",
        )
    warnings: list[str] = []
    if check_other_zones:
        others = [q for q in await rig_queued_resources(settings, qr_id) if q.zone != zone]
        if others and not allow_second:
            raise ConfigError(
                f"rig '{qr_id}' already has a queued resource in another zone: {describe_others(others)}; "
                "a second one would bill twice",
                field="zone",
                value=zone,
                fix=f"use the existing one (get_reservation_status zone={others[0].zone}), or delete it first "
                f"(destroy_queued_resource zone={others[0].zone}); pass allow_second=true only if you really "
                "want two TPUs billing at once",
            )
        if others:
            warnings.append(
                f"SECOND TPU OF RIG '{qr_id}': {describe_others(others)} already exists and bills too "
                "(allow_second=true); destroy the one you do not need"
            )
    per_hour, source = await hourly_price(settings, model, zone)
    if per_hour is None:
        warnings.append(source)
    stops = _stops_text(model, max_run)
    if check_secret:
        await ensure_hf_secret(settings)
    body = build_request(
        settings,
        zone=zone,
        qr_id=qr_id,
        provisioning_model=model,
        max_run_duration_s=max_run,
        valid_until_duration_s=valid,
    )
    try:
        op = await call(api(settings).create_queued_resource, zone, qr_id, body)
    except CloudError as exc:
        if getattr(exc, "status", None) == "ALREADY_EXISTS":
            again = await get_queued(settings, zone, qr_id)
            state = state_of(again) if again else "UNKNOWN"
            return CreateResult(
                queued_resource_id=qr_id, zone=zone, provisioning_model=model, created=False, state=state,
                usd_per_hour=per_hour, stops_billing=stops, next_step="it already exists; use get_reservation_status",
            )  # fmt: skip
        raise
    now = await get_queued(settings, zone, qr_id)
    if model == "flex-start":
        from tpu_devops import capacity

        try:
            support = capacity.known_support(
                settings.accelerator_type, model, zone, capacity.open_store(settings)
            )
        except ConfigError:
            support = capacity.known_support(settings.accelerator_type, model, zone)
        if support.refused:
            warnings.append(
                f"{zone} is known to refuse flex-start for {settings.accelerator_type} ({support.note})"
            )
    else:
        warnings.append(f"{model} bills until you delete it (destroy_queued_resource)")
    return CreateResult(
        warnings=warnings,
        queued_resource_id=qr_id,
        zone=zone,
        provisioning_model=model,
        created=True,
        state=state_of(now) if now else "ACCEPTED",
        operation=op.get("name"),
        usd_per_hour=per_hour,
        stops_billing=stops,
        next_step="poll get_reservation_status (or the wait job) until ACTIVE; then get_vllm_endpoint",
    )


def _stops_text(model: str, max_run_s: float | None) -> str:
    if model == "flex-start":
        return f"stops by itself after {int(max_run_s)}s" if max_run_s else "stops by itself (flex-start)"
    return f"WARNING: {model} bills until deleted"


async def describe_queued_resource(
    settings: Settings, zone: str | None = None, queued_resource_id: str | None = None
) -> QueuedResourceView:
    """One queued resource (any owner; ``ours`` says whether it carries our labels).

    Raises:
        NotFoundError: no such queued resource in the zone.
        ConfigError: a bad or explicitly empty zone / id.
    """
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    qr = await get_queued(settings, zone, qr_id)
    if qr is None:
        raise NotFoundError(
            "no such queued resource",
            field="queued_resource_id",
            value=f"{qr_id} in {zone}",
            fix="list_queued_resources(zone='all') shows what exists; create_tpu_queued_resource creates it",
        )
    return QueuedResourceView.of(qr, zone)


class QueuedResourceList(ToolResult):
    """Queued resources in the zones listed. ``errors`` maps zone -> message for zones that failed."""

    zones_listed: int
    queued_resources: list[QueuedResourceView]
    errors: dict[str, str] = Field(default_factory=dict)
    elapsed_s: float

    def render_text(self) -> str:
        """Headline, then one line per queued resource."""
        lines = [self.headline()]
        for q in self.queued_resources:
            owner = f"ours (rig {q.rig})" if q.ours else "not ours"
            extra = " holds quota until deleted" if q.holds_quota else ""
            lines.append(
                f"- {q.id} in {q.zone}: {q.state}, {q.provisioning_model}, {q.accelerator_type}, {owner}{extra}"
            )
        lines.extend(f"- {zone}: listing failed: {msg}" for zone, msg in sorted(self.errors.items()))
        return "\n".join(lines)

    def headline(self) -> str:
        ours = sum(1 for q in self.queued_resources if q.ours)
        return (
            f"{len(self.queued_resources)} queued resource(s) ({ours} ours) in {self.zones_listed} zone(s)"
            + (f"; {len(self.errors)} zone(s) failed" if self.errors else "")
        )


async def resolve_zones(settings: Settings, zone: str | None) -> list[str]:
    """``"all"`` -> every TPU location of the project; a zone -> [zone]; None -> [configured zone].

    Raises:
        ConfigError: an explicitly empty or malformed zone.
    """
    zone = or_default(zone, settings.zone, "zone")
    if zone.strip().lower() == "all":
        return await call(api(settings).list_zones)
    return [check_zone(zone)]


async def list_queued_resources(
    settings: Settings, zone: str | None = None, *, only_ours: bool = False
) -> QueuedResourceList:
    """List queued resources in one zone or ``"all"`` zones (concurrently, at most
    `MAX_CONCURRENT_CALLS` at a time). A zone whose listing fails is reported in ``errors``.

    Raises:
        ConfigError: bad zone or no project. CloudError: the zone list itself failed, or the one zone
        asked for failed (its own typed error, e.g. `PermissionError_`, with field ``zone``).
    """
    require_project(settings)
    started = time.perf_counter()
    zones = await resolve_zones(settings, zone)
    results: dict[str, list[dict[str, Any]]] = {}
    failures: dict[str, CloudError] = {}

    async def one(z: str) -> None:
        try:
            results[z] = await call(api(settings).list_queued_resources, z)
        except CloudError as exc:
            failures[z] = exc

    async with anyio.create_task_group() as tg:
        for z in zones:
            tg.start_soon(one, z)
    views = [QueuedResourceView.of(qr, z) for z in zones for qr in results.get(z, [])]
    if only_ours:
        views = [v for v in views if v.ours]
    if len(zones) == 1 and failures:
        failure = failures[zones[0]]
        if failure.field is None:
            failure.field, failure.value = "zone", zones[0]
        raise failure
    return QueuedResourceList(
        zones_listed=len(zones),
        queued_resources=views,
        errors={z: exc.message for z, exc in failures.items()},
        elapsed_s=round(time.perf_counter() - started, 3),
    )


class ReservationStatus(ToolResult):
    """State of our queued resource with its node and countdowns. Seconds; times as ISO strings."""

    queued_resource_id: str
    zone: str
    exists: bool
    state: str | None = None
    ours: bool | None = None
    provisioning_model: str | None = None
    time_in_state_s: float | None = None
    age_s: float | None = None
    node_id: str | None = None
    node_state: str | None = None
    external_ip: str | None = None
    endpoint_url: str | None = None
    expires_at: str | None = None
    expires_in_s: float | None = None
    usd_per_hour: float | None = None
    price_source: str | None = None
    cost_so_far_usd: float | None = None
    failed_error: str | None = None
    rig_queued_resources: list[str] = Field(default_factory=list)
    several: bool = False
    warnings: list[str] = Field(default_factory=list)
    next_step: str

    def headline(self) -> str:
        loud = f"WARNING: {self.warnings[0]}. " if self.several and self.warnings else ""
        if not self.exists:
            return f"{loud}'{self.queued_resource_id}' does not exist in {self.zone}. {self.next_step}"
        parts = [f"{loud}'{self.queued_resource_id}' in {self.zone}: {self.state}"]
        if self.endpoint_url:
            parts.append(f"endpoint {self.endpoint_url}")
        if self.expires_in_s is not None:
            parts.append(f"stops in {self.expires_in_s / 60:.0f} min")
        return ", ".join(parts) + f". {self.next_step}"


async def reservation_status(
    settings: Settings,
    zone: str | None = None,
    queued_resource_id: str | None = None,
    *,
    scan_all_zones: bool = True,
) -> ReservationStatus:
    """State, time in state, node, IP, expiry countdown and cost so far of one queued resource.

    Without an explicit ``zone``, a request of ours with this id in any other zone is found too.
    With ``scan_all_zones`` (default) every live queued resource of the rig in any zone is listed in
    ``rig_queued_resources``; more than one sets ``several`` and a warning (each one bills). The
    detailed one is the one in ``zone`` (or the configured zone), else the first ACTIVE one.
    Time in state: for ACTIVE it is measured from the node's ``createTime`` (the API records no state
    timestamps); otherwise from the request's ``createTime``. Flex-start expiry = node ``createTime`` +
    ``runDuration.maxRunDuration`` (or ``runDuration.terminationTime`` when the API returns it).
    """
    explicit = zone is not None
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    qr = await get_queued(settings, zone, qr_id)
    rig: list[QueuedResourceView] = []
    if scan_all_zones:
        # find_tpu may have placed it in another zone, and a rig must never hold two: list ours everywhere.
        listing = await list_queued_resources(settings, "all", only_ours=True)
        rig = [q for q in listing.queued_resources if q.id == qr_id or q.rig == qr_id]
    if qr is None and not explicit and rig:
        live = [q for q in rig if q.state not in NOT_LIVE_STATES]
        pick = next((q for q in live if q.state == "ACTIVE"), None) or (live or rig)[0]
        zone = pick.zone
        qr = await get_queued(settings, zone, pick.id)
    live_rig = [q for q in rig if q.state not in NOT_LIVE_STATES]
    extras = {
        "rig_queued_resources": [f"{q.id} in {q.zone}: {q.state}, {q.provisioning_model}" for q in rig],
        "several": len(live_rig) > 1,
        "warnings": (
            [
                f"{len(live_rig)} queued resources of rig '{qr_id}' are live ({describe_others(live_rig)}): "
                "each one bills; keep one and delete the others with destroy_queued_resource zone=<zone>"
            ]
            if len(live_rig) > 1
            else []
        ),
    }
    if qr is None:
        return ReservationStatus(
            queued_resource_id=qr_id,
            zone=zone,
            exists=False,
            next_step="create it with create_tpu_queued_resource or find_tpu",
            **extras,
        )
    view = QueuedResourceView.of(qr, zone)
    now = time.time()
    created = _parse_time(qr.get("createTime"))
    status = ReservationStatus(
        queued_resource_id=qr_id,
        zone=zone,
        exists=True,
        state=view.state,
        ours=view.ours,
        provisioning_model=view.provisioning_model,
        age_s=None if created is None else round(now - created, 1),
        node_id=view.node_id,
        failed_error=view.failed_error,
        next_step="",
        **extras,
    )
    status.time_in_state_s = status.age_s
    per_hour, source = await hourly_price(settings, view.provisioning_model, zone)
    status.usd_per_hour, status.price_source = per_hour, source
    if view.state == "ACTIVE" and view.node_id:
        ip, node = await node_external_ip(settings, zone, view.node_id)
        if node:
            status.node_state = node.get("state")
            node_created = _parse_time(node.get("createTime"))
            if node_created is not None:
                status.time_in_state_s = round(now - node_created, 1)
                if per_hour is not None:
                    status.cost_so_far_usd = round(per_hour * (now - node_created) / 3600, 2)
                end = _parse_time(qr.get("runDuration", {}).get("terminationTime"))
                if end is None and view.max_run_duration_s:
                    end = node_created + view.max_run_duration_s
                if end is not None:
                    status.expires_at = datetime.fromtimestamp(end).astimezone().isoformat(timespec="seconds")
                    status.expires_in_s = round(max(0.0, end - now), 1)
        status.external_ip = ip
        if ip:
            status.endpoint_url = f"http://{ip}:{settings.vllm_port}"
    status.next_step = next_step_for(view.state, status.endpoint_url)
    return status


def next_step_for(state: str, endpoint_url: str | None = None) -> str:
    """What to do next for a queued resource in ``state``."""
    return {
        "ACTIVE": f"the TPU is up; vLLM answers at {endpoint_url} once it has booted (about 10-15 min)"
        if endpoint_url
        else "the TPU is up; the node has no external IP yet",
        "FAILED": "it failed and still holds quota: manage_queued_resource(action='cleanup') deletes it; find_tpu tries other zones",
        "SUSPENDED": "it ran out its time (or was stopped) and still holds quota: clean it up with manage_queued_resource",
        "PROVISIONING": "resources are being allocated (cannot be deleted now); poll again in a minute",
        "WAITING_FOR_RESOURCES": "queued for capacity; poll again, or cancel with destroy_queued_resource",
        "ACCEPTED": "accepted; poll again shortly",
        "CREATING": "being created; poll again shortly",
        "SUSPENDING": "stopping; poll again",
        "DELETING": "being deleted",
    }.get(state, "poll again")


async def wait_for_active(
    settings: Settings, record: Any, *, zone: str, qr_id: str, timeout_s: float, poll_interval_s: float
) -> ReservationStatus:
    """Job body: poll until ACTIVE (with an external IP), FAILED / SUSPENDED, or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = await reservation_status(settings, zone, qr_id, scan_all_zones=False)
        record.progress = {"state": status.state, "zone": zone, "queued_resource_id": qr_id}
        record.message = f"{qr_id} in {zone}: {status.state}"
        if (
            not status.exists
            or status.state in TERMINAL_STATES
            or (status.state == "ACTIVE" and status.external_ip)
        ):
            return status
        if time.monotonic() >= deadline:
            status.next_step = f"still {status.state} after {timeout_s:.0f}s; poll get_reservation_status"
            return status
        await anyio.sleep(poll_interval_s)


async def create_with_optional_wait(
    settings: Settings,
    *,
    wait: bool = False,
    wait_timeout_s: float = 3600,
    poll_interval_s: float = 15,
    **create_args: Any,
) -> CreateResult:
    """`create_queued_resource`, then (``wait``) a job that polls until ACTIVE; its id is ``wait_job_id``."""
    from tpu_devops.jobs import JOBS

    result = await create_queued_resource(settings, **create_args)
    if wait and result.state not in TERMINAL_STATES:
        zone, qr_id = result.zone, result.queued_resource_id

        async def body(record: Any) -> ReservationStatus:
            return await wait_for_active(
                settings,
                record,
                zone=zone,
                qr_id=qr_id,
                timeout_s=wait_timeout_s,
                poll_interval_s=poll_interval_s,
            )

        rec = JOBS.start("wait-active", f"wait for {qr_id} in {zone} to become ACTIVE", body)
        result.wait_job_id = result.job_id = rec.id
        result.next_step = f"a wait job started: poll get_job {rec.id} (job_id='{rec.id}') until it succeeds; then get_vllm_endpoint"
    return result
