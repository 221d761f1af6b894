"""README's walkthrough ("Your first TPU, step by step") against `make fake-gcp`'s fakes, through the
official MCP client over stdio, as a new user follows it: check_setup, a plan, a find_tpu sweep whose first
zone refuses and that lands in the second, a healthy endpoint reached with the API key (the fake vLLM
answers 401 without it), and a teardown that deletes the TPU and the firewall rule. The key and the
Hugging Face token never appear in a tool output, the server's stderr, the node's metadata or a
command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.gcp.__main__ import build, exports
from tests.mcp_session import mcp_client

pytestmark = pytest.mark.anyio
HF_TOKEN = "hf_WalkThroughToken0123456789AbCdEfGh"


async def call(client: Any, name: str, args: dict[str, Any], seen: list[str]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    text = result.content[0].text
    seen.append(text + json.dumps(result.structured_content))
    assert not result.is_error, (name, text)
    return result.structured_content


def command_lines() -> str:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                out.append(
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                )
            except OSError:
                pass
    return "\n".join(out)


async def test_readme_walkthrough_against_make_fake_gcp(tmp_path: Path) -> None:
    args = argparse.Namespace(
        port=0, project="demo-project", script=["us-west4-a=unsupported"], timings="0,0,0", latency=0.0,
        secret=False, no_vllm=False, no_vm=True,  # one fake vLLM: the simulated VMs have their own test
    )  # fmt: skip
    gcp, vllm = build(args)
    env = {
        **exports(gcp, vllm, "demo-project"),
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
    }
    seen: list[str] = []
    log = tmp_path / "server-stderr.log"
    asked: list[str] = []
    answers = [("decline", None), ("accept", {"rig": "gemma4-e2b"})]

    async def you(context: Any, params: Any) -> Any:  # the person at the host: no, then yes with the name
        from mcp_types import ElicitResult

        asked.append(params.message)
        action, content = answers.pop(0)
        return ElicitResult(action=action, content=content)

    try:
        with log.open("w") as errlog:
            async with mcp_client(
                errlog=errlog, client_kwargs={"elicitation_callback": you}, **env
            ) as client:
                # 1. check_setup: everything but the Hugging Face secret
                setup = await call(client, "check_setup", {}, seen)
                assert "hf_secret" in json.dumps(setup) and setup["ready"] is False
                # 2. save_hf_token
                await call(client, "save_hf_token", {"token": HF_TOKEN}, seen)
                setup = await call(client, "check_setup", {}, seen)
                assert setup["ready"] is True, setup
                # 4. plan: the firewall rule for your public IP (the fake's lookup answers 203.0.113.7)
                plan = await call(client, "plan_queued_resource", {}, seen)
                assert "203.0.113.7/32" in json.dumps(plan)
                # 5-6. find_tpu: us-west4-a refuses flex-start, us-central1-a accepts
                started = await call(
                    client, "find_tpu",
                    {"zones": ["us-west4-a", "us-central1-a"], "poll_interval_s": 0.05, "zone_budget_s": 10}, seen,
                )  # fmt: skip
                job: dict[str, Any] = {}
                for _ in range(400):
                    job = await call(client, "get_job", {"job_id": started["job_id"]}, seen)
                    if job["state"] != "running":
                        break
                    await asyncio.sleep(0.05)
                assert job["state"] == "succeeded" and "us-central1-a" in json.dumps(job), job
                assert gcp.tpu.state_of("us-central1-a", "gemma4-e2b") == "ACTIVE"
                rule = gcp.compute.firewalls["tpu-devops-gemma4-e2b"]
                assert rule["sourceRanges"] == ["203.0.113.7/32"]
                # 7. the endpoint, with the key (the fake vLLM refuses /v1/* without it)
                endpoint = await call(client, "get_vllm_endpoint", {}, seen)
                assert f"127.0.0.1:{env['VLLM_PORT']}" in json.dumps(endpoint)
                health = await call(client, "verify_model_health", {}, seen)
                assert health["healthy"] is True, health
                assert httpx.get(f"{vllm.url}/v1/models").status_code == 401  # type: ignore[attr-defined]
                answer = await call(
                    client, "query_gemma", {"stats": True, "prompt": "hi", "max_tokens": 4}, seen
                )
                assert answer and vllm.unauthorized == 1  # type: ignore[attr-defined]  (only ours above)
                # 8. teardown, without naming the zone the sweep chose: the dry run finds the TPU there and
                # lists it with the rule and the gcloud commands; confirm=true makes the host ask you: a
                # "no" deletes nothing, your "yes" with the rig's name typed deletes both
                dry = await call(client, "destroy_queued_resource", {}, seen)
                assert "us-central1-a" in json.dumps(dry) and "delete_firewall_rule" in json.dumps(dry)
                assert gcp.compute.firewalls and dry.get("confirm_token") is None
                assert dry["next_call"] == "destroy_queued_resource(confirm=true)"
                assert "--zone=us-central1-a" in dry["how_to_delete"][0]
                no = await client.call_tool("destroy_queued_resource", {"confirm": True})
                assert no.is_error and "nothing was deleted" in no.content[0].text
                assert gcp.tpu.state_of("us-central1-a", "gemma4-e2b") == "ACTIVE"
                done = await call(client, "destroy_queued_resource", {"confirm": True}, seen)
                assert "delete_firewall_rule" in json.dumps(done) and done["executed"]
                assert len(asked) == 2 and "us-central1-a" in asked[1]
                cmdlines = command_lines()
        assert gcp.tpu.state_of("us-central1-a", "gemma4-e2b") is None
        assert gcp.compute.firewalls == {}
        key = gcp.secrets.secrets["vllm-api-key"][-1].decode()
        node_metadata = json.dumps([c["body"] for c in gcp.tpu.creates()])
        stderr = log.read_text()
        for secret in (key, HF_TOKEN):
            assert not any(secret in s for s in seen), "a tool output shows a secret"
            assert secret not in stderr and secret not in node_metadata and secret not in cmdlines
    finally:
        vllm.stop()  # type: ignore[union-attr]
        gcp.stop()
