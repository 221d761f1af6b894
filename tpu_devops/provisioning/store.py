"""The persisted zone-attempt store and the rig's sweep lease.

SQLite (WAL, busy timeout) at ``<state_dir>/zone_attempts.sqlite3`` so it survives restarts and is
shared by concurrent servers. It also holds the rig lease (table ``leases``): one `find_tpu` sweep or
one create per rig at a time, across every server sharing the state directory, so two of them can never
each create a TPU in a different zone (servers with separate state directories rely on the re-check
after every create, `tpu_devops.provisioning.queued`). After every attempt it renders ``<state_dir>/tpu_zones_status.md``
for people. Capacity and quota failures expire (`EXPIRY_S`); unsupported-model failures never do.

The rig's teardown fence (table ``rig_fences``, `Fence`): a confirmed teardown raises the rig's
``epoch``; every sweep and create reads the epoch when it starts and re-checks it, atomically, as it
enters each create (`ZoneStore.begin_create`, which also marks the create as in flight until
`ZoneStore.end_create`). So no create that began before a teardown is sent after it, in any server
sharing the state directory, and the teardown can wait out the one create that was already on its way
(`wait_out_create`) before it lists what to delete. A new create, started after the teardown, reads
the new epoch and goes ahead.
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

from tpu_devops.config import Settings
from tpu_devops.errors import ConfigError, JobError
from tpu_devops.host.sqlite import connect

# How long a failure blocks a zone (seconds). None: forever.
EXPIRY_S: dict[str, float | None] = {
    "zone": 2 * 3600,
    "region": 3600,
    "model": None,
    "transient": 600,
    "config": 0,
}


DB_NAME = "zone_attempts.sqlite3"


STATUS_NAME = "tpu_zones_status.md"


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

    @classmethod
    def from_row(cls, name: str, row: tuple[Any, ...], *, held: bool = False) -> Lease:
        """The lease named ``name`` from a ``(owner, host, pid, job_id, acquired_at, expires_at)`` row."""
        owner, host, pid, job_id, acquired_at, expires_at = row
        return cls(name, owner, host, pid, job_id, acquired_at, expires_at, held)


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


CREATE_SECTION_MAX_S = 120.0  # a create in flight longer than this is taken as abandoned (a hung server)
# A create sent by a server that died may still land (the request was on its way): how long a teardown
# watches for it to appear before taking it as never sent.
CREATE_LANDING_S = 30.0


@dataclass(frozen=True)
class Fence:
    """A rig's teardown fence. ``epoch``: how many teardowns were confirmed (0: none); ``fenced_at`` (Unix
    seconds) and ``fenced_by`` (who, in words): the last one. ``creating_*``: the create in flight, if any."""

    name: str
    epoch: int = 0
    fenced_at: float | None = None
    fenced_by: str | None = None
    creating_owner: str | None = None
    creating_host: str | None = None
    creating_pid: int | None = None
    creating_since: float | None = None
    creating_target: str | None = None  # "zone/queued resource id" being created

    def may_still_land(self, now: float | None = None) -> bool:
        """A create was entered less than `CREATE_LANDING_S` ago by a process that is gone (it died between
        sending the create and leaving): the request may still appear at ``creating_target``."""
        if not self.creating_owner or self.creating_since is None or not self.creating_target:
            return False
        now = time.time() if now is None else now
        return now - self.creating_since < CREATE_LANDING_S and not self.create_in_flight(now)

    def create_in_flight(self, now: float | None = None) -> bool:
        """A create is between `ZoneStore.begin_create` and `ZoneStore.end_create`, in a process that is
        not known to be gone, for less than `CREATE_SECTION_MAX_S`."""
        if not self.creating_owner or self.creating_since is None:
            return False
        now = time.time() if now is None else now
        if now - self.creating_since > CREATE_SECTION_MAX_S:
            return False
        return _alive(self.creating_host or "", int(self.creating_pid or 0))

    def when(self) -> str:
        """``"2026-11-02 10:15:03 UTC by destroy_queued_resource in server pid 123"``."""
        at = (
            datetime.fromtimestamp(self.fenced_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            if self.fenced_at
            else "?"
        )
        return f"{at} by {self.fenced_by or 'a teardown'}"


def _fence_row(db: sqlite3.Connection, name: str) -> Fence:
    row = db.execute(
        "SELECT epoch, fenced_at, fenced_by, creating_owner, creating_host, creating_pid, creating_since,"
        " creating_target FROM rig_fences WHERE name = ?",
        (name,),
    ).fetchone()
    return Fence(name) if row is None else Fence(name, *row)


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
            db.execute(
                "CREATE TABLE IF NOT EXISTS rig_fences (name TEXT PRIMARY KEY, epoch INTEGER NOT NULL,"
                " fenced_at REAL, fenced_by TEXT, creating_owner TEXT, creating_host TEXT, creating_pid INTEGER,"
                " creating_since REAL, creating_target TEXT)"
            )

    def _connect(self) -> sqlite3.Connection:
        return connect(self.path)

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
                    holder = Lease.from_row(name, row, held=False)
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

    def lease_holder(self, name: str) -> Lease | None:
        """Who holds the lease ``name`` now (unexpired, its process not known to be gone), else None.
        ``held`` is True when it is a lease of this process."""
        with self._connect() as db:
            row = db.execute(
                "SELECT owner, host, pid, job_id, acquired_at, expires_at FROM leases WHERE name = ?", (name,)
            ).fetchone()
        if row is None:
            return None
        lease = Lease.from_row(name, row)
        if lease.expires_at <= time.time() or not _alive(lease.host, lease.pid):
            return None
        mine = lease.host == socket.gethostname() and lease.pid == os.getpid()
        return Lease.from_row(name, row, held=mine)

    # ---- the rig's teardown fence (module docstring) ----

    def fence(self, name: str) -> Fence:
        """The fence of ``name`` now (epoch 0 when no teardown was ever confirmed)."""
        with self._connect() as db:
            return _fence_row(db, name)

    def raise_fence(self, name: str, by: str) -> Fence:
        """A confirmed teardown: the next epoch of ``name`` (``by``: who, in words). Returns the new fence,
        with the create that was in flight at that moment (if any) in its ``creating_*`` fields."""
        now = time.time()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                old = _fence_row(db, name)
                db.execute(
                    "INSERT INTO rig_fences (name, epoch, fenced_at, fenced_by) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(name) DO UPDATE SET epoch = excluded.epoch, fenced_at = excluded.fenced_at,"
                    " fenced_by = excluded.fenced_by",
                    (name, old.epoch + 1, now, by),
                )
                new = _fence_row(db, name)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return new

    def begin_create(self, name: str, owner: str, epoch: int, target: str | None = None) -> Fence | None:
        """Enter a create of ``name`` that began at ``epoch``: None (go ahead; it is marked in flight for
        ``owner``) unless a teardown raised the fence since, then that `Fence` (do not create). Atomic
        with `raise_fence` across processes. ``target``: see `sending`."""
        now = time.time()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                current = _fence_row(db, name)
                if current.epoch != epoch:
                    db.execute("COMMIT")
                    return current
                db.execute(
                    "INSERT INTO rig_fences (name, epoch, creating_owner, creating_host, creating_pid, creating_since,"
                    " creating_target) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET"
                    " creating_owner = excluded.creating_owner, creating_host = excluded.creating_host,"
                    " creating_pid = excluded.creating_pid, creating_since = excluded.creating_since,"
                    " creating_target = excluded.creating_target",
                    (name, epoch, owner, socket.gethostname(), os.getpid(), now, target),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return None

    def sending(self, name: str, owner: str, target: str) -> None:
        """The create ``owner`` entered is being sent now, making ``target`` ("zone/id"): if its server
        dies from here on, the request may still land there (`Fence.may_still_land`)."""
        with self._connect() as db:
            db.execute(
                "UPDATE rig_fences SET creating_target = ?, creating_since = ? WHERE name = ? AND creating_owner = ?",
                (target, time.time(), name, owner),
            )

    def end_create(self, name: str, owner: str) -> None:
        """Leave the create ``owner`` entered with `begin_create` (no-op when it is not the one in flight)."""
        with self._connect() as db:
            db.execute(
                "UPDATE rig_fences SET creating_owner = NULL, creating_host = NULL, creating_pid = NULL,"
                " creating_since = NULL, creating_target = NULL WHERE name = ? AND creating_owner = ?",
                (name, owner),
            )

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


LEASE_TTL_S = 120.0  # a lease lapses this long after its last renewal (a crashed server)


CREATE_LEASE_WAIT_S = (
    20.0  # how long a create or sweep waits for another create's lease (a create takes seconds)
)


SWEEP, CREATE = "sweep", "create"


def rig_lease_name(settings: Settings) -> str:
    """The lease every create and sweep of this rig takes: ``rig:<project>:<RESOURCE_ID>``."""
    return f"rig:{settings.project}:{settings.resource_id}"


class RigLease:
    """The rig's lease (a row in the zone store's ``leases`` table), held by one sweep or one create at a
    time across every server sharing the state directory, renewed while its holder runs and released when
    it ends. Renewals are throttled to one per ``ttl_s / 4``. ``purpose``: `SWEEP` or `CREATE`."""

    def __init__(self, store: ZoneStore, name: str, owner: str, ttl_s: float) -> None:
        self.store, self.name, self.owner, self.ttl_s = store, name, owner, ttl_s
        self._renewed = time.monotonic()

    @property
    def purpose(self) -> str:
        return self.owner.split(":", 1)[0]

    def renew(self, job_id: str | None = None) -> None:
        if job_id is None and time.monotonic() - self._renewed < self.ttl_s / 4:
            return
        self.store.renew_lease(self.name, self.owner, self.ttl_s, job_id)
        self._renewed = time.monotonic()

    def release(self) -> None:
        self.store.release_lease(self.name, self.owner)


def _holder_error(settings: Settings, holder: Lease, purpose: str) -> JobError:
    """The refusal naming who holds the rig's lease and how to get past it."""
    here = holder.pid == os.getpid() and holder.host == socket.gethostname()
    where = "this server" if here else f"server pid {holder.pid} on {holder.host}"
    rig = settings.resource_id
    doing = "a create" if purpose == CREATE else "a sweep"
    if holder.owner.startswith(f"{SWEEP}:"):
        job = holder.job_id or "(job id not yet recorded)"
        return JobError(
            f"a sweep for rig '{rig}' is already running as job {job} in {where}; {doing} now could leave "
            "two TPUs billing",
            field="find_tpu" if purpose == SWEEP else "queued_resource_id",
            value=rig,
            fix=f"poll get_job('{job}') until it ends, or cancel_job('{job}') first"
            + ("" if here else " (in that server)"),
        )
    return JobError(
        f"another create for rig '{rig}' has been running in {where} for over {CREATE_LEASE_WAIT_S:.0f} s; "
        f"{doing} now could leave two TPUs billing",
        field="find_tpu" if purpose == SWEEP else "queued_resource_id",
        value=rig,
        fix="wait a minute and try again (describe_queued_resource shows what it created)",
    )


