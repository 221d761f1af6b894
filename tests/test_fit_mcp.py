"""Fit before money through the official MCP client: MODEL_NAME=google/gemma-3-27b-it (its config.json in
the Hugging Face cache, put there by the real client; weights not downloaded) on v5litepod-1 is refused by
plan_capacity, lint, plan_queued_resource, create, find_tpu and reconfigure, naming a slice that fits,
and check_setup says so; no create is ever sent. A base checkpoint (google/gemma-4-e2b) is flagged where
chat completions and tool calls are configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.hub import config_bytes, seed_cache
from tests.test_provisioning_mcp import TOKEN, call, server

pytestmark = pytest.mark.anyio
GEMMA3 = Path(__file__).resolve().parent / "data" / "model-configs" / "gemma-3-27b-it.config.json"


async def refused(client, tool: str, args: dict | None = None) -> str:
    result = await client.call_tool(tool, args or {})
    assert result.is_error, (tool, result.content[0].text)
    return result.content[0].text


async def test_a_model_the_chip_cannot_hold_is_refused_before_money(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    hf = tmp_path / "hf"
    seed_cache(hf, "google/gemma-3-27b-it", {"config.json": config_bytes(GEMMA3)})
    env = {"MODEL_NAME": "google/gemma-3-27b-it", "HF_HOME": str(hf), "HF_HUB_OFFLINE": "1"}
    async with server(fake_gcp, tmp_path, **env) as client:
        text = await refused(client, "plan_capacity")
        assert (
            "does not fit" in text and "27.43 B parameters from config.json" in text and "v5litepod-8" in text
        )
        lint = await call(client, "lint_vllm_flags")
        found = {f["id"]: f for f in lint["findings"]}
        assert (
            found["model-does-not-fit"]["severity"] == "error"
            and "v5litepod-8" in found["model-does-not-fit"]["fix"]
        )
        setup = await call(client, "check_setup")
        model = next(c for c in setup["checks"] if c["name"] == "model")
        assert (
            not model["ok"]
            and "does not fit v5litepod-1" in model["detail"]
            and "v5litepod-8" in model["fix"]
        )
        assert "setup OK" not in setup["summary"]
        for tool, args in (
            ("plan_queued_resource", {}),
            ("create_tpu_queued_resource", {}),
            ("create_tpu_queued_resource", {"provisioning_model": "spot", "zone": "us-east1-b"}),
            ("find_tpu", {"poll_interval_s": 0.05}),
        ):
            text = await refused(client, tool, args)
            assert (
                "MODEL_NAME" in text and "does not fit" in text and "ACCELERATOR_TYPE=v5litepod-8" in text
            ), text
    assert fake_gcp.tpu.creates() == [] and fake_gcp.compute.firewalls == {}  # nothing billed, nothing made


async def test_a_reconfigure_to_a_model_that_cannot_fit_changes_nothing(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    hf = tmp_path / "hf"
    seed_cache(hf, "google/gemma-3-27b-it", {"config.json": config_bytes(GEMMA3)})
    async with server(fake_gcp, tmp_path, HF_HOME=str(hf), HF_HUB_OFFLINE="1") as client:
        created = await call(client, "create_tpu_queued_resource", {"provisioning_model": "spot"})
        assert created["created"], created
        before = dict(fake_gcp.tpu.node_metadata("us-west4-a", "gemma4-e2b"))
        text = await refused(client, "reconfigure_vllm", {"model_name": "google/gemma-3-27b-it"})
        assert "model_name" in text and "does not fit" in text and "v5litepod-8" in text, text
        assert fake_gcp.tpu.node_metadata("us-west4-a", "gemma4-e2b") == before


async def test_a_base_checkpoint_is_flagged_where_chat_and_tool_calls_are_configured(
    fake_gcp, tmp_path
) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    async with server(fake_gcp, tmp_path, MODEL_NAME="google/gemma-4-e2b", HF_HUB_OFFLINE="1") as client:
        lint = await call(client, "lint_vllm_flags")
        base = {f["id"]: f for f in lint["findings"]}["base-model-for-chat"]
        assert (
            base["severity"] == "warning"
            and "google/gemma-4-e2b-it" in base["fix"]
            and "tool" in base["what_happens"]
        )
        setup = await call(client, "check_setup")
        model = next(c for c in setup["checks"] if c["name"] == "model")
        assert not model["ok"] and "NOT AN INSTRUCTION-TUNED MODEL" in model["detail"]
        assert "MODEL_NAME=google/gemma-4-e2b-it" in model["fix"]
        plan = await call(client, "plan_queued_resource", {})
        assert any(w.startswith("NOT AN INSTRUCTION-TUNED MODEL") for w in plan["warnings"]), plan["warnings"]
        created = await call(client, "create_tpu_queued_resource", {"provisioning_model": "spot"})
        assert "NOT AN INSTRUCTION-TUNED MODEL" in created["summary"], created["summary"]
