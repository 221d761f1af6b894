"""`find_tpu`: the zone sweep job, one create at a time, each failure classified and recorded.

Uses `requests` to check arguments, `queued` to create / read / delete the rig's own request,
`failures` to decide how far a refusal reaches, `store` for the attempt history and the rig lease,
and `tpu_devops.quota` to pick the zones worth trying.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import BaseModel, Field

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import CloudError, ConfigError, TpuDevopsError
from tpu_devops.images import image_gate
from tpu_devops.provisioning.access import EndpointAccess, ensure_access, plan_access
from tpu_devops.provisioning.cloud import api, call, get_queued, node_external_ip
from tpu_devops.provisioning.failures import Failure, classify_exception, classify_failed_data
from tpu_devops.provisioning.queued import (
    TERMINAL_STATES,
    CreateResult,
    QueuedResourceView,
    create_queued_resource,
    ensure_hf_secret,
    is_ours,
    rig_queued_resources,
    state_of,
)
from tpu_devops.provisioning.requests import check_durations, check_zone, node_specs
from tpu_devops.provisioning.store import LEASE_TTL_S, SweepLease, ZoneStore, open_store
from tpu_devops.quota import ZoneQuota, zones_with_quota
from tpu_devops.results import ToolResult

# A PROVISIONING request cannot be deleted, so the sweep keeps waiting past its budget, up to this long.
PROVISIONING_GRACE_S = 900.0


class SweepAttempt(BaseModel):
    """One zone tried (or skipped) by a sweep."""

    zone: str
    outcome: str  # active, failed, timeout, skipped, refused, error
    reach: str | None = None
    reason: str | None = None
    message: str = ""
    seconds: float = 0.0


class SweepResult(ToolResult):
    """Result of a sweep: the zone that produced an ACTIVE TPU (if any) and every attempt in order."""

    found: bool
    zone: str | None = None
    queued_resource_id: str
    provisioning_model: str
    state: str | None = None
    endpoint_url: str | None = None
    attempts: list[SweepAttempt] = Field(default_factory=list)
    stopped_because: str
    next_step: str
    status_file: str

    def headline(self) -> str:
        if self.found:
            return f"TPU '{self.queued_resource_id}' ACTIVE in {self.zone} after {len(self.attempts)} zone(s). {self.next_step}"
        return f"no TPU: {self.stopped_because}. {self.next_step}"


@dataclass
class SweepOptions:
    """Sweep parameters. Seconds."""

    provisioning_model: str
    zones: list[str] | None
    zone_budget_s: float
    poll_interval_s: float
    max_zones: int
    max_run_duration_s: int | None
    valid_until_duration_s: int | None
    allow_unsupported_image: bool = False
    allowed_source_ranges: list[str] | None = None
    open_to_internet: bool = False
    access: EndpointAccess | None = None  # planned by start_sweep, put in place once before the first create


async def candidate_zones(settings: Settings, opts: SweepOptions, store: ZoneStore) -> list[str]:
    """Zones to try, best first: known to accept, documented, configured zone, past success, quota size.

    Explicit ``opts.zones`` are kept in the given order. Otherwise zones come from the quota scan
    (zones with enough quota of the right family).
    """
    if opts.zones is not None:
        return list(dict.fromkeys(check_zone(z, "zones") for z in opts.zones))
    scan = await zones_with_quota(settings, opts.provisioning_model)
    ok = [z for z in scan.zones if z.enough_for_request]

    def score(z: ZoneQuota) -> tuple[int, int, int, int, str]:
        acc = z.known_acceptance
        return (
            0
            if acc.startswith("accepted")
            else 1
            if acc.startswith("documented")
            else 3
            if acc.startswith("refused")
            else 2,
            0 if z.zone == settings.zone else 1,
            0 if z.zone.rsplit("-", 1)[0] == settings.region else 1,
            -(z.zone_limit or 0),
            z.zone,
        )

    return [z.zone for z in sorted(ok, key=score)][: opts.max_zones]


async def _rig_elsewhere(settings: Settings, qr_id: str) -> QueuedResourceView | None:
    """A live queued resource of this rig in any zone (ACTIVE first), else None.

    Every zone, not only the candidates: a create in one zone while the rig holds a request in
    another (made by a previous sweep, another server or create_tpu_queued_resource) bills twice.
    """
    try:
        live = await rig_queued_resources(settings, qr_id)
    except CloudError:
        return None
    live.sort(key=lambda q: q.state != "ACTIVE")
    return live[0] if live else None


async def run_sweep(
    settings: Settings, record: Any, opts: SweepOptions, lease: SweepLease | None = None
) -> SweepResult:
    """Job body of `find_tpu`: try zones one at a time until one request becomes ACTIVE.

    One create at a time, and before every create every zone is checked for a live queued resource
    of this rig (the sweep stops instead of creating a second TPU). `start_sweep` also holds a lease
    (``lease``, renewed while waiting) so only one sweep per rig runs at a time, across server
    processes sharing the state directory. Each zone gets ``zone_budget_s`` to leave
    the queue; a request that fails or waits out its budget is deleted (it is the sweep's own id,
    and FAILED requests hold quota). Failures are recorded in the store with their reach; a
    ``config`` failure stops the sweep at once. A PROVISIONING request is never abandoned.
    """
    store = open_store(settings)
    accel = settings.accelerator_type
    model = opts.provisioning_model
    qr_id = settings.resource_id
    zones = await candidate_zones(settings, opts, store)
    attempts: list[SweepAttempt] = []

    def result(
        found: bool,
        stopped: str,
        next_step: str,
        zone: str | None = None,
        state: str | None = None,
        url: str | None = None,
    ) -> SweepResult:
        out = SweepResult(
            found=found, zone=zone, queued_resource_id=qr_id, provisioning_model=model, state=state, endpoint_url=url,
            attempts=attempts, stopped_because=stopped, next_step=next_step, status_file=str(store.status_path),
        )  # fmt: skip
        record.message = out.headline()
        record.progress = dict(record.progress, tried=len(attempts))
        return out

    if not zones:
        return result(
            False,
            "no candidate zone has quota for this provisioning model",
            "check get_zones_with_available_quota",
        )
    record.progress = {"candidates": zones, "tried": 0}

    def already(existing: QueuedResourceView) -> SweepResult:
        z, st = existing.zone, existing.state
        return result(
            st == "ACTIVE", f"'{existing.id}' already exists in {z} ({st}, {existing.provisioning_model}); "
            "a sweep never holds two TPUs",
            f"use get_reservation_status zone={z}, or destroy_queued_resource zone={z} before sweeping again",
            zone=z, state=st,
        )  # fmt: skip

    existing = await _rig_elsewhere(settings, qr_id)
    if existing is not None:
        return already(existing)
    await ensure_hf_secret(settings)
    for zone in zones:
        started = time.monotonic()
        if lease is not None:
            lease.renew()
        blocker = store.blocker(zone, accel, model)
        if blocker is not None:
            attempts.append(
                SweepAttempt(
                    zone=zone,
                    outcome="skipped",
                    reach=blocker.reach,
                    reason=blocker.reason,
                    message=f"blocked by an earlier attempt: {blocker.message[:200]}",
                )
            )
            record.progress = {"candidates": zones, "tried": len(attempts), "last": f"{zone}: skipped"}
            continue
        record.message = f"trying {zone} ({len(attempts) + 1}/{len(zones)})"
        if attempts:  # the first zone was checked just above
            existing = await _rig_elsewhere(settings, qr_id)
            if existing is not None:
                return already(existing)
        try:
            created = await _create_backing_off(settings, record, zone, opts, lease)
        except TpuDevopsError as exc:
            if isinstance(exc, ConfigError):  # our own argument / setting errors: not the zone's
                raise
            failure = classify_exception(exc)
            attempt = _record_failure(
                store, zone, accel, model, failure, attempts, started, outcome="refused"
            )
            record.progress = {
                "candidates": zones,
                "tried": len(attempts),
                "last": f"{zone}: {attempt.reason}",
            }
            if failure.reach == "config":
                return result(
                    False, f"configuration error in {zone}: {failure.message}",
                    f"{failure.fix}. The sweep stopped: every other zone would fail the same way.",
                )  # fmt: skip
            continue
        if not created.created:
            attempts.append(
                SweepAttempt(
                    zone=zone,
                    outcome="skipped",
                    reason="exists",
                    message=f"'{qr_id}' already exists here ({created.state})",
                    seconds=0,
                )
            )
            continue
        store.record(
            zone=zone,
            accelerator_type=accel,
            provisioning_model=model,
            outcome="accepted",
            message="request accepted",
        )
        outcome = await _wait_in_zone(settings, record, zone, qr_id, opts, lease)
        state, failure, url = outcome
        if state == "ACTIVE":
            store.record(
                zone=zone,
                accelerator_type=accel,
                provisioning_model=model,
                outcome="active",
                message="ACTIVE",
            )
            attempts.append(
                SweepAttempt(zone=zone, outcome="active", seconds=round(time.monotonic() - started, 2))
            )
            return result(
                True, "found capacity", f"vLLM boots in about 10-15 min; then get_vllm_endpoint{' -> ' + url if url else ''}",
                zone=zone, state=state, url=url,
            )  # fmt: skip
        assert failure is not None
        _record_failure(
            store,
            zone,
            accel,
            model,
            failure,
            attempts,
            started,
            outcome="timeout" if failure.reason == "budget" else "failed",
        )
        await _delete_own(settings, zone, qr_id)
        if failure.reach == "config":
            return result(False, f"configuration error in {zone}: {failure.message}", failure.fix)
    return result(
        False,
        f"no zone produced an ACTIVE TPU ({len(attempts)} tried)",
        "see attempts; capacity failures expire, so retry later or widen zones",
    )


RATE_LIMIT_RETRIES = 3  # back-offs of 1, 2 and 4 poll intervals (15 / 30 / 60 s by default) per zone


async def _create_backing_off(
    settings: Settings, record: Any, zone: str, opts: SweepOptions, lease: SweepLease | None
) -> CreateResult:
    """The sweep's create in ``zone``; a per-minute request rate limit (`failures`: reason ``rate_limit``)
    is waited out here, up to `RATE_LIMIT_RETRIES` times with doubling pauses, instead of being taken
    as a verdict on the zone or the region.

    Raises:
        TpuDevopsError: the create failed for another reason, or still rate limited after the back-offs.
    """
    for attempt in range(RATE_LIMIT_RETRIES + 1):
        try:
            return await create_queued_resource(
                settings, zone=zone, provisioning_model=opts.provisioning_model,
                max_run_duration_s=opts.max_run_duration_s, valid_until_duration_s=opts.valid_until_duration_s,
                check_secret=False, check_other_zones=False, allow_unsupported_image=opts.allow_unsupported_image,
            )  # fmt: skip
        except TpuDevopsError as exc:
            if isinstance(exc, ConfigError) or attempt == RATE_LIMIT_RETRIES:
                raise
            if classify_exception(exc).reason != "rate_limit":
                raise
            pause = opts.poll_interval_s * 2**attempt
            record.message = f"the TPU API rate-limited the create in {zone}: retrying in {pause:.0f}s"
            if lease is not None:
                lease.renew()
            await anyio.sleep(pause)
    raise AssertionError("unreachable")  # the loop returns or raises


def _record_failure(
    store: ZoneStore,
    zone: str,
    accel: str,
    model: str,
    failure: Failure,
    attempts: list[SweepAttempt],
    started: float,
    *,
    outcome: str,
) -> SweepAttempt:
    store.record(
        zone=zone, accelerator_type=accel, provisioning_model=model, outcome=outcome,
        reach=None if failure.reach == "config" else failure.reach, reason=failure.reason, message=failure.message,
    )  # fmt: skip
    attempt = SweepAttempt(
        zone=zone, outcome=outcome, reach=failure.reach, reason=failure.reason, message=failure.message[:300],
        seconds=round(time.monotonic() - started, 2),
    )  # fmt: skip
    attempts.append(attempt)
    return attempt


async def _wait_in_zone(
    settings: Settings,
    record: Any,
    zone: str,
    qr_id: str,
    opts: SweepOptions,
    lease: SweepLease | None = None,
) -> tuple[str, Failure | None, str | None]:
    """Poll one request: ("ACTIVE", None, url) or (state, Failure, None).

    The budget is a deadline: the last sleep is cut short at it (a 15 s poll interval used to carry a
    20 s budget to 30 s), except for PROVISIONING, which cannot be deleted and is waited for.
    """
    deadline = time.monotonic() + opts.zone_budget_s
    while True:
        if lease is not None:
            lease.renew()
        qr = await get_queued(settings, zone, qr_id)
        if qr is None:
            return (
                "GONE",
                Failure("zone", "vanished", "the request disappeared while waiting", "try again"),
                None,
            )
        state = state_of(qr)
        record.progress = dict(record.progress, current=f"{zone}: {state}")
        if state == "ACTIVE":
            node_id = node_specs(qr)[0].get("nodeId", qr_id) if node_specs(qr) else qr_id
            ip, _ = await node_external_ip(settings, zone, node_id)
            return state, None, (f"http://{ip}:{settings.vllm_port}" if ip else None)
        if state in TERMINAL_STATES:
            err = qr.get("state", {}).get("failedData", {}).get("error", {}) or {}
            return state, classify_failed_data(err, state), None
        over = time.monotonic() - deadline
        if over >= 0 and (state != "PROVISIONING" or over >= max(PROVISIONING_GRACE_S, opts.zone_budget_s)):
            return (
                state,
                Failure(
                    "zone", "budget", f"still {state} after {opts.zone_budget_s:.0f}s", "try again later"
                ),
                None,
            )
        await anyio.sleep(opts.poll_interval_s if over >= 0 else min(opts.poll_interval_s, -over))


async def _delete_own(settings: Settings, zone: str, qr_id: str) -> None:
    """Delete the request this sweep created in ``zone`` (best effort; logged, not raised).

    Re-read first and deleted only while it still carries our labels (``managed-by=tpu-devops``,
    ``rig=<id>``): ``force`` also deletes its nodes, so nothing else may ever be the target.
    """
    import logging

    log = logging.getLogger(__name__)
    try:
        qr = await get_queued(settings, zone, qr_id)
        if qr is None:
            return
        if not is_ours(qr, qr_id):
            log.warning("sweep request %s in %s no longer carries our labels: left alone", qr_id, zone)
            return
        await call(api(settings).delete_queued_resource, zone, qr_id, force=True)
    except TpuDevopsError as exc:
        log.warning("could not delete sweep request %s in %s: %s", qr_id, zone, exc)


class SweepStarted(ToolResult):
    """A sweep started as a job: poll ``get_job(job_id)``."""

    job_id: str
    provisioning_model: str
    queued_resource_id: str
    zone_budget_s: float
    message: str
    endpoint_access: EndpointAccess | None = None

    def headline(self) -> str:
        return f"sweep started as job {self.job_id}; poll get_job('{self.job_id}')"


def check_sweep_options(settings: Settings, opts: SweepOptions) -> SweepOptions:
    """Validate every argument before a job starts (a typo must fail the call, not the job).

    Raises:
        ConfigError: an explicitly empty zone list, a malformed zone (field ``zones``), bad durations
            (see `requests.check_durations`), an image too old for the model (field ``VLLM_IMAGE``,
            `tpu_devops.images.image_gate`) unless ``allow_unsupported_image``.
    """
    if opts.zones is not None:
        if not opts.zones:
            raise ConfigError(
                "empty zone list", field="zones", value=[],
                fix="omit zones to try the zones with quota (best first), or list zones such as us-west4-a",
            )  # fmt: skip
        opts.zones = list(dict.fromkeys(check_zone(z, "zones") for z in opts.zones))
    check_durations(opts.provisioning_model, opts.max_run_duration_s, opts.valid_until_duration_s, settings)
    image_gate(settings.vllm_image, settings.model_name, allow_unsupported_image=opts.allow_unsupported_image)
    return opts


async def start_sweep(settings: Settings, opts: SweepOptions) -> SweepStarted:
    """Validate, take the rig's sweep lease, and start `run_sweep` as a job.

    Explicit zones are checked against the project's TPU locations (one ``locations.list`` call)
    before the job starts, so a typo fails this call instead of the job.

    Raises:
        ConfigError: bad arguments (field ``zones`` for a zone that is not a TPU location) or no project.
        JobError: a sweep for this rig is already running (this server or another one sharing the
            state directory); the message names its job id.
    """
    import uuid

    from tpu_devops.errors import JobError
    from tpu_devops.jobs import JOBS

    require_project(settings)
    opts = check_sweep_options(settings, opts)
    if opts.zones:
        known = set(await call(api(settings).list_zones))
        unknown = [z for z in opts.zones if z not in known]
        if unknown:
            raise ConfigError(
                f"not a Cloud TPU location of this project: {', '.join(unknown)}",
                field="zones",
                value=unknown,
                fix="use zones from get_zones_with_available_quota (or list_queued_resources zone='all'), "
                "or omit zones",
            )
    opts.access = await plan_access(
        settings, allowed_source_ranges=opts.allowed_source_ranges, open_to_internet=opts.open_to_internet
    )
    store = open_store(settings)
    name = f"sweep:{settings.project}:{settings.resource_id}"
    owner = uuid.uuid4().hex
    ttl = max(LEASE_TTL_S, 3 * opts.poll_interval_s)
    holder = store.acquire_lease(name, owner, ttl)
    if holder is not None and not holder.held:
        where = "this server" if holder.pid == os.getpid() else f"server pid {holder.pid} on {holder.host}"
        job = holder.job_id or "(job id not yet recorded)"
        raise JobError(
            f"a sweep for rig '{settings.resource_id}' is already running as job {job} in {where}; "
            "two sweeps at once could leave two TPUs billing",
            field="find_tpu",
            value=settings.resource_id,
            fix=f"poll get_job('{job}') until it ends, or cancel_job('{job}') first"
            + ("" if holder.pid == os.getpid() else " (in that server)"),
        )
    lease = SweepLease(store, name, owner, ttl)
    try:  # before the job starts, so a missing network or permission is this call's error
        await ensure_hf_secret(settings)
        opts.access = await ensure_access(settings, opts.access)
    except BaseException:
        lease.release()
        raise

    async def body(record: Any) -> SweepResult:
        try:
            out = await run_sweep(settings, record, opts, lease)
            if not out.found and opts.access is not None and opts.access.action == "created":
                from tpu_devops.provisioning.queued import release_unused_rule

                await release_unused_rule(settings)  # the rule this sweep made protects no TPU
            return out
        finally:
            lease.release()

    try:
        rec = JOBS.start(
            "find-tpu", f"sweep zones for {opts.provisioning_model} {settings.accelerator_type}", body
        )
    except BaseException:
        lease.release()
        raise
    lease.renew(job_id=rec.id)
    return SweepStarted(
        job_id=rec.id,
        provisioning_model=opts.provisioning_model,
        queued_resource_id=settings.resource_id,
        zone_budget_s=opts.zone_budget_s,
        message="one create at a time; failures are classified and recorded in tpu_zones_status.md",
        endpoint_access=opts.access,
    )
