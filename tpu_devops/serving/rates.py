"""How fast each serving endpoint reads a prompt and writes an answer, measured on its earlier calls.

A model call can then be judged before it is sent: will it finish inside one tool call
(`tpu_devops.host.deadline`), or must it be a job? Two rates per endpoint and model, from streamed
answers (`tpu_devops.serving.stream.StreamedAnswer`):

- **prefill** (prompt tokens per second) = ``usage.prompt_tokens`` / TTFT, for prompts of at least
  `PREFILL_MIN_TOKENS` (a shorter prompt's TTFT is mostly request overhead). TTFT also holds queueing
  and the network, so the rate is a lower bound, and the slowest of the recent samples is used: a
  prefix-cache hit makes a repeated prompt look fast, a new prompt is not;
- **decode** (output tokens per second after the first) = (completion_tokens - 1) / (last chunk -
  first chunk), for answers of at least `DECODE_MIN_TOKENS` (no rate from one token); the median of the
  recent samples.

`estimate` adds prompt / prefill + max_tokens / decode: the time of the longest answer the request
allows. The book lives in the server process (an endpoint's speed changes with its hardware and
load; nothing is persisted) and keeps `SAMPLES` samples per endpoint and model.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

PREFILL_MIN_TOKENS = 32
DECODE_MIN_TOKENS = 2
SAMPLES = 8


class Timed(Protocol):
    """What a streamed answer tells about speed (`tpu_devops.serving.stream.StreamedAnswer`)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    sent_at: float
    chunk_times: list[float]


@dataclass
class Rates:
    """Recent samples of one endpoint and model, tokens per second."""

    prefill: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    decode: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """The slowest recent prefill rate (module docstring), or None before any sample."""
        return min(self.prefill) if self.prefill else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """The median recent decode rate, or None before any sample."""
        return statistics.median(self.decode) if self.decode else None


@dataclass(frozen=True)
class Estimate:
    """Expected seconds for one request: ``prefill_s`` + ``decode_s`` (None when that rate is not
    measured yet; ``seconds`` then counts only the known part and ``complete`` is False)."""

    seconds: float
    prefill_s: float | None
    decode_s: float | None
    prompt_tokens: int
    max_tokens: int
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None

    @property
    def complete(self) -> bool:
        return self.prefill_s is not None and self.decode_s is not None

    def basis(self) -> str:
        """How the figure was made, e.g. ``1,200 prompt tokens at 70.5 tok/s + up to 512 tokens at 12.3
        tok/s (measured on this endpoint's earlier calls)``."""
        parts = []
        if self.prefill_tokens_per_s is not None:
            parts.append(f"{self.prompt_tokens:,} prompt tokens at {self.prefill_tokens_per_s:,.1f} tok/s")
        else:
            parts.append(f"{self.prompt_tokens:,} prompt tokens at a prefill rate not measured yet")
        if self.decode_tokens_per_s is not None:
            parts.append(f"up to {self.max_tokens:,} tokens at {self.decode_tokens_per_s:,.1f} tok/s")
        else:
            parts.append(f"up to {self.max_tokens:,} tokens at a decode rate not measured yet")
        return " + ".join(parts) + " (measured on this endpoint's earlier calls)"


class RateBook:
    """Measured rates per (endpoint URL, model)."""

    def __init__(self) -> None:
        self._rates: dict[tuple[str, str], Rates] = {}

    def observe(self, url: str, model: str, answer: Timed) -> None:
        """Take the rates one streamed answer shows (nothing when it is too short to tell)."""
        times = answer.chunk_times
        if not times:
            return
        rates = self._rates.setdefault((url, model), Rates())
        ttft = times[0] - answer.sent_at
        prompt = answer.prompt_tokens or 0
        if prompt >= PREFILL_MIN_TOKENS and ttft > 0:
            rates.prefill.append(prompt / ttft)
        n_out = answer.completion_tokens if answer.completion_tokens is not None else len(times)
        span = times[-1] - times[0]
        if n_out >= DECODE_MIN_TOKENS and span > 0:
            rates.decode.append((n_out - 1) / span)

    def rates(self, url: str, model: str) -> Rates | None:
        """The samples of ``url`` and ``model``, or None when it was never measured."""
        return self._rates.get((url, model))

    def estimate(self, url: str, model: str, prompt_tokens: int, max_tokens: int) -> Estimate | None:
        """Expected seconds for a request of ``prompt_tokens`` that may generate ``max_tokens``; None
        when neither rate is measured for this endpoint and model."""
        rates = self._rates.get((url, model))
        if rates is None:
            return None
        pre, dec = rates.prefill_tokens_per_s, rates.decode_tokens_per_s
        if pre is None and dec is None:
            return None
        prefill_s = prompt_tokens / pre if pre else None
        decode_s = max_tokens / dec if dec else None
        return Estimate(
            seconds=(prefill_s or 0.0) + (decode_s or 0.0),
            prefill_s=prefill_s,
            decode_s=decode_s,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            prefill_tokens_per_s=pre,
            decode_tokens_per_s=dec,
        )

    def clear(self) -> None:
        """Forget every measurement (tests)."""
        self._rates.clear()


RATES = RateBook()
