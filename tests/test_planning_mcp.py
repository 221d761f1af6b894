"""The five planning tools end to end: the official MCP client starts server.py over stdio, with no
cloud endpoint at all (planning needs no account). Key values plus one bad input per tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_session import mcp_client
from tpu_devops.host.results import table_records

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "model-configs"
LOGS = DATA / "vllm-logs"


def env_for(tmp_path: Path) -> dict[str, str]:
    return {
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "LIMIT_MM_PER_PROMPT": '{"image":4,"audio":1}',
        "MAX_NUM_BATCHED_TOKENS": "4096",
        "HF_HUB_OFFLINE": "1",
    }


async def call(client: Any, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(name, args or {})
    assert not result.is_error, result.content[0].text
    assert result.content[0].text
    return result.structured_content


async def refused(client: Any, name: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error
    text = result.content[0].text
    assert "Traceback" not in text
    return text


async def test_planning_tools_over_stdio(tmp_path: Path) -> None:
    async with mcp_client(**env_for(tmp_path)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in (
            "plan_capacity",
            "lint_vllm_flags",
            "render_startup_script",
            "diagnose_vllm_boot",
        ):
            assert tools[name].annotations.read_only_hint is True
            assert tools[name].annotations.destructive_hint is False
        assert tools["plan_capacity"].annotations.open_world_hint is True

        # plan_capacity: defaults from settings (E2B, v5litepod-1, 0.92, 16,384)
        plan = await call(client, "plan_capacity")
        assert plan["kv"]["bytes_per_token"] == 18_432
        assert plan["kv_tokens"] == 321_376 and plan["block_size"] == 32
        assert plan["budget"]["cap_gib"] == pytest.approx(14.49) and plan["budget"][
            "outside_cap_gib"
        ] == pytest.approx(1.26)
        v6e = await call(client, "plan_capacity", {"accelerator_type": "v6e-1", "max_model_len": 32768})
        assert v6e["kv_tokens"] == 1_151_744
        e4b = await call(
            client,
            "plan_capacity",
            {
                "model": str(CONFIGS / "gemma-4-E4B-it.config.json"),
                "weights_gib": 15.0,
                "accelerator_type": "v6e-1",
            },
        )
        assert e4b["kv"]["bytes_per_token"] == 57_344
        text = await refused(client, "plan_capacity", {"model": str(tmp_path / "missing.json")})
        assert "model" in text and "Fix:" in text

        # lint_vllm_flags: the seed command is clean; 0.95 on v5e is an error
        seed = (DATA / "seed_serve_command.txt").read_text()
        lint = await call(client, "lint_vllm_flags", {"command": seed})
        assert lint["errors"] == 0
        bad = await call(
            client,
            "lint_vllm_flags",
            {"flags": {"gpu_memory_utilization": 0.95}, "model": "google/gemma-4-E2B-it"},
        )
        assert "memory-utilization-above-0.92" in [f["id"] for f in bad["findings"]]
        text = await refused(client, "lint_vllm_flags", {"command": "python app.py --port 8000"})
        assert "command" in text and "vllm serve" in text

        # render_startup_script: the token lives in Secret Manager, never in the script
        script = await call(client, "render_startup_script", {"max_model_len": 32768})
        body = Path(script["file"]["path"]).read_text()  # the whole script is the answer's file
        assert "--max-model-len 32768" in body and "--max-model-len" in script["settings_block"]
        assert "secretmanager.googleapis.com" in body and "--log-driver=gcplogs" in body
        text = await refused(client, "render_startup_script", {"gpu_memory_utilization": 1.5})
        assert "gpu_memory_utilization" in text

        # render_startup_script as commands: the same flags as the script
        config = await call(client, "render_startup_script", {"form": "commands"})
        expected = list(script["flags"])
        expected[expected.index("--max-model-len") + 1] = "16384"
        assert config["flags"] == expected
        assert config["serve_command"].startswith("vllm serve google/gemma-4-E2B-it")
        text = await refused(
            client, "render_startup_script", {"form": "commands", "vllm_image": "vllm/vllm-tpu:x; rm -rf /"}
        )
        assert "vllm_image" in text

        # diagnose_vllm_boot: the late OOM and the clean boot
        oom = await call(
            client, "diagnose_vllm_boot", {"path": str(LOGS / "v5e1-e2b-util095-program-oom.log")}
        )
        assert oom["status"] == "failed" and oom["root_cause"]["id"] == "program-allocation-oom"
        assert oom["root_cause"]["details"]["program"] == "jit_structured_decode_fn"
        assert oom["budget"]["kv_tokens"] == 348_896
        ok = await call(
            client, "diagnose_vllm_boot", {"log_text": (LOGS / "v6e1-e2b-boot-ok.log").read_text()}
        )
        assert (
            ok["status"] == "ready"
            and ok.get("root_cause") is None
            and ok["budget"]["kv_tokens"] == 1_151_744
        )
        text = await refused(client, "diagnose_vllm_boot", {"path": str(tmp_path / "nope.log")})
        assert "path" in text and "Fix:" in text


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


async def test_odd_inputs_are_named_errors_over_stdio(tmp_path: Path) -> None:
    cfg = json.loads((CONFIGS / "gemma-4-E2B-it.config.json").read_text())
    cfg["text_config"]["global_head_dim"] = "abc"
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(cfg))
    async with mcp_client(**env_for(tmp_path)) as client:
        # was the SDK's bare "Error executing tool plan_capacity" (a ValueError inside)
        text = await refused(client, "plan_capacity", {"model": str(bad), "weights_gib": 9})
        assert "global_head_dim" in text and "'abc'" in text and "Fix:" in text
        text = await refused(client, "plan_capacity", {"accelerator_type": "ct5lp-hightpu-3t"})
        assert "ct5lp-hightpu-1t" in text
        text = await refused(client, "lint_vllm_flags", {"command": "vllm serve --"})
        assert "flag" in text and "Fix:" in text
        text = await refused(client, "render_startup_script", {"model_name": "x'; rm -rf /"})
        assert "model_name" in text
        text = await refused(client, "diagnose_vllm_boot", {"log_text": "hello world"})
        assert "no vLLM boot line" in text
        text = await refused(client, "diagnose_vllm_boot", {"log_text": "x", "node": "my-node"})
        assert "one log source" in text
        for name, args in (
            ("plan_capacity", {"model": str(bad), "weights_gib": 9}),
            ("lint_vllm_flags", {"command": "vllm serve --"}),
        ):
            result = await client.call_tool(name, args)
            assert result.content[0].text.strip() != f"Error executing tool {name}"


async def test_newcomer_trial_inputs_over_stdio(tmp_path: Path) -> None:
    """Inputs a newcomer tried that passed silently or gave misleading answers."""
    e4b = "google/gemma-4-E4B-it"
    async with mcp_client(**env_for(tmp_path)) as client:
        # lint: values vLLM's CLI rejects were "0 error(s) ... no blocking problems"
        for command, flag in (
            (f"vllm serve {e4b} --max-model-len abc", "--max-model-len"),
            (f"vllm serve {e4b} --max-model-len -5", "--max-model-len"),
            (f"vllm serve {e4b} --max-num-batched-tokens", "--max-num-batched-tokens"),
            (f"vllm serve {e4b} --tensor-parallel-size 0", "--tensor-parallel-size"),
        ):
            out = await call(client, "lint_vllm_flags", {"command": command})
            errors = [f for f in out["findings"] if f["severity"] == "error"]
            assert out["errors"] >= 1 and errors[0]["flag"] == flag, (command, out["findings"])
            assert "default (2048)" not in json.dumps(errors)
        out = await call(client, "lint_vllm_flags", {"flags": {"max_model_len": "abc"}})
        assert out["errors"] == 1
        result = await client.call_tool("lint_vllm_flags", {"flags": {"bogus_flag": 1}})
        text = result.content[0].text
        assert "not a vLLM serve flag" in text and "no findings" not in text

        # plan_capacity: weights over the cap were a plan with a negative pool
        text = await refused(client, "plan_capacity", {"model": e4b, "weights_gib": 100})
        assert "weights_gib" in text and "does not fit" in text and "-85" not in text
        text = await refused(
            client, "plan_capacity", {"model": e4b, "weights_gib": 9, "tensor_parallel_size": -2}
        )
        assert "tensor_parallel_size" in text and "between 1 and 256" in text and "has 1 chip" not in text

        # diagnose_vllm_boot: a Cloud Logging export was read as JSON text (negative timeline)
        out = await call(
            client, "diagnose_vllm_boot", {"path": str(DATA / "logs" / "v5e1-util095-export.json")}
        )
        assert out["root_cause"]["id"] == "program-allocation-oom"
        assert all(p.get("elapsed_s") is None or p["elapsed_s"] >= 0 for p in table_records(out["phases"]))
        text = await refused(client, "diagnose_vllm_boot", {})
        assert "node" in text
        for path, problem in (
            ("/dev/null", "outside the directories"),
            (str(tmp_path), "not a regular file"),
        ):
            text = await refused(client, "diagnose_vllm_boot", {"path": path})
            assert problem in text
