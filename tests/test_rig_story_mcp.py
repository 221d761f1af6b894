"""One rig, one story, through the official MCP client against what ``python -m tests.fakes.gcp`` runs
(`tests.fakes.gcp.__main__.build`, here with ``--script us-west4-a=stockout --timings 1,3,1``): a
teardown during a ``find_tpu`` sweep ends the sweep and nothing is created after it; status and endpoint
name the running sweep instead of inviting a second create; a teardown from a second server process
sharing the state directory ends the first one's sweep too; two sweeps never run at once; a create
killed between its firewall rule and its request leaves nothing a teardown cannot clear.

Waits are on conditions (the fake's state, a job's state), bounded by generous deadlines, never on
fixed sleeps.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes.gcp.__main__ import build, exports
from tests.mcp_session import mcp_client
from tests.test_provisioning_mcp import call, wait_job

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedSecretTokenDoNotLeak4242abcd"
RIG, ZONE = "gemma4-e2b", "us-west4-a"
LIVE = ("ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE", "CREATING")


@contextlib.contextmanager
def fake_cloud(*script: str, timings: str = "1,3,1", vm: bool = False) -> Any:
    """The fake as ``python -m tests.fakes.gcp --script ... --timings ...`` starts it (``vm``: a simulated
    TPU VM per node, else one fake vLLM)."""
    args = argparse.Namespace(
        port=0, project="demo-project", script=list(script), timings=timings, latency=0.0, secret=False,
        no_vllm=False, no_vm=not vm, boot_s=0.5,
    )  # fmt: skip
    gcp, vllm = build(args)
    try:
        yield gcp, vllm
    finally:
        if vllm is not None:
            vllm.stop()
        if getattr(gcp, "fleet", None) is not None:
            gcp.fleet.close()
        gcp.stop()


@contextlib.asynccontextmanager
async def session(gcp: Any, vllm: Any, state_dir: Path, **extra: str) -> AsyncIterator[Any]:
    # the operator's standing permission: these stories are about what a teardown ends, not who approves it
    env = {**exports(gcp, vllm, "demo-project"), "TPU_DEVOPS_ENV_FILE": str(state_dir / "none.env"),
           "TPU_DEVOPS_STATE_DIR": str(state_dir), "TPU_DEVOPS_UNATTENDED_DELETE": RIG, **extra}  # fmt: skip
    with open(state_dir / "server-stderr.log", "a") as errlog:
        async with mcp_client(errlog=errlog, **env) as client:
            yield client


def live_of_rig(gcp: Any) -> list[tuple[str, str, str]]:
    """(zone, id, state) of every queued resource of the rig that holds or will hold a TPU."""
    out = []
    for (zone, qr_id), rec in list(gcp.tpu.queued.items()):
        state = gcp.tpu.state_of(zone, qr_id)
        labels = rec.body["tpu"]["nodeSpec"][0]["node"].get("labels", {})
        if labels.get("rig") == RIG and state in LIVE:
            out.append((zone, qr_id, state))
    return sorted(out)


async def until(check: Callable[[], Any], timeout_s: float = 60) -> Any:
    """Wait until ``check()`` is truthy (a bound for a stuck system, not a speed assertion)."""
    with anyio.fail_after(timeout_s):
        while not (value := check()):
            await anyio.sleep(0.02)
    return value


async def confirmed_teardown(client: Any, **args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dry run, then the deletion with its token, as a model under the standing permission does (again with the fresh token when
    what would be deleted changed in between: a sweep moves on); then the teardown's follow-up job, if
    it left one (a request that was PROVISIONING), to its end."""
    for _ in range(5):
        plan = await call(client, "destroy_queued_resource", args)
        if not plan.get("confirm_token"):
            return plan, plan
        done = await client.call_tool(
            "destroy_queued_resource", {**args, "confirm": True, "confirm_token": plan["confirm_token"]}
        )
        if not done.is_error:
            out = done.structured_content
            if out.get("follow_up_job_id"):
                follow = await wait_job(client, out["follow_up_job_id"])
                assert follow["state"] == "succeeded", follow
            return plan, out
        assert "has changed since that dry run" in done.content[0].text, done.content[0].text
    raise AssertionError("the plan kept changing")


