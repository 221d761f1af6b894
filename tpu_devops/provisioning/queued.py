"""Queued resources: create, describe, list, reservation status, and ownership by this server's rig.

Two blast radii (DESIGN §2): creating touches only the id it was given and is never destructive;
deleting lives in `tpu_devops.teardown`. A queued resource is ours when its node carries
``managed-by=tpu-devops`` (and ``rig=<resource id>`` for one rig), as `requests.build_request` labels it.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import anyio
from pydantic import Field

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import CloudError, ConfigError, NotFoundError, TpuDevopsError
from tpu_devops.images import image_gate
from tpu_devops.provisioning.access import EndpointAccess
from tpu_devops.provisioning.cloud import api, call, get_queued, node_external_ip
from tpu_devops.provisioning.failures import classify_failed_data
from tpu_devops.provisioning.plan import hourly_price, stops_text
from tpu_devops.provisioning.requests import (
    CreateCall,
    build_request,
    check_durations,
    check_provisioning_model,
    check_resource_id,
    check_zone,
    create_call,
    labels_of,
    max_run_duration_of,
    node_specs,
    or_default,
    provisioning_model_of,
    termination_time_of,
)
from tpu_devops.provisioning.store import open_store
from tpu_devops.quota import known_support
from tpu_devops.results import ToolResult

TERMINAL_STATES = ("FAILED", "SUSPENDED")


WAITING_STATES = ("CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES")


# States in which a queued resource of ours holds (or will hold) a TPU that bills: not finished, not
# on its way out. A rig with more than one of these bills twice.
NOT_LIVE_STATES = ("FAILED", "SUSPENDED", "SUSPENDING", "DELETING")


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


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class QueuedResourceView(ToolResult):
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

    def headline(self) -> str:
        owner = f"ours (rig {self.rig})" if self.ours else "not ours"
        failed = f"; failed: {self.failed_error}" if self.failed_error else ""
        return f"queued resource {self.id} in {self.zone}: {self.state}, {self.provisioning_model}, {owner}{failed}"

    @classmethod
    def of(cls, qr: dict[str, Any], zone: str, resource_id: str | None = None) -> QueuedResourceView:
        specs = node_specs(qr)
        node = specs[0].get("node", {}) if specs else {}
        state = state_of(qr)
        failed = qr.get("state", {}).get("failedData", {}).get("error", {}) or {}
        created = _parse_time(qr.get("createTime"))
        labels = labels_of(qr)
        failure = classify_failed_data(failed, state) if failed else None
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
            max_run_duration_s=max_run_duration_of(qr),
            failed_error=failed.get("message"),
            failure_reach=failure.reach if failure else None,
            holds_quota=state in TERMINAL_STATES,
        )


class CreateResult(ToolResult):
    """Outcome of a create: ``created`` False when the id already existed (then ``state`` is its state)."""

    queued_resource_id: str
    zone: str
    provisioning_model: str
    created: bool
    state: str
    operation: str | None = None
    request_id: str | None = None  # the API's idempotent requestId this create was sent with
    usd_per_hour: float | None = None
    stops_billing: str
    wait_job_id: str | None = None
    job_id: str | None = None  # the same wait job, under the name other job-starting tools use
    next_step: str
    warnings: list[str] = Field(default_factory=list)
    endpoint_access: EndpointAccess | None = None

    def headline(self) -> str:
        verb = "created" if self.created else "already exists"
        loud = "".join(
            f" WARNING: {w}." for w in self.warnings if w.startswith(("SECOND TPU", "UNSUPPORTED IMAGE"))
        )
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
    allow_unsupported_image: bool = False,
    allowed_source_ranges: list[str] | None = None,
    open_to_internet: bool = False,
) -> CreateResult:
    """Create the queued resource (non-destructive: touches only its own id) and return at once.

    If the id already exists in the zone, reports it (with its own provisioning model and price)
    instead of failing. If the rig already has a live queued resource in another zone, refuses unless
    ``allow_second`` (then creates with a loud warning): two TPUs of one rig bill twice.
    ``check_other_zones=False`` skips that listing (the sweep does its own check before each create).
    Before the create, the rig's endpoint access is put in place (`access.ensure_access`: the API key
    secret and the firewall rule admitting ``allowed_source_ranges``, default your public IPv4);
    ``check_secret=False`` skips that with the HF secret check (the sweep does both once).

    Raises:
        ConfigError: bad arguments (empty values, durations, max_run_duration_s with spot /
            on-demand), missing HF secret, missing startup-script renderer.
        ConfigError: also when the rig already has a live queued resource in another zone (field
            ``zone``; fix: use or delete it, or ``allow_second=true``).
        ConfigError: VLLM_IMAGE is older than the first vLLM release that serves the model
            (`tpu_devops.images`), unless ``allow_unsupported_image`` (then a loud warning).
        CloudError (and subclasses): the API refused; ``classify_exception`` gives its reach.
    """
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    model = check_provisioning_model(provisioning_model, settings)
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    max_run, valid = check_durations(model, max_run_duration_s, valid_until_duration_s, settings)
    image_warnings = image_gate(
        settings.vllm_image, settings.model_name, allow_unsupported_image=allow_unsupported_image
    )
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
            stops_billing=stops_text(view.provisioning_model, view.max_run_duration_s),
            next_step=f"it already exists ({owner}{note}); use get_reservation_status, or destroy_queued_resource first to recreate",
        )
    warnings: list[str] = list(image_warnings)
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
    stops = stops_text(model, max_run)
    endpoint_access = None
    if check_secret:
        from tpu_devops.provisioning.access import ensure_access, plan_access

        planned = await plan_access(
            settings, allowed_source_ranges=allowed_source_ranges, open_to_internet=open_to_internet
        )
        await ensure_hf_secret(settings)
        endpoint_access = await ensure_access(settings, planned)
        warnings.extend(endpoint_access.warnings)
    body = build_request(
        settings,
        zone=zone,
        qr_id=qr_id,
        provisioning_model=model,
        max_run_duration_s=max_run,
        valid_until_duration_s=valid,
    )
    request = create_call(zone, qr_id, body)
    try:
        op = await send_create(settings, request)
    except CloudError as exc:
        if getattr(exc, "status", None) == "ALREADY_EXISTS":
            again = await get_queued(settings, zone, qr_id)
            state = state_of(again) if again else "UNKNOWN"
            return CreateResult(
                queued_resource_id=qr_id, zone=zone, provisioning_model=model, created=False, state=state,
                usd_per_hour=per_hour, stops_billing=stops, next_step="it already exists; use get_reservation_status",
            )  # fmt: skip
        if endpoint_access is not None and endpoint_access.action == "created":
            await release_unused_rule(settings)  # made for a TPU that was refused: nothing carries its tag
        raise
    now = await get_queued(settings, zone, qr_id)
    if model == "flex-start":
        try:
            support = known_support(settings.accelerator_type, model, zone, open_store(settings))
        except ConfigError:
            support = known_support(settings.accelerator_type, model, zone)
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
        request_id=request.request_id,
        usd_per_hour=per_hour,
        stops_billing=stops,
        next_step="poll get_reservation_status (or the wait job) until ACTIVE; then get_vllm_endpoint",
        endpoint_access=endpoint_access,
    )


async def send_create(settings: Settings, request: CreateCall) -> dict[str, Any]:
    """Send one create exactly as built (`requests.create_call`); returns Google's operation JSON.

    Raises:
        CloudError (and subclasses): the API refused (``ALREADY_EXISTS`` when the id is taken by a
            request with another ``requestId``).
    """
    return await call(
        api(settings).create_queued_resource,
        request.zone,
        request.queued_resource_id,
        request.text,
        version=request.version,
        request_id=request.request_id,
    )


async def is_own_create(settings: Settings, request: CreateCall) -> bool:
    """After a lost response and a 409: was the existing queued resource made by ``request``?

    Re-sends ``request`` unchanged (same body, same ``requestId``). Google deduplicates creates by
    ``requestId`` (TPU discovery document: "Idempotent request UUID"; AIP-155): the same id answers with
    the original operation and creates nothing, so an operation back means the existing resource is
    ours; ``ALREADY_EXISTS`` means another request made it. If nothing exists under the id the re-send
    creates it, which is what a retried create wants anyway: call it only where creating is intended.

    Raises:
        CloudError: any other refusal.
    """
    try:
        await send_create(settings, request)
    except CloudError as exc:
        if getattr(exc, "status", None) == "ALREADY_EXISTS":
            return False
        raise
    return True


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
    firewall: str | None = Field(None, description="the rig's firewall rule: who may reach the vLLM port")
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
    timestamps); otherwise from the request's ``createTime``. Flex-start expiry: the time Google states
    (`requests.termination_time_of`: ``runDuration.terminationTime``, else the node's
    ``schedulingConfig.terminationTimestamp``), else node ``createTime`` + ``runDuration.maxRunDuration``.
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
                end = _parse_time(termination_time_of(qr, node))
                if end is None and view.max_run_duration_s:
                    end = node_created + view.max_run_duration_s
                if end is not None:
                    status.expires_at = datetime.fromtimestamp(end).astimezone().isoformat(timespec="seconds")
                    status.expires_in_s = round(max(0.0, end - now), 1)
        status.external_ip = ip
        if ip:
            status.endpoint_url = f"http://{ip}:{settings.vllm_port}"
    if view.ours:
        from tpu_devops.provisioning.access import firewall_state

        status.firewall = (await firewall_state(settings)).line()
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


async def release_unused_rule(settings: Settings) -> str | None:
    """After a create or sweep that left the rig without a TPU: delete the rule this create made, since
    nothing carries its tag any more. Kept (None) when any zone cannot be listed, a live queued resource
    of the rig exists, or the rule is not ours. Never raises (best effort; the rule admits only the
    allowed ranges to instances that carry the rig's tag, and teardown deletes it later)."""
    from tpu_devops.provisioning.access import delete_rig_rule

    try:
        listing = await list_queued_resources(settings, "all", only_ours=True)
        if listing.errors or any(
            q.rig == settings.resource_id and q.state not in NOT_LIVE_STATES for q in listing.queued_resources
        ):
            return None
        return await delete_rig_rule(settings)
    except TpuDevopsError:
        return None
