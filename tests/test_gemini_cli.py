"""The real Gemini CLI (npm ``@google/gemini-cli``, installed by ``make setup``) as the agent host.

Set up with only what the README says (``make gemini-extension``) in a throwaway HOME, driven headless
(``gemini -p``, default approval mode) against a scripted fake of the Gemini API (`tests.fakes.gemini_api`;
``GOOGLE_GEMINI_BASE_URL`` + ``GEMINI_API_KEY``, loopback only). The CLI's own settings only select the
API-key authentication the fake answers and turn off telemetry and update checks, so that nothing leaves
the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT
from tests.fakes.gcp import FakeGcp
from tests.fakes.gemini_api import FakeGeminiApi, Turn, declarations, function_responses
from tests.host_scenarios import DEFAULT_DECLARATION_BUDGET, GEMINI_CLI_PER_TOOL_BYTES, declaration_bytes
from tests.mcp_session import ROOT, TEST_CACHE_DIR, mcp_client

GEMINI = ROOT / "node_modules" / ".bin" / "gemini"
OURS = "mcp_tpu-devops_"
RIG_LABELS = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
CLI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "telemetry": {"enabled": False},
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A HOME with the extension installed the way the README says: ``make gemini-extension``."""
    if not GEMINI.exists():
        pytest.fail(f"{GEMINI} is missing: run make setup (it installs @google/gemini-cli from package.json)")
    home = tmp_path_factory.mktemp("home")
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(CLI_SETTINGS))
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "GEMINI": str(GEMINI)}
    out = subprocess.run(
        ["make", "--no-print-directory", "gemini-extension"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "(ignored)" not in out.stdout + out.stderr  # make's "Error 1 (ignored)": a clean run says none
    assert (home / ".gemini" / "policies" / "tpu-devops-read-only.toml").is_file()
    return home


def run_gemini(
    home: Path, api: FakeGeminiApi, state: Path, prompt: str, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``gemini -p PROMPT`` in default approval mode; the server it starts reads ``env`` (tpu.env path, fake
    Google endpoint), as the CLI passes a sanitized copy of its own environment to MCP servers."""
    full = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "GEMINI_API_KEY": "fake-key-for-the-loopback-fake",
        "GOOGLE_GEMINI_BASE_URL": api.url,
        "TPU_DEVOPS_STATE_DIR": str(state),
        "TPU_DEVOPS_CACHE_DIR": TEST_CACHE_DIR,
        "NO_GCE_CHECK": "true",
        **env,
    }
    return subprocess.run(
        [str(GEMINI), "-p", prompt, "-m", "gemini-2.5-flash", "--skip-trust"],
        cwd=cwd or state,
        env=full,
        capture_output=True,
        text=True,
        timeout=240,
    )


def ours(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"][len(OURS) :]: d for d in declarations(request) if d["name"].startswith(OURS)}


def first_answer_line(body: dict[str, Any]) -> str:
    """What a model does with a tool answer: tell the user its first line."""
    responses = function_responses(body)
    if not responses:
        return "no tool answer"
    output = str(responses[0].get("response", {}).get("output") or responses[0].get("response"))
    lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith("<")]
    return f"The tool says: {lines[0] if lines else output[:200]}"


def env_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tpu.env"
    path.write_text(text)
    return str(path)


@pytest.mark.anyio
async def test_headless_run_offers_the_read_only_tools_and_calls_one(home: Path, tmp_path: Path) -> None:
    # what a server with the default toolsets lists (the CLI passes no TPU_DEVOPS_TOOLSETS)
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path), TPU_DEVOPS_TOOLSETS="") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    read_only = {n for n, t in listed.items() if t.annotations.read_only_hint}
    with FakeGeminiApi() as api:
        api.script(
            Turn(function=f"{OURS}plan_capacity", args={"max_model_len": 16384}), Turn(text=first_answer_line)
        )
        out = run_gemini(
            home, api, tmp_path, "How many KV tokens fit?", TPU_DEVOPS_ENV_FILE=env_file(tmp_path, "")
        )
    assert out.returncode == 0, out.stderr
    offered = ours(api.requests[0])
    assert set(offered) == read_only, f"offered {sorted(offered)}"
    assert not {"destroy_queued_resource", "create_tpu_queued_resource", "save_hf_token"} & set(offered)
    # as the CLI sends them: our computation (make bench) is the real byte count
    sent = sum(
        len(json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()) for d in offered.values()
    )
    assert sent == declaration_bytes([listed[n] for n in offered]) <= DEFAULT_DECLARATION_BUDGET
    wait = offered["plan_capacity"]["parametersJsonSchema"]["properties"]["wait_for_previous"]
    assert len(',"wait_for_previous":' + json.dumps(wait, separators=(",", ":"))) == GEMINI_CLI_PER_TOOL_BYTES
    [response] = function_responses(api.requests[1])
    assert "321,376" in json.dumps(response)  # the real server answered: Gemma 4 E2B's KV tokens at 0.92
    assert "The tool says: google/gemma-4-E2B-it on v5litepod-1: 321,376 KV tokens" in out.stdout


@pytest.mark.anyio
async def test_a_state_changing_call_is_not_run_without_the_user(home: Path, tmp_path: Path) -> None:
    with FakeGcp() as gcp, FakeGeminiApi() as api:
        gcp.tpu.add_foreign("us-west4-a", "gemma4-e2b", labels=RIG_LABELS)
        # a prompt-injected or overeager model asks for the deletion outright
        api.script(
            Turn(function=f"{OURS}destroy_queued_resource", args={"dry_run": False, "confirm": True}),
            Turn(text=lambda body: f"result: {json.dumps(function_responses(body))[:400]}"),
        )
        out = run_gemini(
            home,
            api,
            tmp_path,
            "Delete my TPU now.",
            TPU_DEVOPS_ENV_FILE=env_file(tmp_path, f"GOOGLE_CLOUD_PROJECT={PROJECT}\n"),
            TPU_DEVOPS_GCP_ENDPOINT=gcp.url,
        )
        assert gcp.tpu.state_of("us-west4-a", "gemma4-e2b") == "ACTIVE"
        assert not [r for r in gcp.tpu.requests if r["method"] == "DELETE"]
    assert "destroy_queued_resource" not in ours(api.requests[0])
    refusal = json.dumps(function_responses(api.requests[1]))
    assert "destroy_queued_resource" in refusal and "nothing was deleted" not in refusal  # refused by the CLI
    assert out.returncode in (0, 1), out.stderr


@pytest.mark.anyio
async def test_an_invalid_tpu_env_is_visible_through_the_cli(home: Path, tmp_path: Path) -> None:
    with FakeGeminiApi() as api:
        api.script(Turn(function=f"{OURS}get_help"), Turn(text=first_answer_line))
        out = run_gemini(
            home,
            api,
            tmp_path,
            "Is tpu-devops set up?",
            TPU_DEVOPS_ENV_FILE=env_file(
                tmp_path, "GOOGLE_CLOUD_ZONE=europe-west4-a\nGOOGLE_CLOUD_REGION=us-west4\n"
            ),
        )
    assert out.returncode == 0, out.stderr
    assert ours(api.requests[0]), "the server must start and list its tools despite the bad setting"
    assert "The tool says: CONFIGURATION ERROR" in out.stdout
    assert "GOOGLE_CLOUD_ZONE = 'europe-west4-a'" in out.stdout and "Fix:" in out.stdout


@pytest.mark.anyio
async def test_files_in_the_users_workspace_are_read_by_relative_and_absolute_path(
    home: Path, tmp_path: Path
) -> None:
    """The extension starts the server in the user's workspace (``${workspacePath}``) and Gemini CLI declares
    it as a root: a relative path is read from there, and an absolute one inside it is allowed."""
    workspace, state = tmp_path / "workspace", tmp_path / "state"
    (workspace / "logs").mkdir(parents=True)
    state.mkdir()
    shutil.copy(
        ROOT / "tests" / "data" / "vllm-logs" / "v5e1-e2b-util095-program-oom.log", workspace / "boot.log"
    )
    shutil.copy(ROOT / "tests" / "data" / "vllm-logs" / "v6e1-e2b-boot-ok.log", workspace / "logs" / "ok.log")
    with FakeGeminiApi() as api:
        api.script(
            Turn(function=f"{OURS}diagnose_vllm_boot", args={"path": "boot.log"}),
            Turn(function=f"{OURS}diagnose_vllm_boot", args={"path": str(workspace / "logs" / "ok.log")}),
            Turn(text=lambda body: "answers: " + json.dumps(function_responses(body))[:2000]),
        )
        out = run_gemini(
            home, api, state, "Why did vLLM not boot?", cwd=workspace, TPU_DEVOPS_ENV_FILE=env_file(state, "")
        )
    assert out.returncode == 0, out.stderr
    [relative] = function_responses(api.requests[1])
    [absolute] = function_responses(api.requests[2])
    assert "program-allocation" in json.dumps(relative) or "RuntimeProgramAllocationFailure" in json.dumps(
        relative
    )
    assert "no such file" not in json.dumps(relative) and "outside the directories" not in json.dumps(
        absolute
    )
    assert "boot OK" in json.dumps(absolute) or "Application startup complete" in json.dumps(absolute)
