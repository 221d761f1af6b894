"""A local OpenAI-compatible server that answers in vLLM's shapes, with programmable latency and faults.

Endpoints (vLLM's OpenAI server, ``vllm/entrypoints/openai/api_server.py``):

- ``GET /health`` -> 200 with an empty body when ready; 503 while "booting".
- ``GET /v1/models`` -> ``{"object": "list", "data": [{"id", "object": "model", "owned_by": "vllm",
  "root", "parent", "max_model_len", "permission": [...]}]}``.
- ``GET /version`` -> ``{"version": "0.30.0"}``: by default the vLLM of the pinned default image
  (`PINNED_VERSION`), so demo and tests never show a version the product would refuse for Gemma 4.
- ``GET /metrics`` -> Prometheus text made by ``prometheus_client`` with vLLM's metric names (labels
  ``model_name`` and ``engine``): ``vllm:num_requests_running`` / ``_waiting`` (gauges),
  ``vllm:kv_cache_usage_perc`` (or the older ``vllm:gpu_cache_usage_perc``), counters
  ``vllm:num_preemptions_total``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:request_success_total``, histograms ``vllm:time_to_first_token_seconds``,
  ``vllm:time_per_output_token_seconds``, ``vllm:inter_token_latency_seconds``,
  ``vllm:e2e_request_latency_seconds``, and the info gauge ``vllm:cache_config_info``. Names as listed
  in vLLM's ``docs/source/design/v1/metrics.md`` and llm-d-inference-sim ``docs/metrics.md``.
- ``POST /v1/chat/completions``, streaming (SSE ``data: {chunk}`` lines ending with ``data: [DONE]``)
  and non-streaming, ``usage`` always in non-streaming answers and as a final ``choices: []`` chunk
  when ``stream_options.include_usage`` is true. Tool calls in vLLM's shape: ids ``chatcmpl-tool-<hex>``,
  streamed as a first delta with ``index``/``id``/``type``/``function.name`` and ``arguments: ""`` then
  argument fragments; ``finish_reason: "tool_calls"``.

API key (``api_key``: a string, or a callable read on every request, e.g. the fake Secret Manager's
current version): like vLLM started with ``VLLM_API_KEY`` / ``--api-key``, every path starting with
``/v1`` (except OPTIONS) needs ``Authorization: Bearer <key>`` and otherwise answers 401
``{"error": "Unauthorized"}``; ``/health``, ``/version`` and ``/metrics`` stay open
(vllm-project/vllm ``vllm/entrypoints/openai/server_utils.py``, ``AuthenticationMiddleware``).
``unauthorized`` counts the refused requests.

Errors use vLLM's body ``{"error": {"message", "type", "param", "code"}}``; the messages are vLLM's:
``"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`` (400,
BadRequestError) and ``The model `X` does not exist.`` (404, NotFoundError).

"Tokens": the prompt is counted as whitespace-separated words plus `TEMPLATE_OVERHEAD_TOKENS` per
message; each generated token is one word (``" tok"``). Timing follows an absolute schedule per request:
the first token at ``ttft_s`` after the request arrived, token *i* at ``ttft_s + i * itl_s``, so a busy
event loop delays a chunk without shifting the ones after it.

Scripting for the log analyst: `FakeVllm.queue(ScriptedTurn(...))` queues assistant turns that
are answered in order before the default generator; a turn may carry ``tool_calls`` (structured, as a
vLLM tool parser returns them) or raw Gemma tool-call syntax in ``content`` (what the client sees when
the server runs without ``--tool-call-parser gemma4``): ``<|tool_call>call:NAME{key:<|"|>v<|"|>}<tool_call|>``.

``flavor="llama.cpp"`` answers as llama.cpp's ``llama-server`` (ggml-org/llama.cpp ``tools/server``):
``/v1/models`` cards ``owned_by: "llamacpp"`` with ``meta.n_ctx`` (context per slot) and no
``max_model_len``; ``/health`` ``{"status": "ok"}``; no ``/version`` (404); ``/metrics`` with the
``llamacpp:`` series (``requests_processing``, ``requests_deferred``, ``prompt_tokens_total``,
``tokens_predicted_total``, ...) or, with ``metrics_enabled=False``, 501 ``not_supported_error``
"This server does not support metrics endpoint. Start it with `--metrics`"; ``POST /tokenize``
``{"content", "add_special", "parse_special"}`` -> ``{"tokens": [...]}`` and ``POST /apply-template``
``{"messages", "tools"}`` -> ``{"prompt"}``; a prompt over the context answers 400
``exceed_context_size_error`` "request (N tokens) exceeds the available context size (C tokens), try
increasing it" with ``n_prompt_tokens`` and ``n_ctx`` (``legacy_overflow_message``: the older "the
request exceeds the available context size, try increasing it", numbers only in the body). Its tokens are Gemma-like (`dense_tokens`: every
digit and punctuation mark one token, words one token per 8 letters), and every chat request's prompt
+ ``max_tokens`` is recorded in ``context_checks`` so a test can assert nothing oversized was sent.
vLLM mode also answers ``POST /tokenize`` (``{"count", "max_model_len", "tokens"}``, vllm
``vllm/entrypoints/serve/tokenize/protocol.py``).

``degenerate``: ``"repeat"`` answers ``model model model ...`` until ``max_tokens`` (finish_reason
``length``); ``"echo"`` echoes the prompt with template markers.

Run on its own for manual sessions: ``python -m tests.fakes.openai_server --port 8000 --ttft 0.2 --itl 0.02``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread
from tpu_devops.config import DEFAULTS
from tpu_devops.planning.images import parse_image

# The vLLM version of the image the product pins by default (VLLM_IMAGE vllm/vllm-tpu:v0.30.0 -> "0.30.0").
PINNED_VERSION = str(parse_image(DEFAULTS["VLLM_IMAGE"]).version)

TEMPLATE_OVERHEAD_TOKENS = 4
TOOL_PARSER_MISSING = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
GEMMA_QUOTE = '<|"|>'

# vLLM's bucket edges (seconds) for the latency histograms (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
TPOT_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)


def gemma_tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """Raw Gemma 4 tool-call syntax, e.g. ``<|tool_call>call:get_time{zone:<|"|>UTC<|"|>}<tool_call|>``."""

    def value(v: Any) -> str:
        if isinstance(v, str):
            return f"{GEMMA_QUOTE}{v}{GEMMA_QUOTE}"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(value(x) for x in v) + "]"
        return json.dumps(v)

    return f"<|tool_call>call:{name}{value(arguments)}<tool_call|>"


@dataclass
class ScriptedTurn:
    """One scripted assistant turn.

    ``tool_calls``: ``[{"name": str, "arguments": dict | str}]`` returned as structured tool calls.
    ``content``: assistant text (may contain raw Gemma tool-call syntax, see `gemma_tool_call_text`).
    ``reasoning``: text returned as ``reasoning_content`` (vLLM's reasoning parser field).
    ``status``/``error``: answer with this HTTP error instead (vLLM's error body).
    ``ttft_s``/``itl_s``: this turn's own latency (seconds), instead of the server's: a slow answer (a
    CPU server's long prefill, a long generation) among quick ones.
    """

    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str | None = None
    finish_reason: str | None = None
    status: int | None = None
    error: str | None = None
    ttft_s: float | None = None
    itl_s: float | None = None


@dataclass
class FakeVllm:
    """The fake server's state; every field may be changed while it runs (tests script it).

    Times in seconds. ``mode``: ``"ready"``, ``"booting"`` (503 on every path, as while the engine
    starts) . ``tool_parser``: False answers ``tool_choice="auto"`` with vLLM's 400. ``raw_tool_syntax``:
    the model "calls" tools by writing Gemma syntax in content (no parser active). ``empty_content``:
    every answer has empty content. ``default_output_tokens``: tokens generated when the request does
    not ask for ``ignore_eos`` (else ``max_tokens``).
    """

    model: str = "google/gemma-4-E2B-it"
    max_model_len: int = 16384
    version: str = PINNED_VERSION
    ttft_s: float = 0.0
    itl_s: float = 0.0
    default_output_tokens: int = 12
    mode: str = "ready"
    tool_parser: bool = True
    raw_tool_syntax: bool = False
    empty_content: bool = False
    kv_metric_name: str = "vllm:kv_cache_usage_perc"
    kv_usage: float = 0.0
    num_gpu_blocks: int = 10043
    block_size: int = 32
    stall_after_tokens: int | None = None
    stall_s: float = 0.0
    flavor: str = "vllm"  # or "llama.cpp"
    metrics_enabled: bool = True
    tokenize_enabled: bool = True
    degenerate: str | None = None  # "repeat" or "echo"
    # llama.cpp's older overflow wording: no numbers in the message, only in the body (field report C17)
    legacy_overflow_message: bool = False
    die_after_tokens: int | None = None  # drop the stream after this many tokens (a crash mid-answer)
    context_checks: list[tuple[int, int, int]] = field(default_factory=list)  # (prompt, max_tokens, ctx)
    requests: list[dict[str, Any]] = field(default_factory=list)
    scripted: deque[ScriptedTurn] = field(default_factory=deque)
    api_key: str | Callable[[], str | None] | None = None
    unauthorized: int = 0
    auth_headers_seen: list[str | None] = field(default_factory=list)
    methods_seen: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request

    def __post_init__(self) -> None:
        disable_created_metrics()
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        r = self.registry
        self._running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=r
        )
        self._waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=r
        )
        self._kv = Gauge(
            self.kv_metric_name, "KV-cache usage. 1 means 100 percent usage.", labels, registry=r
        )
        self._preempt = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, registry=r
        )
        self._prompt = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r
        )
        self._gen = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r
        )
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=r,
        )
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self._tpot = Histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            labels,
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self._itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels,
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self._cache_info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [
                "block_size",
                "cache_dtype",
                "gpu_memory_utilization",
                "num_gpu_blocks",
                "enable_prefix_caching",
            ],
            registry=r,
        )
        m = (self.model, "0")
        for metric in (self._running, self._waiting, self._kv, self._preempt, self._prompt, self._gen):
            metric.labels(*m)
        self._thread: ServerThread | None = None
        self._llama = CollectorRegistry()
        self._llama_gauges = {
            name: Gauge(f"llamacpp:{name}", help_, registry=self._llama)
            for name, help_ in (
                ("requests_processing", "Number of requests processing."),
                ("requests_deferred", "Number of requests deferred."),
                ("prompt_tokens_seconds", "Average prompt throughput in tokens/s."),
                ("predicted_tokens_seconds", "Average generation throughput in tokens/s."),
            )
        }
        self._llama_counters = {
            name: Counter(f"llamacpp:{name}", help_, registry=self._llama)
            for name, help_ in (
                ("prompt_tokens", "Number of prompt tokens processed."),
                ("tokens_predicted", "Number of generation tokens processed."),
                ("n_decode", "Total number of llama_decode() calls"),
            )
        }
        self.app = Starlette(
            middleware=[Middleware(_KeyGate, fake=self)],
            routes=[
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/apply-template", self._apply_template, methods=["POST"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/version", self._version, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
            ],
        )

    # ---- scripting -------------------------------------------------------------------------------

    def queue(self, *turns: ScriptedTurn) -> None:
        """Queue scripted assistant turns, answered in order before the default generator."""
        self.scripted.extend(turns)

    def add_preemptions(self, n: int = 1) -> None:
        """Raise ``vllm:num_preemptions_total`` by ``n``."""
        self._preempt.labels(self.model, "0").inc(n)

    # ---- lifecycle ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._thread is not None, "FakeVllm not started"
        return self._thread.url

    def start(self, port: int = 0) -> FakeVllm:
        self._thread = ServerThread(self.app, port=port).start()
        return self

    def stop(self) -> None:
        if self._thread:
            self._thread.stop()

    def __enter__(self) -> FakeVllm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- handlers ------------------------------------------------------------------------------------

    def _booting(self) -> Response | None:
        if self.mode == "booting":
            return JSONResponse(
                _error("Service Unavailable: the engine is starting", "ServiceUnavailableError", 503),
                status_code=503,
            )
        return None

    @property
    def llama(self) -> bool:
        return self.flavor == "llama.cpp"

    def set_llama_load(self, processing: int, deferred: int) -> None:
        """Set ``llamacpp:requests_processing`` / ``requests_deferred`` (what llama-server reports)."""
        self._llama_gauges["requests_processing"].set(processing)
        self._llama_gauges["requests_deferred"].set(deferred)

    def count(self, text: str) -> int:
        """This server's token count of ``text`` (llama.cpp flavor: `dense_tokens`; vLLM: words)."""
        return dense_tokens(text) if self.llama else len(text.split())

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """A Gemma-like chat template: turn markers per message, tool declarations as JSON up front."""
        parts = ["<bos>"]
        if tools:
            parts.append("<start_of_turn>system\ntools: " + json.dumps(tools) + "<end_of_turn>\n")
        for m in messages:
            content = m.get("content") or ""
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            calls = json.dumps(m["tool_calls"]) if m.get("tool_calls") else ""
            parts.append(f"<start_of_turn>{m.get('role')}\n{content}{calls}<end_of_turn>\n")
        parts.append("<start_of_turn>model\n")
        return "".join(parts)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        messages = body.get("messages") or []
        if self.llama:
            return self.count(self.render(messages, body.get("tools")))
        return _count_prompt_tokens(messages)

    async def _tokenize(self, request: Request) -> Response:
        if not self.tokenize_enabled:
            return self._not_found()
        body = await request.json()
        if self.llama:  # {"content", "add_special", "parse_special"} -> {"tokens": [...]}
            n = self.count(str(body.get("content", ""))) + (1 if body.get("add_special") else 0)
            return JSONResponse({"tokens": list(range(n))})
        if "messages" in body:  # vLLM TokenizeChatRequest
            n = _count_prompt_tokens(body["messages"])
        else:
            n = len(str(body.get("prompt", "")).split())
        return JSONResponse({"count": n, "max_model_len": self.max_model_len, "tokens": list(range(n))})

    async def _apply_template(self, request: Request) -> Response:
        if not self.llama or not self.tokenize_enabled:
            return self._not_found()
        body = await request.json()
        return JSONResponse({"prompt": self.render(body.get("messages") or [], body.get("tools"))})

    def _not_found(self) -> Response:
        if self.llama:  # llama-server: unknown route
            return JSONResponse(
                {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404
            )
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    async def _health(self, request: Request) -> Response:
        if self.llama:
            return self._booting() or JSONResponse({"status": "ok"})
        return self._booting() or Response(status_code=200)

    async def _version(self, request: Request) -> Response:
        if self.llama:
            return self._not_found()
        return self._booting() or JSONResponse({"version": self.version})

    async def _models(self, request: Request) -> Response:
        if busy := self._booting():
            return busy
        if self.llama:  # ggml-org/llama.cpp tools/server/server-context.cpp model info
            card = {
                "id": self.model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "llamacpp",
                "meta": {
                    "vocab_type": 1,
                    "n_vocab": 262144,
                    "n_ctx": self.max_model_len,
                    "n_ctx_train": 131072,
                    "n_embd": 1536,
                    "n_params": 4_650_000_000,
                    "size": 253_000_000,
                },
            }
            return JSONResponse(
                {"models": [{"name": self.model, "model": self.model}], "object": "list", "data": [card]}
            )
        card = {
            "id": self.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{secrets.token_hex(8)}",
                    "object": "model_permission",
                    "allow_sampling": True,
                }
            ],
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def _metrics(self, request: Request) -> Response:
        if self.llama:
            if not self.metrics_enabled:
                msg = "This server does not support metrics endpoint. Start it with `--metrics`"
                return JSONResponse(
                    {"error": {"code": 501, "message": msg, "type": "not_supported_error"}}, 501
                )
            return Response(generate_latest(self._llama), media_type="text/plain; version=0.0.4")
        self._kv.labels(self.model, "0").set(self.kv_usage)
        self._cache_info.labels(str(self.block_size), "auto", "0.92", str(self.num_gpu_blocks), "True").set(1)
        return Response(generate_latest(self.registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _completions(self, request: Request) -> Response:
        # vLLM answers /v1/completions on -it models with empty text (DESIGN §3).
        if busy := self._booting():
            return busy
        body = await request.json()
        return JSONResponse(
            {
                "id": f"cmpl-{secrets.token_hex(16)}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model", self.model),
                "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4},
            }
        )

    async def _chat(self, request: Request) -> Response:
        arrived = time.perf_counter()
        if busy := self._booting():
            return busy
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return JSONResponse(_error("Invalid JSON body", "BadRequestError", 400), status_code=400)
        self.requests.append(body)
        model = body.get("model")
        if model != self.model:
            return JSONResponse(
                _error(f"The model `{model}` does not exist.", "NotFoundError", 404), status_code=404
            )
        if body.get("tools") and body.get("tool_choice", "auto") == "auto" and not self.tool_parser:
            return JSONResponse(_error(TOOL_PARSER_MISSING, "BadRequestError", 400), status_code=400)
        turn = self._next_turn(body)
        if turn.status:
            return JSONResponse(
                _error(turn.error or "error", "BadRequestError", turn.status), status_code=turn.status
            )
        prompt_tokens = self.prompt_tokens(body)
        self.context_checks.append((prompt_tokens, int(body.get("max_tokens") or 0), self.max_model_len))
        if self.llama and prompt_tokens + int(body.get("max_tokens") or 0) > self.max_model_len:
            msg = (
                f"request ({prompt_tokens} tokens) exceeds the available context size ({self.max_model_len} tokens), "
                "try increasing it"
            )
            if self.legacy_overflow_message:
                msg = "the request exceeds the available context size, try increasing it"
            err = {"code": 400, "message": msg, "type": "exceed_context_size_error"}
            err |= {"n_prompt_tokens": prompt_tokens, "n_ctx": self.max_model_len}
            return JSONResponse({"error": err}, status_code=400)
        if prompt_tokens + int(body.get("max_tokens") or 0) > self.max_model_len:
            msg = (
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + int(body.get('max_tokens') or 0)} tokens ({prompt_tokens} in the messages, "
                f"{int(body.get('max_tokens') or 0)} in the completion). Please reduce the length of the messages or completion."
            )
            return JSONResponse(_error(msg, "BadRequestError", 400), status_code=400)
        pieces = _pieces(turn)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                self._stream(body, turn, pieces, prompt_tokens, include_usage, arrived),
                media_type="text/event-stream",
            )
        return await self._complete(body, turn, pieces, prompt_tokens, arrived)

    def _next_turn(self, body: dict[str, Any]) -> ScriptedTurn:
        if self.scripted:
            return self.scripted.popleft()
        if self.empty_content:
            return ScriptedTurn(content="", finish_reason="stop")
        if self.degenerate == "repeat":
            n = int(body.get("max_tokens") or self.default_output_tokens)
            return ScriptedTurn(content=" ".join("model" for _ in range(n)), finish_reason="length")
        if self.degenerate == "echo":
            last = next((m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), {})
            return ScriptedTurn(
                content=f"<start_of_turn>user\n{last.get('content', '')}<end_of_turn>\n<start_of_turn>model"
            )
        tools = body.get("tools") or []
        if tools and body.get("tool_choice", "auto") != "none":
            fn = tools[0]["function"]
            args = {k: "UTC" for k in (fn.get("parameters") or {}).get("properties", {})}
            if self.raw_tool_syntax:
                return ScriptedTurn(content=gemma_tool_call_text(fn["name"], args))
            return ScriptedTurn(tool_calls=[{"name": fn["name"], "arguments": args}])
        last = next((m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), {})
        if (q := re.search(r"What is (\d+) \+ (\d+)\?", str(last.get("content") or ""))) and not body.get(
            "ignore_eos"
        ):  # a competent model answers a small sum (the health probe's checkable question)
            return ScriptedTurn(content=str(int(q.group(1)) + int(q.group(2))))
        n = int(body.get("max_tokens") or self.default_output_tokens)
        if not body.get("ignore_eos"):
            n = min(n, self.default_output_tokens)
        return ScriptedTurn(content="".join(" tok" for _ in range(n)).lstrip(" "))

    async def _wait_until(self, t0: float, index: int, turn: ScriptedTurn | None = None) -> None:
        """Sleep until token ``index`` is due: ``t0 + ttft + index * itl`` (+ a programmed stall); the
        turn's own latency when it has one."""
        ttft = turn.ttft_s if turn is not None and turn.ttft_s is not None else self.ttft_s
        itl = turn.itl_s if turn is not None and turn.itl_s is not None else self.itl_s
        due = t0 + ttft + index * itl
        if self.stall_after_tokens is not None and index >= self.stall_after_tokens:
            due += self.stall_s
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

    def _record(
        self, prompt_tokens: int, n_out: int, ttft: float, e2e: float, gaps: list[float], reason: str
    ) -> None:
        m = (self.model, "0")
        self._prompt.labels(*m).inc(prompt_tokens)
        self._gen.labels(*m).inc(n_out)
        self._ttft.labels(*m).observe(ttft)
        for g in gaps:
            self._itl.labels(*m).observe(g)
        if n_out > 1:
            self._tpot.labels(*m).observe((e2e - ttft) / (n_out - 1))
        self._e2e.labels(*m).observe(e2e)
        self._success.labels(*m, reason).inc()

    async def _complete(
        self, body: dict[str, Any], turn: ScriptedTurn, pieces: list[str], prompt_tokens: int, t0: float
    ) -> Response:
        self._running.labels(self.model, "0").inc()
        try:
            await self._wait_until(t0, max(len(pieces) - 1, 0), turn)
        finally:
            self._running.labels(self.model, "0").dec()
        e2e = time.perf_counter() - t0
        reason = _finish_reason(turn, body, len(pieces))
        self._record(prompt_tokens, len(pieces), min(self.ttft_s, e2e), e2e, [], reason)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if turn.tool_calls else (turn.content or ""),
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [_tool_call(tc) for tc in turn.tool_calls or []],
            "reasoning_content": turn.reasoning,
        }
        return JSONResponse(
            {
                "id": f"chatcmpl-{secrets.token_hex(16)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": reason,
                        "stop_reason": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": _usage(prompt_tokens, len(pieces)),
                "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        )

    async def _stream(
        self,
        body: dict[str, Any],
        turn: ScriptedTurn,
        pieces: list[str],
        prompt_tokens: int,
        include_usage: bool,
        t0: float,
    ):
        cid = f"chatcmpl-{secrets.token_hex(16)}"
        created = int(time.time())
        m = (self.model, "0")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            data = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            if include_usage and (body.get("stream_options") or {}).get("continuous_usage_stats"):
                data["usage"] = None
            return f"data: {json.dumps(data)}\n\n"

        self._running.labels(*m).inc()
        emitted: list[float] = []
        try:
            await self._wait_until(t0, 0, turn)
            yield chunk({"role": "assistant", "content": ""})
            if turn.tool_calls:
                for i, tc in enumerate(turn.tool_calls):
                    full = _tool_call(tc)
                    head = {
                        "index": i,
                        "id": full["id"],
                        "type": "function",
                        "function": {"name": full["function"]["name"], "arguments": ""},
                    }
                    yield chunk({"tool_calls": [head]})
                    emitted.append(time.perf_counter())
                    args = full["function"]["arguments"]
                    for j in range(0, len(args), 8):
                        yield chunk(
                            {"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 8]}}]}
                        )
                n_out = max(len(pieces), 1)
            else:
                if turn.reasoning:
                    yield chunk({"reasoning_content": turn.reasoning})
                for i, piece in enumerate(pieces):
                    if self.die_after_tokens is not None and i >= self.die_after_tokens:
                        raise ConnectionResetError("the fake server died mid-stream")
                    await self._wait_until(t0, i, turn)
                    yield chunk({"content": piece})
                    emitted.append(time.perf_counter())
                n_out = len(pieces)
            reason = _finish_reason(turn, body, n_out)
            yield chunk({}, reason)
            if include_usage:
                usage = {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": self.model,
                    "choices": [],
                    "usage": _usage(prompt_tokens, n_out),
                }
                yield f"data: {json.dumps(usage)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            self._running.labels(*m).dec()
        if emitted:
            gaps = [b - a for a, b in zip(emitted, emitted[1:], strict=False)]
            self._record(prompt_tokens, n_out, emitted[0] - t0, emitted[-1] - t0, gaps, reason)


_DENSE = re.compile(r"<start_of_turn>|<end_of_turn>|<bos>|\d|[^\w\s]|[A-Za-z]+|\n| {2,}")


def dense_tokens(text: str) -> int:
    """A Gemma-like token count: each digit, symbol, newline and special token (``<start_of_turn>``) is a
    token; a word is one token per 8 letters (real Gemma counts of log text run 1.6-2.0 characters per
    token)."""
    n = 0
    for m in _DENSE.finditer(text):
        tok = m.group(0)
        n += (len(tok) + 7) // 8 if tok[0].isalpha() else 1
    return n


class _KeyGate:
    """vLLM's API-key check as an ASGI middleware (see the module docstring)."""

    def __init__(self, app: Any, fake: FakeVllm) -> None:
        self.app = app
        self.fake = fake

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            self.fake.auth_headers_seen.append(headers.get("authorization"))
            self.fake.methods_seen.append((scope["method"], scope["path"]))
            key = self.fake.api_key() if callable(self.fake.api_key) else self.fake.api_key
            if key and scope["method"] != "OPTIONS" and scope["path"].startswith("/v1"):
                scheme, _, token = (headers.get("authorization") or "").partition(" ")
                if scheme.lower() != "bearer" or not secrets.compare_digest(token.encode(), key.encode()):
                    self.fake.unauthorized += 1
                    await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _error(message: str, type_: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _count_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    total = 0
    for msg in messages:
        content = msg.get("content") or ""
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += len(str(content).split()) + TEMPLATE_OVERHEAD_TOKENS
    return total


def _pieces(turn: ScriptedTurn) -> list[str]:
    """The token stream of a turn: one piece per word (keeping spaces), or one per tool call."""
    if turn.tool_calls:
        return ["" for _ in turn.tool_calls]
    text = turn.content or ""
    if not text:
        return []
    words = text.split(" ")
    return [words[0]] + [" " + w for w in words[1:]]


def _finish_reason(turn: ScriptedTurn, body: dict[str, Any], n_out: int) -> str:
    if turn.finish_reason:
        return turn.finish_reason
    if turn.tool_calls:
        return "tool_calls"
    max_tokens = body.get("max_tokens")
    return "length" if max_tokens and n_out >= int(max_tokens) else "stop"


def _tool_call(tc: dict[str, Any]) -> dict[str, Any]:
    args = tc.get("arguments", {})
    return {
        "id": tc.get("id") or f"chatcmpl-tool-{secrets.token_hex(16)}",
        "type": "function",
        "function": {"name": tc["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
    }


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def closed_port_url() -> str:
    """``http://127.0.0.1:PORT`` where nothing listens (connection refused, like a booting TPU VM)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def silent_port_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` that accepts connections and never answers (a hung server, or a
    firewall that lets the SYN through and drops the rest): clients must time out, not hang."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)  # the kernel completes handshakes into the backlog; nothing ever reads
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def main() -> None:
    """Serve the fake on a port until interrupted (manual sessions, `scripts/bench_serving.py`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="google/gemma-4-E2B-it")
    parser.add_argument("--ttft", type=float, default=0.0, help="seconds to the first token")
    parser.add_argument("--itl", type=float, default=0.0, help="seconds between tokens")
    parser.add_argument("--max-model-len", type=int, default=16384)
    parser.add_argument("--api-key-env", default="", help="require the key held by this environment variable")
    args = parser.parse_args()
    fake = FakeVllm(model=args.model, ttft_s=args.ttft, itl_s=args.itl, max_model_len=args.max_model_len)
    if args.api_key_env:
        import os

        fake.api_key = os.environ.get(args.api_key_env) or None
    fake.start(port=args.port)
    print(f"fake vLLM serving {args.model} on {fake.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
