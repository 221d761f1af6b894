"""Capacity: quota scan, known flex-start support, the persisted zone-attempt store, and the zone sweep.

Quota is not capacity, and capacity is not the provisioning model (DESIGN §3): the quota scan reads
the family the provisioning model draws on (on-demand: ``TPUV5sLitepod...``; spot and flex-start: the
Preemptible family), and shows next to it what Google documents about flex-start support and what
this project has observed, so "has quota" and "will accept" are never confused.

Known flex-start support (Google's "Request Cloud TPUs using Flex-start" page): v5e serving
``us-central1-a``, v5e training ``us-west4-a``, v6e ``asia-northeast1-b`` and ``us-east5-a``. Observed by
the seed (DESIGN §3): ``v5litepod-1`` flex-start accepted in ``us-west4-a``, refused in
``europe-west4-a`` and ``europe-west4-b``.

The zone-attempt store is SQLite (WAL, busy timeout) at ``<state_dir>/zone_attempts.sqlite3`` so it
survives restarts and is shared by concurrent servers. It also holds the sweep lease (table ``leases``):
one `find_tpu` sweep per rig at a time, across every server sharing the state directory, so two
sweeps can never each create a TPU in a different zone. After every attempt it renders
``<state_dir>/tpu_zones_status.md`` for people. Capacity and quota failures expire (`EXPIRY_S`);
unsupported-model failures never do.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, Field

from tpu_devops import provisioning as prov
from tpu_devops.config import Settings, require_project
from tpu_devops.errors import CloudError, ConfigError, TpuDevopsError
from tpu_devops.results import ToolResult

DOCUMENTED_FLEX_START: dict[str, dict[str, str]] = {
    "v5e": {"us-central1-a": "v5e serving", "us-west4-a": "v5e training"},
    "v6e": {"asia-northeast1-b": "v6e training and serving", "us-east5-a": "v6e training and serving"},
}
SEED_OBSERVED: dict[tuple[str, str], dict[str, str]] = {
    ("v5litepod-1", "flex-start"): {
        "us-west4-a": "accepted",
        "europe-west4-a": "refused",
        "europe-west4-b": "refused",
    },
}
# How long a failure blocks a zone (seconds). None: forever.
EXPIRY_S: dict[str, float | None] = {
    "zone": 2 * 3600,
    "region": 3600,
    "model": None,
    "transient": 600,
    "config": 0,
}

# A PROVISIONING request cannot be deleted, so the sweep keeps waiting past its budget, up to this long.
PROVISIONING_GRACE_S = 900.0

DB_NAME = "zone_attempts.sqlite3"
WAL_SWITCH_ATTEMPTS = 12  # bounded retry (about 4 s in all) when another process holds the lock
STATUS_NAME = "tpu_zones_status.md"


# ---------------------------------------------------------------------------------------------
# Zone-attempt store
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One recorded outcome. ``outcome``: accepted / active / failed / timeout / skipped.
    ``reach``: zone / region / model / config / transient / None (success). Times: Unix seconds."""

    at: float
    zone: str
    accelerator_type: str
    provisioning_model: str
    outcome: str
    reach: str | None
    reason: str | None
    message: str
    expires_at: float | None

    def active(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


@dataclass(frozen=True)
class Lease:
    """A row of the ``leases`` table. Times: Unix seconds. ``held``: True for the caller's own lease."""

    name: str
    owner: str
    host: str
    pid: int
    job_id: str | None
    acquired_at: float
    expires_at: float
    held: bool = False


def _alive(host: str, pid: int) -> bool:
    """False only when ``pid`` on this host is known to be gone (another host: assume alive)."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ZoneStore:
    """SQLite-backed attempt history under ``state_dir``. Safe across processes (WAL + busy timeout)."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / DB_NAME
        self.status_path = self.dir / STATUS_NAME
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS attempts (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,"
                " zone TEXT NOT NULL, accelerator_type TEXT NOT NULL, provisioning_model TEXT NOT NULL,"
                " outcome TEXT NOT NULL, reach TEXT, reason TEXT, message TEXT NOT NULL, expires_at REAL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL,"
                " host TEXT NOT NULL, pid INTEGER NOT NULL, job_id TEXT, acquired_at REAL NOT NULL,"
                " expires_at REAL NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        """A connection with a 30 s busy timeout, the database in WAL mode.

        Switching to WAL needs an exclusive lock, and SQLite does not always run the busy handler for
        it, so a second writer opening at the same moment saw "database is locked". WAL is persistent
        in the file: the mode is read first and switched only when needed, with a bounded retry.
        """
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA busy_timeout=30000")
        delay = 0.02
        for attempt in range(WAL_SWITCH_ATTEMPTS):
            try:
                mode = db.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    db.close()
                    raise
                if attempt == WAL_SWITCH_ATTEMPTS - 1:
                    db.close()
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        return db

    def record(
        self,
        *,
        zone: str,
        accelerator_type: str,
        provisioning_model: str,
        outcome: str,
        reach: str | None = None,
        reason: str | None = None,
        message: str = "",
        now: float | None = None,
    ) -> Attempt:
        """Append one attempt (expiry from `EXPIRY_S` by reach) and re-render the status file."""
        at = time.time() if now is None else now
        ttl = EXPIRY_S.get(reach or "", 0) if reach else 0
        expires = None if (reach is not None and ttl is None) else at + (ttl or 0)
        attempt = Attempt(
            at, zone, accelerator_type, provisioning_model, outcome, reach, reason, message[:500], expires
        )
        with self._connect() as db:
            db.execute(
                "INSERT INTO attempts (at, zone, accelerator_type, provisioning_model, outcome, reach, reason, message, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    at,
                    zone,
                    accelerator_type,
                    provisioning_model,
                    outcome,
                    reach,
                    reason,
                    attempt.message,
                    expires,
                ),
            )
        self.render_status()
        return attempt

    def history(
        self, accelerator_type: str | None = None, provisioning_model: str | None = None
    ) -> list[Attempt]:
        """Attempts, oldest first, optionally filtered."""
        sql = "SELECT at, zone, accelerator_type, provisioning_model, outcome, reach, reason, message, expires_at FROM attempts"
        where, args = [], []
        if accelerator_type:
            where.append("accelerator_type = ?")
            args.append(accelerator_type)
        if provisioning_model:
            where.append("provisioning_model = ?")
            args.append(provisioning_model)
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._connect() as db:
            rows = db.execute(sql + " ORDER BY id", args).fetchall()
        return [Attempt(*row) for row in rows]

    def blocker(
        self,
        zone: str,
        accelerator_type: str,
        provisioning_model: str,
        now: float | None = None,
        *,
        history: list[Attempt] | None = None,
    ) -> Attempt | None:
        """The newest still-active failure that rules ``zone`` out, or None.

        A success in the zone after a capacity failure clears it; model failures never expire.
        ``history``: ``self.history(accelerator_type, provisioning_model)`` when the caller already read
        it (a scan over many zones reads the table once instead of once per zone).
        """
        now = time.time() if now is None else now
        region = zone.rsplit("-", 1)[0]
        found: Attempt | None = None
        if history is None:
            history = self.history(accelerator_type, provisioning_model)
        for a in history:
            same_zone = a.zone == zone
            same_region = a.zone.rsplit("-", 1)[0] == region
            if a.reach is None and same_zone and a.outcome in ("accepted", "active"):
                found = None if (found is None or found.reach != "model") else found
                continue
            if not a.active(now):
                continue
            if (a.reach in ("zone", "model", "transient") and same_zone) or (
                a.reach == "region" and same_region
            ):
                if found is None or found.reach != "model":
                    found = a
        return found

    # ---- leases: one sweep per rig, across server processes sharing this state directory ----

    def acquire_lease(self, name: str, owner: str, ttl_s: float, job_id: str | None = None) -> Lease | None:
        """Take the lease ``name`` for ``owner`` for ``ttl_s`` seconds; None when taken.

        Atomic across processes (``BEGIN IMMEDIATE``). A lease is free when absent, expired, or held
        by a process of this host that no longer exists (a server killed mid-sweep). Returns the
        holder's `Lease` when it is taken by someone else (``held=False``).
        """
        now = time.time()
        host, pid = socket.gethostname(), os.getpid()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT owner, host, pid, job_id, acquired_at, expires_at FROM leases WHERE name = ?",
                    (name,),
                ).fetchone()
                if row is not None:
                    holder = Lease(name, *row, held=False)
                    if holder.owner != owner and holder.expires_at > now and _alive(holder.host, holder.pid):
                        db.execute("COMMIT")
                        return holder
                db.execute(
                    "INSERT OR REPLACE INTO leases (name, owner, host, pid, job_id, acquired_at, expires_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (name, owner, host, pid, job_id, now, now + ttl_s),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return Lease(name, owner, host, pid, job_id, now, now + ttl_s, held=True)

    def renew_lease(self, name: str, owner: str, ttl_s: float, job_id: str | None = None) -> None:
        """Extend (and optionally tag with ``job_id``) a lease this owner holds. No-op otherwise."""
        with self._connect() as db:
            db.execute(
                "UPDATE leases SET expires_at = ?, job_id = COALESCE(?, job_id) WHERE name = ? AND owner = ?",
                (time.time() + ttl_s, job_id, name, owner),
            )

    def release_lease(self, name: str, owner: str) -> None:
        """Give a lease back (only when this owner holds it)."""
        with self._connect() as db:
            db.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner))

    def render_status(self) -> None:
        """Write ``tpu_zones_status.md``: the latest outcome per (accelerator, model, zone). Atomic replace."""
        now = time.time()
        latest: dict[tuple[str, str, str], Attempt] = {}
        for a in self.history():
            latest[(a.accelerator_type, a.provisioning_model, a.zone)] = a
        lines = [
            "# TPU zone status",
            "",
            f"Written by tpu-devops at {datetime.fromtimestamp(now, UTC).isoformat(timespec='seconds')}; "
            "source: the zone-attempt store (zone_attempts.sqlite3). Do not edit.",
            "",
            "| accelerator | model | zone | last outcome | reach | when (UTC) | blocks until | message |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for (acc, model, zone), a in sorted(latest.items()):
            until = "never expires" if (a.reach and a.expires_at is None) else (
                "-" if not a.reach or not a.expires_at or a.expires_at <= now
                else datetime.fromtimestamp(a.expires_at, UTC).strftime("%Y-%m-%d %H:%M")
            )  # fmt: skip
            when = datetime.fromtimestamp(a.at, UTC).strftime("%Y-%m-%d %H:%M")
            msg = a.message.replace("|", "/").replace("\n", " ")[:120]
            lines.append(
                f"| {acc} | {model} | {zone} | {a.outcome} | {a.reach or '-'} | {when} | {until} | {msg} |"
            )
        text = "\n".join(lines) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".status-", suffix=".md")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, self.status_path)


def open_store(settings: Settings) -> ZoneStore:
    """The store under ``settings.state_dir``. Raises `ConfigError` when the directory is not writable."""
    try:
        return ZoneStore(settings.state_dir)
    except OSError as exc:
        raise ConfigError(
            f"cannot use the state directory: {exc.strerror}",
            field="TPU_DEVOPS_STATE_DIR",
            value=settings.state_dir,
            fix="point TPU_DEVOPS_STATE_DIR at a writable directory",
        ) from None


# ---------------------------------------------------------------------------------------------
# Known support
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Support:
    """What is known about a (zone, provisioning model, accelerator) triple."""

    documented: bool
    documented_zones: tuple[str, ...]
    accepted: bool
    refused: bool
    note: str


def known_support(
    accelerator_type: str,
    provisioning_model: str,
    zone: str,
    store: ZoneStore | None = None,
    *,
    history: list[Attempt] | None = None,
) -> Support:
    """Documented flex-start zones + seed observations + this project's history for one zone.

    For spot and on-demand, every zone counts as documented (support is a flex-start question).
    The project's history comes from ``history`` (``store.history(accelerator_type,
    provisioning_model)`` already read) when given, else from ``store``; with neither, only
    documentation and seed observations count.
    """
    from tpu_devops.catalog import resolve_accelerator_type

    gen = resolve_accelerator_type(accelerator_type).generation.name
    if provisioning_model != "flex-start":
        return Support(True, (), False, False, f"{provisioning_model}: no per-zone model restriction known")
    docs = DOCUMENTED_FLEX_START.get(gen, {})
    observed = SEED_OBSERVED.get((accelerator_type, provisioning_model), {}).get(zone)
    accepted = observed == "accepted"
    refused = observed == "refused"
    notes = []
    if zone in docs:
        notes.append(f"documented: {docs[zone]}")
    if observed:
        notes.append(f"seed observed: {observed}")
    if history is None and store is not None:
        history = store.history(accelerator_type, provisioning_model)
    if history is not None:
        for a in history:
            if a.zone != zone:
                continue
            if a.reach == "model":
                refused, accepted = True, False
            elif a.outcome in ("accepted", "active"):
                accepted, refused = True, False
        if refused and not observed == "refused":
            notes.append("refused here before (this project)")
        elif accepted and observed != "accepted":
            notes.append("accepted here before (this project)")
    return Support(zone in docs, tuple(sorted(docs)), accepted, refused, "; ".join(notes) or "no record")


# ---------------------------------------------------------------------------------------------
# Quota scan
# ---------------------------------------------------------------------------------------------


class ZoneQuota(BaseModel):
    """Quota and support for one zone. Limits in chips (None: no entry for that dimension)."""

    zone: str
    zone_limit: int | None
    region_limit: int | None
    enough_for_request: bool
    flex_start_documented: bool | None = None
    known_acceptance: str
    last_attempt: str | None = None
    blocked_until: str | None = None


class QuotaScan(ToolResult):
    """Zones with quota for the family the provisioning model uses. Limits, not usage."""

    accelerator_type: str
    provisioning_model: str
    quota_family: str
    zone_quota_id: str
    region_quota_id: str
    chips_needed: int
    zones: list[ZoneQuota]
    note: str

    def render_text(self) -> str:
        """Headline, then one line per zone (quota limits, acceptance, last attempt)."""
        lines = [
            self.headline(),
            f"quota ids: {self.zone_quota_id} / {self.region_quota_id}; {self.note}",
            "",
        ]
        lines.append("zone | zone limit | region limit | enough | acceptance | last attempt | blocked until")
        for z in self.zones:
            lines.append(
                f"{z.zone} | {z.zone_limit} | {z.region_limit} | {'yes' if z.enough_for_request else 'no'} | "
                f"{z.known_acceptance} | {z.last_attempt or '-'} | {z.blocked_until or '-'}"
            )
        return "\n".join(lines)

    def headline(self) -> str:
        ok = [z for z in self.zones if z.enough_for_request]
        accept = [
            z.zone
            for z in ok
            if z.known_acceptance.startswith("accepted") or z.known_acceptance.startswith("documented")
        ]
        return (
            f"{len(ok)} zone(s) have {self.quota_family} quota for {self.accelerator_type}; "
            f"known to accept {self.provisioning_model}: {', '.join(accept) or 'none recorded'}"
        )


async def zones_with_quota(
    settings: Settings, provisioning_model: str | None = None, accelerator_type: str | None = None
) -> QuotaScan:
    """Scan Cloud Quotas for the family the provisioning model draws on, per zone, with support and history.

    Raises:
        ConfigError: no project / bad arguments. PermissionError_ / CloudError: the Cloud Quotas API failed.
    """
    from tpu_devops.catalog import resolve_accelerator_type
    from tpu_devops.gcp import quotas

    require_project(settings)
    model = prov.check_provisioning_model(provisioning_model, settings)
    accel = resolve_accelerator_type(
        prov.or_default(accelerator_type, settings.accelerator_type, "accelerator_type")
    )
    zone_id, region_id = accel.quota_ids_for(model)
    family = "on-demand" if model == "on-demand" else "Preemptible (spot and flex-start)"
    limits = await prov.call(quotas.list_tpu_quota_limits, settings)
    zone_limits = {q.location: q.value for q in limits if q.quota_id == zone_id and q.dimension == "zone"}
    region_limits = {
        q.location: q.value for q in limits if q.quota_id == region_id and q.dimension == "region"
    }
    store = open_store(settings)
    history = store.history(accel.name, model)  # read once: three uses per zone below
    now = time.time()
    rows: list[ZoneQuota] = []
    for zone in sorted(zone_limits):
        zl = zone_limits.get(zone)
        rl = region_limits.get(zone.rsplit("-", 1)[0])
        enough = (
            (zl is None or zl < 0 or zl >= accel.chips)
            and (rl is None or rl < 0 or rl >= accel.chips)
            and (zl or 0) != 0
        )
        support = known_support(accel.name, model, zone, history=history)
        if support.refused:
            acceptance = f"refused ({support.note})"
        elif support.accepted:
            acceptance = f"accepted ({support.note})"
        elif support.documented and model == "flex-start":
            acceptance = f"documented ({support.note})"
        else:
            acceptance = "unknown" if model == "flex-start" else "no model restriction"
        hist = [a for a in history if a.zone == zone]
        last = None
        if hist:
            a = hist[-1]
            last = f"{a.outcome} {datetime.fromtimestamp(a.at, UTC).strftime('%Y-%m-%d %H:%M')}Z" + (
                f" ({a.reason})" if a.reason else ""
            )
        blocker = store.blocker(zone, accel.name, model, now, history=history)
        blocked = None
        if blocker is not None:
            blocked = (
                "never (model not offered)"
                if blocker.expires_at is None
                else datetime.fromtimestamp(blocker.expires_at, UTC).isoformat(timespec="minutes")
            )
        rows.append(
            ZoneQuota(
                zone=zone,
                zone_limit=zl,
                region_limit=rl,
                enough_for_request=enough,
                flex_start_documented=support.documented if model == "flex-start" else None,
                known_acceptance=acceptance,
                last_attempt=last,
                blocked_until=blocked,
            )
        )
    return QuotaScan(
        accelerator_type=accel.name,
        provisioning_model=model,
        quota_family=family,
        zone_quota_id=zone_id,
        region_quota_id=region_id,
        chips_needed=accel.chips,
        zones=rows,
        note="quota is a limit, not free capacity, and not a promise that the zone offers this provisioning model",
    )


# ---------------------------------------------------------------------------------------------
# Zone sweep (find_tpu)
# ---------------------------------------------------------------------------------------------


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


async def candidate_zones(settings: Settings, opts: SweepOptions, store: ZoneStore) -> list[str]:
    """Zones to try, best first: known to accept, documented, configured zone, past success, quota size.

    Explicit ``opts.zones`` are kept in the given order. Otherwise zones come from the quota scan
    (zones with enough quota of the right family).
    """
    if opts.zones is not None:
        return list(dict.fromkeys(prov.check_zone(z, "zones") for z in opts.zones))
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


async def _rig_elsewhere(settings: Settings, qr_id: str) -> prov.QueuedResourceView | None:
    """A live queued resource of this rig in any zone (ACTIVE first), else None.

    Every zone, not only the candidates: a create in one zone while the rig holds a request in
    another (made by a previous sweep, another server or create_tpu_queued_resource) bills twice.
    """
    try:
        live = await prov.rig_queued_resources(settings, qr_id)
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

    def already(existing: prov.QueuedResourceView) -> SweepResult:
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
    await prov.ensure_hf_secret(settings)
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
            created = await prov.create_queued_resource(
                settings, zone=zone, provisioning_model=model, max_run_duration_s=opts.max_run_duration_s,
                valid_until_duration_s=opts.valid_until_duration_s, check_secret=False, check_other_zones=False,
            )  # fmt: skip
        except TpuDevopsError as exc:
            if isinstance(exc, ConfigError):  # our own argument / setting errors: not the zone's
                raise
            failure = prov.classify_exception(exc)
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


def _record_failure(
    store: ZoneStore,
    zone: str,
    accel: str,
    model: str,
    failure: prov.Failure,
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
) -> tuple[str, prov.Failure | None, str | None]:
    """Poll one request: ("ACTIVE", None, url) or (state, Failure, None).

    The budget is a deadline: the last sleep is cut short at it (a 15 s poll interval used to carry a
    20 s budget to 30 s), except for PROVISIONING, which cannot be deleted and is waited for.
    """
    deadline = time.monotonic() + opts.zone_budget_s
    while True:
        if lease is not None:
            lease.renew()
        qr = await prov.get_queued(settings, zone, qr_id)
        if qr is None:
            return (
                "GONE",
                prov.Failure("zone", "vanished", "the request disappeared while waiting", "try again"),
                None,
            )
        state = prov.state_of(qr)
        record.progress = dict(record.progress, current=f"{zone}: {state}")
        if state == "ACTIVE":
            node_id = prov.node_specs(qr)[0].get("nodeId", qr_id) if prov.node_specs(qr) else qr_id
            ip, _ = await prov.node_external_ip(settings, zone, node_id)
            return state, None, (f"http://{ip}:{settings.vllm_port}" if ip else None)
        if state in prov.TERMINAL_STATES:
            err = qr.get("state", {}).get("failedData", {}).get("error", {}) or {}
            return state, prov.classify_failure(err.get("message", f"request ended {state}")), None
        over = time.monotonic() - deadline
        if over >= 0 and (state != "PROVISIONING" or over >= max(PROVISIONING_GRACE_S, opts.zone_budget_s)):
            return (
                state,
                prov.Failure(
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
        qr = await prov.get_queued(settings, zone, qr_id)
        if qr is None:
            return
        if not prov.is_ours(qr, qr_id):
            log.warning("sweep request %s in %s no longer carries our labels: left alone", qr_id, zone)
            return
        await prov.call(prov.api(settings).delete_queued_resource, zone, qr_id, force=True)
    except TpuDevopsError as exc:
        log.warning("could not delete sweep request %s in %s: %s", qr_id, zone, exc)


class SweepStarted(ToolResult):
    """A sweep started as a job: poll ``get_job(job_id)``."""

    job_id: str
    provisioning_model: str
    queued_resource_id: str
    zone_budget_s: float
    message: str

    def headline(self) -> str:
        return f"sweep started as job {self.job_id}; poll get_job('{self.job_id}')"


LEASE_TTL_S = 120.0  # a sweep's lease lapses this long after its last renewal (a crashed server)


class SweepLease:
    """The "one sweep per rig" lease (a row in the zone store's ``leases`` table), renewed while the
    sweep runs and released when it ends. Renewals are throttled to one per ``ttl_s / 4``."""

    def __init__(self, store: ZoneStore, name: str, owner: str, ttl_s: float) -> None:
        self.store, self.name, self.owner, self.ttl_s = store, name, owner, ttl_s
        self._renewed = time.monotonic()

    def renew(self, job_id: str | None = None) -> None:
        if job_id is None and time.monotonic() - self._renewed < self.ttl_s / 4:
            return
        self.store.renew_lease(self.name, self.owner, self.ttl_s, job_id)
        self._renewed = time.monotonic()

    def release(self) -> None:
        self.store.release_lease(self.name, self.owner)


def check_sweep_options(settings: Settings, opts: SweepOptions) -> SweepOptions:
    """Validate every argument before a job starts (a typo must fail the call, not the job).

    Raises:
        ConfigError: an explicitly empty zone list, a malformed zone (field ``zones``), bad durations
            (see `provisioning.check_durations`).
    """
    if opts.zones is not None:
        if not opts.zones:
            raise ConfigError(
                "empty zone list", field="zones", value=[],
                fix="omit zones to try the zones with quota (best first), or list zones such as us-west4-a",
            )  # fmt: skip
        opts.zones = list(dict.fromkeys(prov.check_zone(z, "zones") for z in opts.zones))
    prov.check_durations(
        opts.provisioning_model, opts.max_run_duration_s, opts.valid_until_duration_s, settings
    )
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
        known = set(await prov.call(prov.api(settings).list_zones))
        unknown = [z for z in opts.zones if z not in known]
        if unknown:
            raise ConfigError(
                f"not a Cloud TPU location of this project: {', '.join(unknown)}",
                field="zones",
                value=unknown,
                fix="use zones from get_zones_with_available_quota (or list_queued_resources zone='all'), "
                "or omit zones",
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

    async def body(record: Any) -> SweepResult:
        try:
            return await run_sweep(settings, record, opts, lease)
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
    )