async def test_a_teardown_during_a_sweep_ends_it_and_nothing_is_created_after(tmp_path) -> None:
    """The issue's reproduction: find_tpu(poll_interval_s=1, zone_budget_s=20) on a us-west4-a that stocks
    out; while its request waits there, status and endpoint name the sweep; the teardown's dry run lists
    the sweep as a job it ends first; confirmed, it ends the sweep, no create is sent after it, and no TPU
    of the rig is left in any zone, nor its firewall rule."""
    with fake_cloud("us-west4-a=stockout") as (gcp, vllm):
        async with session(gcp, vllm, tmp_path) as client:
            await call(client, "save_hf_token", {"token": TOKEN})
            started = await call(client, "find_tpu", {"poll_interval_s": 1, "zone_budget_s": 20})
            job_id = started["job_id"]
            await until(lambda: gcp.tpu.state_of(ZONE, RIG) in ("ACCEPTED", "WAITING_FOR_RESOURCES"))

            status = await call(client, "describe_queued_resource", {})
            text = status["summary"]
            assert job_id in text and "create it" not in text, text
            assert "look again in 1 s" in status["next_step"] and status["jobs_running"], status
            endpoint = await call(client, "get_vllm_endpoint", {})
            assert endpoint["status"] in ("pending", "not_ready") and job_id in endpoint["next_step"], (
                endpoint
            )
            assert "create one" not in endpoint["next_step"]
            dashboard = await call(client, "check_setup", {"view": "status"})
            assert any(j["job_id"] == job_id for j in dashboard["jobs_running"]), dashboard

            plan, done = await confirmed_teardown(client)
            assert plan["steps"][0]["action"] == "end_job" and job_id in plan["steps"][0]["target"], plan
            assert job_id in plan["summary"]
            creates_at_teardown = len(gcp.tpu.creates())
            assert done["executed"] and "DELETED" in done["summary"], done
            assert all(s["done"] for s in done["steps"]), done["steps"]

            job = await wait_job(client, job_id)
            assert job["state"] == "cancelled" and "torn down" in job["message"], job
            assert live_of_rig(gcp) == [] and len(gcp.tpu.creates()) == creates_at_teardown
            listing = await call(client, "list_queued_resources", {"zone": "all", "only_ours": True})
            assert not [q for q in listing.get("queued_resources", []) if q["state"] in LIVE], listing
            again = await call(client, "destroy_queued_resource", {})
            assert "nothing of rig" in again["summary"] and gcp.compute.firewalls == {}, again
            # a new create asks for a TPU again: it is not fenced
            fresh = await call(client, "create_tpu_queued_resource", {"provisioning_model": "spot"})
            assert fresh["created"], fresh


async def test_a_teardown_from_a_second_server_ends_the_first_ones_sweep(tmp_path) -> None:
    """Two server processes share the state directory: the second one's dry run names the first one's
    sweep (by the rig lease), and its confirmed teardown fences it: the sweep stops before its next
    create and says why; nothing of the rig is left."""
    with fake_cloud("us-west4-a=stockout") as (gcp, vllm):
        gcp.secrets.put("hf-token", TOKEN)
        async with session(gcp, vllm, tmp_path) as one, session(gcp, vllm, tmp_path) as two:
            started = await call(one, "find_tpu", {"poll_interval_s": 0.2, "zone_budget_s": 20})
            await until(lambda: gcp.tpu.state_of(ZONE, RIG) in ("ACCEPTED", "WAITING_FOR_RESOURCES"))
            status = await call(two, "describe_queued_resource", {})
            assert "server pid" in status["next_step"] and "find_tpu sweep" in status["next_step"], status
            plan, done = await confirmed_teardown(two)
            ends = [s for s in plan["steps"] if s["action"] == "end_job"]
            assert ends and "server pid" in ends[0]["zone"], plan
            assert done["executed"], done
            job = await wait_job(one, started["job_id"])
            assert job["state"] == "failed" and job["result"]["outcome"] == "torn_down", job
            assert "torn down" in job["message"] or "deleted while it waited" in job["message"], job
            await anyio.sleep(0)  # the sweep has ended: nothing of it can act any more
            assert live_of_rig(gcp) == [] and gcp.compute.firewalls == {}


