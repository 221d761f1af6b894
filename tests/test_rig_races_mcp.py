"""Races and faults between real server processes: two `server.py` processes driven by
the official MCP client over stdio against one fake Google Cloud, sharing a state directory (the rig
lease serialises them) or each with its own (only the re-check after every create protects them).

Each scenario runs `TRIALS` times (``RIG_RACE_TRIALS`` in the environment raises it for a longer run)
and the goal figure is the same for all: second TPUs 0, i.e. never two live queued resources of the rig.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from typing import Any

import anyio
import pytest

from tests.test_provisioning_mcp import TOKEN, call, server, wait_job

pytestmark = pytest.mark.anyio
TRIALS = int(os.environ.get("RIG_RACE_TRIALS", "4"))
RIG = "gemma4-e2b"


def live_of_rig(fake_gcp: Any) -> list[tuple[str, str]]:
    """(zone, id) of every queued resource labelled for the rig that holds or will hold a TPU."""
    out = []
    for (zone, qr_id), rec in list(fake_gcp.tpu.queued.items()):
        state = fake_gcp.tpu.state_of(zone, qr_id)
        labels = rec.body["tpu"]["nodeSpec"][0]["node"].get("labels", {})
        if labels.get("rig") == RIG and state not in (None, "FAILED", "SUSPENDED", "SUSPENDING", "DELETING"):
            out.append((zone, qr_id))
    return sorted(out)


def _reset(fake_gcp: Any) -> None:
    fake_gcp.tpu.queued.clear()
    fake_gcp.tpu.nodes.clear()


async def _both(first: Any, second: Any) -> list[Any]:
    """Run two calls at once; each result or the exception it raised."""
    out: list[Any] = [None, None]

    async def run(i: int, fn: Any) -> None:
        out[i] = await fn()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0, first)
        tg.start_soon(run, 1, second)
    return out


@contextlib.asynccontextmanager
async def two_servers(fake_gcp: Any, tmp_path: Any, shared: bool):
    dirs = (tmp_path, tmp_path) if shared else (tmp_path / "a", tmp_path / "b")
    for d in dirs:
        d.mkdir(exist_ok=True)
    async with server(fake_gcp, dirs[0]) as one, server(fake_gcp, dirs[1]) as two:
        yield one, two


@pytest.mark.parametrize("shared", [True, False], ids=["shared-state-dir", "separate-state-dirs"])
async def test_two_creates_in_two_zones_leave_one_tpu(fake_gcp, tmp_path, shared) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.latency_s = 0.02  # both pre-checks overlap: the race is really run
    second_tpus, outcomes = 0, []
    async with two_servers(fake_gcp, tmp_path, shared) as (one, two):
        for trial in range(TRIALS):
            _reset(fake_gcp)
            zones = ("us-west4-a", "us-east1-b") if trial % 2 else ("us-east1-b", "us-west4-a")
            results = await _both(
                lambda z=zones[0]: one.call_tool(
                    "create_tpu_queued_resource", {"zone": z, "provisioning_model": "spot"}
                ),
                lambda z=zones[1]: two.call_tool(
                    "create_tpu_queued_resource", {"zone": z, "provisioning_model": "spot"}
                ),
            )
            live = live_of_rig(fake_gcp)
            second_tpus += len(live) > 1
            assert len(live) == 1, (trial, live, [r.content[0].text for r in results])
            kinds = sorted(_kind(r) for r in results)
            outcomes.append(kinds)
            assert kinds in (["created", "refused"], ["created", "withdrawn"]), kinds
    print(
        f"two creates, {'shared' if shared else 'separate'} state: {TRIALS} trials, second TPUs {second_tpus}, outcomes {outcomes}"
    )


def _kind(result: Any) -> str:
    if result.is_error:
        text = result.content[0].text
        assert "bill twice" in text or "already running" in text or "another create" in text, text
        return "refused"
    out = result.structured_content
    return "withdrawn" if out.get("withdrawn") else "created" if out.get("created") else "exists"


@pytest.mark.parametrize("shared", [True, False], ids=["shared-state-dir", "separate-state-dirs"])
async def test_find_tpu_racing_a_create_leaves_one_tpu(fake_gcp, tmp_path, shared) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.latency_s = 0.02
    second_tpus = 0
    sweep_args = {
        "zones": ["us-central1-a"],
        "provisioning_model": "spot",
        "poll_interval_s": 0.05,
        "zone_budget_s": 5,
    }
    async with two_servers(fake_gcp, tmp_path, shared) as (one, two):

        async def sweep() -> Any:
            started = await one.call_tool("find_tpu", sweep_args)
            if started.is_error:
                return started
            return await wait_job(one, started.structured_content["job_id"])

        for trial in range(TRIALS):
            _reset(fake_gcp)
            results = await _both(
                sweep,
                lambda: two.call_tool(
                    "create_tpu_queued_resource", {"zone": "us-west4-a", "provisioning_model": "spot"}
                ),
            )
            live = live_of_rig(fake_gcp)
            second_tpus += len(live) > 1
            assert len(live) == 1, (trial, live, results)
    print(
        f"find_tpu vs create, {'shared' if shared else 'separate'} state: {TRIALS} trials, second TPUs {second_tpus}"
    )


async def test_a_server_killed_mid_sweep_leaves_nothing_waiting_forever(fake_gcp, tmp_path) -> None:
    """SIGKILL of the server process while its sweep waits in a zone: its request carries a
    validUntilDuration equal to the zone budget (it would expire by itself), and the next sweep, from a
    new server, adopts it, gives it its own budget, deletes it and goes on."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-east5-a", "wait")
    args = {"zones": ["us-east5-a", "us-west4-b"], "provisioning_model": "spot", "poll_interval_s": 0.05}
    with contextlib.suppress(Exception):  # the client's transport breaks when its server is killed
        async with server(fake_gcp, tmp_path) as one:
            await call(one, "find_tpu", {**args, "zone_budget_s": 600})
            with anyio.fail_after(30):
                while fake_gcp.tpu.state_of("us-east5-a", RIG) is None:
                    await anyio.sleep(0.05)
            pid = _lease_pid(tmp_path)
            os.kill(pid, signal.SIGKILL)
            with anyio.fail_after(30):
                while _alive(pid):
                    await anyio.sleep(0.05)
    leftover = fake_gcp.tpu.queued[("us-east5-a", RIG)]
    assert leftover.body["queueingPolicy"] == {"validUntilDuration": "600s"}  # it expires by itself
    assert fake_gcp.tpu.state_of("us-east5-a", RIG) == "WAITING_FOR_RESOURCES"
    async with server(fake_gcp, tmp_path) as two:
        again = await call(two, "find_tpu", {**args, "zone_budget_s": 0.5})
        job = await wait_job(two, again["job_id"])
    result = job["result"]
    assert result["found"] and result["zone"] == "us-west4-b", result
    assert [(a["zone"], a["outcome"]) for a in result["attempts"]] == [
        ("us-east5-a", "timeout"),
        ("us-west4-b", "active"),
    ]
    assert fake_gcp.tpu.state_of("us-east5-a", RIG) is None
    assert live_of_rig(fake_gcp) == [("us-west4-b", RIG)]


def _lease_pid(state_dir: Any) -> int:
    db = sqlite3.connect(state_dir / "zone_attempts.sqlite3")
    try:
        (pid,) = db.execute("SELECT pid FROM leases WHERE name LIKE 'rig:%'").fetchone()
    finally:
        db.close()
    return int(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie until the client reaps it: read its state
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False
