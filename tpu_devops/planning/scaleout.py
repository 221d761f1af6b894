"""Scale-out planning (`plan_scale_out`): how many vLLM engines, on which shape, for a target.

A target is an aggregate output rate (tok/s) or N concurrent streams, optionally within a median TTFT
and / or TPOT objective. Three shapes are compared, each priced per hour and per million output tokens:

- ``engines-per-host``: one one-chip engine per chip of one multi-chip host (v5litepod-4 / -8); the
  startup script runs one container per chip behind a load balancer (no idle chips);
- ``single-chip-nodes``: N one-chip nodes (GKE node pool of ``ct5lp-hightpu-1t``, topology 1x1), one
  vLLM pod per node behind a Service; the GKE cluster fee is added;
- ``tensor-parallel``: one engine with ``--tensor-parallel-size N`` over a v5litepod-N host.

**The model** (every number in the answer says where it came from):

1. The per-replica curve is a one-chip engine's measured output tok/s X(c) at c concurrent streams,
   from `run_benchmark` results, imported ``vllm bench serve`` JSON, or the bundled seed sweep (marked as
   such). Its decode step time s(c) = c / X(c) is fitted as ``fixed + per_stream x c`` by least squares
   (seed v5e-1 E2B at 128-token prompts: 7.7 ms + 0.60 ms per stream). Median TPOT and TTFT are fitted
   linearly in c the same way.
2. The fixed part is split into *device* time, the weights streamed once per step from HBM (dense
   parameters from config.json: attention, MLP and the LM head; Gemma 4's per-layer input embeddings
   are a gather, not a stream) divided by the chip's HBM bandwidth (catalog), and *host* time (the
   rest: scheduling, input preparation, sampling). The per-stream part is split into device time (the
   stream's KV cache read, context x KV bytes per token / bandwidth, and 2 x parameters FLOPs / peak
   bf16) and host time (the rest: per-request work in the one API server and engine process).
3. A TP=N engine divides only device work: weights and FLOPs over N chips; KV reads per chip divide by
   N only when the model has at least N KV heads (sizing.kv_breakdown: one KV head is replicated, so
   every chip reads the whole cache); it adds two all-reduces of the activations per layer over ICI
   (ring: 2(N-1)/N x batch x hidden x 2 B per chip at the ICI bandwidth). Collective latency is not
   modelled (it would only lower TP further). Host work does not divide: one engine is one scheduler.
4. An engine holds at most ``max_num_seqs`` (256) streams and, to avoid preemption, streams x context
   below 78% of its KV pool (sizing.plan_from_geometry for its chips and TP). N one-chip engines on one
   host do not contend: each v5e host gives every chip at least 24 vCPUs (ct5lp-hightpu-1t 24, -4t 112,
   -8t 224; cloud.google.com/tpu/docs/v5e).

Validation (`make bench`): from the bundled v5e-1 curve alone the model predicts four one-chip engines
at 1.40x / 2.46x / 3.38x one TP=4 engine at 16 / 64 / 256 streams; the seed measured 1.39x / 2.52x /
3.36x on a v5e-4 (DESIGN §3, seed 003).

Prices: `tpu_devops.planning.pricing` (live Billing Catalog, else the dated fallback), per chip-hour x chips;
GKE adds its cluster management fee of $0.10 per cluster-hour (cloud.google.com/kubernetes-engine/pricing).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.catalog import GIB, AcceleratorType, resolve_accelerator_type
from tpu_devops.config import get_settings
from tpu_devops.errors import InputError
from tpu_devops.host import files
from tpu_devops.host.results import Table, ToolResult

MAX_CURVE_BYTES = 16 << 20  # one benchmark result file
MAX_CURVE_FILES = 1000  # result files read from one directory
BUNDLED_CURVE_DIR = Path(__file__).resolve().parents[1] / "data" / "bench"
BUNDLED_CURVE_LABEL = (
    "BUNDLED FIXTURE (not your deployment): seed vllm bench serve sweep, one v5e chip, google/gemma-4-E2B-it "
    "bf16, 128 output tokens (xbill9/gemma4-dev tpu-vllm-v5e1-2b/benchmarks/runs/2026-08-06-vllm-sweep-v5e1)"
)
GKE_CLUSTER_FEE_USD_PER_HOUR = 0.10  # cloud.google.com/kubernetes-engine/pricing: per cluster, per hour
MAX_NUM_SEQS = 256  # vLLM's default --max-num-seqs on TPU (sizing.DEFAULT_MAX_NUM_SEQS)
MAX_NODES = 512
MAX_STREAMS = 100_000
MAX_TARGET_TOKENS_PER_S = 10_000_000.0
ACTIVATION_BYTES = 2  # bf16 activations in the all-reduce
SHAPES = ("engines-per-host", "single-chip-nodes", "tensor-parallel")
SHAPE_TITLES = {
    "engines-per-host": "one-chip engines on one host",
    "single-chip-nodes": "single-chip nodes (GKE)",
    "tensor-parallel": "one tensor-parallel engine",
}


# ---- the per-replica curve -----------------------------------------------------------------------


class CurvePoint(BaseModel):
    """One measured cell of a one-chip engine: c streams -> output tok/s, median TTFT / TPOT (ms)."""

    concurrency: int
    prompt_tokens: float
    output_tokens: float
    output_tokens_per_s: float
    median_ttft_ms: float | None = None
    median_tpot_ms: float | None = None
    source: str


class Curve(BaseModel):
    """The per-replica curve used: where it came from and the cells at the chosen prompt length."""

    source: str
    bundled: bool
    model: str | None
    prompt_tokens: float = Field(description="mean prompt tokens of the cells used")
    output_tokens: float = Field(description="mean output tokens per request of the cells used")
    points: Table[CurvePoint]
    other_prompt_lengths: list[float] = Field(description="prompt lengths in the source not used")


def _cells_from_results_json(data: dict[str, Any], path: Path) -> list[CurvePoint]:
    points = []
    for cell in data.get("cells") or []:
        if not isinstance(cell, dict) or not cell.get("output_tokens_per_s") or not cell.get("concurrency"):
            continue
        prompt = cell.get("prompt_tokens_measured") or cell.get("prompt_tokens_target")
        out = cell.get("output_tokens_mean") or data.get("output_len")
        if not prompt or not out:
            continue
        points.append(
            CurvePoint(
                concurrency=int(cell["concurrency"]),
                prompt_tokens=float(prompt),
                output_tokens=float(out),
                output_tokens_per_s=float(cell["output_tokens_per_s"]),
                median_ttft_ms=cell.get("median_ttft_ms"),
                median_tpot_ms=cell.get("median_tpot_ms"),
                source=f"run_benchmark: {path.name}",
            )
        )
    return points


def _points_from_file(path: Path) -> tuple[list[CurvePoint], str | None]:
    """Cells of one file: a `run_benchmark` results.json (has ``cells``) or a vllm bench serve JSON."""
    from tpu_devops.serving.benchmark import read_vllm_bench

    try:
        data = json.loads(files.read_text(path, field="curve", value=str(path), max_bytes=MAX_CURVE_BYTES))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(
            f"cannot read a benchmark result: {exc}",
            field="curve",
            value=str(path),
            fix="pass run_benchmark's results.json, a vllm bench serve JSON file, or a directory of them",
        ) from None
    if isinstance(data, dict) and "cells" in data:
        return _cells_from_results_json(data, path), data.get("model")
    cell = read_vllm_bench(path)
    if not cell.output_tokens_per_s or not cell.concurrency:
        return [], None
    point = CurvePoint(
        concurrency=cell.concurrency,
        prompt_tokens=cell.prompt_tokens_measured or 0.0,
        output_tokens=cell.output_tokens_mean or 0.0,
        output_tokens_per_s=cell.output_tokens_per_s,
        median_ttft_ms=cell.median_ttft_ms,
        median_tpot_ms=cell.median_tpot_ms,
        source=cell.source,
    )
    return [point], str(data.get("model_id")) if data.get("model_id") else None


def load_curve(curve: str | None, prompt_tokens: int | None = None) -> Curve:
    """The per-replica curve: cells at one prompt length with at least two concurrency levels.

    Args:
        curve: run_benchmark's results.json, a vllm bench serve JSON file, or a directory of either;
            None: the bundled seed sweep (v5e-1, Gemma 4 E2B), marked as a fixture in every answer.
        prompt_tokens: the workload's prompt length; the cells nearest it are used (default: the
            shortest prompt length that has two or more concurrency levels).

    Raises:
        InputError: nothing readable, or no prompt length with two concurrency levels.
    """
    bundled = curve is None or not str(curve).strip()
    # A path argument is read only where tools may read, regular files only (`tpu_devops.host.files`).
    limit = MAX_CURVE_BYTES
    path = (
        BUNDLED_CURVE_DIR
        if bundled
        else files.readable_path(get_settings(), str(curve), field="curve", max_bytes=limit)
    )
    found_files = (
        files.files_in(
            get_settings(), path, "*.json", field="curve", value=curve, max_bytes=limit, limit=MAX_CURVE_FILES
        )
        if path.is_dir()
        else [path]
    )
    points: list[CurvePoint] = []
    models: set[str] = set()
    for f in found_files:
        try:
            found, model = _points_from_file(f)
        except InputError:
            if not path.is_dir():
                raise
            continue  # a directory may hold other JSON next to the results
        points.extend(found)
        if model:
            models.add(model)
    groups: dict[int, list[CurvePoint]] = {}
    for p in points:
        groups.setdefault(round(p.prompt_tokens), []).append(p)
    usable = {k: v for k, v in groups.items() if len({p.concurrency for p in v}) >= 2}
    if not usable:
        raise InputError(
            f"{len(points)} benchmark cell(s) found, but no prompt length was measured at two or more "
            "concurrency levels: the per-replica curve needs at least two points to fit",
            field="curve",
            value=str(curve) if curve else "bundled",
            fix="run run_benchmark with e.g. concurrency [1, 16, 64] at one prompt length",
        )
    if prompt_tokens is not None:
        key = min(usable, key=lambda k: (abs(k - prompt_tokens), k))
    else:
        key = min(usable)
    chosen = sorted(usable[key], key=lambda p: p.concurrency)
    return Curve(
        source=BUNDLED_CURVE_LABEL if bundled else str(path),
        bundled=bundled,
        model=", ".join(sorted(models)) or None,
        prompt_tokens=round(sum(p.prompt_tokens for p in chosen) / len(chosen), 1),
        output_tokens=round(sum(p.output_tokens for p in chosen) / len(chosen), 1),
        points=chosen,
        other_prompt_lengths=sorted(float(k) for k in groups if k != key),
    )


def within_pool(curve: Curve, kv_tokens: int) -> tuple[Curve, str | None]:
    """The curve without cells whose streams x context exceed 78% of one engine's KV pool: those measured
    queueing and preemption, not decode speed (seed: 64 x 8K on a 321K pool), and would bend the fit.

    Returns: (the curve kept, a note naming what was dropped or None).

    Raises:
        InputError: fewer than two concurrency levels remain.
    """
    context = curve.prompt_tokens + curve.output_tokens
    limit = 0.78 * kv_tokens
    kept = [p for p in curve.points if p.concurrency * context <= limit]
    if len(kept) == len(curve.points):
        return curve, None
    gone = ", ".join(str(p.concurrency) for p in curve.points if p not in kept)
    note = (
        f"cells at {gone} streams x {context:,.0f} tokens exceed 78% of the {kv_tokens:,}-token KV pool "
        "(they measure queueing, not decode speed): left out of the fit"
    )
    if len({p.concurrency for p in kept}) < 2:
        raise InputError(
            f"at {curve.prompt_tokens:,.0f}-token prompts only {len(kept)} cell(s) fit the KV pool: {note}",
            field="curve",
            value=curve.source,
            fix="benchmark at least two concurrency levels whose streams x context fit the pool, or pick "
            "another prompt_tokens",
        )
    return curve.model_copy(update={"points": kept}), note


def _linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x`` (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


# ---- the step model ------------------------------------------------------------------------------


class StepModel(BaseModel):
    """Decode step time of one engine, ms: fixed + per_stream x streams, split into device and host."""

    fixed_ms: float = Field(description="fitted step time at zero streams")
    per_stream_ms: float = Field(description="fitted step time added by each stream")
    fit_max_error_pct: float = Field(description="largest |fit - measured| of the throughput, %")
    device_fixed_ms: float = Field(description="weights streamed per step / HBM bandwidth")
    host_fixed_ms: float
    kv_read_per_stream_ms: float = Field(description="one stream's KV cache read per step (one chip)")
    compute_per_stream_ms: float = Field(description="2 x streamed parameters FLOPs / peak bf16")
    host_per_stream_ms: float
    streamed_weight_gb: float = Field(description="weights read per decode step, GB (1e9 B)")
    streamed_weight_source: str
    tpot_fit: tuple[float, float] | None = Field(description="median TPOT ms = a + b x streams")
    ttft_fit: tuple[float, float] | None = Field(description="median TTFT ms = a + b x streams")


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def _streamed_weight_bytes(cfg: dict[str, Any], geom: Any, weights_gib: float) -> tuple[float, str]:
    """Bytes of weights a decode step reads: dense attention + MLP per layer and the LM head.

    Gemma 4's per-layer input embeddings (``vocab_size_per_layer_input`` x ``hidden_size_per_layer_input``
    per layer) are looked up a row per token, not streamed, so they are left out; without the dense
    fields the whole HBM weight figure is used (an upper bound) and the source says so.
    """
    text = _text_config(cfg)
    hidden, inter, vocab = text.get("hidden_size"), text.get("intermediate_size"), text.get("vocab_size")
    heads = text.get("num_attention_heads")
    if (
        not (
            isinstance(hidden, int)
            and isinstance(inter, int)
            and isinstance(vocab, int)
            and isinstance(heads, int)
        )
        or min(hidden, inter, vocab, heads) <= 0
    ):
        return (
            weights_gib * GIB,
            f"all {weights_gib:.2f} GiB of weights (config lacks dense sizes: upper bound)",
        )
    dtype_bytes = 4 if str(geom.dtype) == "float32" else 2
    params = vocab * hidden  # LM head (tied or not, read once per step for the logits)
    for kind in geom.layer_kinds:
        dim = geom.full_head_dim if kind == "full" else geom.head_dim
        kv = geom.full_kv_heads if kind == "full" else geom.kv_heads
        params += 2 * hidden * heads * dim + 2 * hidden * kv * dim + 3 * hidden * inter
    return (
        float(params * dtype_bytes),
        f"config.json dense weights: {params / 1e9:.2f}B parameters x {dtype_bytes} B (attention, MLP, LM head; "
        "per-layer input embeddings are gathered, not streamed)",
    )


def fit_step_model(
    curve: Curve, cfg: dict[str, Any], geom: Any, accel: AcceleratorType, weights_gib: float, kv_bytes: int
) -> StepModel:
    """Fit s(c) = c / X(c) and split it into device and host parts (module docstring, steps 1-2).

    Raises:
        InputError: the curve does not slow down per stream (s(c) not rising with c), which no
            extrapolation can be built on.
    """
    xs = [float(p.concurrency) for p in curve.points]
    steps = [p.concurrency / p.output_tokens_per_s * 1000 for p in curve.points]
    a, b = _linear_fit(xs, steps)
    if b <= 0 or a <= 0:
        raise InputError(
            f"the curve's step time does not grow with streams (fit {a:.2f} ms + {b:.3f} ms x streams): "
            "the measurements are too noisy or too few to extrapolate",
            field="curve",
            value=curve.source,
            fix="benchmark one prompt length at several concurrency levels, e.g. 1, 16 and 64",
        )
    err = max(
        abs(p.concurrency / (a + b * p.concurrency) * 1000 - p.output_tokens_per_s) / p.output_tokens_per_s
        for p in curve.points
    )
    bw = accel.generation.bandwidth_gbps * 1e9
    weight_bytes, weight_source = _streamed_weight_bytes(cfg, geom, weights_gib)
    device_fixed = min(weight_bytes / bw * 1000, a)
    context = curve.prompt_tokens + curve.output_tokens / 2
    kv_read = context * kv_bytes / bw * 1000
    compute = (
        2
        * weight_bytes
        / (2 if geom.dtype != "float32" else 4)
        / (accel.generation.bf16_tflops * 1e12)
        * 1000
    )
    device_stream = min(kv_read + compute, b)
    scale = device_stream / (kv_read + compute) if kv_read + compute else 0.0

    def fit(values: list[tuple[int, float | None]]) -> tuple[float, float] | None:
        known = [(c, v) for c, v in values if v is not None]
        if len({c for c, _ in known}) < 2:
            return None
        fa, fb = _linear_fit([float(c) for c, _ in known], [float(v) for _, v in known])
        return (round(fa, 3), round(max(fb, 0.0), 4))

    return StepModel(
        fixed_ms=round(a, 4),
        per_stream_ms=round(b, 5),
        fit_max_error_pct=round(err * 100, 2),
        device_fixed_ms=round(device_fixed, 4),
        host_fixed_ms=round(a - device_fixed, 4),
        kv_read_per_stream_ms=round(kv_read * scale, 5),
        compute_per_stream_ms=round(compute * scale, 5),
        host_per_stream_ms=round(b - device_stream, 5),
        streamed_weight_gb=round(weight_bytes / 1e9, 3),
        streamed_weight_source=weight_source,
        tpot_fit=fit([(p.concurrency, p.median_tpot_ms) for p in curve.points]),
        ttft_fit=fit([(p.concurrency, p.median_ttft_ms) for p in curve.points]),
    )


class Engine:
    """One engine (one chip, or TP over ``tp`` chips) under the step model: rate, TPOT, TTFT per streams."""

    def __init__(self, model: StepModel, *, tp: int, kv_replicated: bool, collective_ms_per_stream: float):
        self.model = model
        self.tp = tp
        kv = model.kv_read_per_stream_ms if kv_replicated else model.kv_read_per_stream_ms / tp
        self.fixed_ms = model.host_fixed_ms + model.device_fixed_ms / tp
        self.per_stream_ms = (
            model.host_per_stream_ms + kv + model.compute_per_stream_ms / tp + collective_ms_per_stream
        )

    def step_ms(self, streams: float) -> float:
        return self.fixed_ms + self.per_stream_ms * streams

    def tokens_per_s(self, streams: float) -> float:
        """Output tok/s with ``streams`` in flight: streams / step time."""
        return streams / self.step_ms(streams) * 1000 if streams > 0 else 0.0

    def _scaled(self, fit: tuple[float, float] | None, streams: float) -> float | None:
        """A fitted one-chip latency at ``streams``, scaled by this engine's step time over one chip's."""
        if fit is None:
            return None
        one_chip = self.model.fixed_ms + self.model.per_stream_ms * streams
        return (fit[0] + fit[1] * streams) * self.step_ms(streams) / one_chip

    def tpot_ms(self, streams: float) -> float | None:
        return self._scaled(self.model.tpot_fit, streams)

    def ttft_ms(self, streams: float) -> float | None:
        return self._scaled(self.model.ttft_fit, streams)


# ---- shapes --------------------------------------------------------------------------------------


class ShapeOption(BaseModel):
    """One shape sized for the target. Rates in output tok/s, times in ms, money in USD."""

    shape: str = Field(description="engines-per-host, single-chip-nodes or tensor-parallel")
    title: str
    accelerator_type: str = Field(description="per host or node, e.g. v5litepod-4")
    hosts: int = Field(description="TPU VMs (hosts) or GKE nodes")
    chips: int
    engines: int
    tensor_parallel_size: int
    runs_on: str
    feasible: bool
    why_not: str | None = None
    streams_per_engine: float | None = None
    output_tokens_per_s: float | None = Field(None, description="delivered at the target load")
    capacity_tokens_per_s: float | None = Field(None, description="most it serves within the objectives")
    median_tpot_ms: float | None = None
    median_ttft_ms: float | None = None
    kv_tokens_per_engine: int
    kv_replication: float = Field(description="copies of each KV head (TP over fewer KV heads than chips)")
    max_streams_per_engine: int = Field(description="min(max_num_seqs, 78% of the KV pool / context)")
    usd_per_hour: float | None = None
    usd_per_million_output_tokens: float | None = None
    notes: list[str] = []


class ScaleOutPlan(ToolResult):
    """`plan_scale_out` result: every shape sized for the target, ranked, the winner and why."""

    target: str
    model: str
    curve: Curve
    step_model: StepModel
    provisioning_model: str
    usd_per_chip_hour: float | None
    price_source: str
    options: Table[ShapeOption]
    winner: str | None
    why: str
    tp_ratio: float | None = Field(
        None, description="winner's output over the tensor-parallel shape's on the same chips (fixed chips)"
    )
    assumptions: list[str]
    warnings: list[str]

    def headline(self) -> str:
        """Winner, its size, rate and cost."""
        best = next((o for o in self.options if o.feasible), None)
        if best is None:
            return f"no shape meets {self.target}: {self.why}"
        cost = (
            f", ${best.usd_per_hour:,.2f}/h, ${best.usd_per_million_output_tokens:,.3f}/M output tokens"
            if best.usd_per_hour is not None and best.usd_per_million_output_tokens is not None
            else ""
        )
        return (
            f"{self.target}: {best.engines} engine(s) as {best.title} ({best.hosts} x {best.accelerator_type}, "
            f"{best.chips} chips) at {best.output_tokens_per_s:,.0f} tok/s{cost}"
            + (" [bundled seed curve, not yours]" if self.curve.bundled else "")
        )

    def render_text(self) -> str:
        """Headline, why, one table row per shape, the model and its assumptions."""
        lines = [self.headline(), f"winner: {self.winner}; why: {self.why}"]
        other = ", ".join(f"{x:g}" for x in self.curve.other_prompt_lengths)
        lines.append(
            f"per-replica curve: {self.curve.source}" + (f" (other prompt lengths: {other})" if other else "")
        )
        lines.append(
            "  cells: "
            + ", ".join(
                f"{p.concurrency} streams {p.output_tokens_per_s:,.1f} tok/s" for p in self.curve.points
            )
            + f" at {self.curve.prompt_tokens:.0f}-token prompts, {self.curve.output_tokens:.0f} output tokens"
        )
        m = self.step_model
        lines.append(
            f"step model (one chip): {m.fixed_ms:.2f} ms + {m.per_stream_ms:.3f} ms x streams (fit within "
            f"{m.fit_max_error_pct:.1f}%); fixed = {m.device_fixed_ms:.2f} device (weights {m.streamed_weight_gb:.2f} GB) "
            f"+ {m.host_fixed_ms:.2f} host; per stream = {m.kv_read_per_stream_ms * 1000:.1f} us KV read + "
            f"{m.compute_per_stream_ms * 1000:.1f} us compute + {m.host_per_stream_ms:.3f} ms host"
        )
        price = f"${self.usd_per_chip_hour:.4f}/chip-h" if self.usd_per_chip_hour is not None else "no price"
        lines.append(f"price: {price} {self.provisioning_model} ({self.price_source})")
        lines.append(
            "rank  shape                          hosts x type      chips engines  tok/s    TPOT ms  TTFT ms  $/h     $/M out"
        )
        for i, o in enumerate(self.options, 1):
            where = f"{o.hosts} x {o.accelerator_type}"
            if not o.feasible:
                lines.append(
                    f"{i:>4}  {o.title:<30} {where:<17} {o.chips:>5} {o.engines:>7}  NOT FEASIBLE: {o.why_not}"
                )
                continue
            lines.append(
                f"{i:>4}  {o.title:<30} {where:<17} {o.chips:>5} {o.engines:>7}  {_n(o.output_tokens_per_s, 7, 0)}  "
                f"{_n(o.median_tpot_ms, 7, 1)}  {_n(o.median_ttft_ms, 7, 0)}  {_n(o.usd_per_hour, 6, 2)}  "
                f"{_n(o.usd_per_million_output_tokens, 7, 4)}"
            )
            capacity = (
                f"; capacity {o.capacity_tokens_per_s:,.1f} tok/s within the objectives"
                if o.capacity_tokens_per_s is not None
                else ""
            )
            lines.append(
                f"      [{o.shape}{capacity}] {o.runs_on}; {o.streams_per_engine:g} streams/engine of at most "
                f"{o.max_streams_per_engine}; "
                f"KV pool {o.kv_tokens_per_engine:,} tokens/engine"
                + (f" (KV replicated {o.kv_replication:g}x)" if o.kv_replication > 1 else "")
            )
            lines.extend(f"      note: {n}" for n in o.notes)
        if self.tp_ratio is not None:
            lines.append(f"winner vs tensor-parallel on the same chips: {self.tp_ratio:.2f}x output")
        lines.extend(f"assumption: {a}" for a in self.assumptions)
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def _n(value: float | None, width: int, digits: int) -> str:
    return f"{value:>{width},.{digits}f}" if value is not None else f"{'-':>{width}}"


class _Ctx:
    """What every shape evaluation shares: the step model, objectives, KV pools and prices."""

    def __init__(
        self,
        *,
        model: StepModel,
        geom: Any,
        accel_gen: Any,
        kv_pool: Any,
        context_tokens: float,
        ttft_ms: float | None,
        tpot_ms: float | None,
        usd_per_chip_hour: float | None,
        hidden_size: int,
    ):
        self.model = model
        self.hidden = hidden_size
        self.geom = geom
        self.gen = accel_gen
        self.kv_pool = kv_pool  # callable(tp) -> (kv_tokens, replication)
        self.context = context_tokens
        self.ttft_ms = ttft_ms
        self.tpot_ms = tpot_ms
        self.price = usd_per_chip_hour

    def engine(self, tp: int) -> tuple[Engine, int, float, int]:
        """(engine model, KV tokens, replication, max streams) for a TP=tp engine."""
        tokens, replication = self.kv_pool(tp)
        ici = self.gen.ici_gb_per_s
        collective = 0.0
        if tp > 1 and ici:
            per_stream_bytes = 2 * self.geom.num_layers * self.hidden * ACTIVATION_BYTES * 2 * (tp - 1) / tp
            collective = per_stream_bytes / (ici * 1e9) * 1000
        engine = Engine(
            self.model, tp=tp, kv_replicated=replication >= tp, collective_ms_per_stream=collective
        )
        max_streams = max(0, min(MAX_NUM_SEQS, int(0.78 * tokens // max(self.context, 1))))
        return engine, tokens, replication, max_streams

    def within(self, engine: Engine, streams: float) -> str | None:
        """None when ``streams`` per engine meets the objectives, else which one fails."""
        if self.tpot_ms is not None:
            t = engine.tpot_ms(streams)
            if t is None:
                return "the curve has no TPOT to check the objective against"
            if t > self.tpot_ms:
                return f"median TPOT {t:.1f} ms > {self.tpot_ms:g} ms"
        if self.ttft_ms is not None:
            t = engine.ttft_ms(streams)
            if t is None:
                return "the curve has no TTFT to check the objective against"
            if t > self.ttft_ms:
                return f"median TTFT {t:.0f} ms > {self.ttft_ms:g} ms"
        return None

    def best_load(self, engine: Engine, max_streams: int) -> int:
        """Most streams per engine within max_streams and the objectives (0: none)."""
        for c in range(max_streams, 0, -1):
            if self.within(engine, c) is None:
                return c
        return 0


def _spread(engine: Engine, streams: int, engines: int) -> tuple[float, int]:
    """Output tok/s of ``streams`` spread over ``engines`` by least connections, and the busiest engine's load."""
    low, extra = divmod(streams, engines)
    rate = extra * engine.tokens_per_s(low + 1) + (engines - extra) * engine.tokens_per_s(low)
    return rate, low + (1 if extra else 0)


