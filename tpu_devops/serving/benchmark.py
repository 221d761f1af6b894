"""Benchmark sweep: concurrency x prompt length against the endpoint, or imported `vllm bench serve` JSON.

Per cell (one concurrency, one prompt length) the sweep sends ``requests`` streamed chat completions
with at most ``concurrency`` in flight (request rate "inf", as ``vllm bench serve --max-concurrency``),
each with ``max_tokens=output_len`` and ``ignore_eos`` (a vLLM sampling parameter, so every request
generates exactly ``output_len`` tokens). Definitions follow ``vllm bench serve``:

- output tok/s = total completion tokens / cell duration (first send to last token);
- TTFT = send -> first output chunk; TPOT = (latency - TTFT) / (completion tokens - 1), per request;
  medians and p99 over the cell's successful requests; per-stream tok/s = 1000 / median TPOT;
- prompt and completion tokens are the server's ``usage`` (``stream_options.include_usage``), so the
  prompt length reported is measured, not assumed. Prompts are random words, unique per request
  (defeats prefix caching), sized by a two-probe calibration of tokens per word and template overhead.

$/M output tokens = $/hour / (output tok/s x 3600) x 1e6 at the live price (`tpu_devops.planning.pricing`).
A cell whose clients x (prompt + output) exceeds the KV pool is flagged: the pool comes from the
server's ``vllm:cache_config_info`` (num_gpu_blocks x block_size) when exposed, else from
`tpu_devops.planning.sizing.plan_capacity` for the configured deployment (seed: 64 clients x 8K context on a
321K pool fell from 400 to 324 tok/s with 11.7 s median TTFT).

Imported ``vllm bench serve`` JSON uses its own fields: ``max_concurrency``, ``total_input_tokens`` /
``completed`` (prompt length), ``output_throughput``, ``median_ttft_ms``, ``p99_ttft_ms``,
``median_tpot_ms``, ``failed``. Results are written as CSV + JSON + a PNG throughput/latency chart (matplotlib, Agg), and
the chart goes with the answer as image content (`chart_png`).
"""

from __future__ import annotations

import asyncio
import csv
import json
import logging
import math
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_serializer

from tpu_devops.config import Settings
from tpu_devops.errors import InputError, TpuDevopsError
from tpu_devops.host import artifacts, files
from tpu_devops.host.artifacts import Artifact
from tpu_devops.host.results import MAX_IMAGE_BYTES, Table, ToolResult, ViewResult
from tpu_devops.planning.pricing import (
    PriceQuote,
    get_price,
    usd_per_million_tokens,
    validate_provisioning_model,
)
from tpu_devops.serving.client import MAX_CONNECTIONS, http_client
from tpu_devops.serving.errors import classify
from tpu_devops.serving.models import choose_model
from tpu_devops.serving.resolve import Endpoint, attributed, resolve_endpoint
from tpu_devops.serving.server_kind import LABELS
from tpu_devops.serving.stream import stream_chat

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = (1, 4, 16, 64)
DEFAULT_PROMPT_LENGTHS = (128, 1024, 8192)
DEFAULT_OUTPUT_LEN = 128
KV_SAFE_FRACTION = 0.78  # seed: keep clients x context below ~250K of a 321K pool
MAX_CELLS = 64
MAX_RESULT_BYTES = 16 << 20  # one vllm bench serve JSON file (a few KiB; --save-detailed ones a few MiB)
MAX_RESULT_FILES = 1000  # JSON files read from one directory
# Prompts are built in this process: 256 clients x 1M-token prompts would be ~1.5 GB of text in flight.
MAX_INFLIGHT_PROMPT_TOKENS = 16_777_216
_WORDS = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name"
).split()
# Required fields of a `vllm bench serve --save-result` JSON. ``max_concurrency`` is written too, as null
# when --max-concurrency was not given (vllm/benchmarks/serve.py), so it is read but not required.
_VLLM_BENCH_FIELDS = (
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "output_throughput",
)


class Cell(BaseModel):
    """One benchmark cell. Times in ms, throughput in tokens/s, cost in USD per million output tokens."""

    concurrency: int
    prompt_tokens_target: int | None
    prompt_tokens_measured: float | None
    output_tokens_mean: float | None
    requests: int
    completed: int
    failures: int
    duration_s: float | None
    output_tokens_per_s: float | None
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    median_tpot_ms: float | None
    per_stream_tokens_per_s: float | None
    usd_per_million_output_tokens: float | None
    kv_tokens_demand: int | None
    kv_warning: str | None = None
    first_error: str | None = None
    source: str


def cell_summary(cell: Cell) -> str:
    """One readable line for a job's progress: ``4 clients x 512-token prompts: 1,381.5 tok/s out, TTFT p50
    812 ms, 16/16 ok`` (the full cell is in the finished result)."""
    parts = [f"{cell.concurrency} clients x {cell.prompt_tokens_target or '?'}-token prompts:"]
    if cell.output_tokens_per_s is not None:
        parts.append(f"{cell.output_tokens_per_s:,.1f} tok/s out,")
    if cell.median_ttft_ms is not None:
        parts.append(f"TTFT p50 {cell.median_ttft_ms:,.0f} ms,")
    parts.append(f"{cell.completed}/{cell.requests} ok")
    return " ".join(parts)


