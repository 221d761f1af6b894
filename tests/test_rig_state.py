"""The rig's one state and the jobs bound to it (`tpu_devops.provisioning.rig`, `rigjobs`), in process against
the fake: what status reads, how a sweep reacts to a teardown it cannot see (another state directory), a
create whose firewall rule vanishes, a wait for ACTIVE whose TPU is deleted, and a scoped teardown that
ends only the jobs on what it deletes."""

from __future__ import annotations

import anyio
import pytest
from mcp.server.elicitation import AcceptedElicitation

from tpu_devops.errors import CloudError, NotFoundError
from tpu_devops.host.confirmation import NotAsked
from tpu_devops.host.jobs import JOBS, JobRecord
from tpu_devops.provisioning import access, rig, rigjobs, teardown
from tpu_devops.provisioning.cloud import api, call
from tpu_devops.provisioning.queued import create_queued_resource
from tpu_devops.provisioning.store import SWEEP, open_store, rig_lease_name
from tpu_devops.provisioning.sweep import SweepOptions, run_sweep, start_sweep

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"
RIG, ZONE = "gemma4-e2b", "us-west4-a"
NO_ELICITATION = AcceptedElicitation(data=NotAsked(reason="no elicitation"))


def _opts(zones: list[str], budget: float = 600) -> SweepOptions:
    return SweepOptions("spot", zones, budget, 0.02, 10, None, None)


async def _until(check, timeout_s: float = 30):
    with anyio.fail_after(timeout_s):
        while not (value := check()):
            await anyio.sleep(0.02)
    return value


async def _destroy(settings, **kw):
    """destroy_queued_resource under the operator's standing permission for the rig (what these tests
    are about is what a teardown ends, not who approves it: tests/test_teardown.py)."""
    args = {"zone": None, "queued_resource_id": None, "only_failed": False, "dry_run": None, "confirm": False,
            "confirm_token": None}  # fmt: skip
    allowed = settings.model_copy(update={"unattended_delete": True})
    return await teardown.destroy_confirmed(allowed, NO_ELICITATION, **(args | kw))


async def test_the_rig_state_names_this_servers_jobs_and_another_servers_sweep(
    fake_gcp, gcp_settings
) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script(ZONE, "wait")
    started = await start_sweep(gcp_settings, _opts([ZONE]))
    await _until(lambda: fake_gcp.tpu.state_of(ZONE, RIG) == "WAITING_FOR_RESOURCES")
    state = await rig.rig_state(gcp_settings, access=True)
    assert [(q.zone, q.state) for q in state.live] == [(ZONE, "WAITING_FOR_RESOURCES")]
    assert [(j.job_id, j.label, j.where, j.creates) for j in state.jobs] == [
        (started.job_id, "find_tpu sweep", "this server", True)
    ]
    assert started.job_id in (state.in_flight() or "") and "look again in 0 s" not in state.in_flight()
    assert state.firewall is not None and state.firewall.exists and "API key secret" in (state.api_key or "")
    await JOBS.cancel(started.job_id)
    # a sweep of another server sharing the state directory (here: another host) is known by its rig lease
    import sqlite3
    import time

    store = open_store(gcp_settings)
    with sqlite3.connect(store.path) as db:
        db.execute(
            "INSERT INTO leases (name, owner, host, pid, job_id, acquired_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rig_lease_name(gcp_settings), f"{SWEEP}:other", "other-host", 4242, "find-tpu-9", time.time(), time.time() + 60),
        )  # fmt: skip
    jobs = await rigjobs.rig_jobs(gcp_settings)
    assert [(j.job_id, j.creates, j.here, j.where) for j in jobs] == [
        ("find-tpu-9", True, False, "server pid 4242 on other-host")
    ]
    status = await rig.reservation_status(gcp_settings)
    assert (
        not status.exists
        and "server pid 4242" in status.next_step
        and "do not create another" in status.next_step
    )


