"""The queued-resource request: its arguments checked, its body built from `Settings`, its shape read.

The one place the request's shape lives, checked in tests against Google's TPU discovery documents
(v2 and v2alpha1, revision 20261001, bundled in google-api-python-client as
``googleapiclient/discovery_cache/documents/tpu.v2alpha1.json``). The body is the REST JSON of a
QueuedResource (``projects.locations.queuedResources.create``): ``tpu.nodeSpec[].{parent,nodeId,node}``;
the node's ``acceleratorType``, ``runtimeVersion``, ``labels``, ``tags`` (the rig's network tag, which
its firewall rule targets: `tpu_devops.provisioning.access`), ``metadata["startup-script"]`` and
``networkConfig`` (``enableExternalIps`` from TPU_EXTERNAL_IP); the queued resource's ``queueingPolicy.validUntilDuration``. Per provisioning model:

- flex-start: ``provisioningModel = "FLEX_START"`` and ``runDuration.maxRunDuration`` on the *queued
  resource* (v2alpha1 only). The node's ``schedulingConfig.provisioningModel`` enum has no FLEX_START
  (PROVISIONING_MODEL_UNSPECIFIED, STANDARD, SPOT, RESERVATION_BOUND): putting it there is a 400.
  gcloud: ``alpha compute tpus queued-resources create --provisioning-model=flex-start
  --max-run-duration``.
- spot: the queued resource's ``spot`` tier (``{}``), which v2 and v2alpha1 both define ("The Spot
  tier") and gcloud's ``--spot`` sets; the nodes it creates are Spot VMs, so the node carries no
  scheduling config of its own.
- on-demand: neither; the API's default is standard provisioning.

Durations are protobuf JSON durations (``"14400s"``, format ``google-duration``). Every create labels
the node ``managed-by=tpu-devops`` and ``rig=<RESOURCE_ID>`` (`Settings.rig_labels`), whatever the queued
resource's id, which is how ownership is recognised later (`tpu_devops.provisioning.ownership`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import uuid
from dataclasses import dataclass
from typing import Any

from tpu_devops.catalog import provisioning_model_name
from tpu_devops.config import Settings, require_project
from tpu_devops.errors import ConfigError
from tpu_devops.provisioning.access import network_tag

PLACEHOLDER_PROJECT = "YOUR_PROJECT_ID"


VALID_UNTIL_MIN_S = 60  # as VALID_UNTIL_DURATION in config.py


VALID_UNTIL_MAX_S = 30 * 86400  # no documented maximum; longer than a month is a unit mistake


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


def check_provisioning_model(model: str | None, settings: Settings) -> str:
    """Normalise a provisioning model argument (None -> the configured one). Raises `ConfigError`."""
    if model is None:
        return settings.provisioning_model
    or_default(model, settings.provisioning_model, "provisioning_model")
    m = provisioning_model_name(model)
    if m is None:
        raise ConfigError(
            "unknown provisioning model",
            field="provisioning_model",
            value=model,
            fix="use flex-start, spot or on-demand",
        )
    return m


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


def node_specs(qr: dict[str, Any]) -> list[dict[str, Any]]:
    """``tpu.nodeSpec`` of a queued resource JSON (empty list when absent)."""
    return list(qr.get("tpu", {}).get("nodeSpec", []) or [])


def labels_of(qr: dict[str, Any]) -> dict[str, str]:
    """Labels of the first node spec (the rig puts one node per request)."""
    specs = node_specs(qr)
    return dict(specs[0].get("node", {}).get("labels", {}) or {}) if specs else {}


# QueuedResource.provisioningModel (v2alpha1) -> this server's names. RESERVATION_BOUND has no name
# here: such a resource is someone else's (this server never creates one) and is shown as is.
_MODEL_NAMES = {"FLEX_START": "flex-start", "SPOT": "spot", "STANDARD": "on-demand"}


def provisioning_model_of(qr: dict[str, Any]) -> str:
    """The provisioning model of a queued resource JSON (ours or anyone's), as this server names it.

    Read where Google puts it (see the module docstring): the queued resource's ``provisioningModel``
    first; else a ``runDuration`` (flex-start) or the ``spot`` tier; else a node's own
    ``schedulingConfig`` (``provisioningModel`` SPOT / STANDARD / RESERVATION_BOUND, or ``spot`` /
    ``preemptible``). Returns flex-start, spot, on-demand, or ``reservation-bound`` for a request tied
    to a reservation (``RESERVATION_BOUND``, ``reservationName`` or ``guaranteed.reserved``).
    """
    model = qr.get("provisioningModel")
    if model in _MODEL_NAMES:
        return _MODEL_NAMES[model]
    if (
        model == "RESERVATION_BOUND"
        or qr.get("reservationName")
        or (qr.get("guaranteed") or {}).get("reserved")
    ):
        return "reservation-bound"
    if "runDuration" in qr:
        return "flex-start"
    if "spot" in qr:
        return "spot"
    for spec in node_specs(qr):
        sched = spec.get("node", {}).get("schedulingConfig", {}) or {}
        if sched.get("provisioningModel") == "RESERVATION_BOUND" or sched.get("reserved"):
            return "reservation-bound"
        if sched.get("provisioningModel") == "SPOT" or sched.get("spot") or sched.get("preemptible"):
            return "spot"
    return "on-demand"


def max_run_duration_of(qr: dict[str, Any]) -> float | None:
    """A flex-start request's ``runDuration.maxRunDuration`` in seconds (None when absent or unreadable)."""
    return duration_seconds((qr.get("runDuration") or {}).get("maxRunDuration"))


def termination_time_of(qr: dict[str, Any], node: dict[str, Any] | None = None) -> str | None:
    """When Google will stop the TPU, as Google states it (RFC 3339), or None.

    The queued resource's ``runDuration.terminationTime``, else the node's output-only
    ``schedulingConfig.terminationTimestamp`` (v2alpha1: "the time at which the node will be terminated").
    """
    end = (qr.get("runDuration") or {}).get("terminationTime")
    if not end and node:
        end = (node.get("schedulingConfig") or {}).get("terminationTimestamp")
    return end or None


def duration_seconds(duration: str | None) -> float | None:
    """Seconds of a protobuf JSON duration (``"14400s"``, ``"0.5s"``); None when absent or unreadable."""
    if not duration:
        return None
    text = str(duration)
    if not text.endswith("s"):
        return None
    try:
        return float(text[:-1])
    except ValueError:
        return None


def _zone_settings(settings: Settings, zone: str) -> Settings:
    region = zone.rsplit("-", 1)[0]
    return settings.model_copy(update={"zone": zone, "region": region})


def render_startup_script(settings: Settings) -> str:
    """The VM startup script text, rendered by `tpu_devops.planning.startup` (imported lazily).

    Raises:
        ConfigError: a setting cannot go into the script, or the template is missing.
    """
    from tpu_devops.planning.startup import render_startup_script as render

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
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The QueuedResource REST JSON that a create sends (shape: the module docstring).

    ``startup_script`` None renders it with `render_startup_script` for the zone. ``labels``: extra node
    labels (`tpu_devops.provisioning.ownership.Rig.labels`: created-by, tool); ``managed-by`` and
    ``rig=<RESOURCE_ID>`` always come from ``settings``, whatever ``qr_id`` is. Send it with
    `api_version` and `request_text` so that what goes out is exactly what a plan shows.

    Raises:
        ConfigError: no project, or the startup script cannot be rendered.
    """
    project = require_project(settings)
    zs = _zone_settings(settings, zone)
    script = startup_script if startup_script is not None else render_startup_script(zs)
    node: dict[str, Any] = {
        "acceleratorType": settings.accelerator_type,
        "runtimeVersion": settings.runtime_version,
        "labels": dict(labels or {}) | settings.rig_labels,
        "tags": [network_tag(settings.resource_id)],
        "metadata": {"startup-script": script},
        "networkConfig": {"enableExternalIps": settings.external_ip},
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
        body["provisioningModel"] = "FLEX_START"
        body["runDuration"] = {"maxRunDuration": f"{int(max_run_duration_s or settings.max_run_duration_s)}s"}
    elif provisioning_model == "spot":
        body["spot"] = {}
    valid = valid_until_duration_s if valid_until_duration_s is not None else settings.valid_until_duration_s
    if valid:
        body["queueingPolicy"] = {"validUntilDuration": f"{int(valid)}s"}
    return body


def check_create_settings(
    settings: Settings,
    *,
    zone: str,
    qr_id: str,
    provisioning_model: str,
    max_run_duration_s: int | None = None,
    valid_until_duration_s: int | None = None,
) -> None:
    """Read every setting a create depends on before it changes anything in the cloud.

    The server starts with invalid settings and a tool that reads one refuses (so the error reaches the host), but a
    create reads most of them only when it renders the request, after it has made the API key, the
    firewall rule and the bucket. Rendering the body once here (and reading the configured zone and
    region, which order a sweep's zones and place the bucket) moves that refusal ahead of every change.

    Raises:
        ConfigError: the first invalid setting the create would read (variable, value, fix).
    """
    _ = settings.zone, settings.region
    build_request(
        settings,
        zone=zone,
        qr_id=qr_id,
        provisioning_model=provisioning_model,
        max_run_duration_s=max_run_duration_s,
        valid_until_duration_s=valid_until_duration_s,
    )


def api_version(body: dict[str, Any]) -> str:
    """The TPU API version a create of ``body`` goes to: ``v2alpha1`` when it uses a field only that
    surface defines (``provisioningModel``, ``runDuration``; discovery documents rev. 20261001), else
    the GA ``v2``."""
    return "v2alpha1" if ("provisioningModel" in body or "runDuration" in body) else "v2"


def request_text(body: dict[str, Any]) -> str:
    """The exact JSON text a create sends for ``body`` (compact, UTF-8, key order as built).

    One serialisation for the create and the plan's ``request_sha256``, so the plan describes the
    bytes that go out, not an approximation of them.
    """
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class CreateCall:
    """One queued-resource create as it goes out: the zone, the id, the API ``version``, the exact
    JSON ``text`` and the ``request_id`` (a UUID; the API's idempotency key, re-sent on every retry)."""

    zone: str
    queued_resource_id: str
    version: str
    text: str
    request_id: str

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the UTF-8 bytes of ``text`` (what a plan shows as ``request_sha256``)."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def create_call(zone: str, qr_id: str, body: dict[str, Any], request_id: str | None = None) -> CreateCall:
    """The `CreateCall` for ``body``: its version (`api_version`), its text (`request_text`) and a new
    ``requestId`` (uuid4) unless one is given (to re-send an earlier create unchanged)."""
    return CreateCall(zone, qr_id, api_version(body), request_text(body), request_id or str(uuid.uuid4()))


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


def with_placeholder_project(settings: Settings) -> Settings:
    """``settings`` unchanged when a project is configured, else a copy whose project is
    `PLACEHOLDER_PROJECT`, so that a dry run (the plan, the deployment view) can build the request a
    create would send before a project exists. A create itself never uses this (`build_request` raises).
    """
    return settings if settings.project else settings.model_copy(update={"project": PLACEHOLDER_PROJECT})


# Double quotes, not single: the shell must run the substitution to put gcloud's configured project there.
PROJECT_FROM_GCLOUD = '"$(gcloud config get-value project)"'


def project_word(project: str | None) -> str:
    """The shell word for a gcloud ``--project`` value: the project id (`shlex.quote`d) when known,
    else `PROJECT_FROM_GCLOUD`, which the shell expands to the project of gcloud's configuration.

    None, "" and `PLACEHOLDER_PROJECT` (never a valid project id: ids are lowercase) count as unknown.
    """
    if not project or project == PLACEHOLDER_PROJECT:
        return PROJECT_FROM_GCLOUD
    return shlex.quote(project)


def gcloud_command(body: dict[str, Any], *, qr_id: str) -> str:
    """The ``gcloud alpha compute tpus queued-resources create`` line equivalent to ``body``.

    Everything is read from the body itself (project and zone from the node spec's ``parent``, the
    provisioning model with `provisioning_model_of`), so it cannot disagree with what a create sends:
    flex-start is ``--provisioning-model=flex-start --max-run-duration=...``, spot ``--spot``, the rig's
    network tag ``--tags``, no external IP ``--internal-ips`` (gcloud reference:
    https://cloud.google.com/sdk/gcloud/reference/alpha/compute/tpus/queued-resources/create). Every
    value is shell-quoted; the project is `project_word` (the placeholder becomes gcloud's configured
    project). The startup script is read from ``startup_script.sh`` (``--metadata-from-file``).
    Lines are joined with `` \\`` + newline, as a person would paste them into bash.
    """
    spec = node_specs(body)[0]
    node = spec["node"]
    _, project, _, zone = spec["parent"].split("/")
    provisioning_model = provisioning_model_of(body)
    q = shlex.quote
    parts = [
        "gcloud alpha compute tpus queued-resources create",
        q(qr_id),
        f"--project={project_word(project)}",
        f"--zone={q(zone)}",
        f"--node-id={q(spec['nodeId'])}",
        f"--accelerator-type={q(node['acceleratorType'])}",
        f"--runtime-version={q(node['runtimeVersion'])}",
        "--labels=" + q(",".join(f"{k}={v}" for k, v in node["labels"].items())),
    ]
    if node.get("tags"):
        parts.append("--tags=" + q(",".join(node["tags"])))
    parts.append("--metadata-from-file=startup-script=startup_script.sh")
    if provisioning_model == "flex-start":
        parts += [
            "--provisioning-model=flex-start",
            f"--max-run-duration={q(body['runDuration']['maxRunDuration'])}",
        ]
    elif provisioning_model == "spot":
        parts.append("--spot")
    if "queueingPolicy" in body:
        parts.append(f"--valid-until-duration={q(body['queueingPolicy']['validUntilDuration'])}")
    net = node.get("networkConfig", {})
    if net.get("enableExternalIps") is False:
        parts.append("--internal-ips")
    if net.get("network"):
        parts.append(f"--network={q(net['network'])}")
    if net.get("subnetwork"):
        parts.append(f"--subnetwork={q(net['subnetwork'])}")
    return " \\\n  ".join(parts)
