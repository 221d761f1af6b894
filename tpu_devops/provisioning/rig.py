"""One rig, one story: what this rig holds and what is working for it, read by every tool that answers
about it (describe_queued_resource, get_vllm_endpoint, check_setup(view='status'), the teardown's dry run)
so that they agree.

`rig_state` builds `RigState` from one listing of every zone (the rig's queued resources, whatever their
ids, and what else is there), the jobs working for the rig (`tpu_devops.provisioning.rigjobs`: this
server's by their binding, another server's sweep or create by the rig lease), the rig's last teardown
(its fence), and on request its firewall rule, API key secret and bucket. Where the rig has no TPU yet
but a sweep or create is making one, the answer names that job and says when to look again instead of
inviting a second create.

Also here: `reservation_status` (describe_queued_resource) and the create's wait for ACTIVE, both
readers of the rig's state.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import anyio
from pydantic import BaseModel, Field

from tpu_devops.config import Settings
from tpu_devops.errors import NotFoundError
from tpu_devops.host.results import ToolResult
from tpu_devops.provisioning.access import FirewallState
from tpu_devops.provisioning.cloud import get_queued, node_external_ip
from tpu_devops.provisioning.ownership import Rig, this_rig
from tpu_devops.provisioning.plan import hourly_price
from tpu_devops.provisioning.queued import (
    TERMINAL_STATES,
    CreateResult,
    QueuedResourceView,
    _creator_warning,
    _parse_time,
    create_queued_resource,
    describe_others,
    list_in_zones,
    resolve_zones,
    rig_subject,
)
from tpu_devops.provisioning.requests import or_default, termination_time_of
from tpu_devops.provisioning.rigjobs import RigJob, creating, rig_jobs, wait_binding
from tpu_devops.provisioning.store import open_store, rig_lease_name
from tpu_devops.types import check_resource_id, check_zone


class RigState(BaseModel):
    """This rig now. ``queued_resources``: the rig's own in every zone listed (any state); ``others``: the
    rest of those zones (not the rig's; left alone by teardown); ``unlisted``: zone -> why its listing
    failed; ``jobs``: what works for the rig (`RigJob`); ``last_teardown``: when the rig was last torn
    down, and by whom; ``firewall`` / ``api_key`` / ``bucket``: read on request (None: not read)."""

    rig: str
    zones_listed: int
    queued_resources: list[QueuedResourceView]
    others: list[QueuedResourceView] = Field(default_factory=list, exclude=True)
    raw: dict[str, dict[str, Any]] = Field(default_factory=dict, exclude=True)  # "zone/id" -> JSON
    unlisted: dict[str, str] = Field(default_factory=dict)
    jobs: list[RigJob] = Field(default_factory=list)
    last_teardown: str | None = None
    landing: str | None = Field(
        None, description="a create whose server died on its way (zone/id): it may land"
    )
    firewall: FirewallState | None = None
    api_key: str | None = None
    bucket: str | None = None

    @property
    def live(self) -> list[QueuedResourceView]:
        """The rig's queued resources that hold, or will hold, a TPU that bills."""
        return [q for q in self.queued_resources if q.live]

    @property
    def active(self) -> list[QueuedResourceView]:
        return [q for q in self.queued_resources if q.state == "ACTIVE"]

    def json_of(self, view: QueuedResourceView) -> dict[str, Any]:
        """The queued resource JSON ``view`` was read from."""
        return self.raw[f"{view.zone}/{view.id}"]

    def making(self) -> list[RigJob]:
        """The jobs that may create the rig's TPU (sweeps, creates)."""
        return creating(self.jobs)

    def on(self, view: QueuedResourceView) -> list[RigJob]:
        """The jobs that work on ``view`` (or on the rig's TPU in general)."""
        return [j for j in self.jobs if j.on(view.zone, view.id)]

    def in_flight(self, view: QueuedResourceView | None = None) -> str | None:
        """The sentence naming what is working on the rig (on ``view`` when given) and when to look
        again, or None when nothing is: ``"a find_tpu sweep is running as job find-tpu-1 in this server
        (trying us-central1-a (2/5)): poll get_job('find-tpu-1'), or look again in 15 s"``."""
        jobs = self.on(view) if view is not None else self.jobs
        if not jobs:
            return None
        parts = []
        for j in jobs:
            doing = f" ({j.message})" if j.message and j.message not in ("started", "done") else ""
            again = f", or look again in {max(1.0, j.look_again_s):.0f} s" if j.look_again_s else ""
            parts.append(f"a {j.label} is running as job {j.job_id} in {j.where}{doing}: {j.poll()}{again}")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """The rig in a few lines, for a status view."""
        out = [f"{q.where()}: {q.owner}" for q in self.queued_resources] or [
            f"no queued resource of rig '{self.rig}' in {self.zones_listed} zone(s) listed"
        ]
        out += [f"job: {j.line()}" for j in self.jobs]
        if self.unlisted:
            out.append(
                f"{len(self.unlisted)} zone(s) could not be listed: {', '.join(sorted(self.unlisted)[:5])}"
            )
        for part in (self.firewall.line() if self.firewall else None, self.api_key, self.bucket):
            if part:
                out.append(part)
        if self.last_teardown:
            out.append(f"last teardown: {self.last_teardown}")
        if self.landing:
            out.append(f"a create whose server stopped may still land: {self.landing}")
        return out


async def rig_state(
    settings: Settings,
    *,
    zone: str | None = None,
    rig: Rig | None = None,
    access: bool = False,
    bucket: bool = False,
) -> RigState:
    """This rig now (`RigState`), listing ``zone`` or (None / ``"all"``) every zone concurrently; with
    ``access`` also its firewall rule and API key secret, with ``bucket`` its bucket. Never raises for
    one zone (it is in ``unlisted``) nor for the parts read on request (their line says what failed).

    Raises:
        ConfigError: bad zone or no project. CloudError: the zone list itself failed.
    """
    zones = await resolve_zones(settings, "all" if zone is None else zone)
    rig = rig or await this_rig(settings)
    found, failures = await list_in_zones(settings, zones)
    state = RigState(rig=rig.rig, zones_listed=len(zones), queued_resources=[])
    for z in zones:
        for qr in found.get(z, []):
            view = QueuedResourceView.of(qr, z, rig)
            (state.queued_resources if view.ours else state.others).append(view)
            state.raw[f"{z}/{view.id}"] = qr
    state.unlisted = {z: exc.message for z, exc in failures.items()}
    state.jobs = await rig_jobs(settings)
    try:
        store = open_store(settings)
        fence = await anyio.to_thread.run_sync(store.fence, rig_lease_name(settings))
        state.last_teardown = fence.when() if fence.epoch else None
        state.landing = fence.creating_target if fence.may_still_land() else None
    except Exception:  # an unreadable state directory: the tools that need it say so
        pass
    if access:
        state.firewall, state.api_key = await _access_parts(settings)
    if bucket:
        from tpu_devops.provisioning.bucket import inspect_bucket

        try:
            state.bucket = (await inspect_bucket(settings)).line()
        except Exception as exc:  # a status line, never a failure of the whole view
            state.bucket = f"bucket: could not be read ({getattr(exc, 'message', exc)})"
    return state


async def _access_parts(settings: Settings) -> tuple[FirewallState, str]:
    from tpu_devops.errors import TpuDevopsError
    from tpu_devops.gcp import secrets
    from tpu_devops.provisioning.access import firewall_state
    from tpu_devops.provisioning.cloud import call

    rule = await firewall_state(settings)
    sid = settings.vllm_api_key_secret_id
    try:
        status = await call(secrets.secret_status, settings, sid)
        key = f"API key secret {sid}: " + (
            "missing (the next create makes one)"
            if not status.exists
            else f"latest version {status.state or 'none'}"
        )
    except TpuDevopsError as exc:
        key = f"API key secret {sid}: could not be read ({exc.message})"
    return rule, key


class ReservationStatus(ToolResult):
    """State of our queued resource with its node and countdowns. Seconds; times as ISO strings."""

    queued_resource_id: str
    zone: str
    exists: bool
    state: str | None = None
    ours: bool | None = None
    owner: str | None = None
    provisioning_model: str | None = None
    accelerator_type: str | None = None
    created_at: str | None = None
    time_in_state_s: float | None = None
    age_s: float | None = None
    max_run_duration_s: float | None = None
    valid_until_duration_s: float | None = None
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
    failure_reach: str | None = None
    holds_quota: bool | None = Field(
        default=None, description="true: a FAILED or SUSPENDED request, holding quota until deleted"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    rig_queued_resources: list[str] = Field(default_factory=list)
    firewall: str | None = Field(None, description="the rig's firewall rule: who may reach the vLLM port")
    jobs_running: list[str] = Field(default_factory=list, description="jobs working for the rig")
    several: bool = False
    warnings: list[str] = Field(default_factory=list)
    next_step: str

    def headline(self) -> str:
        loud = "".join(f"WARNING: {w}. " for w in self.warnings if self.several or w.startswith("CREATED BY"))
        if not self.exists:
            yet = " yet" if self.next_step.startswith("no queued resource yet") else ""
            return f"{loud}'{self.queued_resource_id}' does not exist{yet} in {self.zone}. {self.next_step}"
        parts = [f"{loud}'{self.queued_resource_id}' in {self.zone}: {self.state}"]
        if self.ours is False and self.owner:
            parts.append(self.owner)
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
    state: RigState | None = None,
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
    ``state``: the rig's state when the caller has read it already (`rig_state`). The jobs working for
    the rig are listed in ``jobs_running``; the next step names them (a sweep making the TPU, a
    reconfigure replacing its container) and says when to look again, rather than inviting a create.
    """
    explicit = zone is not None
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    me = await this_rig(settings)
    qr = await get_queued(settings, zone, qr_id)
    rig: list[QueuedResourceView] = []
    unlisted: dict[str, str] = {}
    if scan_all_zones:
        # find_tpu may have placed it in another zone, and a rig must never hold two: list ours everywhere,
        # whatever their ids (every resource this server creates carries the rig label).
        state = state or await rig_state(settings, rig=me)
        rig, unlisted = state.queued_resources, state.unlisted
    # The configured zone may hold another rig's resource under our id (or nothing): without an explicit
    # zone, the subject is this rig's own TPU wherever it is, never someone else's under the same name.
    if (qr is None or not me.is_ours(qr)) and not explicit and rig:
        if pick := rig_subject(rig, qr_id if queued_resource_id is not None else None):
            zone, qr_id = pick.zone, pick.id
            qr = await get_queued(settings, zone, pick.id)
    live_rig = [q for q in rig if q.live]
    warnings = []
    if len(live_rig) > 1:
        warnings.append(
            f"{len(live_rig)} queued resources of rig '{me.rig}' are live ({describe_others(live_rig)}): "
            "each one bills; keep one and delete the others with destroy_queued_resource zone=<zone> "
            "queued_resource_id=<id>"
        )
    if unlisted:
        warnings.append(
            f"{len(unlisted)} zone(s) could not be listed ({', '.join(sorted(unlisted)[:5])}): TPUs of this rig "
            "there are not shown"
        )
    extras: dict[str, Any] = {
        "rig_queued_resources": [f"{q.id} in {q.zone}: {q.state}, {q.provisioning_model}" for q in rig],
        "several": len(live_rig) > 1,
        "warnings": warnings,
        "jobs_running": [j.line() for j in state.jobs] if state else [],
    }
    if qr is None:
        making = state.in_flight() if state and state.making() else None
        return ReservationStatus(
            queued_resource_id=qr_id,
            zone=zone,
            exists=False,
            next_step=f"no queued resource yet: {making}; do not create another"
            if making
            else "create it with create_tpu_queued_resource or find_tpu",
            **extras,
        )
    view = QueuedResourceView.of(qr, zone, me)
    extras["warnings"] = warnings + _creator_warning(view)
    now = time.time()
    created = _parse_time(qr.get("createTime"))
    status = ReservationStatus(
        queued_resource_id=qr_id,
        zone=zone,
        exists=True,
        state=view.state,
        ours=view.ours,
        owner=view.owner,
        provisioning_model=view.provisioning_model,
        accelerator_type=view.accelerator_type,
        created_at=view.created_at,
        age_s=None if created is None else round(now - created, 1),
        max_run_duration_s=view.max_run_duration_s,
        valid_until_duration_s=view.valid_until_duration_s,
        node_id=view.node_id,
        failed_error=view.failed_error,
        failure_reach=view.failure_reach,
        holds_quota=view.holds_quota,
        labels=view.labels,
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
    working = state.in_flight(view) if state else None
    if working:
        status.next_step = f"{working}. {status.next_step}"
    return status


def next_step_for(state: str, endpoint_url: str | None = None) -> str:
    """What to do next for a queued resource in ``state``."""
    return {
        "ACTIVE": f"the TPU is up; vLLM answers at {endpoint_url} once it has booted (about 10-15 min)"
        if endpoint_url
        else "the TPU is up; the node has no external IP yet",
        "FAILED": "it failed and still holds quota: destroy_queued_resource(only_failed=true) deletes it; find_tpu tries other zones",
        "SUSPENDED": "it ran out its time (or was stopped) and still holds quota: clean it up with destroy_queued_resource(only_failed=true)",
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
    """Job body: poll until ACTIVE (with an external IP), FAILED / SUSPENDED, or ``timeout_s``.

    Raises:
        NotFoundError: the queued resource was deleted while it waited (a teardown): the job ends there,
            saying so, instead of waiting for a TPU that is gone.
    """
    deadline = time.monotonic() + timeout_s
    seen = False
    while True:
        status = await reservation_status(settings, zone, qr_id, scan_all_zones=False)
        record.progress = {"state": status.state, "zone": zone, "queued_resource_id": qr_id}
        record.message = f"{qr_id} in {zone}: {status.state}"
        if not status.exists and seen:
            raise NotFoundError(
                f"queued resource {qr_id} in {zone} was deleted while this job waited for it to become ACTIVE "
                "(a teardown, or by hand): nothing to wait for",
                field="queued_resource_id",
                value=f"{qr_id} in {zone}",
                fix="create one again if you want a TPU now (describe_queued_resource shows what the rig holds)",
            )
        seen = seen or status.exists
        if (
            not status.exists
            or status.state in TERMINAL_STATES
            or (status.state == "ACTIVE" and status.external_ip)
        ):
            return status
        if time.monotonic() >= deadline:
            status.next_step = f"still {status.state} after {timeout_s:.0f}s; poll describe_queued_resource"
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
    from tpu_devops.host.jobs import JOBS

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

        rec = JOBS.start(
            "wait-active", f"wait for {qr_id} in {zone} to become ACTIVE", body,
            binding=wait_binding(settings, zone, qr_id, poll_interval_s),
        )  # fmt: skip
        result.wait_job_id = result.job_id = rec.id
        result.next_step = f"a wait job started: poll get_job {rec.id} (job_id='{rec.id}') until it succeeds; then get_vllm_endpoint"
    return result