def _option(
    ctx: _Ctx,
    shape: str,
    *,
    accel: AcceleratorType,
    hosts: int,
    engines: int,
    tp: int,
    streams: int | None,
    target_tok_s: float | None,
) -> ShapeOption:
    """Size one concrete layout against the target (feasible or not, with the reason)."""
    engine, kv_tokens, replication, max_streams = ctx.engine(tp)
    chips = hosts * accel.chips
    runs_on = {
        "engines-per-host": "one TPU VM, one vLLM container per chip (TPU_VISIBLE_CHIPS) behind a load balancer on VLLM_PORT",
        "single-chip-nodes": f"GKE node pool of {hosts} x {accel.machine_type} (topology 1x1), one vLLM pod per node behind a Service",
        "tensor-parallel": f"one TPU VM, one vLLM engine with --tensor-parallel-size {tp}",
    }[shape]
    base: dict[str, Any] = dict(
        shape=shape,
        title=SHAPE_TITLES[shape],
        accelerator_type=accel.name,
        hosts=hosts,
        chips=chips,
        engines=engines,
        tensor_parallel_size=tp,
        runs_on=runs_on,
        kv_tokens_per_engine=kv_tokens,
        kv_replication=replication,
        max_streams_per_engine=max_streams,
    )
    notes: list[str] = []
    if replication > 1:
        notes.append(
            f"{ctx.geom.kv_heads} KV head(s) over TP={tp}: every chip keeps the whole KV cache, so KV reads do not divide"
        )
    per_hour = None
    if ctx.price is not None:
        per_hour = chips * ctx.price + (GKE_CLUSTER_FEE_USD_PER_HOUR if shape == "single-chip-nodes" else 0.0)
    best = ctx.best_load(engine, max_streams)
    capacity = engines * engine.tokens_per_s(best) if best else 0.0
    if max_streams == 0:
        return ShapeOption(
            **base, feasible=False, why_not="one request's context does not fit the KV pool", notes=notes
        )
    if streams is not None:
        rate, busiest = _spread(engine, streams, engines)
        if busiest > max_streams:
            why = f"{busiest} streams/engine > {max_streams} it holds (max_num_seqs {MAX_NUM_SEQS}, KV pool)"
            return ShapeOption(
                **base, feasible=False, why_not=why, capacity_tokens_per_s=round(capacity, 1), notes=notes
            )
        fail = ctx.within(engine, busiest)
        if fail:
            return ShapeOption(
                **base, feasible=False, why_not=fail, capacity_tokens_per_s=round(capacity, 1), notes=notes
            )
        load = streams / engines
    else:
        assert target_tok_s is not None
        if capacity < target_tok_s:
            why = f"serves at most {capacity:,.0f} tok/s within the objectives ({best} streams/engine)"
            return ShapeOption(
                **base, feasible=False, why_not=why, capacity_tokens_per_s=round(capacity, 1), notes=notes
            )
        per_engine = target_tok_s / engines
        # streams per engine that yield per_engine tok/s: X = c / (f + p c) -> c = X f / (1000 - X p)
        load = per_engine * engine.fixed_ms / (1000 - per_engine * engine.per_stream_ms)
        rate = target_tok_s
        busiest = math.ceil(load)
    return ShapeOption(
        **base,
        feasible=True,
        streams_per_engine=round(load, 2),
        output_tokens_per_s=round(rate, 1),
        capacity_tokens_per_s=round(capacity, 1),
        median_tpot_ms=_r(engine.tpot_ms(load)),
        median_ttft_ms=_r(engine.ttft_ms(load)),
        usd_per_hour=round(per_hour, 4) if per_hour is not None else None,
        usd_per_million_output_tokens=round(per_hour / (rate * 3600) * 1e6, 5) if per_hour and rate else None,
        notes=notes,
    )


