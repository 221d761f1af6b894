"""Benchmark of the benchmark client: does `run_benchmark` measure the server, not itself?

The vLLM-shaped fake runs in its own process (no shared GIL with the client), programmed with a known
TTFT and TPOT (absolute per-request schedule: token i at TTFT + i x TPOT). The sweep's cell runner
(`tpu_devops.serving.benchmark.measure_cell`, the real openai client) then runs at 1, 16 and 64
concurrent clients. Printed: measured median TTFT and TPOT as ratios to the programmed values
(target: within 3%, i.e. 0.97-1.03). `run()` returns the printed lines for `make bench`.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tpu_devops.serving import benchmark  # noqa: E402
from tpu_devops.serving.client import close_all  # noqa: E402

# The seed's measured medians at 64 clients x 128-token prompts on v5e-1 (fixture
# v5e1-e2b-c128-u64.json: median TTFT 359 ms, median TPOT 43.9 ms), so the client is checked at the
# load it will really see.
TTFT_S = 0.360
TPOT_S = 0.044
OUTPUT_LEN = 64
PROMPT_TOKENS = 128
CONCURRENCY = (1, 16, 64)
MODEL = "google/gemma-4-E2B-it"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_fake() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.openai_server",
            "--port",
            str(port),
            "--ttft",
            str(TTFT_S),
            "--itl",
            str(TPOT_S),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the fake server did not start")


async def _measure(url: str) -> list[str]:
    lines = [
        f"programmed TTFT {TTFT_S * 1000:.0f} ms, TPOT {TPOT_S * 1000:.0f} ms, {OUTPUT_LEN} output tokens"
    ]
    prompter = benchmark._Prompter()
    await benchmark.measure_cell(url, MODEL, "", prompter, 1, 16, 2, 2)  # warm-up: imports, connections
    try:
        for c in CONCURRENCY:
            cell, _ = await benchmark.measure_cell(
                url, MODEL, "", prompter, c, PROMPT_TOKENS, OUTPUT_LEN, benchmark.requests_for(c, None)
            )
            ttft_ratio = (cell.median_ttft_ms or 0) / (TTFT_S * 1000)
            tpot_ratio = (cell.median_tpot_ms or 0) / (TPOT_S * 1000)
            ok = "ok" if max(abs(ttft_ratio - 1), abs(tpot_ratio - 1)) <= 0.03 else "OUTSIDE 3%"
            lines.append(
                f"concurrency {c:>2}: median TTFT {cell.median_ttft_ms:.1f} ms = {ttft_ratio:.3f}x "
                f"(+{(cell.median_ttft_ms or 0) - TTFT_S * 1000:.1f} ms), "
                f"median TPOT {cell.median_tpot_ms:.2f} ms = {tpot_ratio:.3f}x, "
                f"{cell.output_tokens_per_s:,.0f} tok/s, {cell.failures} failures [{ok}]"
            )
    finally:
        await close_all()
    return lines


def run() -> list[str]:
    """Start the fake, measure, stop it; return the printed lines."""
    proc, url = _start_fake()
    try:
        return asyncio.run(_measure(url))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    for line in run():
        print(line)
