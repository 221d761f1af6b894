"""End to end over stdio: the official MCP client starts server.py, lists tools, calls get_help; raw
JSON-RPC shows that nothing but protocol messages reaches stdout; bad settings stop the server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator

import pytest
from mcp import Client

from tests.fakes.openai_server import FakeVllm
from tests.mcp_session import ROOT, mcp_client, server_env


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def default_server() -> AsyncIterator[Client]:
    """One server with the default settings, shared by the tests that only list tools and make calls that
    change nothing (get_help, refusals): a server process each cost its start and showed nothing more."""
    async with mcp_client() as client:
        yield client


@pytest.mark.anyio
async def test_client_lists_tools_with_annotations_and_calls_get_help(default_server: Client) -> None:
    client = default_server
    listed = (await client.list_tools()).tools
    names = [t.name for t in listed]
    assert "get_help" in names and "get_job" in names
    for t in listed:
        a = t.annotations
        assert a is not None, t.name
        for hint in (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint):
            assert hint is not None, f"{t.name} lacks an explicit annotation"
        assert t.description, t.name
    result = await client.call_tool("get_help", {})
    assert not result.is_error
    help_ = result.structured_content
    assert help_["server"] == "tpu-devops-gemma4-e2b"
    assert {t["name"] for t in help_["tools"]} == set(names)
    assert help_["configuration"]["accelerator_type"] == "v5litepod-1"
    assert "get_help" in result.content[0].text


@pytest.mark.anyio
async def test_read_only_mode_hides_every_tool_that_is_not_read_only(default_server: Client) -> None:
    full = (await default_server.list_tools()).tools
    with FakeVllm(itl_s=0.05) as vllm, tempfile.TemporaryDirectory() as state:
        async with mcp_client(
            TPU_DEVOPS_READ_ONLY="1", VLLM_URL=vllm.url, TPU_DEVOPS_STATE_DIR=state
        ) as client:
            ro = (await client.list_tools()).tools
            help_ = (await client.call_tool("get_help", {})).structured_content
            # read-only mode still starts benchmark jobs, so it keeps the tool that stops them
            started = await client.call_tool("run_benchmark", {"concurrency": [1], "prompt_lengths": [128]})
            assert not started.is_error, started.content[0].text
            cancelled = await client.call_tool("cancel_job", {"job_id": started.structured_content["job_id"]})
            hidden = {t.name for t in full} - {t.name for t in ro}
            refused = {name: await client.call_tool(name, {}) for name in sorted(hidden)}
    for name, answer in refused.items():  # a hidden tool called anyway says why and how to get it back
        text = answer.content[0].text
        assert (
            answer.is_error and "read-only" in text and "TPU_DEVOPS_READ_ONLY=0" in text and "Fix: " in text
        ), text
        assert name in text
    assert {"create_tpu_queued_resource", "destroy_queued_resource", "save_hf_token"} <= set(refused)
    assert {t.name for t in ro} == {t.name for t in full if t.annotations.read_only_hint} | {"cancel_job"}
    assert all(t.annotations.read_only_hint for t in ro if t.name != "cancel_job")
    assert not cancelled.is_error and cancelled.structured_content["state"] == "cancelled"
    assert help_["read_only_mode"] is True
    assert len(ro) < len(full)


@pytest.mark.anyio
async def test_domain_error_becomes_tool_error_with_fix(default_server: Client) -> None:
    result = await default_server.call_tool("get_job", {"job_id": "nope-1"})
    assert result.is_error
    text = result.content[0].text
    assert "job_id" in text and "nope-1" in text and "Fix:" in text
    assert "Traceback" not in text


def _raw_session(messages: list[dict], **env: str) -> tuple[list[str], str, int]:
    """Send messages one by one, waiting for each request's answer, then close stdin."""
    errfile = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty stderr cannot block the server
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errfile,
        text=True,
        env=server_env(**env),
        cwd=ROOT,
    )
    lines: list[str] = []
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" not in message:
                continue
            while True:  # every line before the answer is kept: it must be JSON-RPC too
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip("\n"))
                if json.loads(line).get("id") == message["id"]:
                    break
        proc.stdin.close()
        proc.wait(timeout=60)
        rest = proc.stdout.read()
        errfile.seek(0)
        stderr = errfile.read()
    finally:
        proc.kill()
    lines.extend(rest.splitlines())
    return lines, stderr, proc.returncode


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


def test_stdout_carries_only_json_rpc() -> None:
    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_help", "arguments": {}}},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "get_job", "arguments": {"job_id": "x"}},
        },
    ]
    lines, stderr, _ = _raw_session(messages, TPU_DEVOPS_LOG_LEVEL="DEBUG")
    assert lines, stderr
    ids = []
    for line in lines:
        msg = json.loads(line)  # every stdout line must be JSON
        assert msg.get("jsonrpc") == "2.0", line
        ids.append(msg.get("id"))
    assert {1, 2, 3, 4} <= set(ids)
    assert "get_job" in stderr  # the refusal was logged, to stderr


