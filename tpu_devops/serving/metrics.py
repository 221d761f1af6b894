"""`get_serving_status(view='metrics')`: vLLM's Prometheus ``/metrics`` parsed with ``prometheus_client`` and summarised.

Metric names (vLLM's ``docs/source/design/v1/metrics.md``; llm-d-inference-sim ``docs/metrics.md`` for
the v1 names; all carry ``model_name`` and ``engine`` labels):

- KV cache: ``vllm:kv_cache_usage_perc`` (v1 engine, fraction 0..1); older builds
  ``vllm:gpu_cache_usage_perc`` (TPU builds say "gpu" too). ``vllm:cache_config_info`` labels carry
  ``block_size`` and ``num_gpu_blocks``: their product is the KV pool in tokens.
- Scheduler: ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (gauges).
- Counters: ``vllm:num_preemptions_total``, ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``.
- Histograms (seconds): ``vllm:time_to_first_token_seconds``; per-output-token time as
  ``vllm:time_per_output_token_seconds`` (older), ``vllm:request_time_per_output_token_seconds`` or
  ``vllm:inter_token_latency_seconds`` (newer), whichever is present.

Quantiles are estimated from histogram buckets the way Prometheus' ``histogram_quantile`` does
(linear interpolation inside the bucket). Rates "since the last call" compare with the previous
scrape of the same endpoint in this server process.
"""

from __future__ import annotations

import time
from collections import defaultdict

from pydantic import BaseModel

from tpu_devops.config import Settings
from tpu_devops.errors import EndpointError
from tpu_devops.host.results import ToolResult
from tpu_devops.serving.client import http_client, probe_timeout
from tpu_devops.serving.errors import ServingError, classify
from tpu_devops.serving.resolve import attributed, resolve_endpoint

KV_USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
TPOT_NAMES = (
    "vllm:time_per_output_token_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
)
QUANTILES = (0.5, 0.9, 0.99)
# llama.cpp's llama-server series (ggml-org/llama.cpp tools/server/README.md, "GET /metrics"), shown
# under their own names when the server is llama.cpp: requests_processing is what is running,
# requests_deferred what waits for a free slot.
LLAMA_CPP_SERIES = (
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:prompt_tokens_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:n_decode_total",
    "llamacpp:n_busy_slots_per_decode",
)

Samples = dict[str, list[tuple[dict[str, str], float]]]

# url -> (unix time, counters) of the previous scrape, for "since the last call" rates.
_previous: dict[str, tuple[float, dict[str, float]]] = {}


