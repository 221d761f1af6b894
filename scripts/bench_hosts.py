"""What hosts pay per model request and per answer, and whether Codex gets the tools.

Declarations: the bytes of our function declarations as Gemini CLI sends them to the model on every
turn (all tools, and the read-only set a headless run offers), against the 30,000-byte budget. Answers:
every tool called once on the bundled inputs through the official MCP client (`tests.host_scenarios`):
text and structured sizes, their ratio (goal `RATIO_GOAL`), and each against the host limits (text <=
20,000 characters, text + structure <= 25,000: Qwen Code's). Codex: the real Codex CLI (node_modules)
started with its default MCP settings against the scripted model fake, N times: how long the server took
from spawn to its ``initialize`` answer as Codex logged it, against Codex's 1,000 ms grace for optional
servers and a bare MCPServer's time in the same runs, and in how many runs the model got the tools.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CODEX = ROOT / "node_modules" / ".bin" / "codex"
CODEX_GRACE_S = 1.0  # Codex 0.171 `mcp_optional_startup_grace_ms` default
CODEX_RUNS = 5


def run() -> list[str]:
    from tests.host_scenarios import DECLARATION_BUDGET, RATIO_GOAL, declaration_bytes, run_every_tool
    from tpu_devops.host.results import HOST_COMBINED_LIMIT, HOST_TEXT_LIMIT

    with tempfile.TemporaryDirectory() as state:
        transcript = asyncio.run(run_every_tool(Path(state)))
    read_only = [t for t in transcript.listed if t.annotations.read_only_hint]
    out = [
        f"declarations, all {len(transcript.listed)} tools: {declaration_bytes(transcript.listed):,} bytes "
        f"(budget {DECLARATION_BUDGET:,}: {declaration_bytes(transcript.listed) / DECLARATION_BUDGET:.2f}x)",
        f"declarations, {len(read_only)} read-only tools: {declaration_bytes(read_only):,} bytes "
        f"({declaration_bytes(read_only) / DECLARATION_BUDGET:.2f}x)",
    ]
    ratios = []
    for a in transcript.answers:
        ratio = a.structured_chars / max(1, a.text_chars)
        ratios.append(ratio)
        flags = "" if ratio <= RATIO_GOAL else f"  > {RATIO_GOAL}"
        if a.text_chars > HOST_TEXT_LIMIT or a.both_chars > HOST_COMBINED_LIMIT:
            flags += "  OVER THE HOST LIMITS"
        files = f"  +{len(a.links)} file(s)" if a.links else ""
        out.append(
            f"{a.tool:32s} text {a.text_chars:6,d}  structured {a.structured_chars:6,d}  both {a.both_chars:6,d}"
            f"  ratio {ratio:4.2f}{files}{flags}"
        )
    biggest_text = max(transcript.answers, key=lambda a: a.text_chars)
    biggest_both = max(transcript.answers, key=lambda a: a.both_chars)
    out.append(
        f"largest text {biggest_text.text_chars:,} ({biggest_text.tool}, limit {HOST_TEXT_LIMIT:,}), largest text + "
        f"structured {biggest_both.both_chars:,} ({biggest_both.tool}, limit {HOST_COMBINED_LIMIT:,}) characters"
    )
    out.append(
        f"structured/text ratio: max {max(ratios):.2f}, tools over {RATIO_GOAL}: {sum(r > RATIO_GOAL for r in ratios)}"
    )
    out.extend(codex_startup())
    return out


def codex_startup(runs: int = CODEX_RUNS) -> list[str]:
    """Codex with default MCP settings: our server's and a bare server's spawn-to-initialize times, and the
    runs in which the model got our tools."""
    if not CODEX.exists():
        return [f"codex: {CODEX} missing (make setup): not measured"]
    ours, bare, offered = [], [], 0
    with tempfile.TemporaryDirectory() as home:
        for _ in range(runs):
            offered += _codex_once(Path(home), f"{ROOT}/mcp-run.sh")[1]  # default settings: tools or not
            ours.append(_codex_once(Path(home), f"{ROOT}/mcp-run.sh", required=True)[0])
            bare.append(
                _codex_once(Path(home), f"{ROOT}/.venv/bin/python {ROOT}/scripts/bare_server.py", True)[0]
            )
    first, warm = ours[0], statistics.median(ours[1:]) if runs > 1 else ours[0]
    return [
        f"codex {_codex_version()}, {runs} runs: initialize answered {first * 1000:,.0f} ms after spawn on the "
        f"first start (its schema cache was written by the default-settings run before), then median "
        f"{warm * 1000:,.0f} ms; bare MCPServer "
        f"median {statistics.median(bare) * 1000:,.0f} ms ({warm / statistics.median(bare):.2f}x); Codex waits "
        f"{CODEX_GRACE_S * 1000:,.0f} ms: the model got the tools in {offered} of {runs} runs "
        "(README: required = true waits)"
    ]


def _codex_version() -> str:
    out = subprocess.run([str(CODEX), "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip().split()[-1] if out.returncode == 0 else "?"


def _codex_once(home: Path, command: str, required: bool = False) -> tuple[float, bool]:
    """One ``codex exec`` with the server ``command``, under Codex's default settings or with ``required =
    true`` (Codex then waits, so the initialize time is measured even when it exceeds the grace): (seconds
    from spawn to the initialize answer, or NaN when Codex finished first; whether the model's first
    request carried the server's tools). The spawn is stamped by a wrapper script; the answer by Codex's own
    log line ``Service initialized``."""
    from tests.fakes.openai_hosts import FakeOpenAiHosts, Turn, responses_tools

    stamp = home / "spawned"
    stamp.unlink(missing_ok=True)
    wrapper = home / "timed-server.sh"
    wrapper.write_text(f'#!/bin/bash\ndate +%s.%N > "{stamp}"\nexec {command} "$@"\n')
    wrapper.chmod(0o755)
    env = {"NO_GCE_CHECK": "true", "TPU_DEVOPS_STATE_DIR": str(home / "state")}
    with FakeOpenAiHosts() as api:
        (home / ".codex").mkdir(exist_ok=True)
        (home / ".codex" / "config.toml").write_text(
            "\n".join(
                [
                    'model = "gpt-5-codex"',
                    'model_provider = "fake"',
                    "check_for_update_on_startup = false",
                    "[model_providers.fake]",
                    'name = "fake"',
                    f'base_url = "{api.url}/v1"',
                    'wire_api = "responses"',
                    'env_key = "FAKE_OPENAI_KEY"',
                    "[features]",
                    "plugins = false",
                    "apps = false",
                    "[mcp_servers.timed]",
                    f'command = "{wrapper}"',
                    *(["required = true"] if required else []),
                    "[mcp_servers.timed.env]",
                    *(f'{k} = "{v}"' for k, v in env.items()),
                ]
            )
        )
        api.script(Turn(text="ok"))
        out = subprocess.run(
            [str(CODEX), "exec", "--skip-git-repo-check", "hi"],
            cwd=home,
            env={
                "HOME": str(home),
                "PATH": os.environ["PATH"],
                "FAKE_OPENAI_KEY": "k",
                "RUST_LOG": "rmcp=info",
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
        got_tools = bool(api.requests) and any(
            n.startswith("mcp__timed") for n in responses_tools(api.requests[0])
        )
    line = next((ln for ln in out.stderr.splitlines() if "Service initialized" in ln), None)
    if line is None or not stamp.exists():
        return float("nan"), got_tools
    answered = datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
    return answered - float(stamp.read_text()), got_tools


if __name__ == "__main__":
    print("\n".join(run()))
