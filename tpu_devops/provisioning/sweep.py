"""`find_tpu`: the zone sweep job, one create at a time, each failure classified and recorded.

Uses `requests` to check arguments, `queued` to create / read / delete the rig's own request,
`failures` to decide how far a refusal reaches, `store` for the attempt history and the rig lease,
and `tpu_devops.provisioning.quota` to pick the zones worth trying.

Nothing is left billing or waiting forever: every request a sweep sends carries
``queueingPolicy.validUntilDuration`` equal to its per-zone budget, so a request abandoned by a sweep
that died (SIGKILL, cancel, disconnect) expires by itself; the next sweep adopts a live ``find_tpu``
request of this rig (waits on it until it is ACTIVE or its own time is up, then deletes it) instead of
refusing to touch it, deletes a FAILED / SUSPENDED one of ours that blocks the zone it tries, and
treats a request whose create answer was lost as its own.

A teardown ends the sweep (`tpu_devops.provisioning.store`, the rig's fence): the sweep reads the rig's
fence epoch when it starts and stops, creating nothing more, as soon as a teardown has raised it (checked
at every poll and, atomically, before every create). A request of the sweep that vanishes while it waits
was deleted by someone (Google marks a failed request FAILED, it does not remove it): the sweep stops
there too rather than create in the next zone, which also holds for a teardown from a server with
another state directory.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import BaseModel, Field

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import ConfigError, TpuDevopsError
from tpu_devops.host.results import ToolResult
from tpu_devops.planning.fit import fit_gate
from tpu_devops.planning.images import image_gate
from tpu_devops.provisioning.access import EndpointAccess, ensure_access, plan_access
from tpu_devops.provisioning.cloud import api, call, get_queued, node_external_ip
from tpu_devops.provisioning.failures import Failure, classify_exception, classify_failed_data
from tpu_devops.provisioning.ownership import SWEEP_TOOL, Rig, this_rig
from tpu_devops.provisioning.queued import (
    TERMINAL_STATES,
    WAITING_STATES,
    CreateResult,
    ListingError,
    QueuedResourceView,
    SecondTpuError,
    create_queued_resource,
    ensure_hf_secret,
    release_rule_on_failure,
    rig_queued_resources,
    state_of,
)
from tpu_devops.provisioning.quota import ZoneQuota, zones_with_quota
from tpu_devops.provisioning.requests import (
    VALID_UNTIL_MIN_S,
    check_create_settings,
    check_durations,
    node_specs,
)
from tpu_devops.provisioning.rigjobs import sweep_binding
from tpu_devops.provisioning.store import (
    LEASE_TTL_S,
    SWEEP,
    Fence,
    FencedError,
    RigLease,
    ZoneStore,
    acquire_rig_lease,
    open_store,
    rig_lease_name,
)
from tpu_devops.types import check_zone

RATE_LIMIT_RETRIES = 3  # back-offs of 1, 2 and 4 poll intervals (15 / 30 / 60 s by default) per zone

CANCEL_CLEANUP_S = 30.0  # a cancelled sweep spends at most this long deleting its waiting request

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


# How a sweep ended (``SweepResult.outcome``); only ``found`` is a job that did what it was started for.
SWEEP_OUTCOMES = ("found", "exists", "config_error", "no_capacity", "no_candidates", "lost_race", "torn_down")


class SweepResult(ToolResult):
    """Result of a sweep: the zone that produced an ACTIVE TPU (if any) and every attempt in order.

    ``outcome`` (one of `SWEEP_OUTCOMES`): ``found`` (this sweep's request became ACTIVE), ``exists`` (the
    rig already holds a TPU or request, so nothing was created), ``config_error`` (a setting stopped the
    sweep), ``no_capacity`` (every zone tried refused or timed out), ``no_candidates`` (no zone has quota),
    ``lost_race`` (another create of the rig won), ``torn_down`` (a teardown of the rig, or someone deleting
    the sweep's request, ended it: nothing more was created). Anything but ``found`` ends the `find_tpu` job as
    ``failed`` (`job_failed`), with the reason in ``stopped_because`` and the fix in ``next_step``.
    """

    found: bool
    outcome: str
    zone: str | None = None
    queued_resource_id: str
    provisioning_model: str
    state: str | None = None
    endpoint_url: str | None = None
    attempts: list[SweepAttempt] = Field(default_factory=list)
    stopped_because: str
    next_step: str
    status_file: str
    warnings: list[str] = Field(default_factory=list)

    @property
    def job_failed(self) -> bool:
        """The job reports failure unless this sweep got a TPU (`tpu_devops.host.jobs` reads this)."""
        return self.outcome != "found"

    def headline(self) -> str:
        loud = "".join(f" WARNING: {w}." for w in self.warnings)
        if self.found:
            return f"TPU '{self.queued_resource_id}' ACTIVE in {self.zone} after {len(self.attempts)} zone(s). {self.next_step}{loud}"
        # Google's messages end with a period of their own; never write "..".
        stopped = self.stopped_because.rstrip(".")
        if self.outcome == "exists":
            return f"no new TPU: this sweep created nothing: {stopped}. {self.next_step}{loud}"
        return f"no TPU ({self.outcome.replace('_', ' ')}): {stopped}. {self.next_step}{loud}"


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
    access: EndpointAccess | None = None  # planned by start_sweep, put in place before each create
    epoch: int | None = None  # the rig's teardown fence when the sweep started (`store.Fence`)


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


def request_budget(opts: SweepOptions) -> tuple[float, int]:
    """(seconds the sweep waits in one zone, the ``validUntilDuration`` seconds its request carries).

    The wait is ``zone_budget_s`` (or ``valid_until_duration_s`` when that is shorter); the request's
    validUntilDuration equals it, rounded up to whole seconds and to at least `VALID_UNTIL_MIN_S`, so a
    request outlives its sweep by at most a minute even if the sweep dies.
    """
    budget = opts.zone_budget_s
    if opts.valid_until_duration_s is not None:
        budget = min(budget, float(opts.valid_until_duration_s))
    return budget, max(VALID_UNTIL_MIN_S, math.ceil(budget))


@dataclass(frozen=True)
class _Outcome:
    """How waiting on one request ended: ACTIVE (``url``), or a ``failure`` (FAILED, budget, vanished)."""

    state: str
    failure: Failure | None = None
    url: str | None = None


class _SweepRun:
    """One run of `run_sweep`: its settings, rig, store, lease and the attempts made so far."""

    def __init__(self, settings: Settings, record: Any, opts: SweepOptions, lease: RigLease | None, rig: Rig):
        self.settings, self.record, self.opts, self.lease, self.rig = settings, record, opts, lease, rig
        self.store = open_store(settings)
        self.accel, self.model = settings.accelerator_type, opts.provisioning_model
        self.qr_id = settings.resource_id
        self.budget_s, self.valid_until_s = request_budget(opts)
        self.attempts: list[SweepAttempt] = []
        self.warnings: list[str] = []
        self.zones: list[str] = []

    # ---- results ------------------------------------------------------------------------------

    def result(
        self, outcome: str, stopped: str, next_step: str, zone: str | None = None, state: str | None = None,
        url: str | None = None, qr_id: str | None = None,
    ) -> SweepResult:  # fmt: skip
        out = SweepResult(
            found=outcome == "found", outcome=outcome, zone=zone, queued_resource_id=qr_id or self.qr_id, provisioning_model=self.model,
            state=state, endpoint_url=url, attempts=self.attempts, stopped_because=stopped, next_step=next_step,
            status_file=str(self.store.status_path), warnings=self.warnings,
        )  # fmt: skip
        self.record.message = out.headline()
        self.record.progress = dict(self.record.progress, tried=len(self.attempts))
        return out

    def already(self, existing: QueuedResourceView) -> SweepResult:
        z, st = existing.zone, existing.state
        return self.result(
            "exists", f"'{existing.id}' already exists in {z} ({st}, {existing.provisioning_model}, "
            f"{existing.owner}); a rig never holds two TPUs",
            f"use describe_queued_resource zone={z}, or destroy_queued_resource zone={z} queued_resource_id="
            f"{existing.id} before sweeping again",
            zone=z, state=st, qr_id=existing.id,
        )  # fmt: skip

    def progress(self, last: str) -> None:
        self.record.progress = {"candidates": self.zones, "tried": len(self.attempts), "last": last}

    def renew(self) -> None:
        if self.lease is not None:
            self.lease.renew()

    async def fenced(self) -> Fence | None:
        """The teardown that ended this sweep (the rig's fence moved past its start), else None."""
        if self.opts.epoch is None:
            return None
        fence = await anyio.to_thread.run_sync(self.store.fence, rig_lease_name(self.settings))
        return fence if fence.epoch != self.opts.epoch else None

    def torn_down(self, why: str) -> SweepResult:
        return self.result(
            "torn_down", why, "nothing more was created; call find_tpu again if you want a TPU now"
        )

    def record_failure(self, zone: str, failure: Failure, started: float, *, outcome: str) -> SweepAttempt:
        self.store.record(
            zone=zone, accelerator_type=self.accel, provisioning_model=self.model, outcome=outcome,
            reach=None if failure.reach == "config" else failure.reach, reason=failure.reason, message=failure.message,
        )  # fmt: skip
        attempt = SweepAttempt(
            zone=zone, outcome=outcome, reach=failure.reach, reason=failure.reason, message=failure.message[:300],
            seconds=round(time.monotonic() - started, 2),
        )  # fmt: skip
        self.attempts.append(attempt)
        return attempt

    def record_active(self, zone: str, started: float, message: str = "") -> None:
        self.store.record(
            zone=zone, accelerator_type=self.accel, provisioning_model=self.model, outcome="active", message="ACTIVE"
        )  # fmt: skip
        self.attempts.append(
            SweepAttempt(
                zone=zone, outcome="active", message=message, seconds=round(time.monotonic() - started, 2)
            )
        )

    def found(self, zone: str, outcome: _Outcome, qr_id: str) -> SweepResult:
        url = outcome.url
        return self.result(
            "found", "found capacity", f"vLLM boots in about 10-15 min; then get_vllm_endpoint{' -> ' + url if url else ''}",
            zone=zone, state=outcome.state, url=url, qr_id=qr_id,
        )  # fmt: skip

    # ---- waiting and cleaning -----------------------------------------------------------------

    async def wait(self, zone: str, qr_id: str, budget_s: float) -> _Outcome:
        """Poll one request until ACTIVE (with its URL), FAILED / SUSPENDED, or ``budget_s`` runs out.

        The budget is a deadline: the last sleep is cut short at it (a 15 s poll interval used to carry a
        20 s budget to 30 s), except for PROVISIONING, which cannot be deleted and is waited for.
        """
        deadline = time.monotonic() + budget_s
        while True:
            self.renew()
            fence = await self.fenced()
            if fence is not None:
                return _Outcome(
                    state="TORN_DOWN",
                    failure=Failure(
                        "config", "torn_down", f"rig '{self.rig.rig}' was torn down ({fence.when()})", ""
                    ),
                )
            qr = await get_queued(self.settings, zone, qr_id)
            if qr is None:
                return _Outcome(
                    state="GONE",
                    failure=Failure(
                        "config", "vanished",
                        f"its request '{qr_id}' in {zone} was deleted while it waited (by a teardown, or by hand)",
                        "",
                    ),
                )  # fmt: skip
            state = state_of(qr)
            self.record.progress = dict(self.record.progress, current=f"{zone}: {state}")
            if state == "ACTIVE":
                node_id = node_specs(qr)[0].get("nodeId", qr_id) if node_specs(qr) else qr_id
                ip, _ = await node_external_ip(self.settings, zone, node_id)
                return _Outcome(state=state, url=f"http://{ip}:{self.settings.vllm_port}" if ip else None)
            if state in TERMINAL_STATES:
                err = qr.get("state", {}).get("failedData", {}).get("error", {}) or {}
                return _Outcome(state=state, failure=classify_failed_data(err, state))
            over = time.monotonic() - deadline
            if over >= 0 and (state != "PROVISIONING" or over >= max(PROVISIONING_GRACE_S, budget_s)):
                return _Outcome(
                    state=state,
                    failure=Failure(
                        "zone", "budget", f"still {state} after {budget_s:.0f}s", "try again later"
                    ),
                )
            await anyio.sleep(
                self.opts.poll_interval_s if over >= 0 else min(self.opts.poll_interval_s, -over)
            )

    @contextlib.asynccontextmanager
    async def cleanup_on_cancel(self, zone: str, qr_id: str) -> AsyncIterator[None]:
        """On cancellation inside the block, delete the sweep request ``qr_id`` in ``zone`` if one made by
        these credentials with find_tpu is there (shielded, at most `CANCEL_CLEANUP_S`), then re-raise."""
        try:
            yield
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_CLEANUP_S):
                view = await self._view(zone, qr_id)
                if view is not None and view.ours and view.created_by_you and view.tool == SWEEP_TOOL:
                    await self.delete_own(zone, qr_id)
            raise

    async def delete_own(self, zone: str, qr_id: str) -> None:
        """Delete a request of this rig (best effort; a failure is logged and shown as a warning)."""
        from tpu_devops.provisioning.queued import delete_own_request

        error = await delete_own_request(self.settings, self.rig, zone, qr_id)
        if error is not None:
            import logging

            logging.getLogger(__name__).warning(
                "could not delete sweep request %s in %s: %s", qr_id, zone, error
            )
            self.warnings.append(
                f"could not delete '{qr_id}' in {zone} ({error}); it expires by itself after its "
                f"validUntilDuration, or delete it with destroy_queued_resource(zone='{zone}', queued_resource_id='{qr_id}')"
            )

    async def settle(self, zone: str, qr_id: str, started: float, budget_s: float) -> SweepResult | None:
        """Wait on one request of ours; ACTIVE -> the found result; otherwise record why, delete it, None.

        A cancelled sweep (cancel_job, a client that went away) deletes the request it was waiting on
        before it stops (`cleanup_on_cancel`), so nothing is left queued for capacity nobody wants.
        """
        async with self.cleanup_on_cancel(zone, qr_id):
            outcome = await self.wait(zone, qr_id, budget_s)
        if outcome.state == "ACTIVE":
            self.record_active(zone, started)
            return self.found(zone, outcome, qr_id)
        assert outcome.failure is not None
        failure = outcome.failure
        if outcome.state in ("TORN_DOWN", "GONE"):  # not the zone's verdict: nothing is recorded against it
            if outcome.state == "TORN_DOWN":
                await self.delete_own(zone, qr_id)
            return self.torn_down(failure.message)
        self.record_failure(
            zone, failure, started, outcome="timeout" if failure.reason == "budget" else "failed"
        )
        await self.delete_own(zone, qr_id)
        if failure.reach == "config":
            return self.result(
                "config_error", f"configuration error in {zone}: {failure.message}", failure.fix
            )
        return None

    # ---- the sweep ----------------------------------------------------------------------------

    async def adopt(self, view: QueuedResourceView) -> SweepResult | None:
        """Take over a live request of this rig that no running sweep here owns (left by a sweep that died,
        or whose create answer was lost): wait on it for this sweep's budget or what is left of its own
        validUntilDuration, whichever is shorter, then clean it up like one of ours."""
        started = time.monotonic()
        remaining = self.budget_s
        if view.valid_until_duration_s is not None and view.age_s is not None:
            remaining = min(remaining, max(0.0, view.valid_until_duration_s - view.age_s))
        self.progress(f"adopted '{view.id}' in {view.zone} ({view.state})")
        return await self.settle(view.zone, view.id, started, remaining)

    async def start(self) -> SweepResult | None:
        """What the rig holds already, in every zone (fails closed): an ACTIVE TPU ends the sweep; a
        PROVISIONING request, or a waiting one a sweep made, is adopted when these credentials created
        it; anything else stops it (a request of another installation of this rig is theirs to manage,
        and a find_tpu request of theirs expires by itself)."""
        live = await rig_queued_resources(self.settings, self.rig)
        if not live:
            return None
        active = [q for q in live if q.state == "ACTIVE"]
        if active or len(live) > 1:
            return self.already((active or live)[0])
        view = live[0]
        adoptable = view.state == "PROVISIONING" or (view.tool == SWEEP_TOOL and view.state in WAITING_STATES)
        if adoptable and view.created_by_you:
            done = await self.adopt(view)
            if done is not None:
                return done
            self.zones = [z for z in self.zones if z != view.zone]
            return None
        return self.already(view)

    async def create_backing_off(self, zone: str) -> CreateResult:
        """The sweep's create in ``zone``; a per-minute request rate limit (`failures`: reason ``rate_limit``)
        is waited out here, up to `RATE_LIMIT_RETRIES` times with doubling pauses, instead of being taken
        as a verdict on the zone or the region.

        Raises:
            TpuDevopsError: the create failed for another reason, or still rate limited after the back-offs.
        """
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            try:
                return await create_queued_resource(
                    self.settings, zone=zone, provisioning_model=self.model,
                    max_run_duration_s=self.opts.max_run_duration_s, valid_until_duration_s=self.valid_until_s,
                    check_secret=False, lease=self.lease, tool=SWEEP_TOOL,
                    allow_unsupported_image=self.opts.allow_unsupported_image, epoch=self.opts.epoch,
                    access=self.opts.access,
                )  # fmt: skip
            except TpuDevopsError as exc:
                if isinstance(exc, ConfigError) or attempt == RATE_LIMIT_RETRIES:
                    raise
                if classify_exception(exc).reason != "rate_limit":
                    raise
                pause = self.opts.poll_interval_s * 2**attempt
                self.record.message = (
                    f"the TPU API rate-limited the create in {zone}: retrying in {pause:.0f}s"
                )
                self.renew()
                await anyio.sleep(pause)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def try_zone(self, zone: str) -> SweepResult | None:
        """One zone: create our request (cleaning a dead one of ours that holds the id), wait, clean up."""
        started = time.monotonic()
        for _ in range(2):  # a second pass only after deleting a FAILED / SUSPENDED request of ours
            try:
                async with self.cleanup_on_cancel(zone, self.qr_id):
                    created = await self.create_backing_off(zone)
            except SecondTpuError as exc:  # a live request of the rig appeared (another server)
                return self.already(exc.others[0])
            except FencedError as exc:  # a teardown of the rig since the sweep started
                return self.torn_down(f"rig '{self.rig.rig}' was torn down ({exc.fence.when()})")
            except (ConfigError, ListingError):  # our settings, or zones we cannot see: not this zone's fault
                raise
            except TpuDevopsError as exc:
                failure = classify_exception(exc)
                attempt = self.record_failure(zone, failure, started, outcome="refused")
                self.progress(f"{zone}: {attempt.reason}")
                if failure.reach == "config":
                    return self.result(
                        "config_error", f"configuration error in {zone}: {failure.message}",
                        f"{failure.fix}. The sweep stopped: every other zone would fail the same way.",
                    )  # fmt: skip
                return None
            self.warnings.extend(w for w in created.warnings if "answer to the create was lost" in w)
            if created.withdrawn:
                return self.result(
                    "lost_race", f"another create of rig '{self.rig.rig}' made {created.lost_race_to} first, so this "
                    f"sweep's request in {zone} was deleted again (a rig holds one TPU)",
                    "use describe_queued_resource to follow that one",
                )  # fmt: skip
            if created.created:
                self.store.record(
                    zone=zone, accelerator_type=self.accel, provisioning_model=self.model, outcome="accepted",
                    message="request accepted",
                )  # fmt: skip
                return await self.settle(zone, created.queued_resource_id, started, self.budget_s)
            if not created.ours:
                self.attempts.append(
                    SweepAttempt(
                        zone=zone, outcome="skipped", reason="exists",
                        message=f"'{self.qr_id}' is taken here by a resource that is {created.owner}", seconds=0,
                    )
                )  # fmt: skip
                return None
            if created.state not in TERMINAL_STATES:  # live and ours: adopt rather than abandon it
                view = await self._view(zone, created.queued_resource_id)
                if view is None:
                    return None
                return await self.adopt(view) if view.created_by_you else self.already(view)
            await self.delete_own(
                zone, created.queued_resource_id
            )  # FAILED / SUSPENDED: holds quota and the id
        return None

    async def _view(self, zone: str, qr_id: str) -> QueuedResourceView | None:
        qr = await get_queued(self.settings, zone, qr_id)
        return None if qr is None else QueuedResourceView.of(qr, zone, self.rig)

    async def run(self) -> SweepResult:
        self.zones = await candidate_zones(self.settings, self.opts, self.store)
        if not self.zones:
            return self.result(
                "no_candidates",
                "no candidate zone has quota for this provisioning model",
                "check get_zones_with_available_quota",
            )
        self.record.progress = {"candidates": self.zones, "tried": 0}
        done = await self.start()
        if done is not None:
            return done
        await ensure_hf_secret(self.settings)
        for zone in list(self.zones):
            self.renew()
            blocker = self.store.blocker(zone, self.accel, self.model)
            if blocker is not None:
                self.attempts.append(
                    SweepAttempt(
                        zone=zone, outcome="skipped", reach=blocker.reach, reason=blocker.reason,
                        message=f"blocked by an earlier attempt: {blocker.message[:200]}",
                    )
                )  # fmt: skip
                self.progress(f"{zone}: skipped")
                continue
            self.record.message = f"trying {zone} ({len(self.attempts) + 1}/{len(self.zones)})"
            done = await self.try_zone(zone)
            if done is not None:
                return done
        return self.result(
            "no_capacity",
            f"no zone produced an ACTIVE TPU ({len(self.attempts)} tried)",
            "see attempts; capacity failures expire, so retry later or widen zones",
        )


async def run_sweep(
    settings: Settings, record: Any, opts: SweepOptions, lease: RigLease | None = None
) -> SweepResult:
    """Job body of `find_tpu`: try zones one at a time until one request becomes ACTIVE.

    One create at a time, each through `queued.create_queued_resource` (which lists every zone before
    and after creating, failing closed, and withdraws a create that lost a race). `start_sweep` holds
    the rig lease (``lease``, renewed while waiting) so only one sweep or create per rig runs at a time
    across server processes sharing the state directory. Each zone gets the budget of `request_budget`
    to leave the queue, and its request carries the same validUntilDuration; a request that fails or
    waits out its budget is deleted (FAILED requests hold quota). Failures are recorded in the store with
    their reach; a ``config`` failure stops the sweep at once. A PROVISIONING request is never
    abandoned. What the rig already holds is handled first (`_SweepRun.start`).

    Raises:
        ListingError: a zone could not be listed (fail closed: nothing is created blind).
        ConfigError: a setting the request is built from is wrong, or the HF token secret is missing.
    """
    rig = await this_rig(settings)
    return await _SweepRun(settings, record, opts, lease, rig).run()


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
            `tpu_devops.planning.images.image_gate`) unless ``allow_unsupported_image``, a model the slice
            cannot hold (field ``MODEL_NAME``, `tpu_devops.planning.fit.fit_gate`).
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
    fit_gate(settings)  # no sweep (and so no create) for a model the slice cannot hold
    return opts


