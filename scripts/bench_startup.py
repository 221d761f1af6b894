"""Cold start: spawn -> `initialize` -> `tools/list` answered, median of 10, as a ratio to a bare
MCPServer with one tool measured in the same run. Targets: at most 1.10x with the schema cache, 1.5x
without, and the `initialize` answer within 1.05x of the bare server's (hosts such as Codex give a server
1,000 ms to answer it before they start the model without its tools).

A client spawns the server at every session, so the target is measured the way that happens after the
first start: with the tool schema cache written (`tpu_devops.host.tool_cache`; one unmeasured start fills a
fresh cache directory). The start without a cache (first start after an install or an edit, or
``TPU_DEVOPS_CACHE_DIR=off``) is measured in the same loop and printed too."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUNS = 10

MESSAGES: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def spawn_to_tools_list(script: Path, **extra_env: str) -> tuple[float, int, float]:
    """Seconds from spawn to the tools/list answer, the number of tools listed, and seconds from spawn to
    the initialize answer."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")} | extra_env
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdin and proc.stdout
    count = -1
    initialized = 0.0
    for message in MESSAGES:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" not in message:
            continue
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{script.name} exited before answering {message['method']}")
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                if message["method"] == "tools/list":
                    count = len(answer["result"]["tools"])
                else:
                    initialized = time.perf_counter() - start
                break
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed, count, initialized


def run() -> list[str]:
    ours, uncached, bare, ours_init, bare_init = [], [], [], [], []
    tools = 0
    with tempfile.TemporaryDirectory() as cache_dir:
        spawn_to_tools_list(ROOT / "server.py", TPU_DEVOPS_CACHE_DIR=cache_dir)  # writes the cache
        for _ in range(RUNS):  # interleaved so that machine noise hits all alike
            t, tools, init = spawn_to_tools_list(ROOT / "server.py", TPU_DEVOPS_CACHE_DIR=cache_dir)
            ours.append(t)
            ours_init.append(init)
            uncached.append(spawn_to_tools_list(ROOT / "server.py", TPU_DEVOPS_CACHE_DIR="off")[0])
            t, _, init = spawn_to_tools_list(ROOT / "scripts" / "bare_server.py")
            bare.append(t)
            bare_init.append(init)
    base = statistics.median(bare)
    ratio = statistics.median(ours) / base
    cold = statistics.median(uncached) / base
    init_ratio = statistics.median(ours_init) / statistics.median(bare_init)

    def verdict(value: float, target: float) -> str:
        return f"{value:.2f}x (target <= {target:.2f}x) {'OK' if value <= target else 'OVER TARGET'}"

    return [
        f"cold start (spawn -> tools/list, median of {RUNS}): tpu-devops {statistics.median(ours) * 1000:.0f} ms "
        f"with {tools} tools (default toolsets) and the schema cache vs bare MCPServer {base * 1000:.0f} ms with 1 tool",
        f"cold start ratio with the schema cache: {verdict(ratio, 1.10)}",
        f"cold start without the schema cache: {statistics.median(uncached) * 1000:.0f} ms = {verdict(cold, 1.5)} "
        "(once after each install, upgrade or source edit, or every start with TPU_DEVOPS_CACHE_DIR=off)",
        f"initialize answered after {statistics.median(ours_init) * 1000:.0f} ms vs bare "
        f"{statistics.median(bare_init) * 1000:.0f} ms: {verdict(init_ratio, 1.05)}",
    ]


if __name__ == "__main__":
    print("\n".join(run()))