def _r(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


def _multi_chip_types(gen: Any) -> list[AcceleratorType]:
    """Single-host multi-chip slices of the generation (v5e: v5litepod-4, v5litepod-8)."""
    return [
        resolve_accelerator_type(f"{gen.api_prefix}-{n * gen.cores_per_chip}")
        for n in sorted(gen.machine_types)
        if n > 1
    ]


def size_shapes(
    ctx: _Ctx, gen: Any, *, streams: int | None, target_tok_s: float | None, chips: int | None
) -> list[ShapeOption]:
    """Every shape sized for the target: the smallest layout of each that meets it (or why none does).

    With ``chips`` the layouts are fixed to that many chips (a like-for-like comparison on one host).
    """
    one_chip = resolve_accelerator_type(f"{gen.api_prefix}-{gen.cores_per_chip}")
    hosts = _multi_chip_types(gen)
    kw: dict[str, Any] = dict(streams=streams, target_tok_s=target_tok_s)
    if chips is not None:
        host = next(h for h in hosts if h.chips == chips)
        return [
            _option(ctx, "engines-per-host", accel=host, hosts=1, engines=chips, tp=1, **kw),
            _option(ctx, "single-chip-nodes", accel=one_chip, hosts=chips, engines=chips, tp=1, **kw),
            _option(ctx, "tensor-parallel", accel=host, hosts=1, engines=1, tp=chips, **kw),
        ]
    options = []
    for shape in ("engines-per-host", "tensor-parallel"):
        tried = [
            _option(ctx, shape, accel=h, hosts=1, engines=h.chips if shape == "engines-per-host" else 1,
                    tp=1 if shape == "engines-per-host" else h.chips, **kw)
            for h in hosts
        ]  # fmt: skip
        options.append(next((o for o in tried if o.feasible), tried[-1]))
    last = None
    for n in range(1, MAX_NODES + 1):
        last = _option(ctx, "single-chip-nodes", accel=one_chip, hosts=n, engines=n, tp=1, **kw)
        if last.feasible:
            break
        if streams is not None and n >= streams:
            break  # one stream per engine already fails the objectives: more nodes cannot help
    assert last is not None
    if not last.feasible and last.hosts >= MAX_NODES:
        last.why_not = f"{last.why_not}; more than {MAX_NODES} nodes would be needed"
    options.insert(1, last)
    return options


def rank(options: list[ShapeOption]) -> list[ShapeOption]:
    """Feasible first; then cheapest per hour, cheapest per token, fewest hosts."""
    return sorted(
        options,
        key=lambda o: (
            not o.feasible,
            o.usd_per_hour if o.usd_per_hour is not None else math.inf,
            o.usd_per_million_output_tokens if o.usd_per_million_output_tokens is not None else math.inf,
            -(o.output_tokens_per_s or 0),
            o.hosts,
        ),
    )


def explain(options: list[ShapeOption], model: StepModel, target: str) -> tuple[str, float | None]:
    """Why the winner wins, in one paragraph, and its output over tensor parallelism on the same chips."""
    feasible = [o for o in options if o.feasible]
    if not feasible:
        reasons = "; ".join(f"{o.title}: {o.why_not}" for o in options)
        return f"nothing meets {target} ({reasons})", None
    best = feasible[0]
    tp = next((o for o in options if o.shape == "tensor-parallel"), None)
    host_share = model.host_per_stream_ms / model.per_stream_ms * 100
    parts = [
        f"{best.title} meets {target} for the least money"
        + (f" (${best.usd_per_hour:,.2f}/h)" if best.usd_per_hour is not None else "")
    ]
    ratio = None
    if tp is not None and best.shape != "tensor-parallel":
        if tp.feasible and tp.chips == best.chips and tp.output_tokens_per_s:
            ratio = round((best.output_tokens_per_s or 0) / tp.output_tokens_per_s, 3)
            parts.append(
                f"on the same {best.chips} chips it serves {ratio:.2f}x the output of one TP={tp.tensor_parallel_size} engine"
            )
        parts.append(
            f"per-stream work is {model.per_stream_ms:.2f} ms of every decode step, {host_share:.0f}% of it host-side "
            "(one scheduler per engine): N engines divide it N ways, tensor parallelism does not"
        )
        if tp.kv_replication > 1:
            parts.append(
                f"TP also keeps {tp.kv_replication:g} copies of the KV cache (one per chip), "
                f"{tp.kv_tokens_per_engine:,} tokens for the whole engine"
            )
    elif best.shape == "tensor-parallel":
        parts.append("the model needs the pooled HBM or the weight streaming dominates the step")
    return "; ".join(parts), ratio


# ---- the tool ------------------------------------------------------------------------------------


async def plan_scale_out(
    settings: Any,
    *,
    target_output_tokens_per_s: float | None = None,
    streams: int | None = None,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    curve: str | None = None,
    prompt_tokens: int | None = None,
    model: str | None = None,
    chips: int | None = None,
    provisioning_model: str | None = None,
    region: str | None = None,
    usd_per_chip_hour: float | None = None,
) -> ScaleOutPlan:
    """Size and rank the three shapes for a target (module docstring has the model and its sources).

    Args:
        target_output_tokens_per_s: aggregate output tok/s to serve (exclusive with ``streams``).
        streams: concurrent streams to serve, each in flight at once.
        ttft_ms, tpot_ms: median objectives (ms) every engine must meet at its load.
        curve: the per-replica (one-chip engine) curve; None = the bundled seed sweep (marked).
        prompt_tokens: the workload's prompt length: picks the curve's cells nearest it.
        model: config.json path or repo id for the geometry (default MODEL_NAME).
        chips: compare the shapes on exactly this many chips (4 or 8 for v5e) instead of sizing them.
        provisioning_model, region, usd_per_chip_hour: pricing (`tpu_devops.planning.pricing.get_price`).

    Raises:
        InputError: no target or both, values out of range, an unusable curve, a chips value that is
            not a single-host slice of the generation.
    """
    from tpu_devops.errors import TpuDevopsError
    from tpu_devops.planning import pricing, sizing

    if (target_output_tokens_per_s is None) == (streams is None):
        raise InputError(
            "give exactly one target",
            field="target_output_tokens_per_s" if streams is None else "streams",
            value=None,
            fix="pass target_output_tokens_per_s (e.g. 5000) or streams (e.g. 64), optionally with ttft_ms / tpot_ms",
        )
    if streams is not None and (isinstance(streams, bool) or not 1 <= streams <= MAX_STREAMS):
        raise InputError(
            "out of range", field="streams", value=streams, fix=f"use 1..{MAX_STREAMS:,} concurrent streams"
        )
    if (
        target_output_tokens_per_s is not None
        and not 0 < target_output_tokens_per_s <= MAX_TARGET_TOKENS_PER_S
    ):
        raise InputError(
            "out of range",
            field="target_output_tokens_per_s",
            value=target_output_tokens_per_s,
            fix=f"use a positive output rate up to {MAX_TARGET_TOKENS_PER_S:,.0f} tok/s",
        )
    for name, value in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        if value is not None and not 0 < value <= 3_600_000:
            raise InputError(
                "out of range", field=name, value=value, fix="use a positive number of milliseconds"
            )
    if prompt_tokens is not None and not 1 <= prompt_tokens <= 1_048_576:
        raise InputError(
            "out of range", field="prompt_tokens", value=prompt_tokens, fix="use 1..1,048,576 tokens"
        )
    one_chip = resolve_accelerator_type(settings.accelerator_type).generation
    hosts = _multi_chip_types(one_chip)
    if chips is not None and chips not in [h.chips for h in hosts]:
        raise InputError(
            f"{one_chip.name} single-host slices have {', '.join(str(h.chips) for h in hosts)} chips",
            field="chips",
            value=chips,
            fix=f"use one of {[h.chips for h in hosts]}, or omit chips to size each shape for the target",
        )
    the_curve = load_curve(curve, prompt_tokens)
    model_name = model or settings.model_name
    cfg, config_source, local_dir = sizing.load_model_config(model_name)
    geom = sizing.geometry_from_config(cfg, model=model_name)
    weights_gib, weights_source = sizing.resolve_weights(model_name, local_dir, None, one_chip.name)
    kv_one = sizing.kv_breakdown(geom).bytes_per_token
    accel_one = resolve_accelerator_type(f"{one_chip.api_prefix}-{one_chip.cores_per_chip}")
    max_len = settings.max_model_len or 16384

    def kv_pool(tp: int) -> tuple[int, float]:
        accel = accel_one if tp == 1 else next(h for h in hosts if h.chips == tp)
        plan = sizing.plan_from_geometry(
            geom,
            accel,
            weights_gib=weights_gib,
            weights_source=weights_source,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=max_len,
            tensor_parallel_size=tp,
        )
        replication = max((g.replication for g in plan.kv.groups), default=1.0)
        assert plan.kv_tokens is not None  # weights_gib is known, so the KV pool is sized
        return plan.kv_tokens, replication

    warnings: list[str] = []
    the_curve, dropped = within_pool(the_curve, kv_pool(1)[0])
    if dropped:
        warnings.append(dropped)
    step = fit_step_model(the_curve, cfg, geom, accel_one, weights_gib, kv_one)
    price_source = "no price"
    per_chip: float | None = None
    pm = pricing.validate_provisioning_model(provisioning_model or settings.provisioning_model)
    try:
        quote = await pricing.get_price(
            settings,
            accelerator_type=accel_one.name,
            region=region,
            provisioning_model=pm,
            usd_per_chip_hour=usd_per_chip_hour,
        )
        per_chip, price_source = quote.usd_per_chip_hour, quote.label()
    except InputError:
        raise
    except TpuDevopsError as exc:
        warnings.append(f"no price, so shapes are ranked by throughput only: {exc}")
    ctx = _Ctx(
        model=step,
        geom=geom,
        accel_gen=one_chip,
        kv_pool=kv_pool,
        context_tokens=the_curve.prompt_tokens + the_curve.output_tokens,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        usd_per_chip_hour=per_chip,
        hidden_size=int(_text_config(cfg).get("hidden_size") or 0),
    )
    options = rank(
        size_shapes(ctx, one_chip, streams=streams, target_tok_s=target_output_tokens_per_s, chips=chips)
    )
    objectives = ", ".join(
        x
        for x in (f"TTFT <= {ttft_ms:g} ms" if ttft_ms else "", f"TPOT <= {tpot_ms:g} ms" if tpot_ms else "")
        if x
    )
    target = (
        f"{streams} streams" if streams is not None else f"{target_output_tokens_per_s:,.0f} output tok/s"
    ) + (f" within {objectives}" if objectives else "")
    why, ratio = explain(options, step, target)
    if the_curve.bundled:
        warnings.insert(0, "the per-replica curve is the BUNDLED seed fixture (v5e-1, Gemma 4 E2B): run run_benchmark "
                        "on your one-chip endpoint and pass its results.json as curve")  # fmt: skip
    if the_curve.model and model_name not in the_curve.model:
        warnings.append(f"the curve was measured on {the_curve.model}, the geometry is {model_name}")
    if max(p.concurrency for p in the_curve.points) < max(o.streams_per_engine or 0 for o in options):
        warnings.append(
            f"engines run at more streams than the curve measured (up to {max(p.concurrency for p in the_curve.points)}): "
            "those figures are extrapolated along the fitted line"
        )
    assumptions = [
        f"decode step per one-chip engine = {step.fixed_ms:.2f} ms + {step.per_stream_ms:.3f} ms x streams, fitted to "
        f"{len(the_curve.points)} measured cells (largest error {step.fit_max_error_pct:.1f}%)",
        f"weights streamed per step: {step.streamed_weight_source}; {one_chip.name} HBM {one_chip.bandwidth_gbps:,.0f} GB/s, "
        f"{one_chip.bf16_tflops:g} TFLOPS bf16 (catalog)",
        f"KV per token {kv_one:,} B from config geometry ({config_source}); weights {weights_gib:.2f} GiB ({weights_source})",
        "tensor parallelism divides device work only; host work per step and per stream stays with the one engine",
        "TP adds two all-reduces per layer of batch x hidden x 2 B over ICI"
        + (
            f" at {one_chip.ici_gb_per_s:g} GB/s per chip ({one_chip.ici_source})"
            if one_chip.ici_gb_per_s is not None
            else " (not modelled for this generation: no ICI figure)"
        )
        + "; collective latency is not modelled (it would lower TP further)",
        f"an engine holds at most {MAX_NUM_SEQS} streams (max_num_seqs) and streams x {ctx.context:.0f} context tokens "
        "under 78% of its KV pool; a load balancer with least connections spreads streams evenly",
        "TTFT and TPOT of an engine scale with its step time relative to one chip's at the same streams",
        f"GKE adds ${GKE_CLUSTER_FEE_USD_PER_HOUR:.2f}/h cluster management fee (cloud.google.com/kubernetes-engine/pricing)",
    ]
    return ScaleOutPlan(
        target=target,
        model=model_name,
        curve=the_curve,
        step_model=step,
        provisioning_model=pm,
        usd_per_chip_hour=per_chip,
        price_source=price_source,
        options=options,
        winner=options[0].shape if options and options[0].feasible else None,
        why=why,
        tp_ratio=ratio,
        assumptions=assumptions,
        warnings=warnings,
    )
