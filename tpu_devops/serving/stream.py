"""One streamed chat completion with its timing, kept whole even when the stream is cut.

Streaming stats follow ``vllm bench serve``'s definitions: TTFT is the time from sending the request to
the first chunk that carries output (content, reasoning or a tool call); TPOT is
``(latency - TTFT) / (completion_tokens - 1)``; the inter-chunk gaps after the first token are the
ITLs. Token counts are the server's ``usage`` (``stream_options.include_usage``), not counted chunks.

What arrived is never lost: a stream stopped at its deadline, or dropped by the server after some
output, returns the partial answer marked ``interrupted``; a `StreamProgress` the caller passes in
holds the text while it is still arriving (a job shows it through `get_job`), and stays readable after
a cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tpu_devops.serving.client import openai_client, probe_timeout
from tpu_devops.serving.errors import ServingError, classify

# A gap this much longer than the median inter-token gap (and at least STALL_MIN_MS) is a stall.
STALL_FACTOR = 10.0
STALL_MIN_MS = 500.0
log = logging.getLogger(__name__)


class ChatStats(BaseModel):
    """Timing of one streamed answer. Milliseconds; tokens from the server's ``usage``.

    ``tpot_mean_ms`` = (latency - TTFT) / (completion_tokens - 1) as ``vllm bench serve`` defines it;
    ``itl_median_ms`` and ``max_gap_ms`` are over the gaps between output chunks after the first;
    ``output_tokens_per_s`` = completion_tokens / latency; ``decode_tokens_per_s`` = 1000 / TPOT; both
    None for an answer of one token (a latency, not a rate).
    """

    ttft_ms: float | None
    latency_ms: float
    tpot_mean_ms: float | None
    itl_median_ms: float | None
    max_gap_ms: float | None
    max_gap_after_token: int | None
    output_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    output_chunks: int
    tokens_from: str  # "server usage" or "counted chunks (server sent no usage)"
    stalled: bool


@dataclass
class StreamedAnswer:
    """Raw result of `stream_chat`: text, tool calls, reasons and per-chunk times (perf_counter s)."""

    content: str
    reasoning: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    sent_at: float
    chunk_times: list[float]
    done_at: float
    # Why the stream ended early with a partial answer: "deadline" (stopped at deadline_s) or the
    # failure class of a server that dropped the stream mid-answer; None when it finished.
    interrupted: str | None = None

    def stats(self) -> ChatStats:
        """Compute `ChatStats` from the chunk times and usage."""
        times = self.chunk_times
        latency = (times[-1] if times else self.done_at) - self.sent_at
        ttft = times[0] - self.sent_at if times else None
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        n_out = self.completion_tokens if self.completion_tokens is not None else len(times)
        tpot = (latency - ttft) / (n_out - 1) if ttft is not None and n_out and n_out > 1 else None
        median_gap = statistics.median(gaps) if gaps else None
        max_gap = max(gaps) if gaps else None
        stalled = bool(
            max_gap is not None
            and median_gap is not None
            and max_gap * 1000 >= STALL_MIN_MS
            and max_gap >= STALL_FACTOR * max(median_gap, 1e-6)
        )
        return ChatStats(
            ttft_ms=_ms(ttft),
            latency_ms=round(latency * 1000, 3),
            tpot_mean_ms=_ms(tpot),
            itl_median_ms=_ms(median_gap),
            max_gap_ms=_ms(max_gap),
            max_gap_after_token=(gaps.index(max_gap) + 1) if gaps and max_gap is not None else None,
            # One token gives a latency, not a rate.
            output_tokens_per_s=round(n_out / latency, 3) if n_out and n_out > 1 and latency > 0 else None,
            decode_tokens_per_s=round(1 / tpot, 3) if tpot else None,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=n_out,
            output_chunks=len(times),
            tokens_from="server usage"
            if self.completion_tokens is not None
            else "counted chunks (server sent no usage)",
            stalled=stalled,
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


@dataclass
class StreamProgress:
    """What a stream has delivered so far (`stream_chat` fills it chunk by chunk). Times are
    ``time.perf_counter()`` seconds; ``usage`` holds the server's ``prompt`` / ``completion`` counts once
    its usage chunk arrived."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    chunk_times: list[float] = field(default_factory=list)
    usage: dict[str, int | None] = field(default_factory=dict)
    finish: str | None = None
    sent_at: float | None = None

    @property
    def text(self) -> str:
        """The content so far."""
        return "".join(self.content)

    @property
    def tokens(self) -> int:
        """Output tokens so far: the server's count once reported, else the output chunks seen."""
        n = self.usage.get("completion")
        return n if n is not None else len(self.chunk_times)

    @property
    def produced(self) -> bool:
        """True once any output (content, reasoning or a tool call) arrived."""
        return bool(self.content or self.reasoning or self.calls)

    def elapsed_s(self) -> float:
        """Seconds since the request was sent (0 before)."""
        return 0.0 if self.sent_at is None else time.perf_counter() - self.sent_at


