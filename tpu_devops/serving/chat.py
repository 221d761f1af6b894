"""``query_gemma``: one question to the served model, answered with its text (and stats when asked).

The endpoint and the key come from `tpu_devops.serving.resolve`, the model from
`tpu_devops.serving.models`, the streamed answer from `tpu_devops.serving.stream`; failures are
classified by `tpu_devops.serving.errors`. Chat completions only: ``/v1/completions`` returns empty text
on ``-it`` models (DESIGN §3).
"""

from __future__ import annotations

from tpu_devops.config import Settings
from tpu_devops.errors import InputError
from tpu_devops.host.results import ToolResult
from tpu_devops.host.untrusted import UntrustedContent, UntrustedData, fence, untrusted_data
from tpu_devops.serving.answers import degenerate
from tpu_devops.serving.models import choose_model
from tpu_devops.serving.resolve import attributed, resolve_endpoint
from tpu_devops.serving.stream import ChatStats, stream_chat

# Wall time for one query_gemma answer (seconds): hosts cancel a tool call after ~60 s (DESIGN §2);
# a 20,000-token answer took 296 s on a CPU llama-server.
QUERY_DEADLINE_S = 50.0


class ChatResult(UntrustedContent, ToolResult):
    """`query_gemma` / `query_gemma_with_stats` output. ``stats`` only with stats requested.
    ``cut_off``: the answer is partial (deadline, token limit, or a server that died mid-answer)."""

    untrusted: UntrustedData = untrusted_data("model", "content", "reasoning")
    cut_off: bool = False
    endpoint: str
    endpoint_source: str
    model: str
    content: str
    reasoning: str | None = None
    finish_reason: str | None
    stats: ChatStats | None = None
    notices: list[str] = []

    def headline(self) -> str:
        if self.stats is None:  # our own words: the model's text is untrusted and stays in its fence
            cut = " (CUT OFF)" if self.finish_reason == "length" else ""
            size = f"{len(self.content):,} characters" if self.content else "an empty answer"
            return f"{self.model} answered: {size}, finish_reason={self.finish_reason}{cut}"
        s = self.stats
        line = (
            f"{s.completion_tokens} tokens: TTFT {s.ttft_ms} ms, TPOT {s.tpot_mean_ms} ms "
            f"(median {s.itl_median_ms}), {s.output_tokens_per_s} tok/s, largest gap {s.max_gap_ms} ms"
        )
        return line + (" - STREAM STALLED (KV-cache preemption looks like this)" if s.stalled else "")

    def render_text(self) -> str:
        """The answer (after the stats line when measured), then who answered, then notices."""
        lines = [self.headline(), ""]
        lines.append(
            fence(self.content, "model")
            if self.content
            else f"(empty answer, finish_reason={self.finish_reason})"
        )
        s = self.stats
        tokens = (
            f", {s.prompt_tokens} prompt + {s.completion_tokens} completion tokens ({s.tokens_from})"
            if s
            else ""
        )
        lines += [
            "",
            f"-- {self.model} at {self.endpoint} ({self.endpoint_source}), finish_reason={self.finish_reason}{tokens}",
        ]
        if s:
            gap = f" after token {s.max_gap_after_token}" if s.max_gap_after_token is not None else ""
            lines.append(
                f"stream: latency {s.latency_ms} ms, TTFT {s.ttft_ms} ms, TPOT mean {s.tpot_mean_ms} ms / median "
                f"{s.itl_median_ms} ms, {s.output_tokens_per_s} tok/s overall, {s.decode_tokens_per_s} tok/s decoding, "
                f"{s.output_chunks} chunks, largest gap {s.max_gap_ms} ms{gap}, stalled: {'yes' if s.stalled else 'no'}"
            )
        lines.extend(f"note: {n}" for n in self.notices)
        return "\n".join(lines)


async def query(
    settings: Settings,
    prompt: str,
    *,
    system: str | None = None,
    max_tokens: int = 512,
    temperature: float | None = None,
    model: str | None = None,
    base_url: str | None = None,
    with_stats: bool = False,
) -> ChatResult:
    """Ask the served Gemma one question (streamed) and return the answer, optionally with stats.

    Args:
        prompt: the user message (non-empty).
        system: optional system message.
        max_tokens: output cap, 1..32768 tokens.
        temperature: sampling temperature 0..2 (None: the server's default).
    Raises:
        InputError: empty prompt, max_tokens or temperature out of range.
        ServingError: endpoint or model failures, classified with the fix.
    """
    if not prompt or not prompt.strip():
        raise InputError("the prompt is empty", field="prompt", value=prompt, fix="pass the question to ask")
    if not 1 <= max_tokens <= 32768:
        raise InputError("out of range", field="max_tokens", value=max_tokens, fix="use 1..32768")
    if temperature is not None and not 0 <= temperature <= 2:
        raise InputError("out of range", field="temperature", value=temperature, fix="use 0..2")
    ep = await resolve_endpoint(settings, base_url)
    with attributed(ep):
        choice = await choose_model(settings, ep.url, model, api_key=ep.api_key)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}
        ]
        answer = await stream_chat(
            ep.url,
            choice.model,
            messages,
            api_key=ep.api_key,
            max_tokens=max_tokens,
            temperature=temperature,
            deadline_s=QUERY_DEADLINE_S,
        )
    notices = list(choice.notices)
    got = f"{answer.completion_tokens or len(answer.chunk_times)} tokens"
    if answer.interrupted == "deadline":
        notices.append(
            f"CUT OFF: stopped at the {QUERY_DEADLINE_S:.0f} s deadline after {got} (hosts cancel calls that run "
            "longer): the answer is partial; ask for fewer max_tokens for a complete one"
        )
    elif answer.interrupted:
        notices.append(
            f"CUT OFF: the server dropped the stream ({answer.interrupted}) after {got}: the answer is partial"
        )
    elif answer.finish_reason == "length":
        notices.append(f"CUT OFF at max_tokens={max_tokens} (finish_reason=length): the answer is incomplete")
    if answer.content and (problem := degenerate(answer.content)):
        notices.append(f"the answer looks degenerate: {problem}")
    if not answer.content and not answer.tool_calls:
        notices.append(
            "empty content: on -it models use chat completions (this tool does); if reasoning is on, "
            "raise max_tokens; check the prompt fits max_model_len"
        )
    stats = answer.stats() if with_stats else None
    if stats and stats.stalled:
        notices.append(
            f"the stream stalled {stats.max_gap_ms} ms after token {stats.max_gap_after_token}: from outside this "
            "is KV-cache preemption; get_metrics shows vllm:num_preemptions_total"
        )
    return ChatResult(
        cut_off=bool(answer.interrupted) or answer.finish_reason == "length",
        endpoint=ep.url,
        endpoint_source=ep.source,
        model=choice.model,
        content=answer.content,
        reasoning=answer.reasoning or None,
        finish_reason=answer.finish_reason,
        stats=stats,
        notices=notices,
    )