def parse(text: str) -> Samples:
    """Prometheus text -> ``{sample name: [(labels, value), ...]}`` using ``prometheus_client.parser``.

    Raises:
        EndpointError: the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    samples: Samples = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[s.name].append((dict(s.labels), float(s.value)))
    except ValueError as exc:
        raise EndpointError(
            f"/metrics is not in Prometheus text format: {exc}",
            field="/metrics",
            value=text[:80],
            fix="point VLLM_URL at the vLLM server itself (not a proxy); vLLM serves /metrics by default",
        ) from None
    return dict(samples)


def _sum(samples: Samples, name: str) -> float | None:
    rows = samples.get(name)
    return None if not rows else sum(v for _, v in rows)


def histogram_quantile(samples: Samples, name: str, q: float) -> float | None:
    """Prometheus-style quantile ``q`` (0..1) of histogram ``name`` summed over label sets, in the
    histogram's unit; None when it has no observations."""
    buckets: dict[float, float] = defaultdict(float)
    for labels, value in samples.get(f"{name}_bucket", []):
        buckets[float(labels["le"])] += value
    if not buckets:
        return None
    edges = sorted(buckets)
    total = buckets[edges[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower_edge, lower_count = 0.0, 0.0
    for edge in edges:
        count = buckets[edge]
        if count >= rank:
            if edge == float("inf"):
                return lower_edge
            if count == lower_count:
                return edge
            return lower_edge + (edge - lower_edge) * (rank - lower_count) / (count - lower_count)
        lower_edge, lower_count = edge, count
    return edges[-2] if len(edges) > 1 else None


class LatencySummary(BaseModel):
    """A latency histogram: which metric, count, mean and quantiles in milliseconds."""

    metric: str
    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None


def _latency(samples: Samples, name: str) -> LatencySummary | None:
    count = _sum(samples, f"{name}_count")
    if count is None:
        return None
    total = _sum(samples, f"{name}_sum") or 0.0
    qs = [histogram_quantile(samples, name, q) for q in QUANTILES]
    return LatencySummary(
        metric=name,
        count=int(count),
        mean_ms=round(total / count * 1000, 3) if count else None,
        p50_ms=None if qs[0] is None else round(qs[0] * 1000, 3),
        p90_ms=None if qs[1] is None else round(qs[1] * 1000, 3),
        p99_ms=None if qs[2] is None else round(qs[2] * 1000, 3),
    )


class MetricsResult(ToolResult):
    """`get_serving_status(view='metrics')` output. Fractions 0..1, counts, tokens; ``*_per_s`` since the previous call."""

    endpoint: str
    kv_cache_usage: float | None
    kv_cache_metric: str | None
    kv_pool_tokens: int | None
    requests_running: float | None
    requests_waiting: float | None
    preemptions_total: float | None
    preemptions_since_last_call: float | None
    preemptions_per_min: float | None
    prompt_tokens_total: float | None
    generation_tokens_total: float | None
    generation_tokens_per_s: float | None
    seconds_since_last_call: float | None
    ttft: LatencySummary | None
    tpot: LatencySummary | None
    findings: list[str]
    metrics_kind: str = "vllm"  # "vllm", "llama.cpp" or "unknown": whose series /metrics exposes
    server_series: dict[str, float] = {}  # a known non-vLLM server's own series, summed over labels

    def headline(self) -> str:
        if self.metrics_kind == "llama.cpp":
            s = self.server_series
            return (
                "no vLLM metrics: this is llama.cpp (llamacpp: series): "
                f"{s.get('llamacpp:requests_processing', 0):.0f} processing / "
                f"{s.get('llamacpp:requests_deferred', 0):.0f} deferred, "
                f"{s.get('llamacpp:tokens_predicted_total', 0):,.0f} tokens generated"
            )
        if self.metrics_kind == "unknown":
            return f"no vLLM metrics at {self.endpoint}: /metrics exposes none of the vllm: series (not a vLLM server?)"
        kv = "?" if self.kv_cache_usage is None else f"{self.kv_cache_usage:.0%}"
        return (
            f"KV cache {kv} used, {self.requests_running or 0:.0f} running / {self.requests_waiting or 0:.0f} waiting, "
            f"{self.preemptions_total or 0:.0f} preemptions total"
        )

    def render_text(self) -> str:
        """Headline, then one line each: KV pool, rates since the last call, token totals, latencies."""

        def n(x: float | None, unit: str = "") -> str:
            return "?" if x is None else f"{x:,.0f}{unit}"

        lines = [self.headline(), f"endpoint: {self.endpoint} ({self.metrics_kind} metrics)"]
        if self.metrics_kind != "vllm":
            lines += [f"{k}: {v:,.3f}".rstrip("0").rstrip(".") for k, v in self.server_series.items()]
            lines.extend(f"finding: {f}" for f in self.findings)
            return "\n".join(lines)
        lines.append(
            f"now: KV cache {self.kv_cache_usage if self.kv_cache_usage is not None else '?'} used "
            f"({self.kv_cache_metric}), {n(self.requests_running)} running, {n(self.requests_waiting)} waiting, "
            f"{n(self.preemptions_total)} preemptions total"
        )
        if self.kv_pool_tokens:
            lines.append(
                f"KV pool: {self.kv_pool_tokens:,} tokens (vllm:cache_config_info blocks x block size)"
            )
        if self.seconds_since_last_call:
            lines.append(
                f"since the last call ({self.seconds_since_last_call:g} s): "
                f"{n(self.preemptions_since_last_call)} preemptions ({self.preemptions_per_min or 0:g}/min), "
                f"{self.generation_tokens_per_s or 0:,.1f} generated tok/s"
            )
        lines.append(
            f"tokens total: {n(self.prompt_tokens_total)} prompt, {n(self.generation_tokens_total)} generated"
        )
        for name, h in (("TTFT", self.ttft), ("TPOT", self.tpot)):
            if h:
                lines.append(
                    f"{name} ms over {h.count:,} requests: mean {h.mean_ms}, p50 {h.p50_ms}, p90 {h.p90_ms}, "
                    f"p99 {h.p99_ms} ({h.metric}, histogram estimate)"
                )
        lines.extend(f"finding: {f}" for f in self.findings)
        return "\n".join(lines)


def _not_vllm(url: str, samples: Samples) -> MetricsResult:
    """The answer for a /metrics without any ``vllm:`` series: whose metrics they are, never zeros."""
    llama = {name: v for name in LLAMA_CPP_SERIES if (v := _sum(samples, name)) is not None}
    findings: list[str] = []
    if llama:
        kind = "llama.cpp"
        deferred = llama.get("llamacpp:requests_deferred") or 0
        if deferred > 0:
            findings.append(
                f"{deferred:.0f} request(s) deferred: every llama-server slot is busy (raise --parallel)"
            )
        findings.append("KV-cache usage and preemptions are vLLM metrics: llama.cpp does not expose them")
    else:
        kind = "unknown"
        names = sorted({n.split("{")[0] for n in samples})[:8]
        findings.append(
            "no vLLM series in /metrics" + (f" (it has {', '.join(names)})" if names else " (it is empty)")
        )
    return MetricsResult(
        endpoint=url, kv_cache_usage=None, kv_cache_metric=None, kv_pool_tokens=None, requests_running=None,
        requests_waiting=None, preemptions_total=None, preemptions_since_last_call=None, preemptions_per_min=None,
        prompt_tokens_total=None, generation_tokens_total=None, generation_tokens_per_s=None,
        seconds_since_last_call=None, ttft=None, tpot=None, findings=findings, metrics_kind=kind,
        server_series=llama,
    )  # fmt: skip


def summarise(url: str, samples: Samples, now: float | None = None) -> MetricsResult:
    """Summarise parsed samples; updates the per-endpoint "previous scrape" used for rates. Without
    any ``vllm:`` series it says whose metrics these are (llama.cpp's are summarised) instead of zeros."""
    if not any(name.startswith("vllm:") for name in samples):
        return _not_vllm(url, samples)
    now = time.time() if now is None else now
    kv_name = next((n for n in KV_USAGE_NAMES if n in samples), None)
    kv_rows = samples.get(kv_name, []) if kv_name else []
    kv = max((v for _, v in kv_rows), default=None)
    pool = kv_pool_tokens(samples)
    counters = {
        "preemptions": _sum(samples, "vllm:num_preemptions_total"),
        "generation": _sum(samples, "vllm:generation_tokens_total"),
    }
    prev = _previous.get(url)
    _previous[url] = (now, {k: v for k, v in counters.items() if v is not None})
    dt = (now - prev[0]) if prev else None
    d_pre = d_gen = None
    if prev and counters["preemptions"] is not None and "preemptions" in prev[1]:
        d_pre = counters["preemptions"] - prev[1]["preemptions"]
    if prev and counters["generation"] is not None and "generation" in prev[1]:
        d_gen = counters["generation"] - prev[1]["generation"]
    running = _sum(samples, "vllm:num_requests_running")
    waiting = _sum(samples, "vllm:num_requests_waiting")
    tpot_name = next((n for n in TPOT_NAMES if f"{n}_count" in samples), None)
    findings: list[str] = []
    if kv is not None and kv >= 0.9:
        findings.append(
            f"KV cache {kv:.0%} full: new requests wait and running ones may be preempted; keep clients x context below the pool"
        )
    if d_pre:
        findings.append(
            f"{d_pre:.0f} preemption(s) since the last call: the KV pool is over-subscribed (streams stall, TTFT climbs)"
        )
    if waiting and waiting > 0:
        findings.append(f"{waiting:.0f} request(s) waiting: the server is saturated at this concurrency")
    return MetricsResult(
        endpoint=url,
        kv_cache_usage=kv,
        kv_cache_metric=kv_name,
        kv_pool_tokens=pool,
        requests_running=running,
        requests_waiting=waiting,
        preemptions_total=counters["preemptions"],
        preemptions_since_last_call=d_pre,
        preemptions_per_min=round(d_pre / dt * 60, 3) if d_pre is not None and dt else None,
        prompt_tokens_total=_sum(samples, "vllm:prompt_tokens_total"),
        generation_tokens_total=counters["generation"],
        generation_tokens_per_s=round(d_gen / dt, 3) if d_gen is not None and dt else None,
        seconds_since_last_call=round(dt, 1) if dt else None,
        ttft=_latency(samples, "vllm:time_to_first_token_seconds"),
        tpot=_latency(samples, tpot_name) if tpot_name else None,
        findings=findings,
    )


async def fetch_samples(url: str) -> Samples:
    """``GET /metrics`` and parse it.

    Raises:
        ServingError: classified transport / HTTP failure; EndpointError: not Prometheus text.
    """
    try:
        response = await http_client(url).get("/metrics", timeout=probe_timeout())
        if response.status_code == 501:  # llama.cpp without --metrics: not_supported_error
            raise ServingError(
                f"{url}/metrics answered 501 Not Implemented: the server's metrics endpoint is switched off",
                failure="metrics_disabled",
                field="/metrics",
                value=url,
                fix="start llama-server with --metrics (vLLM serves /metrics by default)",
            )
        response.raise_for_status()
    except ServingError:
        raise
    except Exception as exc:
        raise classify(exc, url) from exc
    return parse(response.text)


async def get_metrics(settings: Settings, base_url: str | None = None) -> MetricsResult:
    """Scrape and summarise the endpoint's metrics (see the module docstring for names and units).

    Raises:
        ServingError / EndpointError: no endpoint, unreachable, or not a Prometheus endpoint.
    """
    ep = await resolve_endpoint(settings, base_url)
    with attributed(ep):
        return summarise(ep.url, await fetch_samples(ep.url))


def kv_pool_tokens(samples: Samples) -> int | None:
    """KV pool size in tokens from ``vllm:cache_config_info`` (num_gpu_blocks x block_size), or None."""
    for labels, _ in samples.get("vllm:cache_config_info", []):
        try:
            return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
        except (KeyError, ValueError):
            continue
    return None
