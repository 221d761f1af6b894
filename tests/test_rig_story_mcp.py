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
    env = {**exports(gcp, vllm, "demo-project"), "TPU_DEVOPS_ENV_FILE": str(state_dir / "none.env"),
           "TPU_DEVOPS_STATE_DIR": str(state_dir), **extra}  # fmt: skip
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
    """The dry run, then the deletion with its token, as a person would (again with the fresh token when
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