async def test_a_sweep_whose_request_is_deleted_under_it_stops_instead_of_creating_elsewhere(
    fake_gcp, gcp_settings
) -> None:
    """A teardown from a server with another state directory cannot fence this sweep; the deleted request
    says it all the same (Google marks a failed request FAILED, it does not remove it)."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script(ZONE, "wait")
    record = JobRecord(id="t", kind="find-tpu", description="")
    async with anyio.create_task_group() as tg:
        out: list = []

        async def sweep() -> None:
            out.append(await run_sweep(gcp_settings, record, _opts([ZONE, "us-central1-a"])))

        tg.start_soon(sweep)
        await _until(lambda: fake_gcp.tpu.state_of(ZONE, RIG) == "WAITING_FOR_RESOURCES")
        await call(api(gcp_settings).delete_queued_resource, ZONE, RIG, force=True)
    result = out[0]
    assert result.outcome == "torn_down" and "deleted while it waited" in result.stopped_because, result
    assert [c["zone"] for c in fake_gcp.tpu.creates()] == [ZONE]  # nothing in the next zone


async def test_the_sweep_puts_the_rule_back_before_each_create(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script(ZONE, "stockout")
    name = access.rule_name(RIG)

    def drop_rule(rec) -> None:  # someone deletes the rule while the first zone's request is out
        if rec.zone == ZONE:
            fake_gcp.compute.firewalls.pop(name, None)

    fake_gcp.tpu.on_create(drop_rule)
    started = await start_sweep(gcp_settings, _opts([ZONE, "us-central1-a"]))
    job = JOBS.get(started.job_id)
    await _until(lambda: job.state != "running")
    assert job.state == "succeeded" and job.result["zone"] == "us-central1-a", job.snapshot()
    assert name in fake_gcp.compute.firewalls  # the TPU has its rule


async def test_a_create_whose_rule_vanishes_is_withdrawn(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.on_create(lambda rec: fake_gcp.compute.firewalls.clear())
    with pytest.raises(CloudError) as err:
        await create_queued_resource(gcp_settings, provisioning_model="spot")
    assert err.value.field == "firewall_rule" and "deleted again at once" in err.value.message
    assert fake_gcp.tpu.state_of(ZONE, RIG) in (None, "DELETING")


async def test_a_wait_for_active_ends_saying_so_when_its_tpu_is_deleted(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script(ZONE, "wait")
    created = await rig.create_with_optional_wait(
        gcp_settings, wait=True, wait_timeout_s=600, poll_interval_s=0.02, provisioning_model="spot"
    )
    job = JOBS.get(created.wait_job_id)
    assert job.binding and job.binding.target == f"qr:{ZONE}/{RIG}"
    await _until(lambda: job.progress.get("state") == "WAITING_FOR_RESOURCES")
    await call(api(gcp_settings).delete_queued_resource, ZONE, RIG, force=True)
    await _until(lambda: job.state != "running")
    assert job.state == "failed" and "was deleted while this job waited" in job.message, job.snapshot()
    assert isinstance(job.exception, NotFoundError)


async def test_a_teardown_ends_the_wait_and_a_scoped_one_ends_only_what_it_deletes(
    fake_gcp, gcp_settings
) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script(ZONE, "wait")
    created = await rig.create_with_optional_wait(
        gcp_settings, wait=True, wait_timeout_s=600, poll_interval_s=0.02, provisioning_model="spot"
    )
    wait = JOBS.get(created.wait_job_id)
    # a teardown of another zone deletes nothing of this request: its wait is left running, and named
    other = await _destroy(gcp_settings, zone="us-east1-b")
    assert not other.steps and wait.state == "running"
    plan = await _destroy(gcp_settings)
    assert [s.action for s in plan.steps] == ["end_job", "delete_queued_resource", "delete_firewall_rule"]
    assert plan.steps[0].target == f"{wait.id} (wait for ACTIVE)" and "would end job(s)" in plan.headline()
    done = await _destroy(gcp_settings, confirm=True, confirm_token=plan.confirm_token)
    assert done.executed and all(s.done for s in done.steps), done.render_text()
    assert wait.state == "cancelled" and "torn down" in wait.message
    assert fake_gcp.tpu.state_of(ZONE, RIG) is None and fake_gcp.compute.firewalls == {}
