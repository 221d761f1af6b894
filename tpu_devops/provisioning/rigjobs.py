"""The jobs that work for this rig, in this server and in the others that share its state directory.

A job that works on the rig says so with a `tpu_devops.host.jobs.Binding` made here: its scope is the
rig (`scope`: ``rig:<project>:<RESOURCE_ID>``) and its target what it works on: the rig's TPU in
general (`TPU`: a ``find_tpu`` sweep, which may create one), one queued resource (a create's wait for
ACTIVE), one node (a reconfigure) or one GKE deployment. A sweep or a create running in *another*
server is known here only by the rig lease it holds (`tpu_devops.provisioning.store`), which names its
purpose, its job id and its process.

`rig_jobs` lists both, as `RigJob`: what status, endpoint and teardown name ("a find_tpu sweep is
running as job find-tpu-1 in this server: look again in 15 s"). `end_jobs` ends this server's jobs on
something about to be deleted, with the reason as their message.
"""

from __future__ import annotations

import functools
import time

import anyio
from pydantic import BaseModel

from tpu_devops.config import Settings
from tpu_devops.host.jobs import JOBS, Binding, JobRecord
from tpu_devops.provisioning.store import SWEEP, Lease, open_store, rig_lease_name

TPU = "tpu"  # the rig's TPU, wherever it is or will be (a sweep, a create)


def scope(settings: Settings) -> str:
    """``rig:<project>:<RESOURCE_ID>``: the scope every job of this rig is bound to."""
    return f"rig:{settings.project}:{settings.resource_id}"


def queued_target(zone: str, qr_id: str) -> str:
    """The target of a job on one queued resource: ``qr:<zone>/<id>``."""
    return f"qr:{zone}/{qr_id}"


def node_target(zone: str, node_id: str) -> str:
    """The target of a job on one node: ``node:<zone>/<id>``."""
    return f"node:{zone}/{node_id}"


def gke_target(cluster: str, namespace: str) -> str:
    """The target of a job on the rig's GKE deployment: ``gke:<cluster>/<namespace>``."""
    return f"gke:{cluster}/{namespace}"


def sweep_binding(settings: Settings, poll_interval_s: float) -> Binding:
    """A ``find_tpu`` sweep: it creates the rig's TPU, so a teardown ends it first."""
    return Binding(scope(settings), TPU, "find_tpu sweep", creates=True, look_again_s=poll_interval_s)


def wait_binding(settings: Settings, zone: str, qr_id: str, poll_interval_s: float) -> Binding:
    """A create's wait for ACTIVE on ``qr_id`` in ``zone``."""
    return Binding(
        scope(settings), queued_target(zone, qr_id), "wait for ACTIVE", look_again_s=poll_interval_s
    )


def reconfigure_binding(settings: Settings, zone: str, node_id: str, expected_s: float | None) -> Binding:
    """A reconfigure of the rig's node ``node_id``: serving stops until it ends (``expected_s``)."""
    return Binding(
        scope(settings),
        node_target(zone, node_id),
        "reconfigure",
        look_again_s=min(60.0, expected_s / 8) if expected_s else 60.0,
    )


def gke_binding(settings: Settings, cluster: str, namespace: str, poll_interval_s: float) -> Binding:
    """An apply's wait for the rig's GKE pods."""
    return Binding(scope(settings), gke_target(cluster, namespace), "GKE apply", look_again_s=poll_interval_s)


class RigJob(BaseModel):
    """A job working for this rig. ``where``: "this server" or "server pid N on HOST"; ``target``: what
    it works on (`TPU`, ``qr:...``, ``node:...``, ``gke:...``); ``creates``: it may create the rig's TPU;
    ``look_again_s``: how soon to look again; ``elapsed_s``: seconds since it started."""

    job_id: str
    label: str
    target: str
    where: str
    creates: bool = False
    message: str = ""
    look_again_s: float | None = None
    elapsed_s: float | None = None
    here: bool = True

    def line(self) -> str:
        """``"find_tpu sweep find-tpu-1 (this server, 12 s): trying us-central1-a (2/5)"``."""
        took = f", {self.elapsed_s:.0f} s" if self.elapsed_s is not None else ""
        return f"{self.label} {self.job_id} ({self.where}{took}): {self.message}".rstrip(": ")

    def poll(self) -> str:
        """How to follow it: ``poll get_job('find-tpu-1')`` here, or who to ask elsewhere."""
        if self.here:
            return f"poll get_job('{self.job_id}')"
        return f"it runs in {self.where} (ask that server's get_job('{self.job_id}'))"

    def on(self, zone: str, qr_id: str) -> bool:
        """It works on queued resource ``qr_id`` in ``zone`` (or its node), or on the rig's TPU in general."""
        return self.target in (TPU, queued_target(zone, qr_id)) or self.target.startswith(f"node:{zone}/")


def _of_record(record: JobRecord) -> RigJob:
    b = record.binding
    assert b is not None
    return RigJob(
        job_id=record.id, label=b.label, target=b.target, where="this server", creates=b.creates,
        message=record.message, look_again_s=b.look_again_s, elapsed_s=round(time.time() - record.started_at, 1),
    )  # fmt: skip


def _of_lease(lease: Lease) -> RigJob:
    sweep = lease.owner.startswith(f"{SWEEP}:")
    where = "this server" if lease.held else f"server pid {lease.pid} on {lease.host}"
    return RigJob(
        job_id=lease.job_id or ("(job id not yet recorded)" if sweep else "(a create call)"),
        label="find_tpu sweep" if sweep else "create_tpu_queued_resource",
        target=TPU,
        where=where,
        creates=True,
        message="holds the rig's lease" + ("" if sweep else ": a create is being sent"),
        look_again_s=15.0 if sweep else 5.0,
        elapsed_s=round(time.time() - lease.acquired_at, 1),
        here=lease.held,
    )


def running_here(settings: Settings) -> list[JobRecord]:
    """This server's running jobs bound to the rig, oldest first."""
    return JOBS.bound(scope(settings))


async def rig_jobs(settings: Settings) -> list[RigJob]:
    """Every job working for the rig: this server's (by their binding) and a sweep or create that holds
    the rig's lease in another server sharing the state directory (or a create call of this one). A
    state directory that cannot be read leaves only this server's jobs."""
    jobs = [_of_record(r) for r in running_here(settings)]
    try:
        store = open_store(settings)
        lease = await anyio.to_thread.run_sync(store.lease_holder, rig_lease_name(settings))
    except Exception:  # an unreadable state directory: the refusal belongs to the tool that needs it
        lease = None
    if lease is not None and not any(j.job_id == lease.job_id for j in jobs):
        if not (lease.held and lease.owner.startswith(f"{SWEEP}:")):  # a sweep of ours is listed already
            jobs.append(_of_lease(lease))
    return jobs


def creating(jobs: list[RigJob]) -> list[RigJob]:
    """The jobs that may create the rig's TPU (sweeps, creates)."""
    return [j for j in jobs if j.creates]


async def end_jobs(records: list[JobRecord], reason: str, wait_s: float = 45.0) -> list[JobRecord]:
    """End this server's ``records`` (each runs its own clean-up first: a sweep deletes the request it
    waits on), concurrently, waiting up to ``wait_s`` seconds for each; ``reason`` becomes their message.
    Returns those still running after the wait."""
    async with anyio.create_task_group() as tg:
        for record in records:
            tg.start_soon(functools.partial(JOBS.end, record, reason, wait_s=wait_s))
    return [r for r in records if r.state == "running"]
