"""A user with no project and no credentials: the first `get_help`, `check_setup` and
`plan_queued_resource` of a fresh server, as a ratio to the same call with ``NO_GCE_CHECK=true`` measured
in the same loop (median of `RUNS`: ``BENCH_RUNS``, default 5; ``BENCH_TOOLS`` picks the calls). Target: at most 1.20x, whether no metadata server is configured, one
is configured (``GCE_METADATA_HOST`` / ``GCE_METADATA_IP``) on a loopback port that accepts and never
answers, or on one that drops the connection attempt.

Every server runs under `tests.loopback_only` (a dial beyond loopback is refused and counted: the count must
be 0), with an empty HOME (no gcloud files) and no tpu.env. Before the change google-auth's metadata ping
(3 tries, 1 s + 2 s pauses) made these 3.7 s, 6.7 s and 9.6 s against 0.3 s, 0.7 s and 0.8 s.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
TARGET = 1.20
CALLS: dict[str, dict[str, object]] = {"get_help": {}, "check_setup": {}, "plan_queued_resource": {}}
if os.environ.get("BENCH_TOOLS"):  # e.g. BENCH_TOOLS=get_help to measure one call with more runs
    CALLS = {t: CALLS[t] for t in os.environ["BENCH_TOOLS"].split(",")}


async def first_call(tool: str, env: dict[str, str]) -> float:
    """Seconds the first ``tool`` call of a fresh server takes (after ``initialize``)."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.loopback_only", "server.py"], env=env, cwd=str(ROOT)
    )
    async with Client(params, read_timeout_seconds=120) as client:
        start = time.perf_counter()
        await client.call_tool(tool, CALLS[tool])
        return time.perf_counter() - start


def base_env(home: str, log: str, cache: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        "TPU_DEVOPS_ENV_FILE": "none",
        "TPU_DEVOPS_CACHE_DIR": cache,
        "TPU_DEVOPS_STATE_DIR": str(Path(home) / "state"),
        "ALLOWED_SOURCE_RANGES": "203.0.113.7/32",  # no public-IP lookup
        "LOOPBACK_ONLY_LOG": log,
    }


def run() -> list[str]:
    lines = []
    with tempfile.TemporaryDirectory() as home:
        log = str(Path(home) / "dials.jsonl")
        base = base_env(home, log, str(Path(home) / "cache"))
        anyio.run(first_call, "get_help", base)  # writes the schema cache
        from tests.fakes.dead_ports import dropping_port, silent_port

        scenarios: dict[str, contextlib.AbstractContextManager[tuple[str, list[socket.socket]]]] = {
            "no metadata server configured": contextlib.nullcontext(("", [])),
            "metadata host never answers": silent_port(),
            "metadata host drops": dropping_port(),
        }
        for label, context in scenarios.items():
            with context as (address, _):
                env = dict(base)
                if address:
                    env |= {"GCE_METADATA_HOST": address, "GCE_METADATA_IP": address}
                for tool in CALLS:
                    ref: list[float] = []
                    got: list[float] = []
                    for i in range(RUNS):  # interleaved, in alternating order: noise hits both alike
                        pair = [(ref, {**base, "NO_GCE_CHECK": "true"}), (got, env)]
                        for into, run_env in pair if i % 2 == 0 else pair[::-1]:
                            into.append(anyio.run(first_call, tool, run_env))
                    ratio = statistics.median(got) / statistics.median(ref)
                    verdict = "OK" if ratio <= TARGET else "OVER TARGET"
                    lines.append(
                        f"{label}: first {tool} {statistics.median(got) * 1000:.0f} ms vs "
                        f"{statistics.median(ref) * 1000:.0f} ms with NO_GCE_CHECK=true: {ratio:.2f}x "
                        f"(target <= {TARGET:.2f}x) {verdict}"
                    )
        dials = Path(log).read_text().splitlines() if Path(log).exists() else []
        lines.append(f"dials beyond loopback refused: {len(dials)} (target 0)")
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