class BenchmarkResult(ToolResult):
    """A sweep (measured or imported): the cells, the price used, the KV pool checked, the files."""

    endpoint: str | None
    model: str | None
    output_len: int | None
    price: PriceQuote | None
    kv_pool_tokens: int | None
    kv_pool_source: str | None
    cells: Table[Cell]
    # the headline's words (both forms lead with them)
    best: str | None = Field(exclude=True)
    files: dict[str, str] = Field(
        description="the files written, by kind (csv, json, png): their directory as dir, then each file's name"
    )
    notices: list[str] = []
    replicas: int | None = Field(None, description="engines behind the endpoint (per-replica figures)")
    chart: Artifact | None = Field(
        None, description="the throughput/latency chart (PNG), sent as an image too"
    )

    @field_serializer("files")
    def _files_in_dir(self, files: dict[str, str]) -> dict[str, str]:
        """Full paths here and in the text; serialized, their shared directory once (``dir``)."""
        if not files:
            return {}
        where = {str(Path(p).parent) for p in files.values()}
        if len(where) != 1:
            return files
        return {"dir": where.pop(), **{kind: Path(p).name for kind, p in files.items()}}

    def headline(self) -> str:
        return f"{len(self.cells)} cell(s); " + (
            f"best: {self.best}" if self.best else "no successful requests"
        )

    def render_text(self) -> str:
        """Headline, the price and KV pool used, one table row per cell, files, notices."""
        lines = [self.headline()]
        if self.endpoint or self.model:
            lines.append(f"model {self.model or '?'}" + (f" at {self.endpoint}" if self.endpoint else ""))
        if self.price:
            lines.append(
                f"price: ${self.price.usd_per_hour:.4f}/h {self.price.provisioning_model}, {self.price.label()}; "
                f"{self.price.chips} x {self.price.accelerator_type} ({self.price.generation}) in {self.price.region}"
                + (f", effective {self.price.effective_time}" if self.price.effective_time else "")
            )
        if self.kv_pool_tokens:
            lines.append(f"KV pool: {self.kv_pool_tokens:,} tokens ({self.kv_pool_source})")
        lines.append("clients  prompt  out tok/s  TTFT p50/p99 ms  TPOT ms  tok/s/stream  fail  $/M out")
        for c in self.cells:
            prompt = c.prompt_tokens_measured or c.prompt_tokens_target or 0
            lines.append(
                f"{c.concurrency:>7}  {prompt:>6.0f}  {_f(c.output_tokens_per_s, 9, 1)}  "
                f"{_f(c.median_ttft_ms, 7, 1)}/{_f(c.p99_ttft_ms, 7, 1)}  {_f(c.median_tpot_ms, 7, 2)}  "
                f"{_f(c.per_stream_tokens_per_s, 12, 1)}  {c.failures:>4}  {_f(c.usd_per_million_output_tokens, 7, 4)}"
            )
            lines.append(
                f"         {c.completed}/{c.requests} requests in {c.duration_s or 0:,.1f} s, mean output "
                f"{c.output_tokens_mean or 0:,.0f} tokens, KV demand {c.kv_tokens_demand or 0:,} tokens"
                + (f"; from {c.source}" if c.source else "")
            )
            if c.kv_warning:
                lines.append(f"         ! {c.kv_warning}")
            if c.first_error:
                lines.append(f"         first error: {c.first_error}")
        if self.replicas:
            lines.append(
                f"per replica, mean of {self.replicas}: "
                + ", ".join(
                    f"{c.concurrency} clients {c.output_tokens_per_s / self.replicas:,.1f} tok/s"
                    for c in self.cells
                    if c.output_tokens_per_s
                )
            )
        lines.extend(f"{kind}: {path}" for kind, path in self.files.items())
        if self.chart:
            lines.append(f"chart: {self.chart.describe()}")
        lines.extend(f"note: {n}" for n in self.notices)
        return "\n".join(lines)


def _f(value: float | None, width: int, digits: int) -> str:
    return f"{value:>{width},.{digits}f}" if value is not None else f"{'-':>{width}}"


class BenchmarkStarted(ToolResult):
    """`run_benchmark` answer: the job id to poll with get_job and what will run."""

    job_id: str
    endpoint: str
    model: str
    cells: int
    total_requests: int
    message: str

    def headline(self) -> str:
        return f"benchmark job {self.job_id} started: {self.cells} cells, {self.total_requests} requests. {self.message}"


# ---- inputs -------------------------------------------------------------------------------------