@pytest.mark.anyio
async def test_an_invalid_setting_is_shown_inside_the_host_and_the_server_still_starts(tmp_path) -> None:
    """The server does not exit before initialize (a bare "Disconnected"); the error reaches the host."""
    env_file = tmp_path / "tpu.env"
    env_file.write_text("GOOGLE_CLOUD_ZONE=europe-west4-a\nGOOGLE_CLOUD_REGION=us-west4\n")
    errlog = tmp_path / "stderr.log"
    with open(errlog, "w") as err:
        async with mcp_client(
            errlog=err,
            TPU_DEVOPS_ENV_FILE=str(env_file),
            TPU_DEVOPS_STATE_DIR=str(tmp_path),
            GOOGLE_CLOUD_PROJECT="demo-project",
        ) as client:
            assert len((await client.list_tools()).tools) > 30
            help_ = await client.call_tool("get_help", {})
            text = help_.content[0].text
            assert not help_.is_error and text.startswith("CONFIGURATION ERROR")
            assert (
                "GOOGLE_CLOUD_ZONE = 'europe-west4-a'" in text.splitlines()[0]
                and "Fix:" in text.splitlines()[0]
            )
            assert help_.structured_content["summary"].startswith("CONFIGURATION ERROR")
            setup = await client.call_tool("check_setup", {})
            assert setup.content[0].text.startswith("CONFIGURATION ERROR: GOOGLE_CLOUD_ZONE")
            assert setup.structured_content["checks"][0]["name"] == "configuration"
            plan = await client.call_tool("plan_queued_resource", {})  # needs the zone
            assert plan.is_error and "GOOGLE_CLOUD_ZONE = 'europe-west4-a'" in plan.content[0].text
            assert "restart the server" in plan.content[0].text
            capacity = await client.call_tool("plan_capacity", {})  # needs no zone
            assert not capacity.is_error, capacity.content[0].text
    stderr = errlog.read_text()
    assert (
        "tpu-devops: invalid configuration: GOOGLE_CLOUD_ZONE = 'europe-west4-a'" in stderr
        and "Fix:" in stderr
    )
    assert "Traceback" not in stderr


def test_check_config_still_refuses_an_invalid_setting() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tpu_devops.main", "--check-config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(GOOGLE_CLOUD_ZONE="uswest4a"),
        timeout=60,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert (
        "tpu-devops: invalid configuration: GOOGLE_CLOUD_ZONE = 'uswest4a'" in out.stderr
        and "Fix:" in out.stderr
    )
    assert "Traceback" not in out.stderr


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("creat_tpu_queued_resource", "create_tpu_queued_resource"),
        ("get_hlep", "get_help"),
        ("rm -rf /", None),
    ],
)
async def test_an_unknown_tool_gets_the_closest_name_and_get_help(
    default_server: Client, name: str, hint: str | None
) -> None:
    answer = await default_server.call_tool(name, {})
    text = answer.content[0].text
    assert answer.is_error and "unknown tool" in text and "get_help lists every tool" in text, text
    assert (f"did you mean {hint}" in text) if hint else "did you mean" not in text


def test_an_unknown_pagination_cursor_is_invalid_params() -> None:
    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "bogus"}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": ""}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"cursor": None}},
    ]
    lines, stderr, _ = _raw_session(messages)
    answers = {m["id"]: m for m in map(json.loads, lines) if "id" in m}
    for refused in (2, 3):
        assert answers[refused]["error"]["code"] == -32602, answers[refused]
        assert "cursor" in answers[refused]["error"]["message"]
    for listed in (4, 5):  # no cursor (or null): the one page, with no nextCursor
        assert answers[listed]["result"]["tools"] and "nextCursor" not in answers[listed]["result"]


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["int", "term"]
)
def test_sigint_and_sigterm_stop_the_server_with_stdin_still_open(signum: int, code: int) -> None:
    errfile = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errfile,
        text=True,
        env=server_env(),
        cwd=ROOT,
    )
    try:
        proc.stdin.write(json.dumps(INITIALIZE) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1  # serving, stdin open, reader blocked
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == code  # within ms here; 10 s only bounds a loaded machine
    finally:
        proc.kill()
        proc.stdin.close()
    errfile.seek(0)
    stderr = errfile.read()
    assert f"tpu-devops: stopped ({signal.Signals(signum).name})." in stderr
    assert "Traceback" not in stderr


@pytest.mark.anyio
async def test_a_misspelt_tpu_env_key_is_reported_by_get_help_and_on_stderr(tmp_path) -> None:
    env_file = tmp_path / "tpu.env"
    env_file.write_text("GPU_MEMORY_UTILISATION=0.95\n")
    errlog = tmp_path / "stderr.log"
    with open(errlog, "w") as err:
        async with mcp_client(errlog=err, TPU_DEVOPS_ENV_FILE=str(env_file)) as client:
            help_ = await client.call_tool("get_help", {})
    expected = (
        f"GPU_MEMORY_UTILISATION: unknown key in {env_file} (ignored): did you mean GPU_MEMORY_UTILIZATION? "
        "Fix: rename it to GPU_MEMORY_UTILIZATION"
    )
    assert help_.structured_content["configuration_errors"] == [expected]
    assert help_.content[0].text.startswith(f"CONFIGURATION ERROR (tpu-devops-gemma4-e2b): {expected}")
    assert help_.structured_content["configuration"]["gpu_memory_utilization"] == 0.92
    assert f"tpu-devops: invalid configuration: {expected}" in errlog.read_text()
