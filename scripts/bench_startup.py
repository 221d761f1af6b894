"""Cold start: spawn -> `initialize` -> `tools/list` answered, median of 10, as a ratio to a bare
MCPServer with one tool measured in the same run (issue 2 target: at most 1.25x)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 10

MESSAGES = [
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


def spawn_to_tools_list(script: Path) -> tuple[float, int]:
    """Seconds from spawn to the tools/list answer, and the number of tools listed."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
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
                break
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed, count


def run() -> list[str]:
    ours, bare = [], []
    tools = 0
    for _ in range(RUNS):  # interleaved so that machine noise hits both alike
        t, tools = spawn_to_tools_list(ROOT / "server.py")
        ours.append(t)
        bare.append(spawn_to_tools_list(ROOT / "scripts" / "bare_server.py")[0])
    ratio = statistics.median(ours) / statistics.median(bare)
    verdict = "OK" if ratio <= 1.25 else "OVER TARGET"
    return [
        f"cold start (spawn -> tools/list, median of {RUNS}): tpu-devops {statistics.median(ours) * 1000:.0f} ms "
        f"with {tools} tools vs bare MCPServer {statistics.median(bare) * 1000:.0f} ms with 1 tool",
        f"cold start ratio: {ratio:.2f}x (target <= 1.25x) {verdict}",
    ]


if __name__ == "__main__":
    print("\n".join(run()))
