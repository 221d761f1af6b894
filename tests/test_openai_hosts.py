"""The real Codex CLI (npm ``@openai/codex``) and Qwen Code (npm ``@qwen-code/qwen-code``) as agent hosts,
configured with exactly the README's sections for them.

Each runs headless in a throwaway HOME against a scripted fake of its model API on loopback
(`tests.fakes.openai_hosts`: Codex speaks the Responses API, Qwen Code Chat Completions). What the tests add
to the README's configuration only points the CLI at the fake, keeps it off the network (Codex's plugin and
app sync, telemetry, update checks) and gives the server its test environment (state directory, schema
cache, no metadata-server probe), through the configuration, since neither CLI passes its own environment
to a server as it is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT
from tests.fakes.gcp import FakeGcp
from tests.fakes.openai_hosts import FakeOpenAiHosts, Turn, chat_tools, responses_tools, tool_outputs
from tests.host_scenarios import default_toolset_tools
from tests.mcp_session import ROOT, TEST_CACHE_DIR, mcp_client
from tpu_devops.host.results import HOST_COMBINED_LIMIT

CODEX = ROOT / "node_modules" / ".bin" / "codex"
QWEN = ROOT / "node_modules" / ".bin" / "qwen"
README = (ROOT / "README.md").read_text()
NAMESPACE = "mcp__tpu_devops"  # Codex 0.171 offers a server's tools as one namespace named after it
QWEN_PREFIX = "mcp__tpu-devops__"
RIG_LABELS = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}


def readme_block(host: str, language: str) -> str:
    """The first ``language`` code block after the README's ``**<host>**`` paragraph, with the checkout's
    path for ``/path/to/tpu-devops``."""
    start = README.index(f"**{host}**")
    block = re.search(rf"```{language}\n(.*?)```", README[start:], re.S)
    assert block, f"README: no {language} block after **{host}**"
    return block.group(1).replace("/path/to/tpu-devops", str(ROOT))


def server_test_env(state: Path, **extra: str) -> dict[str, str]:
    return {
        "TPU_DEVOPS_STATE_DIR": str(state),
        "TPU_DEVOPS_CACHE_DIR": TEST_CACHE_DIR,
        "NO_GCE_CHECK": "true",  # never probe the metadata server from a test
        "TPU_DEVOPS_ENV_FILE": str(state / "no-tpu.env"),
        "PUBLIC_IP_LOOKUP_URL": "http://127.0.0.1:9/public-ip",
        **extra,
    }


def installed(cli: Path) -> None:
    if not cli.exists():
        pytest.fail(f"{cli} is missing: run make setup (it installs the CLIs pinned in package-lock.json)")


async def default_tools(tmp_path: Path) -> dict[str, Any]:
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path), TPU_DEVOPS_TOOLSETS="") as client:
        return {t.name: t for t in (await client.list_tools()).tools}


# ---- Codex CLI ---------------------------------------------------------------------------------------


def run_codex(
    api: FakeOpenAiHosts, home: Path, prompt: str, server_env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``codex exec PROMPT`` with the README's config.toml plus the fake provider; ``--strict-config``
    refuses any key this Codex does not know, so the README cannot drift from what Codex reads."""
    installed(CODEX)
    env_table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in server_env.items())
    config = "\n".join(
        [
            'model = "gpt-5-codex"',
            'model_provider = "fake"',
            "check_for_update_on_startup = false",
            readme_block("Codex CLI", "toml"),
            "[mcp_servers.tpu-devops.env]",
            env_table,
            "[model_providers.fake]",
            'name = "fake"',
            f'base_url = "{api.url}/v1"',
            'wire_api = "responses"',
            'env_key = "FAKE_OPENAI_KEY"',
            "[features]",  # no plugin or app sync: nothing leaves the machine
            "plugins = false",
            "apps = false",
            "[analytics]",
            "enabled = false",
        ]
    )
    tomllib.loads(config)  # the README block is valid TOML that composes with the rest
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(config)
    return subprocess.run(
        [str(CODEX), "exec", "--strict-config", "--skip-git-repo-check", prompt],
        cwd=home,
        env={
            "HOME": str(home),
            "PATH": os.environ["PATH"],
            "FAKE_OPENAI_KEY": "fake-key-for-the-loopback-fake",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )


def our_codex_tools(body: dict[str, Any]) -> dict[str, Any]:
    return {
        name[len(NAMESPACE) :]: t for name, t in responses_tools(body).items() if name.startswith(NAMESPACE)
    }


def first_line(body: dict[str, Any]) -> str:
    """What a model does with a tool answer: tell the user its first line."""
    outputs = tool_outputs(body)
    if not outputs:
        return "no tool answer"
    text = outputs[-1].split("Output:\n", 1)[-1]  # Codex puts "Wall time: ... Output:" in front
    try:
        return "The tool says: " + json.loads(text)["summary"]
    except (ValueError, KeyError, TypeError):
        return "The tool says: " + text.strip().splitlines()[0]


@pytest.mark.anyio
async def test_codex_offers_the_tools_with_their_bounds_and_a_call_goes_through(tmp_path: Path) -> None:
    listed = await default_tools(tmp_path / "list")
    with FakeOpenAiHosts() as api:
        api.script(
            Turn(function="plan_capacity", namespace=NAMESPACE, args={"max_model_len": 16384}),
            Turn(text=first_line),
        )
        out = run_codex(api, tmp_path, "How many KV tokens fit?", server_test_env(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    offered = our_codex_tools(api.requests[0])
    assert set(offered) == set(listed) == default_toolset_tools(), sorted(offered)
    # Codex drops bounds and defaults from the schemas it sends: the descriptions still carry them
    limit = offered["get_cloud_logging_logs"]["parameters"]["properties"]["limit"]
    assert "minimum" not in limit and limit["description"].endswith("(1-500; default 50)")
    [answer] = tool_outputs(api.requests[1])
    assert "321,376" in answer and "unsupported call" not in answer
    assert "The tool says: google/gemma-4-E2B-it on v5litepod-1: 321,376 KV tokens" in out.stdout


@pytest.mark.anyio
async def test_codex_gets_the_project_from_tpu_env_and_whole_answers(tmp_path: Path) -> None:
    """Codex passes the server only HOME, LANG, PATH and TERM: the project comes from tpu.env; the full
    startup script is a linked file, so the answer reaches the model whole under the README's limit."""
    env_file = tmp_path / "tpu.env"
    env_file.write_text(f"GOOGLE_CLOUD_PROJECT={PROJECT}\nGOOGLE_CLOUD_ZONE=us-west4-a\n")
    with FakeGcp() as gcp, FakeOpenAiHosts() as api:
        api.script(
            Turn(function="describe_queued_resource", namespace=NAMESPACE),
            Turn(function="render_startup_script", namespace=NAMESPACE),
            Turn(text=first_line),
        )
        env = server_test_env(tmp_path, TPU_DEVOPS_ENV_FILE=str(env_file), TPU_DEVOPS_GCP_ENDPOINT=gcp.url)
        out = run_codex(api, tmp_path, "Where is my TPU, and what will it run?", env)
        listed = [r for r in gcp.tpu.requests if r["method"] == "GET"]
    assert out.returncode == 0, out.stderr[-3000:]
    described, script = tool_outputs(api.requests[2])
    assert f"projects/{PROJECT}/locations/us-west4-a" in json.dumps([r["path"] for r in listed])
    assert "us-west4-a" in described and "GOOGLE_CLOUD_PROJECT" not in described  # no "set the project"
    answer = json.loads(script.split("Output:\n", 1)[1])
    assert "truncated" not in script and answer["file"]["uri"].startswith("tpu-devops://artifacts/")
    assert Path(answer["file"]["path"]).read_text().startswith("#!/bin/bash")


# ---- Qwen Code ---------------------------------------------------------------------------------------


def run_qwen(
    api: FakeOpenAiHosts, home: Path, prompt: str, server_env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``qwen -p PROMPT`` (headless, default approval mode) with the README's settings.json, pointed at the
    fake with Qwen Code's OpenAI variables."""
    installed(QWEN)
    settings = json.loads(readme_block("Qwen Code", "json"))
    settings["mcpServers"]["tpu-devops"]["env"] = server_env
    settings |= {
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False},
        "telemetry": {"enabled": False},
    }
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    work = home / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run(
        [str(QWEN), "-p", prompt],
        cwd=work,
        env={
            "HOME": str(home),
            "PATH": os.environ["PATH"],
            "OPENAI_API_KEY": "fake-key-for-the-loopback-fake",
            "OPENAI_BASE_URL": f"{api.url}/v1",
            "OPENAI_MODEL": "fake-model",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_qwen_allow_list_is_exactly_the_read_only_tools(tmp_path: Path) -> None:
    import anyio

    async def every_tool() -> list[Any]:
        async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
            return (await client.list_tools()).tools

    tools = anyio.run(every_tool)
    allowed = json.loads(readme_block("Qwen Code", "json"))["permissions"]["allow"]
    assert allowed == [QWEN_PREFIX + t.name for t in tools if t.annotations.read_only_hint], (
        "README, Qwen Code: list every tool whose readOnlyHint is true, and no other"
    )


@pytest.mark.anyio
async def test_qwen_offers_the_tools_and_gets_whole_answers(tmp_path: Path) -> None:
    listed = await default_tools(tmp_path / "list")
    with FakeOpenAiHosts() as api:
        api.script(
            Turn(function=QWEN_PREFIX + "plan_capacity", args={"max_model_len": 16384}),
            Turn(function=QWEN_PREFIX + "render_startup_script"),
            Turn(text=lambda body: "The tool says: " + tool_outputs(body)[0].split("\n")[0][:300]),
        )
        out = run_qwen(
            api, tmp_path, "How many KV tokens fit, and what will the VM run?", server_test_env(tmp_path)
        )
    assert out.returncode == 0, out.stderr[-3000:]
    first = api.requests[0]
    # Qwen Code defers MCP tools: the model sees each by name in a reminder and fetches schemas by search
    reminder = json.dumps(first["messages"])
    assert {"tool_search", "tool_call"} <= set(chat_tools(first))
    assert all(f'\\"{QWEN_PREFIX}{name}\\"' in reminder for name in listed), "every default tool is offered"
    plan, script = tool_outputs(api.requests[2])
    assert "321,376" in plan and "requires user approval" not in plan
    # text and structure together, whole: under Qwen Code's 25,000 characters, so never moved to a file
    for answer in (plan, script):
        assert len(answer) <= HOST_COMBINED_LIMIT + 10 and "persisted-output" not in answer
        assert answer.startswith("{") and '"summary"' in answer  # the structured form, then the text
    assert "tpu-devops://artifacts/startup-script-" in script


@pytest.mark.anyio
async def test_qwen_headless_declines_a_state_changing_tool(tmp_path: Path) -> None:
    with FakeGcp() as gcp, FakeOpenAiHosts() as api:
        gcp.tpu.add_foreign("us-west4-a", "gemma4-e2b", labels=RIG_LABELS)
        env_file = tmp_path / "tpu.env"
        env_file.write_text(f"GOOGLE_CLOUD_PROJECT={PROJECT}\n")
        api.script(
            Turn(function=QWEN_PREFIX + "destroy_queued_resource", args={"dry_run": False, "confirm": True}),
            Turn(text=lambda body: "result: " + json.dumps(tool_outputs(body))[:400]),
        )
        env = server_test_env(tmp_path, TPU_DEVOPS_ENV_FILE=str(env_file), TPU_DEVOPS_GCP_ENDPOINT=gcp.url)
        out = run_qwen(api, tmp_path, "Delete my TPU now.", env)
        assert gcp.tpu.state_of("us-west4-a", "gemma4-e2b") == "ACTIVE"
        assert not [r for r in gcp.tpu.requests if r["method"] == "DELETE"]
    assert out.returncode in (0, 1), out.stderr[-3000:]
    assert "requires user approval" in out.stderr + json.dumps(api.requests[-1])