async def test_two_sweeps_never_run_at_once_and_status_names_the_one_that_runs(tmp_path) -> None:
    with fake_cloud("us-west4-a=wait", timings="0,0,0") as (gcp, vllm):
        gcp.secrets.put("hf-token", TOKEN)
        async with session(gcp, vllm, tmp_path) as one, session(gcp, vllm, tmp_path) as two:
            args = {"poll_interval_s": 0.2, "zone_budget_s": 600, "zones": ["us-west4-a"]}
            started = await call(one, "find_tpu", args)
            for client in (one, two):
                second = await client.call_tool("find_tpu", args)
                assert second.is_error and started["job_id"] in second.content[0].text
            await until(lambda: gcp.tpu.state_of(ZONE, RIG) == "WAITING_FOR_RESOURCES")
            assert len(gcp.tpu.creates()) == 1
            cancelled = await call(one, "cancel_job", {"job_id": started["job_id"]})
            assert cancelled["state"] == "cancelled" and live_of_rig(gcp) == []


async def _booted(gcp: Any, zone: str = ZONE) -> Any:
    def ready() -> Any:
        vm = gcp.fleet.vm(zone, RIG)
        assert not gcp.fleet.errors, gcp.fleet.errors
        stage = gcp.tpu.guest_attributes.get((zone, RIG), {}).get("tpu-devops/stage")
        return vm if vm and stage == "watcher-started" else None

    return await until(ready, timeout_s=120)


@pytest.mark.skipif(__import__("tests.fakes.vm", fromlist=["unusable"]).unusable() is not None,
                    reason="the simulated TPU VM needs network namespaces")  # fmt: skip
async def test_a_teardown_during_a_reconfigure_ends_it_here_and_elsewhere(tmp_path) -> None:
    """A reconfigure whose new flags never become healthy is running. In another server (sharing the state
    directory) a teardown deletes the TPU: the reconfigure job ends at once saying the node is gone (it
    used to retry "nodes/gemma4-e2b was not found" for 7,200 s). In the same server, the teardown's dry run
    lists the reconfigure as a job it ends first, and ends it."""
    with fake_cloud(timings="0,0,0", vm=True) as (gcp, vllm):
        gcp.secrets.put("hf-token", TOKEN)
        async with session(gcp, vllm, tmp_path) as one, session(gcp, vllm, tmp_path) as two:
            for round_ in ("elsewhere", "here"):
                created = await call(one, "create_tpu_queued_resource", {"provisioning_model": "spot"})
                assert created["created"], created
                vm = await _booted(gcp)
                vm.script({"boot_s": 0.2, "engines": [{"match": "--max-model-len 8192", "healthy": False}]})
                started = await call(one, "reconfigure_vllm", {"max_model_len": 8192})
                job_id = started["job_id"]
                status = await call(one, "describe_queued_resource", {})
                assert job_id in status["next_step"] and "reconfigure" in status["next_step"], status
                endpoint = await call(one, "get_vllm_endpoint", {})
                assert endpoint["status"] == "discovered" and job_id in endpoint["next_step"], endpoint
                if round_ == "elsewhere":
                    plan, done = await confirmed_teardown(two)
                    assert done["executed"], done
                    job = await wait_job(one, job_id)
                    assert job["state"] == "failed" and job["result"]["outcome"] == "gone", job
                    assert "is gone" in job["message"], job
                else:
                    plan, done = await confirmed_teardown(one)
                    ends = [s for s in plan["steps"] if s["action"] == "end_job"]
                    assert ends and job_id in ends[0]["target"], plan["steps"]
                    job = await wait_job(one, job_id)
                    assert job["state"] == "cancelled" and "torn down" in job["message"], job
                assert live_of_rig(gcp) == [] and gcp.compute.firewalls == {}


