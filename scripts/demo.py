"""`make demo`: a scripted MCP session on the bundled real inputs, exactly as an MCP host would run it.

The official MCP client starts `mcp-run.sh` over stdio and calls the tools one by one; the transcript
shows what each tool answered. No Google Cloud account and no TPU are needed. When VLLM_URL points at
an OpenAI-compatible server (a local llama.cpp or Ollama, or the TPU), the model steps run too.
Exits non-zero if any step fails.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
MAX_LINES = int(os.environ.get("DEMO_MAX_LINES", "28"))

SEED_COMMAND = (DATA / "seed_serve_command.txt").read_text().strip()
IMAGE = next(
    (
        line.split("=", 1)[1].strip()
        for line in (ROOT / "tpu.env").read_text().splitlines()
        if line.startswith("VLLM_IMAGE=")
    ),
    "the pinned image",
)
BROKEN_COMMAND = (
    "vllm serve google/gemma-4-E2B-it --gpu-memory-utilization 0.95 --kv-cache-dtype fp8 "
    "--max-num-batched-tokens 2000 --disable-chunked-mm-input --block-size 16 --tensor-parallel-size 4"
)


@dataclass
class Step:
    """One tool call and what its structured answer must show."""

    title: str
    tool: str
    args: dict[str, Any]
    check: Callable[[dict[str, Any]], str | None] | None = None  # returns a failure reason or None
    notes: Callable[[dict[str, Any]], list[str]] | None = None  # lines always shown, never cut off


def expect(condition: bool, reason: str) -> str | None:
    return None if condition else reason


def steps() -> list[Step]:
    oom_log = str(DATA / "vllm-logs" / "v5e1-e2b-util095-program-oom.log")
    export = str(DATA / "logs" / "v5e1-util095-export.json")
    bench = str(DATA / "bench" / "v5e1-e2b-c128-u64.json")
    return [
        Step(
            "What this server offers",
            "get_help",
            {},
            lambda r: expect(len(r["tools"]) >= 24 and len(r["toolsets"]) >= 9, "fewer tools"),
        ),
        Step(
            "Gemma 4 E2B on one v5e chip at --gpu-memory-utilization 0.92",
            "plan_capacity",
            {"accelerator_type": "v5litepod-1", "gpu_memory_utilization": 0.92, "max_model_len": 16384},
            lambda r: expect(r["kv"]["bytes_per_token"] == 18432, "KV bytes/token is not 18,432"),
        ),
        Step(
            "The same at 0.95 (the setting that died 14 minutes into boot)",
            "plan_capacity",
            {"accelerator_type": "v5litepod-1", "gpu_memory_utilization": 0.95, "max_model_len": 16384},
        ),
        Step(
            "Lint the serve command of the build log this project started from (xbill9/gemma4-dev)",
            "lint_vllm_flags",
            {"command": SEED_COMMAND, "accelerator_type": "v5litepod-1"},
            lambda r: expect(r["errors"] == 0, "the build log's command has lint errors"),
        ),
        Step(
            "Lint a broken serve command",
            "lint_vllm_flags",
            {"command": BROKEN_COMMAND, "accelerator_type": "v5litepod-1"},
            lambda r: expect(r["errors"] >= 2, "the broken command was not flagged"),
        ),
        Step("Render the TPU VM startup script", "render_startup_script", {}),
        Step(
            "Diagnose the real boot log that ran out of memory",
            "diagnose_vllm_boot",
            {"path": oom_log},
            lambda r: expect("0.92" in str(r), "no fix to 0.92 in the diagnosis"),
            notes=lambda r: [
                f"note: this log is from a vLLM {r.get('vllm_version') or '0.26.x'} build (the real boot logs we "
                f"have are 0.26.x); tpu.env pins {IMAGE}, the release that served Gemma 4 E2B on v5e-1 in the "
                "build log (0.19.0 is the first vLLM with Gemma 4). The HBM arithmetic and the 0.92 fix are the same."
            ],
        ),
        Step(
            "Summarise a Cloud Logging export of that failure",
            "summarize_logs",
            {"path": export},
            lambda r: expect("RuntimeProgramAllocationFailure" in str(r), "root cause not in the summary"),
        ),
        Step(
            "Import the real v5e benchmark (128-token prompts, 64 clients) and price it",
            "run_benchmark",
            {"results_path": bench, "provisioning_model": "spot"},
        ),
        Step(
            "What a spot v5litepod-1 costs at the build log's best run, 1,496.5 tok/s (the file above: 1,381.5)",
            "estimate_deployment_cost",
            {"accelerator_type": "v5litepod-1", "provisioning_model": "spot", "tokens_per_s": 1496.5},
        ),
        Step(
            "Dry run: a flex-start queued resource in us-west4-a, its endpoint open to one address only",
            "plan_queued_resource",
            # a real plan detects your public IPv4; the demo names one (TEST-NET-3) so it asks nobody
            {
                "zone": "us-west4-a",
                "provisioning_model": "flex-start",
                "allowed_source_ranges": ["203.0.113.7/32"],
            },
            lambda r: expect(r["endpoint_access"]["source_ranges"] == ["203.0.113.7/32"], "no firewall rule"),
            notes=lambda r: (
                [f"warning: {w}" for w in r.get("warnings", [])]
                + [
                    f"endpoint access: {r['endpoint_access']['firewall_rule']} admits tcp:{r['endpoint_access']['port']} "
                    f"from {', '.join(r['endpoint_access']['source_ranges'])}; API key in secret "
                    f"{r['endpoint_access']['api_key_secret']}"
                ]
            ),
        ),
    ]


def model_steps() -> list[Step]:
    export = str(DATA / "logs" / "v5e1-util095-export.json")
    return [
        Step("Is the model endpoint healthy?", "verify_model_health", {}),
        Step(
            "Ask the model, with speed statistics",
            "query_gemma",
            {"prompt": "In one sentence: what is a TPU queued resource?", "max_tokens": 64, "stats": True},
        ),
        Step(
            "Ask the model why the boot failed, from the logs",
            "analyze_cloud_logging",
            {"question": "Why did vLLM fail to start?", "path": export},
        ),
    ]


def show(text: str) -> None:
    lines = text.splitlines()
    for line in lines[:MAX_LINES]:
        print(textwrap.indent(line, "    "))
    if len(lines) > MAX_LINES:
        print(f"    ... ({len(lines) - MAX_LINES} more lines)")


async def run_step(client: Client, n: int, step: Step) -> bool:
    print(f"\n[{n}] {step.title}\n  > {step.tool}({', '.join(f'{k}={v!r}' for k, v in step.args.items())})")
    result = await client.call_tool(step.tool, step.args)
    text = "\n".join(getattr(c, "text", "") for c in result.content)
    show(text)
    if step.notes and not result.is_error:
        for line in step.notes(result.structured_content or {}):
            print(textwrap.indent(line, "    "))
    if result.is_error:
        print(f"  FAILED: {step.tool} returned a tool error")
        return False
    try:
        reason = step.check(result.structured_content or {}) if step.check else None
    except (KeyError, TypeError, IndexError) as exc:
        reason = f"unexpected answer shape ({type(exc).__name__}: {exc})"
    if reason:
        print(f"  FAILED: {reason}")
        return False
    print("  ok")
    return True


async def main() -> int:
    state = ROOT / ".state" / "demo"
    state.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("TPU_DEVOPS_STATE_DIR", str(state))
    env.setdefault("TPU_DEVOPS_CACHE_DIR", str(state / "cache"))
    env.setdefault("TPU_DEVOPS_LOG_LEVEL", "WARNING")
    env.setdefault("TPU_DEVOPS_TOOLSETS", "default,bench")  # the demo prices a benchmark too
    # The demo promises no cloud: without credentials google-auth would probe the GCE metadata server,
    # and a plan without source ranges would ask a public service for your IP (loopback port 9 refuses).
    env.setdefault("NO_GCE_CHECK", "true")
    env.setdefault("PUBLIC_IP_LOOKUP_URL", "http://127.0.0.1:9/public-ip")
    params = StdioServerParameters(command=str(ROOT / "mcp-run.sh"), args=[], env=env, cwd=str(ROOT))
    plan = steps()
    vllm_url = env.get("VLLM_URL", "").strip()
    if vllm_url:
        plan += model_steps()
    failed = 0
    print("tpu-devops demo: an MCP client session over stdio on bundled real inputs")
    print(
        "Sources in the answers: 'DESIGN §N' is a section of docs/DESIGN.md (the domain facts, with their own "
        "sources);\n'seed' is the public build log this project was specified from (xbill9/gemma4-dev: Gemma 4 "
        "E2B on a v5e-1, measured)."
    )
    async with Client(params, read_timeout_seconds=180) as client:
        for n, step in enumerate(plan, 1):
            failed += not await run_step(client, n, step)
    if not vllm_url:
        print(
            "\nModel steps skipped (verify_model_health, query_gemma, analyze_cloud_logging): "
            "set VLLM_URL to any OpenAI-compatible server, e.g.\n"
            "    VLLM_URL=http://127.0.0.1:8080 make demo     # llama.cpp server, Ollama (:11434), or the TPU"
        )
    if failed:
        print(f"\ndemo: {failed} step(s) FAILED")
        return 1
    print(f"\ndemo: all steps passed ({len(plan)} tool calls)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