async def start_sweep(settings: Settings, opts: SweepOptions) -> SweepStarted:
    """Validate, take the rig's lease, and start `run_sweep` as a job.

    Explicit zones are checked against the project's TPU locations (one ``locations.list`` call)
    before the job starts, so a typo fails this call instead of the job.

    Raises:
        ConfigError: bad arguments (field ``zones`` for a zone that is not a TPU location) or no project.
        JobError: a sweep (or, for longer than a create takes, a create) of this rig is running in this
            server or another one sharing the state directory; the message names its job id.
    """
    from tpu_devops.host.jobs import JOBS

    require_project(settings)
    opts = check_sweep_options(settings, opts)
    store = open_store(settings)
    opts.epoch = (await anyio.to_thread.run_sync(store.fence, rig_lease_name(settings))).epoch
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
    check_create_settings(
        settings, zone=(opts.zones or [settings.zone])[0], qr_id=settings.resource_id,
        provisioning_model=opts.provisioning_model, max_run_duration_s=opts.max_run_duration_s,
        valid_until_duration_s=opts.valid_until_duration_s,
    )  # fmt: skip
    opts.access = await plan_access(
        settings, allowed_source_ranges=opts.allowed_source_ranges, open_to_internet=opts.open_to_internet
    )
    lease = await acquire_rig_lease(settings, store, SWEEP, ttl_s=max(LEASE_TTL_S, 3 * opts.poll_interval_s))
    try:  # before the job starts, so a missing network or permission is this call's error
        await ensure_hf_secret(settings)
        opts.access = await ensure_access(settings, opts.access)
        from tpu_devops.provisioning.bucket import prepare_for_create

        async with release_rule_on_failure(settings, opts.access):
            settings, _ = await prepare_for_create(settings)  # every create of the sweep renders this bucket
    except BaseException:
        lease.release()
        raise

    async def body(record: Any) -> SweepResult:
        try:
            async with release_rule_on_failure(settings, opts.access):  # a failed or cancelled sweep
                out = await run_sweep(settings, record, opts, lease)
            if not out.found and opts.access is not None and opts.access.action == "created":
                from tpu_devops.provisioning.queued import release_unused_rule

                await release_unused_rule(settings)  # the rule this sweep made protects no TPU
            return out
        finally:
            lease.release()

    try:
        rec = JOBS.start(
            "find-tpu", f"sweep zones for {opts.provisioning_model} {settings.accelerator_type}", body,
            binding=sweep_binding(settings, opts.poll_interval_s),
        )  # fmt: skip
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