def validate_sweep(
    concurrency: list[int], prompt_lengths: list[int], output_len: int, requests_per_cell: int | None
) -> None:
    """Check the sweep before anything is sent.

    Raises:
        InputError: empty lists, values out of range (concurrency 1..256, prompt 1..1,048,576 tokens,
            output 1..32,768, requests 1..10,000), more than 64 cells, or more than 16M prompt tokens in
            flight (largest concurrency x largest prompt).
    """
    if not concurrency:
        raise InputError(
            "no concurrency levels", field="concurrency", value=concurrency, fix="pass e.g. [1, 4, 16, 64]"
        )
    if not prompt_lengths:
        raise InputError(
            "no prompt lengths",
            field="prompt_lengths",
            value=prompt_lengths,
            fix="pass e.g. [128, 1024, 8192]",
        )
    for c in concurrency:
        if not 1 <= c <= MAX_CONNECTIONS:
            raise InputError(
                "out of range",
                field="concurrency",
                value=c,
                fix=f"use 1..{MAX_CONNECTIONS} concurrent clients (the shared HTTP client's connection pool)",
            )
    for p in prompt_lengths:
        if not 1 <= p <= 1_048_576:
            raise InputError("out of range", field="prompt_lengths", value=p, fix="use 1..1,048,576 tokens")
    if not 1 <= output_len <= 32768:
        raise InputError("out of range", field="output_len", value=output_len, fix="use 1..32768 tokens")
    if requests_per_cell is not None and not 1 <= requests_per_cell <= 10_000:
        raise InputError(
            "out of range", field="requests_per_cell", value=requests_per_cell, fix="use 1..10000"
        )
    inflight = max(concurrency) * max(prompt_lengths)
    if inflight > MAX_INFLIGHT_PROMPT_TOKENS:
        raise InputError(
            f"{max(concurrency)} clients x {max(prompt_lengths):,}-token prompts = {inflight:,} prompt tokens in "
            f"flight, over the {MAX_INFLIGHT_PROMPT_TOKENS:,} this client builds at once",
            field="concurrency x prompt_lengths",
            value=f"{max(concurrency)} x {max(prompt_lengths)}",
            fix="lower the largest concurrency or prompt length (the seed's largest cell was 64 x 8,192)",
        )
    if len(concurrency) * len(prompt_lengths) > MAX_CELLS:
        raise InputError(
            f"{len(concurrency) * len(prompt_lengths)} cells is too many",
            field="concurrency x prompt_lengths",
            value=f"{len(concurrency)} x {len(prompt_lengths)}",
            fix=f"keep the sweep at {MAX_CELLS} cells or fewer",
        )


def requests_for(concurrency: int, requests_per_cell: int | None) -> int:
    """Requests in a cell: the given number, else max(8, 2 x concurrency) (the fixtures' sizing)."""
    return requests_per_cell or max(8, 2 * concurrency)


def results_dir(settings: Settings, given: str | None) -> Path:
    """A new timestamped directory under ``given`` or ``<state_dir>/results``; ``given`` must lie under the
    directories tools may write (`tpu_devops.host.files`). Blocking: call it from a worker thread.

    Raises:
        InputError: outside the allowed directories, or the directory cannot be created.
    """
    root = files.writable_dir(
        settings, given, field="results_dir", default=Path(settings.state_dir) / "results"
    )
    path = root / datetime.now(UTC).strftime("benchmark-%Y%m%d-%H%M%S-%f")
    try:
        path.mkdir(exist_ok=False)
    except OSError as exc:
        raise InputError(
            f"cannot create the results directory: {exc.strerror}",
            field="results_dir",
            value=str(root),
            fix="pass a writable directory",
        ) from None
    return path


# ---- measuring ----------------------------------------------------------------------------------


class _Prompter:
    """Makes prompts of about N tokens: ``overhead + words x tokens_per_word`` (calibrated)."""

    def __init__(self, overhead: float = 0.0, tokens_per_word: float = 1.0) -> None:
        self.overhead = overhead
        self.tokens_per_word = tokens_per_word
        self._rng = random.Random(1234)

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / max(self.tokens_per_word, 1e-3)))

    def prompt(self, tokens: int, tag: int) -> str:
        n = self.words_for(tokens)
        return f"{tag} " + " ".join(self._rng.choice(_WORDS) for _ in range(max(n - 1, 0)))


async def _calibrate(url: str, model: str, api_key: str) -> tuple[_Prompter, list[str]]:
    """Two probes (32 and 96 words) give tokens per word and the chat-template overhead from usage."""
    prompter = _Prompter()
    seen: list[int] = []
    for words in (32, 96):
        answer = await stream_chat(
            url,
            model,
            [{"role": "user", "content": prompter.prompt(words, 0)}],
            api_key=api_key,
            max_tokens=1,
        )
        if answer.prompt_tokens is None:
            return prompter, ["the server sent no usage: prompt lengths are word counts, not measured tokens"]
        seen.append(answer.prompt_tokens)
    per_word = max((seen[1] - seen[0]) / 64, 0.1)
    overhead = seen[0] - 32 * per_word
    return _Prompter(overhead, per_word), []


async def stream_timed(url: str, model: str, api_key: str, prompt: str, output_len: int) -> dict[str, Any]:
    """One benchmark request, streamed over the shared httpx client with a lean SSE reader.

    The openai client builds a pydantic object per chunk (~0.3 ms): at 64 streams that saturates a core
    and the client would measure itself. Like vLLM's own benchmark client (``vllm bench serve`` parses
    the SSE lines of ``/v1/chat/completions`` itself), this reads ``data:`` lines with ``json.loads``.
    The send time is taken from httpcore's trace hook (``http11.send_request_headers.started``), so time
    spent by this process before the request reaches the wire is not counted as TTFT.

    Returns ``{"ok": True, "sent", "end", "ttft", "tpot", "prompt_tokens", "completion_tokens"}`` (seconds,
    perf_counter clock) or ``{"ok": False, "error": "<failure>: <message>"}``.
    """
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": output_len,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    marks: dict[str, float] = {}

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event == "http11.send_request_headers.started":
            marks["sent"] = time.perf_counter()

    times: list[float] = []
    usage: dict[str, Any] | None = None
    started = time.perf_counter()
    try:
        async with http_client(url).stream(
            "POST", "/v1/chat/completions", json=body, headers=headers, extensions={"trace": trace}
        ) as response:
            if response.status_code != 200:
                await response.aread()
                response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                        times.append(now)
    except Exception as exc:
        err = classify(exc, url, model)
        return {"ok": False, "error": f"{err.failure}: {err.message}"}
    if not times:
        return {"ok": False, "error": "no output tokens"}
    sent = marks.get("sent", started)
    ttft = times[0] - sent
    latency = times[-1] - sent
    n_out = int(usage["completion_tokens"]) if usage else len(times)
    return {
        "ok": True,
        "sent": sent,
        "end": times[-1],
        "ttft": ttft,
        "tpot": (latency - ttft) / (n_out - 1) if n_out > 1 else None,
        "prompt_tokens": usage.get("prompt_tokens") if usage else None,
        "completion_tokens": n_out,
    }


