"""Queued resources: create, describe, list, reservation status of this server's rig.

Two blast radii (DESIGN §2): creating touches only the id it was given and is never destructive;
deleting lives in `tpu_devops.provisioning.teardown`. A queued resource is ours when its node carries
``managed-by=tpu-devops`` and ``rig=<RESOURCE_ID of this server>`` (`ownership`), whatever its id.

One TPU per rig, failing closed: a create takes the rig lease (`store.acquire_rig_lease`,
shared with the sweep), lists every zone first and refuses when a listing fails, and after creating
lists every zone again. If a concurrent create (another server, possibly with its own state
directory) made another live request of the rig, the newer of the two deletes itself at once and says
so. "Newer" is ordered by (``createTime``, zone, id), which every server computes the same way, so
exactly one request survives: if one server's re-check misses the other's request, that request was
created after the re-check, hence is the newer one, and its own re-check sees the older.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import anyio
from pydantic import BaseModel, Field

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import CloudError, ConfigError, DeadlineError, NotFoundError, TpuDevopsError
from tpu_devops.host import deadline
from tpu_devops.host.results import ToolResult
from tpu_devops.planning.checkpoint import chat_checkpoint
from tpu_devops.planning.fit import fit_gate
from tpu_devops.planning.images import image_gate
from tpu_devops.provisioning.access import EndpointAccess
from tpu_devops.provisioning.cloud import api, call, get_queued
from tpu_devops.provisioning.failures import classify_failed_data
from tpu_devops.provisioning.ownership import CREATE_TOOL, Rig, this_rig
from tpu_devops.provisioning.plan import hourly_price, stops_text
from tpu_devops.provisioning.quota import known_support
from tpu_devops.provisioning.requests import (
    CreateCall,
    build_request,
    check_create_settings,
    check_durations,
    check_provisioning_model,
    create_call,
    duration_seconds,
    labels_of,
    max_run_duration_of,
    node_specs,
    or_default,
    provisioning_model_of,
)
from tpu_devops.provisioning.store import (
    CREATE,
    RigLease,
    acquire_rig_lease,
    fenced_error,
    open_store,
    rig_lease_name,
)
from tpu_devops.types import check_resource_id, check_zone

TERMINAL_STATES = ("FAILED", "SUSPENDED")


WAITING_STATES = ("CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES")


# States in which a queued resource of ours holds (or will hold) a TPU that bills: not finished, not
# on its way out. A rig with more than one of these bills twice.
NOT_LIVE_STATES = ("FAILED", "SUSPENDED", "SUSPENDING", "DELETING")
# How long a failed or cancelled create may spend deleting the firewall rule it made (every zone listed
# once, then one delete): a cancelled call must still end soon.
RULE_RELEASE_S = 20.0


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
    """One queued resource as tools show it. Times are Unix seconds / seconds.

    ``ours``: this server's rig labels (`ownership`); ``owner``: the same in words ("ours", "another
    rig's (rig=x)", "not created by tpu-devops", "ours, created by someone else"); ``created_by``: the
    created-by label (a hash of the creator's ADC principal); ``created_by_you``: it is this server's
    principal (None: unknown); ``tool``: the tool that created it (find_tpu / create_tpu_queued_resource).
    Both forms state ownership once, in ``owner``'s words, and the labels once.
    """

    id: str
    zone: str
    state: str
    provisioning_model: str
    accelerator_type: str | None = None
    node_id: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    # ours and created_by_you are what owner says in words ("ours (rig x)": this rig's, created by you)
    ours: bool = Field(default=False, exclude=True)
    owner: str = Field(
        default="not created by tpu-devops",
        description="whose it is: starts with 'ours' when this server's rig owns it; 'ours (rig x)' alone: "
        "created by this server's principal too",
    )
    # labels["rig"], ["created-by"] and ["tool"] again: the text names them, the structure has them in labels
    rig: str | None = Field(default=None, exclude=True)
    created_by: str | None = Field(default=None, exclude=True)
    created_by_you: bool | None = Field(default=None, exclude=True)
    tool: str | None = Field(default=None, exclude=True)
    created_at: str | None = None
    age_s: float | None = None
    max_run_duration_s: float | None = None
    valid_until_duration_s: float | None = None
    failed_error: str | None = None
    failure_reach: str | None = None
    holds_quota: bool | None = Field(
        default=None, description="true: a FAILED or SUSPENDED request, holding quota until deleted"
    )

    def headline(self) -> str:
        failed = f"; failed: {self.failed_error}" if self.failed_error else ""
        return f"queued resource {self.id} in {self.zone}: {self.state}, {self.provisioning_model}, {self.owner}{failed}"

    @classmethod
    def of(cls, qr: dict[str, Any], zone: str, rig: Rig) -> QueuedResourceView:
        """The view of queued resource JSON ``qr`` in ``zone``, ownership as seen by ``rig``."""
        specs = node_specs(qr)
        node = specs[0].get("node", {}) if specs else {}
        state = state_of(qr)
        failed = qr.get("state", {}).get("failedData", {}).get("error", {}) or {}
        created = _parse_time(qr.get("createTime"))
        labels = labels_of(qr)
        failure = classify_failed_data(failed, state) if failed else None
        owner = rig.owner(qr)
        return cls(
            id=str(qr.get("name", "")).rsplit("/", 1)[-1],
            zone=zone,
            state=state,
            provisioning_model=provisioning_model_of(qr),
            accelerator_type=node.get("acceleratorType"),
            node_id=specs[0].get("nodeId") if specs else None,
            labels=labels,
            ours=owner.ours,
            owner=owner.describe(rig.rig),
            rig=owner.rig,
            created_by=owner.created_by,
            created_by_you=owner.by_you,
            tool=owner.tool,
            created_at=qr.get("createTime"),
            age_s=None if created is None else round(time.time() - created, 1),
            max_run_duration_s=max_run_duration_of(qr),
            valid_until_duration_s=duration_seconds(
                (qr.get("queueingPolicy") or {}).get("validUntilDuration")
            ),
            failed_error=failed.get("message"),
            failure_reach=failure.reach if failure else None,
            holds_quota=True if state in TERMINAL_STATES else None,
        )

    @property
    def live(self) -> bool:
        """It holds, or will hold, a TPU that bills (not in `NOT_LIVE_STATES`)."""
        return self.state not in NOT_LIVE_STATES

    def order_key(self) -> tuple[float, str, str]:
        """Creation order every server computes the same way: (``createTime``, zone, id)."""
        created = _parse_time(self.created_at)
        return (float("inf") if created is None else created, self.zone, self.id)

    def where(self) -> str:
        """``"gemma4-e2b in us-west4-b (ACTIVE, flex-start)"``."""
        return f"{self.id} in {self.zone} ({self.state}, {self.provisioning_model})"


class SecondTpuError(ConfigError):
    """The rig already has a live queued resource (``others``, ACTIVE first) and a create would make a
    second one; field ``zone``."""

    def __init__(self, rig: str, zone: str, others: list[QueuedResourceView]) -> None:
        self.others = sorted(others, key=lambda q: q.state != "ACTIVE")
        first = self.others[0]
        super().__init__(
            f"rig '{rig}' already has a live queued resource: {describe_others(self.others)}; "
            "a second one would bill twice",
            field="zone",
            value=zone,
            fix=f"use the existing one (describe_queued_resource zone={first.zone}), or delete it first "
            f"(destroy_queued_resource zone={first.zone} queued_resource_id={first.id}); pass "
            "allow_second=true only if you really want two TPUs billing at once",
        )


class CreateResult(ToolResult):
    """Outcome of a create: ``created`` False when the id already existed (then ``state`` is its state).

    ``withdrawn``: this create made a request and deleted it again at once, because a concurrent create
    of the same rig made another one first (``lost_race_to`` names it); the rig then holds one TPU.
    """

    queued_resource_id: str
    zone: str
    provisioning_model: str
    created: bool
    state: str
    ours: bool = True
    owner: str | None = None
    withdrawn: bool = False
    lost_race_to: str | None = None
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
        if self.withdrawn:
            return (
                f"queued resource '{self.queued_resource_id}' in {self.zone}: created and DELETED AGAIN at once: "
                f"another create of this rig made {self.lost_race_to} first, and a rig holds one TPU. {self.next_step}"
            )
        verb = "created" if self.created else "already exists"
        loud = "".join(
            f" WARNING: {w}."
            for w in self.warnings
            if w.startswith(("SECOND TPU", "UNSUPPORTED IMAGE", "CREATED BY", "NOT AN INSTRUCTION-TUNED"))
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


async def rig_queued_resources(settings: Settings, rig: Rig | None = None) -> list[QueuedResourceView]:
    """Every live queued resource of this server's rig (`ownership`) in every zone, whatever its id,
    listed concurrently. "Live": not in `NOT_LIVE_STATES`, i.e. it holds or will hold a TPU that bills.

    Fails closed: a guard that cannot see a zone cannot promise one TPU per rig.

    Raises:
        CloudError: the zone list failed. ListingError: the listing failed in some zone (field ``zone``:
            the zones, with Google's message).
    """
    listing = await list_queued_resources(settings, "all", only_ours=True, rig=rig)
    if listing.errors:
        raise listing_failed(listing.errors)
    return [q for q in listing.queued_resources if q.live]


class ListingError(CloudError):
    """Queued resources could not be listed in some zones, so a guard that must see every zone refused."""


def listing_failed(errors: dict[str, str], consequence: str = "so nothing was created") -> ListingError:
    """The fail-closed refusal for zones whose listing failed (``errors``: zone -> message)."""
    zones = sorted(errors)
    return ListingError(
        f"could not list queued resources in {len(zones)} zone(s) ({', '.join(zones[:5])}"
        f"{', ...' if len(zones) > 5 else ''}: {errors[zones[0]]}); this rig's TPUs there are unknown, "
        f"{consequence} (one TPU per rig is checked in every zone)",
        field="zone",
        value=zones,
        fix="try again in a minute (Google's API was failing for those zones); list_queued_resources(zone='all') "
        "shows which zones answer",
    )


def describe_others(others: list[QueuedResourceView]) -> str:
    """``"gemma4-e2b in us-west4-b (ACTIVE, flex-start), ..."``."""
    return ", ".join(q.where() for q in others)


def _creator_warning(view: QueuedResourceView) -> list[str]:
    if view.created_by_you is False:
        return [
            f"CREATED BY SOMEONE ELSE: {view.where()} carries this rig's labels but created-by={view.created_by}, "
            "not this server's credentials: another installation with the same RESOURCE_ID shares this rig"
        ]
    return []


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
    lease: RigLease | None = None,
    tool: str = CREATE_TOOL,
    allow_unsupported_image: bool = False,
    allowed_source_ranges: list[str] | None = None,
    open_to_internet: bool = False,
    epoch: int | None = None,
    access: EndpointAccess | None = None,
) -> CreateResult:
    """Create the queued resource (non-destructive: touches only its own id) and return at once.

    If the id already exists in the zone, reports it (its owner, provisioning model and price) instead
    of failing. One TPU per rig (module docstring): under the rig lease (``lease`` when the caller, a
    sweep, already holds it), every zone is listed first and a live queued resource of the rig (any id,
    any zone) refuses the create unless ``allow_second`` (then it creates with a loud warning); after the
    create every zone is listed again and, if a concurrent create won, this one deletes itself
    (``withdrawn``). ``tool`` is recorded in the ``tool`` label. Before the create, the rig's endpoint
    access is put in place (`access.ensure_access`: the API key secret and the firewall rule admitting
    ``allowed_source_ranges``, default your public IPv4); ``check_secret=False`` skips planning that with
    the HF secret check (the sweep plans once and passes its plan as ``access``, put in place again
    before each of its creates, since a teardown may have deleted the rule meanwhile). After the create
    the rule is read again: a request whose planned rule is gone is withdrawn (deleted) at once, so no
    TPU of the rig exists without it.

    The teardown fence (`store.ZoneStore.begin_create`): the create goes ahead only if no teardown of the
    rig was confirmed since ``epoch`` (the sweep's start; default: this call's start), and is marked in
    flight until it ends, so a teardown waits it out.

    Raises:
        ConfigError: bad arguments (empty values, durations, max_run_duration_s with spot /
            on-demand), missing HF secret, missing startup-script renderer.
        ConfigError: also when the rig already has a live queued resource (field ``zone``; fix: use or
            delete it, or ``allow_second=true``).
        ConfigError: VLLM_IMAGE is older than the first vLLM release that serves the model
            (`tpu_devops.planning.images`), unless ``allow_unsupported_image`` (then a loud warning); the
            model's weights plus one request's KV cache cannot fit the slice (field ``MODEL_NAME``,
            `tpu_devops.planning.fit.fit_gate`).
        JobError: a sweep of this rig is running (or another create held the lease too long), or a
            teardown of the rig was confirmed after ``epoch`` (nothing was created).
        CloudError (and subclasses): the API refused (``classify_exception`` gives its reach), or a zone
            could not be listed (before the create: nothing was made; after it: ours was deleted again).
    """
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    model = check_provisioning_model(provisioning_model, settings)
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    max_run, valid = check_durations(model, max_run_duration_s, valid_until_duration_s, settings)
    image_warnings = image_gate(
        settings.vllm_image, settings.model_name, allow_unsupported_image=allow_unsupported_image
    )
    image_warnings += fit_gate(settings)  # no create for a model the slice cannot hold
    image_warnings += [w for w in [chat_checkpoint(settings.model_name).warning()] if w]
    check_create_settings(
        settings, zone=zone, qr_id=qr_id, provisioning_model=model, max_run_duration_s=max_run,
        valid_until_duration_s=valid,
    )  # fmt: skip
    store = open_store(settings)
    if epoch is None:
        epoch = (await anyio.to_thread.run_sync(store.fence, rig_lease_name(settings))).epoch
    rig = await this_rig(settings)
    held = lease or await acquire_rig_lease(settings, store, CREATE)
    try:
        async with create_section(
            settings, store, epoch, "this sweep" if lease else "this create"
        ) as section:
            return await _create_under_lease(
                settings, rig, zone=zone, model=model, qr_id=qr_id, max_run=max_run, valid=valid,
                check_secret=check_secret, allow_second=allow_second, tool=tool, warnings=list(image_warnings),
                allowed_source_ranges=allowed_source_ranges, open_to_internet=open_to_internet, access=access,
                section=section,
            )  # fmt: skip
    finally:
        if lease is None:
            await anyio.to_thread.run_sync(held.release)


class CreateSection:
    """The create in flight (`create_section`); ``sending`` marks the moment its request goes out."""

    def __init__(self, store: Any, name: str, owner: str) -> None:
        self.store, self.name, self.owner = store, name, owner

    async def sending(self, zone: str, qr_id: str) -> None:
        await anyio.to_thread.run_sync(self.store.sending, self.name, self.owner, f"{zone}/{qr_id}")


@contextlib.asynccontextmanager
async def create_section(
    settings: Settings, store: Any, epoch: int, doing: str
) -> AsyncIterator[CreateSection]:
    """The block in which one create of the rig runs: entered only when no teardown was confirmed since
    ``epoch`` (`store.ZoneStore.begin_create`), marked in flight until it ends (shielded); the create
    marks when its request goes out (`CreateSection.sending`), so that a teardown after a crash watches
    for it to land.

    Raises:
        JobError: a teardown was confirmed since ``epoch`` (`store.fenced_error`); nothing was done.
    """
    import uuid

    name, owner = rig_lease_name(settings), f"create:{uuid.uuid4().hex}"
    fence = await anyio.to_thread.run_sync(store.begin_create, name, owner, epoch)
    if fence is not None:
        raise fenced_error(settings, fence, doing)
    try:
        yield CreateSection(store, name, owner)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(store.end_create, name, owner)


async def _existing_result(settings: Settings, view: QueuedResourceView, model: str) -> CreateResult:
    """The answer when the id is already taken in the zone: whose it is, its model and price."""
    per_hour, _ = await hourly_price(settings, view.provisioning_model, view.zone)
    note = (
        f"; you asked for {model} but the existing one is {view.provisioning_model}"
        if view.provisioning_model != model
        else ""
    )
    return CreateResult(
        queued_resource_id=view.id,
        zone=view.zone,
        provisioning_model=view.provisioning_model,
        created=False,
        state=view.state,
        ours=view.ours,
        owner=view.owner,
        usd_per_hour=per_hour,
        stops_billing=stops_text(view.provisioning_model, view.max_run_duration_s),
        next_step=f"it already exists ({view.owner}{note}); use describe_queued_resource, or destroy_queued_resource first to recreate",
        warnings=_creator_warning(view),
    )


async def _create_under_lease(
    settings: Settings,
    rig: Rig,
    *,
    zone: str,
    model: str,
    qr_id: str,
    max_run: int | None,
    valid: int | None,
    check_secret: bool,
    allow_second: bool,
    tool: str,
    warnings: list[str],
    allowed_source_ranges: list[str] | None,
    open_to_internet: bool,
    access: EndpointAccess | None = None,
    section: CreateSection | None = None,
) -> CreateResult:
    existing = await get_queued(settings, zone, qr_id)
    if existing is not None:
        return await _existing_result(settings, QueuedResourceView.of(existing, zone, rig), model)
    others = [q for q in await rig_queued_resources(settings, rig) if (q.zone, q.id) != (zone, qr_id)]
    if others and not allow_second:
        raise SecondTpuError(rig.rig, zone, others)
    if others:
        warnings.append(
            f"SECOND TPU OF RIG '{rig.rig}': {describe_others(others)} already exists and bills too "
            "(allow_second=true); destroy the one you do not need"
        )
    per_hour, source = await hourly_price(settings, model, zone)
    if per_hour is None:
        warnings.append(source)
    stops = stops_text(model, max_run)
    endpoint_access = None
    from tpu_devops.provisioning.access import ensure_access

    if check_secret:
        from tpu_devops.provisioning.access import plan_access

        planned = await plan_access(
            settings, allowed_source_ranges=allowed_source_ranges, open_to_internet=open_to_internet
        )
        await ensure_hf_secret(settings)
        endpoint_access = await ensure_access(settings, planned)
        warnings.extend(endpoint_access.warnings)
    elif access is not None:  # the sweep's plan, put in place again: a teardown may have deleted the rule
        endpoint_access = await ensure_access(settings, access.model_copy(deep=True))
        if endpoint_access.action == "created":
            access.action = "created"  # the sweep made it, so the sweep deletes it if it ends without a TPU
    async with release_rule_on_failure(settings, endpoint_access if check_secret else None):
        if check_secret:
            from tpu_devops.provisioning.bucket import create_warnings, prepare_for_create

            settings, bucket = await prepare_for_create(settings)  # the sweep prepares once, before its job
            warnings.extend(create_warnings(bucket))
        body = build_request(
            settings,
            zone=zone,
            qr_id=qr_id,
            provisioning_model=model,
            max_run_duration_s=max_run,
            valid_until_duration_s=valid,
            labels=rig.labels(tool),
        )
        key = (settings.project or "", zone, qr_id)
        earlier = _unanswered_creates.get(key)
        # the same create again after a call that ran out of time: the same requestId, so Google answers
        # with the earlier operation instead of making (or refusing) a second one
        same = earlier is not None and earlier[1] == create_call(zone, qr_id, body, earlier[0]).text
        request = create_call(zone, qr_id, body, earlier[0] if same and earlier else None)
    if section is not None:
        await section.sending(zone, qr_id)
    try:
        _unanswered_creates[key] = (request.request_id, request.text)
        with deadline.in_flight(*_create_in_flight(request, model)):
            try:
                op = await send_create(settings, request)
            except DeadlineError:
                raise deadline.expired_in_flight(f"creating '{qr_id}' in {zone}") from None
        _unanswered_creates.pop(key, None)
    except CloudError as exc:
        _unanswered_creates.pop(key, None)
        # It did not exist a moment ago. If it exists now, the create may have been committed with only its
        # answer lost (a 503 after retries, or a retry without the requestId answered 409): ask Google.
        again = await get_queued(settings, zone, qr_id)
        view = QueuedResourceView.of(again, zone, rig) if again is not None else None
        if view is None or not await _made_by(settings, request, view, tool):
            if view is not None and getattr(exc, "status", None) == "ALREADY_EXISTS":
                return await _existing_result(settings, view, model)
            if endpoint_access is not None and endpoint_access.action == "created":
                # made for a TPU that was refused: nothing carries its tag
                await release_unused_rule(settings)
            raise
        op = {}
        warnings.append(
            f"the API's answer to the create was lost ({exc.message[:160]}), but '{qr_id}' in {zone} is the "
            "request this call made (same requestId): it is ours"
        )
    if not allow_second:
        race = await _recheck_after_create(settings, rig, zone, qr_id)
        if race is not None:
            return race.result(model=model, usd_per_hour=per_hour, stops=stops)
    missing = await _rule_missing(settings, endpoint_access)
    if missing is not None:  # deleted meanwhile (a teardown elsewhere): a TPU never runs without its rule
        error = await delete_own_request(settings, rig, zone, qr_id)
        raise CloudError(
            f"the rig's firewall rule {missing} disappeared while '{qr_id}' was being created in {zone}, so "
            + (
                "the request was deleted again at once"
                if error is None
                else f"deleting the request FAILED ({error})"
            ),
            field="firewall_rule",
            value=missing,
            fix="a teardown of this rig probably ran meanwhile; create again if you want a TPU now"
            if error is None
            else f"delete it with destroy_queued_resource(zone='{zone}', queued_resource_id='{qr_id}')",
        )
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
    state = state_of(now) if now else "ACCEPTED"
    return CreateResult(
        warnings=warnings,
        queued_resource_id=qr_id,
        zone=zone,
        provisioning_model=model,
        created=True,
        state=state,
        owner=f"ours (rig {rig.rig})",
        operation=op.get("name"),
        request_id=request.request_id,
        usd_per_hour=per_hour,
        stops_billing=stops,
        next_step="already ACTIVE: get_vllm_endpoint gives its URL once vLLM has booted (about 10-15 min)"
        if state == "ACTIVE"
        else "poll describe_queued_resource (or the wait job) until ACTIVE; then get_vllm_endpoint",
        endpoint_access=endpoint_access,
    )


async def _rule_missing(settings: Settings, access: EndpointAccess | None) -> str | None:
    """The name of the firewall rule ``access`` put in place when it is no longer there (or no longer
    ours), else None. A rule that cannot be read counts as there (the create's own check just saw it)."""
    if access is None or access.firewall_request is None:
        return None
    from tpu_devops.provisioning.access import firewall_state

    state = await firewall_state(settings)
    if state.error is not None or (state.exists and state.ours):
        return None
    return state.name


# Creates sent whose answer never came back within the call: (project, zone, id) -> (requestId, body
# text), so the same create repeated re-sends the same requestId (Google's idempotency key, AIP-155).
_unanswered_creates: dict[tuple[str, str, str], tuple[str, str]] = {}


def _create_in_flight(request: CreateCall, model: str) -> tuple[str, str]:
    """What `deadline.in_flight` says of a create on its way: it may have been committed (and bill), its
    request id, where to look, and that the same create repeated is safe."""
    where = f"'{request.queued_resource_id}' in {request.zone}"
    what = (
        f"the create of {where} was on its way (requestId {request.request_id}): Google may have committed "
        f"it, and a {model} TPU bills from then"
    )
    fix = (
        f"look before anything else: describe_queued_resource queued_resource_id={request.queued_resource_id} "
        f"zone={request.zone}; or repeat this create_queued_resource with the same arguments: it re-sends "
        f"requestId {request.request_id}, so it reports the one that landed and makes no second; if you do "
        "not want it, destroy_queued_resource"
    )
    return what, fix


async def _made_by(settings: Settings, request: CreateCall, view: QueuedResourceView, tool: str) -> bool:
    """Whether the existing ``view`` is the queued resource ``request`` created: Google answers by the
    ``requestId`` (`is_own_create`); if that re-send fails too, this rig's labels with this server's
    created-by and ``tool`` decide (nothing else could have put them there a moment after we looked)."""
    if not view.ours:
        return False
    try:
        return await is_own_create(settings, request)
    except CloudError:
        return bool(view.created_by_you and view.tool == tool)


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


class _LostRace(BaseModel):
    """A create that found, on its re-check, an older live request of the same rig."""

    zone: str
    queued_resource_id: str
    winner: str
    deleted: bool
    delete_error: str | None = None

    def result(self, *, model: str, usd_per_hour: float | None, stops: str) -> CreateResult:
        if self.deleted:
            step = f"use {self.winner} (describe_queued_resource); nothing of this call is left billing"
            warnings: list[str] = []
        else:
            step = (
                f"deleting it failed ({self.delete_error}): delete it with destroy_queued_resource(zone="
                f"'{self.zone}', queued_resource_id='{self.queued_resource_id}') and use {self.winner}"
            )
            warnings = [f"SECOND TPU: '{self.queued_resource_id}' in {self.zone} is still there and may bill"]
        return CreateResult(
            queued_resource_id=self.queued_resource_id,
            zone=self.zone,
            provisioning_model=model,
            created=False,
            state="DELETING" if self.deleted else "UNKNOWN",
            withdrawn=True,
            lost_race_to=self.winner,
            usd_per_hour=usd_per_hour,
            stops_billing=stops,
            next_step=step,
            warnings=warnings,
        )


async def _recheck_after_create(settings: Settings, rig: Rig, zone: str, qr_id: str) -> _LostRace | None:
    """List every zone again; if an older live request of this rig exists, delete ours at once.

    Raises:
        CloudError: a zone (or the zone list) could not be listed; ours was deleted again (fail closed: a second TPU may exist where we cannot see).
    """
    try:
        listing = await list_queued_resources(settings, "all", only_ours=True, rig=rig)
        errors = listing.errors
    except CloudError as exc:  # the zone list itself
        listing, errors = None, {"(list of TPU zones)": exc.message}
    if listing is None or errors:
        error = await delete_own_request(settings, rig, zone, qr_id)
        raise listing_failed(
            errors,
            f"so '{qr_id}' just created in {zone} was deleted again"
            if error is None
            else f"and deleting '{qr_id}' just created in {zone} again FAILED ({error}): delete it with "
            "destroy_queued_resource",
        )
    live = [q for q in listing.queued_resources if q.live]
    mine = next((q for q in live if (q.zone, q.id) == (zone, qr_id)), None)
    if mine is None:  # not listed yet (or already gone): read it directly
        qr = await get_queued(settings, zone, qr_id)
        mine = QueuedResourceView.of(qr, zone, rig) if qr is not None else None
    if mine is None:
        return None
    older = [q for q in live if (q.zone, q.id) != (zone, qr_id) and q.order_key() < mine.order_key()]
    if not older:
        return None
    winner = min(older, key=QueuedResourceView.order_key)
    error = await delete_own_request(settings, rig, zone, qr_id)
    import logging

    logging.getLogger(__name__).warning(
        "create of %s in %s lost the race to %s: %s", qr_id, zone, winner.where(), error or "deleted"
    )
    return _LostRace(
        zone=zone, queued_resource_id=qr_id, winner=winner.where(), deleted=error is None, delete_error=error
    )


async def delete_own_request(settings: Settings, rig: Rig, zone: str, qr_id: str) -> str | None:
    """Delete a request this call just created (nodes too). Re-read first: only while it still carries
    this rig's labels. Returns None when deleted or gone, else the error text."""
    try:
        qr = await get_queued(settings, zone, qr_id)
        if qr is None:
            return None
        if not rig.is_ours(qr):
            return "it no longer carries this rig's labels; left alone"
        await call(api(settings).delete_queued_resource, zone, qr_id, force=True)
    except TpuDevopsError as exc:
        return exc.message
    return None


def rig_subject(rig: list[QueuedResourceView], qr_id: str | None) -> QueuedResourceView | None:
    """Which of the rig's queued resources (``rig``, from every zone) a call without a zone is about: those
    named ``qr_id`` when given, else all; of them the ACTIVE one, else the first live, else the first;
    None when there is none."""
    named = [q for q in rig if q.id == qr_id] if qr_id is not None else rig
    live = [q for q in named if q.live]
    return next((q for q in live if q.state == "ACTIVE"), None) or next(iter(live or named), None)


async def describe_queued_resource(
    settings: Settings, zone: str | None = None, queued_resource_id: str | None = None
) -> QueuedResourceView:
    """One queued resource (any owner; ``ours`` / ``owner`` say whether it carries this rig's labels and
    who created it).

    Without an explicit ``zone``, when the configured zone has no such resource, this rig's own resource
    in another zone is described (find_tpu may have placed it there, as `reservation_status` follows it):
    the one with ``queued_resource_id`` when given, else the rig's ACTIVE (or first live) one.

    Raises:
        NotFoundError: no such queued resource in the zone (nor, without a zone, of this rig anywhere).
        ConfigError: a bad or explicitly empty zone / id.
    """
    explicit = zone is not None
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    qr = await get_queued(settings, zone, qr_id)
    if qr is None and not explicit:
        me = await this_rig(settings)
        rig = (await list_queued_resources(settings, "all", only_ours=True, rig=me)).queued_resources
        if pick := rig_subject(rig, qr_id if queued_resource_id is not None else None):
            zone, qr_id = pick.zone, pick.id
            qr = await get_queued(settings, zone, qr_id)
    if qr is None:
        raise NotFoundError(
            "no such queued resource" + ("" if explicit else " (nor one of this rig in any zone)"),
            field="queued_resource_id",
            value=f"{qr_id} in {zone}",
            fix="list_queued_resources(zone='all') shows what exists; create_tpu_queued_resource creates it",
        )
    return QueuedResourceView.of(qr, zone, await this_rig(settings))


class QueuedResourceList(ToolResult):
    """Queued resources in the zones listed. ``errors`` maps zone -> message for zones that failed."""

    zones_listed: int
    queued_resources: list[QueuedResourceView]
    errors: dict[str, str] = Field(default_factory=dict)
    # how long the listing took: the text says it, nothing depends on it
    elapsed_s: float = Field(exclude=True)

    def render_text(self) -> str:
        """Headline, then one line per queued resource."""
        lines = [self.headline()]
        for q in self.queued_resources:
            extra = ", holds quota until deleted" if q.holds_quota else ""
            when = f", created {q.created_at}" if q.created_at else ""
            age = f" ({q.age_s:,.0f} s ago)" if q.age_s is not None else ""
            run = f", stops after {q.max_run_duration_s:,.0f} s" if q.max_run_duration_s else ""
            if q.valid_until_duration_s:
                run += f", waits at most {q.valid_until_duration_s:,.0f} s for capacity"
            node = f", node {q.node_id}" if q.node_id else ""
            who = f", created by {q.created_by}" if q.created_by else ""
            tool = f" with {q.tool}" if q.tool else ""
            failed = f", failed: {q.failed_error} (reach {q.failure_reach})" if q.failed_error else ""
            labels = ", ".join(f"{k}={v}" for k, v in q.labels.items())
            lines.append(
                f"- {q.id} in {q.zone}: {q.state}, {q.provisioning_model}, {q.accelerator_type}, {q.owner}{extra}"
                f"{node}{when}{age}{run}{who}{tool}{failed}; labels {labels or 'none'}"
            )
        lines.extend(f"- {zone}: listing failed: {msg}" for zone, msg in sorted(self.errors.items()))
        lines.append(f"listed in {self.elapsed_s:.3f} s")
        return "\n".join(lines)

    def headline(self) -> str:
        ours = sum(1 for q in self.queued_resources if q.ours)
        return (
            f"{len(self.queued_resources)} queued resource(s) ({ours} of this rig) in {self.zones_listed} zone(s)"
            + (
                f"; {len(self.errors)} zone(s) FAILED to list: what is there is unknown"
                if self.errors
                else ""
            )
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


async def list_in_zones(
    settings: Settings, zones: list[str]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, CloudError]]:
    """(zone -> queued resource JSONs, zone -> the error its listing raised) for ``zones``, listed
    concurrently (at most `MAX_CONCURRENT_CALLS` at a time). Never raises for one zone."""
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
    return results, failures


async def list_queued_resources(
    settings: Settings, zone: str | None = None, *, only_ours: bool = False, rig: Rig | None = None
) -> QueuedResourceList:
    """List queued resources in one zone or ``"all"`` zones (concurrently, at most
    `MAX_CONCURRENT_CALLS` at a time). A zone whose listing fails is reported in ``errors``.
    ``only_ours``: only this server's rig (`ownership`); ``rig``: this server's `Rig` when the caller
    has it already.

    Raises:
        ConfigError: bad zone or no project. CloudError: the zone list itself failed, or the one zone
        asked for failed (its own typed error, e.g. `PermissionError_`, with field ``zone``).
    """
    require_project(settings)
    started = time.perf_counter()
    zones = await resolve_zones(settings, zone)
    results, failures = await list_in_zones(settings, zones)
    rig = rig or await this_rig(settings)
    views = [QueuedResourceView.of(qr, z, rig) for z in zones for qr in results.get(z, [])]
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


@contextlib.asynccontextmanager
async def release_rule_on_failure(settings: Settings, access: EndpointAccess | None) -> AsyncIterator[None]:
    """Around the steps between making the rig's firewall rule and the create (or sweep) that needs it:
    when they fail or are cancelled, delete the rule ``access`` says this call created (nothing will
    carry its tag), shielded and bounded, then re-raise. A rule that existed before is left alone."""
    try:
        yield
    except BaseException:
        if access is not None and access.action == "created":
            with anyio.CancelScope(shield=True), anyio.move_on_after(RULE_RELEASE_S):
                await release_unused_rule(settings)
        raise


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
