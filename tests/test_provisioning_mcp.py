"""Scenario tests: the real MCP client drives server.py over stdio; the server's real Google clients talk
to the in-process fake (`fake_gcp`). Sweeps, teardown, retries, restarts and the HF token's secrecy."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import gcp_environ
from tests.mcp_session import ROOT, server_env
from tpu_devops.host.results import table_records

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedSecretTokenDoNotLeak4242abcd"
RIG_LABELS = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}


@contextlib.asynccontextmanager
async def server(
    fake_gcp: Any,
    state_dir: Path,
    errlog: Path | None = None,
    client_kwargs: dict[str, Any] | None = None,
    **extra: str,
) -> AsyncIterator[Client]:
    """server.py over stdio, pointed at the fake, stderr captured to ``errlog`` (or the state dir)."""
    env = server_env(**gcp_environ(fake_gcp, state_dir, TPU_DEVOPS_LOG_LEVEL="DEBUG", **extra))
    params = StdioServerParameters(
        command=sys.executable, args=[str(ROOT / "server.py")], env=env, cwd=str(ROOT)
    )
    log_path = errlog or state_dir / "server-stderr.log"
    with open(log_path, "a") as fh:
        async with Client(
            stdio_client(params, errlog=fh), read_timeout_seconds=120, **(client_kwargs or {})
        ) as client:
            yield client


async def call(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(name, args or {})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def wait_job(client: Client, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
    with anyio.fail_after(timeout_s):
        while True:
            job = await call(client, "get_job", {"job_id": job_id})
            if job["state"] != "running":
                return job
            await anyio.sleep(0.1)


async def test_flex_sweep_unsupported_twice_stockout_then_success(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "unsupported")
    fake_gcp.tpu.script("us-central1-a", "unsupported")
    fake_gcp.tpu.script("us-west4-b", "stockout")
    async with server(fake_gcp, tmp_path) as client:
        started = await call(client, "find_tpu", {"poll_interval_s": 0.05, "zone_budget_s": 5})
        job = await wait_job(client, started["job_id"])
        assert job["state"] == "succeeded", job
        result = job["result"]
        assert result["found"] is True
        tried = [(a["zone"], a.get("reach")) for a in result["attempts"]]
        assert tried[:3] == [("us-west4-a", "model"), ("us-central1-a", "model"), ("us-west4-b", "zone")]
        assert len(tried) == 4 and tried[3][1] is None
        assert result["endpoint_url"] == f"http://{fake_gcp.tpu.external_ip}:8000"
        endpoint = await call(client, "get_vllm_endpoint")
        assert endpoint["status"] == "discovered" and endpoint["zone"] == result["zone"]
        scan = await call(client, "get_zones_with_available_quota", {"provisioning_model": "flex-start"})
        rows = {z["zone"]: z for z in table_records(scan["zones"])}
        assert rows["us-central1-a"]["known_acceptance"].startswith("refused")
        assert rows["us-west4-b"]["last_attempt"].startswith("failed")
    status = (tmp_path / "tpu_zones_status.md").read_text()
    for zone in ("us-west4-a", "us-central1-a", "us-west4-b", result["zone"]):
        assert f"| {zone} |" in status
    assert (tmp_path / "zone_attempts.sqlite3").exists()


async def test_sweep_stops_before_any_create_on_network_not_found(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    async with server(fake_gcp, tmp_path, TPU_NETWORK="no-such-vpc") as client:
        # the rig's firewall rule is made before the first create: Compute names the missing network there,
        # so the call itself fails with the setting to fix and no TPU request is ever sent
        result = await client.call_tool(
            "find_tpu", {"poll_interval_s": 0.05, "zone_budget_s": 5, "provisioning_model": "spot"}
        )
    text = result.content[0].text
    assert result.is_error and "TPU_NETWORK" in text and "no-such-vpc" in text, text
    assert fake_gcp.tpu.creates() == [] and fake_gcp.compute.firewalls == {}


async def test_spot_sweep_reads_the_preemptible_quota_family(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    # No Preemptible quota in the configured zone (on-demand quota there is irrelevant to spot).
    fake_gcp.quotas.set_limit("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", "us-west4-a", 0)
    async with server(fake_gcp, tmp_path) as client:
        scan = await call(client, "get_zones_with_available_quota", {"provisioning_model": "spot"})
        assert scan["zone_quota_id"] == "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"
        assert not {z["zone"]: z for z in table_records(scan["zones"])}["us-west4-a"]["enough_for_request"]
        started = await call(client, "find_tpu", {"provisioning_model": "spot", "poll_interval_s": 0.05})
        job = await wait_job(client, started["job_id"])
    assert job["result"]["found"] and job["result"]["zone"] != "us-west4-a"
    assert "us-west4-a" not in {c["zone"] for c in fake_gcp.tpu.creates()}
    assert "spot" in fake_gcp.tpu.creates()[0]["body"]


async def test_teardown_deletes_ours_and_leaves_a_foreign_resource(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign("us-west4-a", "neighbours-tpu", labels={"team": "research"})
    # the operator's standing permission: this host cannot ask, so a dry run's token completes the deletion
    async with server(fake_gcp, tmp_path, TPU_DEVOPS_UNATTENDED_DELETE="gemma4-e2b") as client:
        created = await call(client, "create_tpu_queued_resource", {"provisioning_model": "spot"})
        assert created["created"] is True
        refused = await client.call_tool(
            "destroy_queued_resource",
            {"queued_resource_id": "neighbours-tpu", "dry_run": False, "confirm": True},
        )
        assert refused.is_error and "not created by tpu-devops" in refused.content[0].text
        plan = await call(client, "destroy_queued_resource", {})
        assert plan["dry_run"] is True and any("neighbours-tpu" in x for x in plan["left_alone"])
        assert [s["action"] for s in plan["steps"]] == [
            "delete_node",
            "delete_queued_resource",
            "delete_firewall_rule",
        ]
        unconfirmed = await client.call_tool("destroy_queued_resource", {"dry_run": False})
        assert unconfirmed.is_error and "nothing was deleted" in unconfirmed.content[0].text
        assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") == "ACTIVE"
        dry = await client.call_tool("destroy_queued_resource", {})
        token = dry.structured_content["confirm_token"]
        assert token in dry.content[0].text and dry.structured_content["next_call"] in dry.content[0].text
        done = await call(client, "destroy_queued_resource", {"confirm": True, "confirm_token": token})
        assert done["executed"] and all(s["done"] for s in done["steps"])
    assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None
    assert fake_gcp.tpu.state_of("us-west4-a", "neighbours-tpu") == "ACTIVE"
    assert fake_gcp.compute.firewalls == {}  # the rig's rule went with its TPU


async def test_429_and_503_are_retried_until_success(fake_gcp, tmp_path) -> None:
    fake_gcp.tpu.add_foreign("us-west4-a", "gemma4-e2b", labels=RIG_LABELS)
    async with server(fake_gcp, tmp_path) as client:
        fake_gcp.tpu.fail_next(429)
        fake_gcp.tpu.fail_next(503)
        listing = await call(client, "list_queued_resources")
        assert [q["id"] for q in listing["queued_resources"]] == ["gemma4-e2b"]
        fake_gcp.tpu.fail_next(503)
        status = await call(client, "describe_queued_resource")
        assert status["state"] == "ACTIVE"


async def test_restart_mid_sweep_keeps_the_attempt_history(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-b", "stockout")
    fake_gcp.tpu.script("us-east5-a", "wait")
    zones = ["us-west4-b", "us-east5-a", "us-central1-a"]
    async with server(fake_gcp, tmp_path) as client:
        started = await call(
            client,
            "find_tpu",
            {"provisioning_model": "spot", "zones": zones, "poll_interval_s": 0.05, "zone_budget_s": 600},
        )
        with anyio.fail_after(30):
            while fake_gcp.tpu.state_of("us-east5-a", "gemma4-e2b") is None:
                await anyio.sleep(0.05)
        job = await call(client, "get_job", {"job_id": started["job_id"]})
        assert job["state"] == "running"
    # The first server is gone mid-sweep; a new one sees the history and skips the stocked-out zone.
    fake_gcp.tpu.queued.clear()
    async with server(fake_gcp, tmp_path) as client:
        scan = await call(client, "get_zones_with_available_quota", {"provisioning_model": "spot"})
        row = {z["zone"]: z for z in table_records(scan["zones"])}["us-west4-b"]
        assert row["last_attempt"].startswith("failed") and row["blocked_until"]
        status = await call(client, "check_setup", {"view": "status"})
        assert any("us-west4-b" in a and "stockout" in a for a in status["recent_attempts"])
        again = await call(
            client,
            "find_tpu",
            {"provisioning_model": "spot", "zones": zones, "poll_interval_s": 0.05, "zone_budget_s": 0.3},
        )
        job = await wait_job(client, again["job_id"])
    outcomes = [(a["zone"], a["outcome"]) for a in job["result"]["attempts"]]
    assert outcomes[0] == ("us-west4-b", "skipped")
    assert outcomes[-1] == ("us-central1-a", "active")


async def test_planted_hf_token_never_leaks(fake_gcp, tmp_path) -> None:
    errlog = tmp_path / "stderr.log"
    seen: list[str] = []
    async with server(fake_gcp, tmp_path, errlog=errlog) as client:
        bad = await client.call_tool("save_hf_token", {"token": TOKEN + "!"})
        assert bad.is_error
        seen.append(bad.content[0].text)
        saved = await client.call_tool("save_hf_token", {"token": TOKEN})
        assert not saved.is_error
        seen.append(saved.content[0].text + json.dumps(saved.structured_content))
        for name, args in [
            ("check_setup", {}),
            ("plan_queued_resource", {}),
            ("create_tpu_queued_resource", {"provisioning_model": "spot"}),
            ("describe_queued_resource", {}),
            ("check_setup", {"view": "status"}),
            ("describe_queued_resource", {}),
        ]:
            result = await client.call_tool(name, args)
            assert not result.is_error, (name, result.content[0].text)
            seen.append(result.content[0].text + json.dumps(result.structured_content))
    assert fake_gcp.secrets.secrets["hf-token"] == [TOKEN.encode()]  # it did reach Secret Manager
    for text in seen:
        assert TOKEN not in text
    assert TOKEN not in errlog.read_text() and len(errlog.read_text()) > 0
    for req in fake_gcp.tpu.requests:  # queued-resource bodies (startup script, metadata) and headers
        assert TOKEN not in req["body"] and TOKEN not in json.dumps(req["headers"])
    for req in fake_gcp.secrets.requests:
        assert TOKEN not in json.dumps(req["headers"]) and TOKEN not in req["path"]
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != errlog:
            assert TOKEN.encode() not in path.read_bytes(), path


async def test_deletion_confirmed_by_elicitation_when_the_client_supports_it(fake_gcp, tmp_path) -> None:
    from mcp_types import ElicitResult

    # decline; then what hosts that answer by themselves send (the form's defaults, a bare "yes"); then a
    # person who types the rig's name
    answers = [("decline", None), ("accept", {}), ("accept", {"confirm": True}), ("accept", {"rig": "yes"}),
               ("accept", {"rig": "gemma4-e2b"})]  # fmt: skip
    asked: list[dict[str, Any]] = []

    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append({"message": params.message, "schema": params.requested_schema})
        action, content = answers.pop(0)
        return ElicitResult(action=action, content=content)

    fake_gcp.tpu.add_foreign("us-west4-a", "gemma4-e2b", labels=RIG_LABELS)
    async with server(fake_gcp, tmp_path, client_kwargs={"elicitation_callback": elicit}) as client:
        # confirm=true from the model is not enough where the user can be asked: the user is asked.
        declined = await client.call_tool("destroy_queued_resource", {"confirm": True})
        assert declined.is_error and "you declined" in declined.content[0].text
        assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") == "ACTIVE"
        dry = await call(client, "destroy_queued_resource", {})  # a dry run asks nobody
        assert dry["dry_run"] and len(asked) == 1 and dry.get("confirm_token") is None
        assert dry["next_call"] == "destroy_queued_resource(confirm=true)"
        for _ in range(3):
            automatic = await client.call_tool("destroy_queued_resource", {"confirm": True})
            text = automatic.content[0].text
            assert automatic.is_error and "nothing was deleted" in text and "type gemma4-e2b" in text, text
        assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") == "ACTIVE"
        accepted = await call(client, "destroy_queued_resource", {"dry_run": False})
        assert accepted["executed"] is True
    assert len(asked) == 5 and "delete_node gemma4-e2b (us-west4-a)" in asked[0]["message"]
    assert "type the rig's name, gemma4-e2b" in asked[0]["message"]
    assert list(asked[0]["schema"]["properties"]) == ["rig"]
    assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None


async def test_create_with_wait_job_reaches_active(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.timings["WAITING_FOR_RESOURCES"] = 0.5
    async with server(fake_gcp, tmp_path) as client:
        created = await call(
            client, "create_tpu_queued_resource", {"wait_timeout_s": 3600, "poll_interval_s": 0.05}
        )
        assert created["created"] and created["wait_job_id"]
        job = await wait_job(client, created["wait_job_id"])
        assert job["state"] == "succeeded" and job["result"]["state"] == "ACTIVE"
        assert job["result"]["endpoint_url"] == f"http://{fake_gcp.tpu.external_ip}:8000"
        again = await call(client, "create_tpu_queued_resource", {})
        assert again["created"] is False and again["state"] == "ACTIVE"
    assert len(fake_gcp.tpu.creates()) == 1