async def stream_chat(
    url: str,
    model: str,
    messages: list[dict[str, Any]],
    *,
    api_key: str = "",
    max_tokens: int = 256,
    temperature: float | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    extra_body: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    deadline_s: float | None = None,
    progress: StreamProgress | None = None,
    measure: bool = False,
) -> StreamedAnswer:
    """One streamed chat completion with ``stream_options.include_usage``; times every output chunk.

    ``timeout_s``: read timeout (seconds between bytes) for this request; default the client's 120 s.
    ``deadline_s``: wall time for the whole answer (seconds): at the deadline the stream is closed and
    what arrived is returned with ``interrupted="deadline"``. A server that drops the stream after some
    output also returns the partial answer (``interrupted`` = the failure class) instead of raising.
    ``progress``: filled as chunks arrive (the caller may read it at any time). ``measure``: record the
    answer's prefill and decode rates for this endpoint (`tpu_devops.serving.rates.RATES`); single
    requests only, a benchmark's loaded rates would mislead later estimates.

    Raises:
        ServingError: classified failure before any output (refused, 503, 404 model, 400 tool parser,
            context overflow, or no output at all by the deadline: ``timeout``).
    """
    client = openai_client(url, api_key)
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if temperature is not None:
        kwargs["temperature"] = temperature
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = tool_choice or "auto"
    if extra_body:
        kwargs["extra_body"] = extra_body
    if timeout_s is not None:
        kwargs["timeout"] = probe_timeout(timeout_s)
    if deadline_s is not None:
        kwargs["timeout"] = probe_timeout(max(0.1, min(deadline_s, timeout_s or deadline_s)))
    p = progress if progress is not None else StreamProgress()
    interrupted: str | None = None
    stream: Any = None
    p.sent_at = time.perf_counter()
    try:
        async with asyncio.timeout(deadline_s):
            stream = await client.chat.completions.create(**kwargs)
            await _read_stream(stream, p)
    except TimeoutError:
        interrupted = "deadline"
    except Exception as exc:
        err = classify(exc, url, model)
        if not p.produced:
            raise err from exc
        # The server died mid-answer: what it said so far is kept, marked as cut off.
        log.info("stream from %s ended after %d chunks: %s", url, len(p.chunk_times), err.message)
        interrupted = err.failure
    finally:
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.close()
    if interrupted == "deadline" and not p.produced:
        raise ServingError(
            f"{url} produced no output within the {deadline_s:.0f} s deadline",
            failure="timeout",
            field="VLLM_URL",
            value=url,
            fix="the server is busy or slow (CPU?): retry, or ask for fewer tokens",
        )
    answer = StreamedAnswer(
        content=p.text,
        reasoning="".join(p.reasoning),
        tool_calls=[p.calls[i] for i in sorted(p.calls)],
        finish_reason=None if interrupted else p.finish,
        prompt_tokens=p.usage.get("prompt"),
        completion_tokens=p.usage.get("completion"),
        sent_at=p.sent_at,
        chunk_times=p.chunk_times,
        done_at=time.perf_counter(),
        interrupted=interrupted,
    )
    if measure:
        from tpu_devops.serving.rates import RATES

        RATES.observe(url, model, answer)
    return answer


async def _read_stream(stream: Any, p: StreamProgress) -> None:
    """Collect a chat-completion stream into ``p`` (kept when the stream breaks)."""
    async for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            p.usage["prompt"] = chunk.usage.prompt_tokens
            p.usage["completion"] = chunk.usage.completion_tokens
        for choice in chunk.choices:
            delta = choice.delta
            produced = False
            if delta.content:
                p.content.append(delta.content)
                produced = True
            extra = getattr(delta, "model_extra", None) or {}
            piece = extra.get("reasoning_content") or extra.get("reasoning")
            if piece:
                p.reasoning.append(str(piece))
                produced = True
            for tc in delta.tool_calls or []:
                entry = p.calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    entry["id"] = tc.id
                    produced = True
                if tc.function is not None:
                    entry["name"] += tc.function.name or ""
                    entry["arguments"] += tc.function.arguments or ""
            if produced:
                p.chunk_times.append(now)
            if choice.finish_reason:
                p.finish = choice.finish_reason