async def test_engine_status_of_a_one_chip_rig_is_one_healthy_engine(tmp_path) -> None:
    with fake_cloud(timings="0,0,0") as (gcp, vllm):
        gcp.secrets.put("hf-token", TOKEN)
        async with session(gcp, vllm, tmp_path) as client:
            await call(client, "create_tpu_queued_resource", {"provisioning_model": "spot"})
            health = await call(client, "verify_model_health", {"check_tool_calling": False})
            assert health["healthy"] is True, health
            engines = await call(client, "get_serving_status", {"view": "engines"})
            assert sum(e["healthy"] for e in engines["engines"]) == len(engines["engines"]) == 1, engines
            assert engines["engines"][0]["healthy"] and "DOWN" not in engines["summary"], engines


def _fence_epoch(state_dir: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(state_dir / "zone_attempts.sqlite3")) as db:
        row = db.execute("SELECT epoch FROM rig_fences").fetchone()
    return int(row[0]) if row else 0


def _creating_pid(state_dir: Path) -> int | None:
    import sqlite3

    path = state_dir / "zone_attempts.sqlite3"
    if not path.exists():
        return None
    with contextlib.closing(sqlite3.connect(path)) as db:
        try:
            row = db.execute("SELECT creating_pid FROM rig_fences").fetchone()
        except sqlite3.OperationalError:
            return None
    return row[0] if row and row[0] else None


@pytest.mark.parametrize("kill_at", ["after the firewall rule", "with the create on its way"])
async def test_a_server_killed_in_a_create_leaves_nothing_a_teardown_cannot_clear(tmp_path, kill_at) -> None:
    """SIGKILL of the server between its firewall rule and its request, or with the request in transit
    (the fake holds it until after the next dry run). A new server's teardown (same state directory)
    clears whatever is there: the rule alone, or the request that lands after the crash and then the rule;
    it never deletes the rule while that request may still land."""
    import os
    import signal

    transit = kill_at == "with the create on its way"
    with fake_cloud(timings="0,0,0") as (gcp, vllm):
        gcp.secrets.put("hf-token", TOKEN)
        gcp.tpu.latency_s = 1.0  # slow TPU calls: the kill comes between the rule and the request
        gcp.tpu.hold_creates(transit)
        with contextlib.suppress(Exception):  # the client's transport breaks when its server is killed
            async with session(gcp, vllm, tmp_path) as one:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(one.call_tool, "create_tpu_queued_resource", {"provisioning_model": "spot"})
                    pid = await until(lambda: gcp.compute.firewalls and _creating_pid(tmp_path))
                    if transit:
                        await until(lambda: gcp.tpu.creates())
                    os.kill(pid, signal.SIGKILL)
                    tg.cancel_scope.cancel()
        gcp.tpu.latency_s = 0.0
        assert gcp.compute.firewalls  # the rule was made before the request
        async with session(gcp, vllm, tmp_path) as two:

            async def land_late() -> None:
                """The request lands only once the confirmed teardown (its plan made, the rig fenced) either
                watches for it, or has listed every zone after the fence: too late for it to be seen."""
                await until(lambda: _fence_epoch(tmp_path) > 0)
                seen = len(gcp.tpu.requests)

                def watched_or_listed() -> bool:
                    after = [r for r in gcp.tpu.requests[seen:] if r["method"] == "GET"]
                    if any(r["path"].endswith(f"/queuedResources/{RIG}") for r in after):
                        return True
                    return sum(r["path"].endswith("/queuedResources") for r in after) >= len(gcp.tpu.zones)

                await until(watched_or_listed)
                gcp.tpu.hold_creates(False)

            async with anyio.create_task_group() as tg:
                tg.start_soon(land_late)
                plan, done = await confirmed_teardown(two)
            assert done["executed"], done
            if transit:  # the plan saw only the rule; the request landed after it, and went too
                assert [s["action"] for s in plan["steps"]] == ["delete_firewall_rule"], plan["steps"]
                assert gcp.tpu.creates() and done["summary"].startswith("DELETED 1"), done["summary"]
            assert live_of_rig(gcp) == [] and gcp.compute.firewalls == {}, (live_of_rig(gcp), done)