def _pct(values: list[float], q: float) -> float | None:
    """Percentile with linear interpolation (numpy's default), q in 0..100."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def measure_cell(
    url: str,
    model: str,
    api_key: str,
    prompter: _Prompter,
    concurrency: int,
    prompt_tokens: int,
    output_len: int,
    requests: int,
) -> tuple[Cell, list[dict[str, Any]]]:
    """Run one cell and aggregate it (cost and KV fields are filled by the caller)."""
    gate = asyncio.Semaphore(concurrency)

    async def guarded(i: int) -> dict[str, Any]:
        async with gate:
            return await stream_timed(url, model, api_key, prompter.prompt(prompt_tokens, i + 1), output_len)

    started = time.perf_counter()
    rows = await asyncio.gather(*(guarded(i) for i in range(requests)))
    ok = [r for r in rows if r["ok"]]
    failures = [r for r in rows if not r["ok"]]
    duration = (max(r["end"] for r in ok) - started) if ok else None
    out_tokens = sum(r["completion_tokens"] for r in ok)
    ttfts = [r["ttft"] * 1000 for r in ok]
    tpots = [r["tpot"] * 1000 for r in ok if r["tpot"] is not None]
    prompts = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    median_tpot = statistics.median(tpots) if tpots else None
    cell = Cell(
        concurrency=concurrency,
        prompt_tokens_target=prompt_tokens,
        prompt_tokens_measured=round(statistics.mean(prompts), 1) if prompts else None,
        output_tokens_mean=round(out_tokens / len(ok), 1) if ok else None,
        requests=requests,
        completed=len(ok),
        failures=len(failures),
        duration_s=round(duration, 4) if duration else None,
        output_tokens_per_s=round(out_tokens / duration, 3) if duration else None,
        median_ttft_ms=_r(statistics.median(ttfts)) if ttfts else None,
        p99_ttft_ms=_r(_pct(ttfts, 99)),
        median_tpot_ms=_r(median_tpot),
        per_stream_tokens_per_s=_r(1000 / median_tpot) if median_tpot else None,
        usd_per_million_output_tokens=None,
        kv_tokens_demand=None,
        first_error=failures[0]["error"] if failures else None,
        source="measured",
    )
    return cell, rows


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# ---- KV pool and cost -------------------------------------------------------------------------------


async def kv_pool(
    settings: Settings, url: str | None, *, rig: bool = True, kind: str = "vllm"
) -> tuple[int | None, str | None, list[str]]:
    """KV pool in tokens: the server's ``vllm:cache_config_info``, else `sizing.plan_capacity` of the
    configured model on the configured TPU, which describes the endpoint only when it is this rig's
    TPU (``rig``) serving vLLM (``kind``); otherwise no pool and a notice saying why."""
    notes: list[str] = []
    if url and kind != "vllm":
        notes.append(
            f"no KV-pool check: the endpoint is {LABELS.get(kind, kind)}, which does not report a KV pool"
        )
        return None, None, notes
    if url:
        from tpu_devops.serving.metrics import fetch_samples, kv_pool_tokens

        try:
            pool = kv_pool_tokens(await fetch_samples(url))
            if pool:
                return pool, "server /metrics vllm:cache_config_info (num_gpu_blocks x block_size)", notes
        except TpuDevopsError as exc:
            notes.append(f"/metrics unavailable for the KV pool: {exc.message}")
        if not rig:
            notes.append(
                "no KV-pool check: the endpoint is not this rig's TPU, so the configured deployment's pool says nothing about it"
            )
            return None, None, notes
    try:
        from tpu_devops.planning import sizing
    except ImportError:
        notes.append("KV-pool warning skipped: sizing (plan_capacity) is not available in this build")
        return None, None, notes
    try:
        plan = await asyncio.to_thread(
            sizing.plan_capacity,
            settings.model_name,
            accelerator_type=settings.accelerator_type,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=settings.max_model_len or 16384,
            tensor_parallel_size=settings.tensor_parallel_size,
        )
        if plan.kv_tokens is None:
            notes.append(
                "KV-pool warning skipped: the weights of MODEL_NAME are unknown, so plan_capacity sizes no KV pool"
                + (f" ({plan.weights_missing})" if plan.weights_missing else "")
            )
            return None, None, notes
        return (
            plan.kv_tokens,
            f"plan_capacity({settings.model_name}, {settings.accelerator_type})",
            notes,
        )
    except Exception as exc:  # planning needs a config.json; never fail a benchmark over the warning
        why = exc.message if isinstance(exc, TpuDevopsError) else type(exc).__name__
        notes.append(f"KV-pool warning skipped: plan_capacity for MODEL_NAME failed ({why})")
        return None, None, notes


def annotate(cell: Cell, price: PriceQuote | None, pool: int | None, output_len: int | None) -> Cell:
    """Fill $/M output tokens and the KV demand / warning of a cell."""
    if price is not None and cell.output_tokens_per_s:
        cell.usd_per_million_output_tokens = round(
            usd_per_million_tokens(price.usd_per_hour, cell.output_tokens_per_s), 6
        )
    prompt = cell.prompt_tokens_measured or cell.prompt_tokens_target
    out = cell.output_tokens_mean or output_len or 0
    if prompt is not None:
        cell.kv_tokens_demand = int(cell.concurrency * (prompt + out))
        if pool:
            if cell.kv_tokens_demand > pool:
                cell.kv_warning = (
                    f"{cell.concurrency} clients x {prompt + out:.0f} tokens = {cell.kv_tokens_demand:,} > KV pool {pool:,}: "
                    "requests queue and get preempted (TTFT climbs, throughput falls)"
                )
            elif cell.kv_tokens_demand > KV_SAFE_FRACTION * pool:
                cell.kv_warning = f"{cell.kv_tokens_demand:,} KV tokens is over {KV_SAFE_FRACTION:.0%} of the {pool:,} pool: close to preemption"
    return cell


async def price_or_none(
    settings: Settings, provisioning_model: str | None, notices: list[str]
) -> PriceQuote | None:
    """The live (or fallback) price, or None with a notice when neither is available (a price found is
    stated by the result's price line, with its source)."""
    try:
        return await get_price(settings, provisioning_model=provisioning_model)
    except TpuDevopsError as exc:
        notices.append(f"no price, so no $/M column: {exc}")
        return None


def best_line(cells: list[Cell]) -> str | None:
    """One line naming the highest-throughput cell and its cost."""
    good = [c for c in cells if c.output_tokens_per_s]
    if not good:
        return None
    b = max(good, key=lambda c: c.output_tokens_per_s or 0)
    cost = (
        f", ${b.usd_per_million_output_tokens:.3f}/M output tokens"
        if b.usd_per_million_output_tokens is not None
        else ""
    )
    prompt = b.prompt_tokens_measured or b.prompt_tokens_target
    return (
        f"{b.output_tokens_per_s:,.1f} output tok/s at {b.concurrency} clients x {prompt:.0f}-token prompts "
        f"(median TTFT {b.median_ttft_ms} ms, TPOT {b.median_tpot_ms} ms){cost}"
    )


# ---- files --------------------------------------------------------------------------------------------


def write_files(result: BenchmarkResult, directory: Path, state_dir: str | None = None) -> dict[str, str]:
    """Write ``results.csv``, ``results.json`` and ``chart.png`` (`chart_png`) into ``directory``, and,
    with ``state_dir``, the same chart as the answer's file (``result.chart``, `tpu_devops.host.artifacts`),
    which hosts receive as image content beside the text."""
    files = {
        "csv": str(directory / "results.csv"),
        "json": str(directory / "results.json"),
        "png": str(directory / "chart.png"),
    }
    rows = [c.model_dump() for c in result.cells]
    with open(files["csv"], "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(Cell.model_fields))
        writer.writeheader()
        writer.writerows(rows)
    result.files = files
    png = chart_png(result.cells, title=result.model)
    Path(files["png"]).write_bytes(png)
    if state_dir is not None:
        attach_chart(result, state_dir, png)
    saved = {**result.model_dump(mode="json"), "best": result.best}  # the file keeps the headline's best cell
    Path(files["json"]).write_text(json.dumps(saved, indent=2), encoding="utf-8")
    return files


def attach_chart(result: BenchmarkResult, state_dir: str, png: bytes | None = None) -> None:
    """Set ``result.chart``: the throughput/latency chart written under ``state_dir`` (left as None, with a
    notice, when it cannot be written). Blocking."""
    try:
        png = png if png is not None else chart_png(result.cells, title=result.model)
        result.chart = artifacts.write(
            "benchmark-chart", png, suffix=".png", mime_type="image/png", state_dir=state_dir
        )
    except (OSError, ValueError) as exc:
        result.notices.append(f"the chart could not be saved for the answer: {exc}")


CHART_DPI = (100, 80, 60)  # tried in order until the PNG is at most MAX_IMAGE_BYTES


def chart_png(cells: list[Cell], title: str | None = None) -> bytes:
    """The throughput/latency chart of ``cells`` as PNG bytes (matplotlib, Agg), at most
    `tpu_devops.host.results.MAX_IMAGE_BYTES` (hosts show it inline): output tok/s (left) and TTFT p50
    with p99 dashed, in ms (right), against concurrent clients, one line per prompt length."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_prompt: dict[int, list[Cell]] = {}
    for c in cells:
        by_prompt.setdefault(c.prompt_tokens_target or round(c.prompt_tokens_measured or 0), []).append(c)
    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(9, 3.4))
    for prompt, group in sorted(by_prompt.items()):
        group = sorted(group, key=lambda c: c.concurrency)
        x = [c.concurrency for c in group]
        nan = math.nan
        line = tput.plot(
            x, [c.output_tokens_per_s or nan for c in group], marker="o", label=f"{prompt} tok prompt"
        )
        color = line[0].get_color()
        ttft.plot(x, [c.median_ttft_ms or nan for c in group], marker="o", color=color, label=f"{prompt} p50")
        ttft.plot(
            x, [c.p99_ttft_ms or nan for c in group], linestyle="--", color=color, label=f"{prompt} p99"
        )
    for ax, label in ((tput, "output tokens/s"), (ttft, "TTFT ms (p50, p99 dashed)")):
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        clients = sorted({c.concurrency for c in cells})
        if len(clients) > 1 and clients[0] > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(clients, [str(c) for c in clients])
        ax.minorticks_off()
    tput.legend(fontsize=7)
    fig.suptitle(f"throughput and latency{f': {title}' if title else ''}", fontsize=10)
    fig.tight_layout()
    try:
        for dpi in CHART_DPI:
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=dpi)
            if buffer.tell() <= MAX_IMAGE_BYTES:
                break
        return buffer.getvalue()
    finally:
        plt.close(fig)


# ---- the sweep job --------------------------------------------------------------------------------------


async def run_sweep(
    settings: Settings,
    record: Any,
    *,
    url: str,
    api_key: str = "",
    model: str,
    concurrency: list[int],
    prompt_lengths: list[int],
    output_len: int,
    requests_per_cell: int | None,
    provisioning_model: str | None,
    out_dir: Path,
    notices: list[str],
    price: PriceQuote | None = None,
    replicas: int | None = None,
    rig: bool = True,
    kind: str = "vllm",
) -> BenchmarkResult:
    """The job body: calibrate, run every cell (prompt length outer, concurrency inner), annotate,
    write the files. Progress goes to ``record.progress`` / ``record.message``. ``price``: the whole
    deployment's hourly price (scale-out), instead of looking up ACCELERATOR_TYPE's."""
    prompter, more = await _calibrate(url, model, api_key)
    notices.extend(more)
    if price is None and (rig or provisioning_model):
        price = await price_or_none(settings, provisioning_model, notices)
    elif price is None:
        notices.append(
            "no $/M column: the endpoint is not this rig's TPU (it came from VLLM_URL or base_url); pass "
            "provisioning_model to price it at this rig's TPU rate anyway"
        )
    pool, pool_source, more = await kv_pool(settings, url, rig=rig, kind=kind)
    notices.extend(more)
    cells: list[Cell] = []
    total = len(concurrency) * len(prompt_lengths)
    for p in prompt_lengths:
        for c in concurrency:
            record.message = f"cell {len(cells) + 1}/{total}: {c} clients x {p}-token prompts"
            cell, _ = await measure_cell(
                url,
                model,
                api_key,
                prompter,
                c,
                p,
                output_len,
                requests_for(c, requests_per_cell),
            )
            cells.append(annotate(cell, price, pool, output_len))
            record.progress = {
                "cells_done": len(cells),
                "cells_total": total,
                "last_cell": cell_summary(cell),
            }
    result = BenchmarkResult(
        endpoint=url,
        model=model,
        output_len=output_len,
        price=price,
        kv_pool_tokens=pool,
        kv_pool_source=pool_source,
        cells=cells,
        best=best_line(cells),
        files={},
        notices=notices,
        replicas=replicas,
    )
    await asyncio.to_thread(write_files, result, out_dir, settings.state_dir)
    record.message = f"best: {result.best}" if result.best else "done (no successful requests)"
    return result


async def start_benchmark(
    settings: Settings,
    *,
    concurrency: list[int] | None = None,
    prompt_lengths: list[int] | None = None,
    output_len: int = DEFAULT_OUTPUT_LEN,
    requests_per_cell: int | None = None,
    provisioning_model: str | None = None,
    results_dir_path: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    price: PriceQuote | None = None,
    replicas: int | None = None,
    endpoint: Endpoint | None = None,
) -> BenchmarkStarted:
    """Validate, resolve the endpoint and model, then start the sweep as a job (returns at once).

    ``price`` and ``replicas`` describe a scaled-out deployment behind ``base_url`` (GKE Service, or the
    load balancer of a multi-engine host): $/M tokens then use the whole deployment's price, and the
    result adds the mean per-replica throughput. ``endpoint``: a deployment of ours the caller resolved (a
    GKE Service, with its key) instead of ``base_url``.

    Raises:
        InputError: bad sweep values or results directory. ServingError: no endpoint / unreachable /
        model not served (checked before the job starts, so the answer is immediate).
    """
    from tpu_devops.host.jobs import JOBS

    # None means "the default sweep"; an explicit empty list is a mistake that validate_sweep names.
    conc = list(DEFAULT_CONCURRENCY if concurrency is None else concurrency)
    prompts = list(DEFAULT_PROMPT_LENGTHS if prompt_lengths is None else prompt_lengths)
    validate_sweep(conc, prompts, output_len, requests_per_cell)
    if provisioning_model:
        validate_provisioning_model(provisioning_model)
    if replicas is None and base_url is None and not settings.vllm_url:
        from tpu_devops.planning.multiengine import engines_per_host

        # This rig's own endpoint: a multi-chip host serves one engine per chip behind its balancer.
        replicas = engines_per_host(settings) if engines_per_host(settings) > 1 else None
    ep = endpoint or await resolve_endpoint(settings, base_url, sends="benchmark requests")
    with attributed(ep):
        choice = await choose_model(settings, ep.url, model, api_key=ep.api_key)
    out_dir = await asyncio.to_thread(results_dir, settings, results_dir_path)
    notices = list(choice.notices)
    if choice.max_model_len and max(prompts) + output_len > choice.max_model_len:
        notices.append(
            f"prompts of {max(prompts)} + {output_len} output tokens exceed the server's context "
            f"{choice.max_model_len} ({choice.server.context_source}): those requests will fail"
        )
    total_requests = sum(requests_for(c, requests_per_cell) for c in conc) * len(prompts)

    async def body(record: Any) -> BenchmarkResult:
        return await run_sweep(
            settings,
            record,
            url=ep.url,
            api_key=ep.api_key,
            model=choice.model,
            concurrency=conc,
            prompt_lengths=prompts,
            output_len=output_len,
            requests_per_cell=requests_per_cell,
            provisioning_model=provisioning_model,
            out_dir=out_dir,
            notices=notices,
            price=price,
            replicas=replicas,
            rig=ep.source == "discovery",
            kind=choice.server.kind,
        )

    record = JOBS.start("benchmark", f"{len(conc)}x{len(prompts)} sweep of {choice.model} at {ep.url}", body)
    return BenchmarkStarted(
        job_id=record.id,
        endpoint=ep.url,
        model=choice.model,
        cells=len(conc) * len(prompts),
        total_requests=total_requests,
        message=f"poll get_job('{record.id}'); files go to {out_dir}",
    )


# ---- importing `vllm bench serve` results -----------------------------------------------------------------


def _load_vllm_bench(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(
            files.read_text(path, field="results_path", value=str(path), max_bytes=MAX_RESULT_BYTES)
        )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not JSON ({exc.msg} at line {exc.lineno})",
            field="results_path",
            value=str(path),
            fix="pass the JSON that vllm bench serve --save-result writes",
        ) from None
    missing = [k for k in _VLLM_BENCH_FIELDS if not isinstance(data, dict) or k not in data]
    if missing:
        raise InputError(
            f"not a vllm bench serve result (missing {', '.join(missing)})",
            field="results_path",
            value=str(path),
            fix="pass the JSON that vllm bench serve --save-result writes",
        )
    numeric = (
        *_VLLM_BENCH_FIELDS,
        "max_concurrency",
        "num_prompts",
        "failed",
        "duration",
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_tpot_ms",
    )
    for key in numeric:
        value = data.get(key)
        required = key in _VLLM_BENCH_FIELDS
        if (value is None and required) or (
            value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0)
        ):
            raise InputError(
                f"field {key!r} is {value!r}, not a non-negative number",
                field="results_path",
                value=str(path),
                fix="pass the unedited JSON that vllm bench serve --save-result writes",
            )
    return data


def concurrency_of(data: dict[str, Any]) -> tuple[int, str | None]:
    """Concurrent requests of a ``vllm bench serve`` run and a note when it had to be inferred.

    ``max_concurrency`` null (no --max-concurrency): with request rate ``inf`` every prompt is sent at
    once, so the run had ``num_prompts`` requests in flight; at a finite rate the concurrency is unknown
    (0) and the KV check is skipped for that cell.
    """
    given = data.get("max_concurrency")
    if given is not None:
        return int(given), None
    prompts = int(data.get("num_prompts") or data.get("completed") or 0)
    rate = str(data.get("request_rate", "inf")).lower()
    if rate in ("inf", "infinity"):
        return (
            prompts,
            f"max_concurrency null (no --max-concurrency) at request rate inf: all {prompts} requests in flight",
        )
    return 0, f"max_concurrency null at request rate {rate}: concurrency unknown, no KV check for this run"


def cell_from_vllm_bench(data: dict[str, Any], source: str) -> Cell:
    """One `Cell` from a ``vllm bench serve`` result dict (field names in the module docstring)."""
    completed = int(data["completed"]) or 1
    tpot = data.get("median_tpot_ms")
    return Cell(
        concurrency=concurrency_of(data)[0],
        prompt_tokens_target=None,
        prompt_tokens_measured=round(data["total_input_tokens"] / completed, 1),
        output_tokens_mean=round(data["total_output_tokens"] / completed, 1),
        requests=int(data.get("num_prompts") or completed),
        completed=int(data["completed"]),
        failures=int(data.get("failed") or 0),
        duration_s=_r(data.get("duration")),
        output_tokens_per_s=round(float(data["output_throughput"]), 3),
        median_ttft_ms=_r(data.get("median_ttft_ms")),
        p99_ttft_ms=_r(data.get("p99_ttft_ms")),
        median_tpot_ms=_r(tpot),
        per_stream_tokens_per_s=_r(1000 / tpot) if tpot else None,
        usd_per_million_output_tokens=None,
        kv_tokens_demand=None,
        source=source,
    )


def read_vllm_bench(path: Path) -> Cell:
    """One `Cell` from one ``vllm bench serve --save-result`` JSON file (the scale-out planner reads
    per-replica curves with it).

    Raises:
        InputError: unreadable, not JSON, or not a vllm bench serve result.
    """
    return cell_from_vllm_bench(_load_vllm_bench(path), f"vllm bench serve: {path.name}")


def _same_model(result_model: str, configured: str) -> bool:
    """A result's ``model_id`` (a repo id or a served name) names the configured model."""
    a, b = result_model.strip().lower(), configured.strip().lower()
    return a == b or a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]


def _read_results(
    settings: Settings, results_path: str
) -> tuple[list[tuple[Path, dict[str, Any]]], list[str]]:
    """The ``vllm bench serve`` results at ``results_path`` (a file, or the ``*.json`` files of a directory,
    at most `MAX_RESULT_FILES`), read through `tpu_devops.host.files`, and notices for skipped files. Blocking.

    Raises:
        InputError: empty path, outside the allowed directories, no such file, no JSON files, too many,
        or (for a file) not a vllm bench serve result.
    """
    path = files.readable_path(settings, results_path, field="results_path", max_bytes=MAX_RESULT_BYTES)
    is_dir = path.is_dir()
    paths = (
        files.files_in(
            settings,
            path,
            "*.json",
            field="results_path",
            value=results_path,
            max_bytes=MAX_RESULT_BYTES,
            limit=MAX_RESULT_FILES,
        )
        if is_dir
        else [path]
    )
    if not paths:
        raise InputError(
            "no .json files in the directory",
            field="results_path",
            value=results_path,
            fix="point at the directory holding vllm bench serve results",
        )
    notices: list[str] = []
    records: list[tuple[Path, dict[str, Any]]] = []
    skipped: list[InputError] = []
    for p in paths:
        try:
            records.append((p, _load_vllm_bench(p)))
        except InputError as exc:
            if not is_dir:
                raise
            skipped.append(exc)  # a directory may also hold other JSON (e.g. our own results.json)
            notices.append(f"skipped {p.name}: {exc.message}")
    if not records:
        first = skipped[0]
        raise InputError(
            f"none of the {len(paths)} .json files is a vllm bench serve result (first: {Path(str(first.value)).name}: "
            f"{first.message})",
            field="results_path",
            value=results_path,
            fix=first.fix,
        )
    return records, notices


async def import_results(
    settings: Settings,
    results_path: str,
    *,
    provisioning_model: str | None = None,
    results_dir_path: str | None = None,
    write: bool = True,
) -> BenchmarkResult:
    """Read ``vllm bench serve`` JSON (a file, or every ``*.json`` in a directory), compute the same table
    with $/M at the live price and the KV check, and (``write``) save CSV + JSON + PNG.

    Raises:
        InputError: empty or missing path, outside the directories tools may read, no JSON files, or a
        file that is not a vllm bench serve result.
    """
    if provisioning_model:
        validate_provisioning_model(provisioning_model)
    records, notices = await asyncio.to_thread(_read_results, settings, results_path)
    price = await price_or_none(settings, provisioning_model, notices)
    for p, d in records:
        note = concurrency_of(d)[1]
        if note:
            notices.append(f"{p.name}: {note}")
    models = {str(d.get("model_id")) for _, d in records if d.get("model_id")}
    if not models or all(_same_model(m, settings.model_name) for m in models):
        pool, pool_source, more = await kv_pool(settings, None)
        notices.extend(more)
    else:
        # The pool of the configured model says nothing about another model's run.
        pool, pool_source = None, None
        notices.append(
            f"KV-pool check skipped: the results are for {', '.join(sorted(models))}, not the configured "
            f"{settings.model_name}"
        )
    cells = [
        annotate(cell_from_vllm_bench(d, f"vllm bench serve: {p.name}"), price, pool, None)
        for p, d in records
    ]
    cells.sort(key=lambda c: (c.prompt_tokens_measured or 0, c.concurrency))
    result = BenchmarkResult(
        endpoint=None,
        model=", ".join(sorted(models)) or None,
        output_len=None,
        price=price,
        kv_pool_tokens=pool,
        kv_pool_source=pool_source,
        cells=cells,
        best=best_line(cells),
        files={},
        notices=notices,
    )
    if write:
        await asyncio.to_thread(
            write_files, result, results_dir(settings, results_dir_path), settings.state_dir
        )
    else:
        await asyncio.to_thread(attach_chart, result, settings.state_dir)
    return result


class BenchmarkAnswer(ViewResult):
    """`run_benchmark`'s answer: the job of a sweep it started (``view="started"``), or the table of
    results it imported (``"imported"``)."""

    started: BenchmarkStarted | None = None
    imported: BenchmarkResult | None = None


async def run_or_import(
    settings: Settings,
    *,
    results_path: str | None = None,
    provisioning_model: str | None = None,
    results_dir_path: str | None = None,
    **sweep: Any,
) -> BenchmarkAnswer:
    """`import_results` of ``results_path`` when given (no load is sent), else `start_benchmark` with the
    ``sweep`` arguments (concurrency, prompt_lengths, output_len, requests_per_cell, model, base_url).

    Raises:
        InputError: ``results_path`` together with sweep arguments (an import sends no load), or as the
            two functions raise.
    """
    if results_path is not None:
        given = sorted(k for k, v in sweep.items() if v is not None and v != DEFAULT_OUTPUT_LEN)
        if given:
            raise InputError(
                f"results_path imports results and sends no load, so {', '.join(given)} would be ignored",
                field=given[0],
                value=sweep[given[0]],
                fix="leave the sweep arguments out with results_path, or leave results_path out to run a sweep",
            )
        imported = await import_results(
            settings, results_path, provisioning_model=provisioning_model, results_dir_path=results_dir_path
        )
        return BenchmarkAnswer(view="imported", imported=imported)
    started = await start_benchmark(
        settings, provisioning_model=provisioning_model, results_dir_path=results_dir_path, **sweep
    )
    return BenchmarkAnswer(view="started", started=started)