async def acquire_rig_lease(
    settings: Settings, store: ZoneStore, purpose: str, ttl_s: float = LEASE_TTL_S
) -> RigLease:
    """Take this rig's lease for a `SWEEP` or a `CREATE`, waiting up to `CREATE_LEASE_WAIT_S` while
    another *create* holds it (a create takes seconds); a running sweep refuses at once.

    Raises:
        JobError: the lease is held by a sweep (the message names its job id and server) or by a create
            that did not finish within `CREATE_LEASE_WAIT_S`.
    """
    import uuid

    import anyio

    name, owner = rig_lease_name(settings), f"{purpose}:{uuid.uuid4().hex}"
    deadline = time.monotonic() + CREATE_LEASE_WAIT_S
    while True:
        holder = await anyio.to_thread.run_sync(store.acquire_lease, name, owner, ttl_s)
        if holder is None or holder.held:
            return RigLease(store, name, owner, ttl_s)
        if holder.owner.startswith(f"{SWEEP}:") or time.monotonic() >= deadline:
            raise _holder_error(settings, holder, purpose)
        await anyio.sleep(0.2)


class FencedError(JobError):
    """A create (or a sweep's next create) that began before the rig's latest confirmed teardown: refused,
    nothing was created. ``fence``: that teardown."""

    def __init__(
        self,
        fence: Fence,
        message: str,
        *,
        field: str | None = None,
        value: Any = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, field=field, value=value, fix=fix)
        self.fence = fence


def fenced_error(settings: Settings, fence: Fence, doing: str) -> FencedError:
    """The refusal of a create (``doing``: "this sweep", "this create") that began before the rig's
    latest confirmed teardown."""
    return FencedError(
        fence,
        f"rig '{settings.resource_id}' was torn down ({fence.when()}) after {doing} began: nothing was "
        f"created, and {doing} stopped (a teardown ends what would undo it)",
        field="RESOURCE_ID",
        value=settings.resource_id,
        fix="call create_tpu_queued_resource or find_tpu again if you want a TPU now",
    )


async def wait_out_create(store: ZoneStore, name: str, timeout_s: float = CREATE_SECTION_MAX_S) -> Fence:
    """After `ZoneStore.raise_fence`: wait (polling every 0.1 s, at most ``timeout_s``) until no create of
    ``name`` is in flight (`Fence.create_in_flight`), so that whatever it made is there to be listed.
    Returns the fence as last read (``create_in_flight()`` still True only when the wait timed out)."""
    import anyio

    deadline = time.monotonic() + timeout_s
    while True:
        fence = await anyio.to_thread.run_sync(store.fence, name)
        if not fence.create_in_flight() or time.monotonic() >= deadline:
            return fence
        await anyio.sleep(0.1)
