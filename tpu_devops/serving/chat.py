"""``query_gemma``: one question to the served model, answered with its text (and stats when asked).

The endpoint and the key come from `tpu_devops.serving.resolve`, the model from
`tpu_devops.serving.models`, the streamed answer from `tpu_devops.serving.stream`; failures are
classified by `tpu_devops.serving.errors`. Chat completions only: ``/v1/completions`` returns empty text
on ``-it`` models (DESIGN §3).

An answer may take longer than a tool call may (`tpu_devops.host.deadline`: 25 s; a CPU llama-server
needed 17 s for the prefill of a 6,000-token prompt alone, and 296 s for 20,000 tokens). So, inside a
tool call:

- before sending, ``max_tokens`` is checked against the context the server reported: lowered to what
  the prompt leaves (with a note), or the prompt is refused with the numbers when it leaves nothing;
- when the endpoint's measured rates (`tpu_devops.serving.rates`) say the longest answer allowed may
  not fit in what is left of the call, the answer is a job from the start: the call answers at once
  with the job id and the expected time;
- otherwise it is asked inline; if it is still streaming when the call must answer, the same stream
  goes on as a job (nothing is restarted) and the call answers with the text so far and the job id.

`get_job` shows the text so far while the job streams and the whole answer at the end. No generated
text is thrown away: at the answer's own deadline (`QUERY_DEADLINE_S`), when the server drops the
stream, or when the job is cancelled, the answer so far is the result, marked cut off with the reason.
"""

from __future__ import annotations

from typing import Any

from tpu_devops.config import Settings
from tpu_devops.errors import InputError
from tpu_devops.host import deadline
from tpu_devops.host.results import ToolResult
from tpu_devops.host.untrusted import UntrustedContent, UntrustedData, fence, untrusted_data
from tpu_devops.serving.answers import degenerate
from tpu_devops.serving.models import ModelChoice, choose_model
from tpu_devops.serving.rates import RATES, Estimate
from tpu_devops.serving.resolve import Endpoint, attributed, resolve_endpoint
from tpu_devops.serving.stream import ChatStats, StreamedAnswer, StreamProgress, stream_chat

# Wall time for one answer (seconds), as a job when it outlasts the tool call: 32,768 tokens (the most
# max_tokens allows) at the ~68 tok/s a CPU llama-server measured (20,000 tokens in 296 s) take ~480 s.
QUERY_DEADLINE_S = 900.0
MAX_TOKENS_LIMIT = 32768


class ChatResult(UntrustedContent, ToolResult):
    """`query_gemma` output. ``stats`` only with stats requested.

    ``cut_off``: the answer is partial, and ``cut_reason`` says why (the answer's deadline, the token
    limit, a server that died mid-answer, a cancelled job). ``job_id``: the answer continues in that job
    (``in_progress``; poll `get_job`); ``content`` is then the text so far, ``expected_s`` the expected
    seconds for the whole answer (``estimate_basis`` says how it was made; None when not measured yet).
    ``max_tokens``: what was asked of the server (after the context check).
    """

    untrusted: UntrustedData = untrusted_data("model", "content", "reasoning")
    cut_off: bool = False
    cut_reason: str | None = None
    in_progress: bool = False
    job_id: str | None = None
    expected_s: float | None = None
    estimate_basis: str | None = None
    endpoint: str
    endpoint_source: str
    model: str
    max_tokens: int | None = None
    content: str
    reasoning: str | None = None
    finish_reason: str | None
    stats: ChatStats | None = None
    notices: list[str] = []

    def headline(self) -> str:
        # Our own words only: the model's text is untrusted and stays in its fence.
        size = f"{len(self.content):,} characters" if self.content else "no text"
        if self.in_progress:
            expected = f", expected ~{self.expected_s:,.0f} s in all" if self.expected_s is not None else ""
            where = f": it continues as job {self.job_id}" if self.job_id else ""
            poll = f"; poll get_job('{self.job_id}')" if self.job_id else ""
            return f"{self.model} is still answering ({size} so far{expected}){where}{poll}"
        if self.stats is None:
            cut = f" (CUT OFF: {self.cut_reason})" if self.cut_off else ""
            size = f"{len(self.content):,} characters" if self.content else "an empty answer"
            return f"{self.model} answered: {size}, finish_reason={self.finish_reason}{cut}"
        s = self.stats
        rate = (
            f"{s.output_tokens_per_s} tok/s" if s.output_tokens_per_s is not None else "no tok/s (one token)"
        )
        line = (
            f"{s.completion_tokens} tokens: TTFT {s.ttft_ms} ms, TPOT {s.tpot_mean_ms} ms "
            f"(median {s.itl_median_ms}), {rate}, largest gap {s.max_gap_ms} ms"
        )
        if self.cut_off:
            line += f" - CUT OFF: {self.cut_reason}"
        return line + (" - STREAM STALLED (KV-cache preemption looks like this)" if s.stalled else "")

    def render_text(self) -> str:
        """The answer (after the stats line when measured), then who answered, then notices."""
        lines = [self.headline(), ""]
        if self.content:
            lines.append(fence(self.content, "model"))
        elif self.in_progress:
            lines.append("(no text yet: the server is still reading the prompt or just started writing)")
        else:
            lines.append(f"(empty answer, finish_reason={self.finish_reason})")
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
        if self.estimate_basis:
            lines.append(f"expected time: {self.estimate_basis}")
        if s:
            gap = f" after token {s.max_gap_after_token}" if s.max_gap_after_token is not None else ""
            rates = (
                f"{s.output_tokens_per_s} tok/s overall, {s.decode_tokens_per_s} tok/s decoding"
                if s.output_tokens_per_s is not None
                else "no tok/s figure (one token is a latency, not a rate)"
            )
            lines.append(
                f"stream: latency {s.latency_ms} ms, TTFT {s.ttft_ms} ms, TPOT mean {s.tpot_mean_ms} ms / median "
                f"{s.itl_median_ms} ms, {rates}, {s.output_chunks} chunks, largest gap {s.max_gap_ms} ms{gap}, "
                f"stalled: {'yes' if s.stalled else 'no'}"
            )
        lines.extend(f"note: {n}" for n in self.notices)
        return "\n".join(lines)

    def more_hint(self) -> str:
        return "ask for fewer max_tokens, or ask the model for a shorter answer"


def _check_arguments(prompt: str, max_tokens: int, temperature: float | None) -> None:
    if not prompt or not prompt.strip():
        raise InputError("the prompt is empty", field="prompt", value=prompt, fix="pass the question to ask")
    if not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise InputError(
            "out of range", field="max_tokens", value=max_tokens, fix=f"use 1..{MAX_TOKENS_LIMIT}"
        )
    if temperature is not None and not 0 <= temperature <= 2:
        raise InputError("out of range", field="temperature", value=temperature, fix="use 0..2")


async def fit_max_tokens(
    ep: Endpoint, choice: ModelChoice, messages: list[dict[str, Any]], max_tokens: int, notices: list[str]
) -> tuple[int, int]:
    """(max_tokens that fits the server's context, the prompt's tokens).

    The prompt is counted by the server's tokenizer when it has one, else offline
    (`tpu_devops.serving.tokenize.RequestCounter`). When prompt + ``max_tokens`` exceed the context the
    server reported, ``max_tokens`` is lowered to what is left, with a note in ``notices``. A context
    that is not known is not checked.

    Raises:
        InputError: the server's own tokenizer counts a prompt that leaves no room for an answer
            (field ``prompt``, with both numbers).
    """
    from tpu_devops.serving.tokenize import RequestCounter

    context = choice.server.context_tokens
    counter = RequestCounter(ep.url, choice.model, choice.server.kind, ep.api_key)
    prompt_tokens = await counter.count(messages)
    notices.extend(counter.notices)
    if not context:
        return max_tokens, prompt_tokens
    by_server = counter.source.startswith("the server's tokenizer")
    room = context - prompt_tokens
    if room < 1:
        if by_server:
            raise InputError(
                f"the prompt takes {prompt_tokens:,} tokens ({counter.source}) of the server's {context:,}-token "
                f"context ({choice.server.context_source}): no room is left for an answer",
                field="prompt",
                value=f"{prompt_tokens:,} tokens",
                fix="shorten the prompt, or serve the model with a longer context ("
                + (
                    "llama-server gives each slot --ctx-size / --parallel tokens: raise --ctx-size to --parallel "
                    "x the longest request, or lower --parallel)"
                    if choice.server.kind == "llama.cpp"
                    else "vLLM --max-model-len)"
                ),
            )
        return max_tokens, prompt_tokens  # an offline count may be high: let the server judge
    if max_tokens > room:
        notices.append(
            f"max_tokens {max_tokens:,} lowered to {room:,}: the prompt takes {prompt_tokens:,} of the server's "
            f"{context:,}-token context ({counter.source}; context from {choice.server.context_source})"
        )
        return room, prompt_tokens
    return max_tokens, prompt_tokens


async def query(
    settings: Settings,
    prompt: str,
    *,
    system: str | None = None,
    max_tokens: int = 512,
    temperature: float | None = None,
    model: str | None = None,
    base_url: str | None = None,
    stats: bool = False,
    with_stats: bool = False,
) -> ChatResult:
    """Ask the served Gemma one question (streamed) and return the answer, optionally with stats.

    Args:
        prompt: the user message (non-empty).
        system: optional system message.
        max_tokens: output cap, 1..32768 tokens (lowered to what the server's context leaves).
        temperature: sampling temperature 0..2 (None: the server's default).
        stats: also measure the stream (TTFT, TPOT, tok/s, stalls); ``with_stats`` is the same flag under
            its older name.
    Returns:
        The answer; inside a tool call that cannot wait for it, a result with ``job_id`` (module
        docstring) whose job's result is the answer.
    Raises:
        InputError: empty prompt, max_tokens or temperature out of range, a prompt that fills the context.
        ServingError: endpoint or model failures, classified with the fix.
    """
    from tpu_devops.host.jobs import JOBS

    _check_arguments(prompt, max_tokens, temperature)
    want_stats = stats or with_stats
    ep = await resolve_endpoint(settings, base_url, sends="prompts")
    with attributed(ep):
        choice = await choose_model(settings, ep.url, model, api_key=ep.api_key)
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}
    ]
    notices = list(choice.notices)
    with attributed(ep):
        max_tokens, prompt_tokens = await fit_max_tokens(ep, choice, messages, max_tokens, notices)
    estimate = RATES.estimate(ep.url, choice.model, prompt_tokens, max_tokens)
    progress = StreamProgress()
    answer_shape = _Shape(ep, choice, max_tokens, notices, estimate)

    async def answer(record: Any = None) -> ChatResult:
        if record is not None:
            record.partial = lambda: answer_shape.partial(progress, record)
            record.message = "streaming the answer"
        with attributed(ep):
            streamed = await stream_chat(
                ep.url,
                choice.model,
                messages,
                api_key=ep.api_key,
                max_tokens=max_tokens,
                temperature=temperature,
                deadline_s=QUERY_DEADLINE_S,
                progress=progress,
                measure=True,
            )
        return answer_shape.final(streamed, want_stats)

    left = deadline.time_to_answer()
    if left is None:  # not inside a tool call: nothing to outlast
        return await answer()
    description = f"answer of {choice.model} at {ep.url} (max_tokens {max_tokens:,})"
    if estimate is not None and estimate.seconds > left:
        job = JOBS.start("query", description, answer)
        return answer_shape.started(job.id, progress, left, handed_off=False)
    outcome = await JOBS.finish_or_continue("query", description, answer, wait_s=left)
    if outcome.job is None:
        return outcome.value
    return answer_shape.started(outcome.job.id, progress, left, handed_off=True)


class _Shape:
    """Builds the `ChatResult` forms of one question: started as a job, in progress, final."""

    def __init__(
        self,
        ep: Endpoint,
        choice: ModelChoice,
        max_tokens: int,
        notices: list[str],
        estimate: Estimate | None,
    ) -> None:
        self.ep, self.choice, self.max_tokens, self.notices, self.estimate = (
            ep,
            choice,
            max_tokens,
            notices,
            estimate,
        )

    def _base(self, **fields: Any) -> ChatResult:
        return ChatResult(
            endpoint=self.ep.url,
            endpoint_source=self.ep.source,
            model=self.choice.model,
            max_tokens=self.max_tokens,
            **fields,
        )

    def _expected(self, progress: StreamProgress) -> tuple[float | None, str | None]:
        """(expected seconds for the whole answer, how it was made): the measured rates, else the rate
        this stream shows so far."""
        if self.estimate is not None:
            return self.estimate.seconds, self.estimate.basis()
        n, elapsed = progress.tokens, progress.elapsed_s()
        if n >= 2 and progress.chunk_times and progress.sent_at is not None:
            span = progress.chunk_times[-1] - progress.chunk_times[0]
            if span > 0:
                rate = (n - 1) / span
                total = elapsed + (self.max_tokens - n) / rate
                return total, (
                    f"{n:,} tokens in {elapsed:,.0f} s so far, up to {self.max_tokens:,} at the {rate:,.1f} tok/s "
                    "this stream shows"
                )
        return None, (
            f"no rate measured on this endpoint yet, and no output after {elapsed:,.0f} s (the server is still "
            "reading the prompt)"
        )

    def started(
        self, job_id: str, progress: StreamProgress, left_s: float, *, handed_off: bool
    ) -> ChatResult:
        """The tool call's answer when the answer goes on as job ``job_id``: started as a job at once
        (the estimate did not fit in ``left_s``), or ``handed_off`` mid-stream."""
        expected, basis = self._expected(progress)
        if handed_off:
            why = f"the answer was not finished when this tool call had to answer ({progress.elapsed_s():,.0f} s in)"
        else:
            why = (
                f"the longest answer max_tokens allows is expected to take ~{expected:,.0f} s, more than the "
                f"{left_s:,.0f} s this tool call has left"
            )
        return self._base(
            in_progress=True,
            job_id=job_id,
            expected_s=round(expected, 1) if expected is not None else None,
            estimate_basis=basis,
            content=progress.text,
            finish_reason=None,
            notices=[
                *self.notices,
                f"{why}: it continues as job {job_id}; get_job('{job_id}') shows the text so far and, when it is "
                "done, the whole answer (nothing generated is lost)",
            ],
        )

    def partial(self, progress: StreamProgress, record: Any) -> ChatResult:
        """The answer so far, as `get_job` shows it (and keeps when the job is cancelled)."""
        cancelled = getattr(record, "state", "") == "cancelled"
        record.progress.update(tokens_so_far=progress.tokens, characters_so_far=len(progress.text))
        if cancelled:
            return self._base(
                cut_off=True,
                cut_reason="the job was cancelled",
                content=progress.text,
                finish_reason=None,
                notices=[
                    *self.notices,
                    f"CUT OFF: cancelled after {progress.tokens:,} tokens: the answer is partial",
                ],
            )
        expected, basis = self._expected(progress)
        return self._base(
            in_progress=True,
            expected_s=round(expected, 1) if expected is not None else None,
            estimate_basis=basis,
            content=progress.text,
            finish_reason=None,
            notices=list(self.notices),
        )

    def final(self, answer: StreamedAnswer, want_stats: bool) -> ChatResult:
        """The finished (or cut) answer with its notes."""
        notices = list(self.notices)
        got = f"{answer.completion_tokens or len(answer.chunk_times)} tokens"
        reason = None
        if answer.interrupted == "deadline":
            reason = f"the answer's {QUERY_DEADLINE_S:.0f} s deadline"
            notices.append(
                f"CUT OFF: stopped at the {QUERY_DEADLINE_S:.0f} s deadline after {got}: the answer so far is kept; "
                "ask for fewer max_tokens for a complete one"
            )
        elif answer.interrupted:
            reason = f"the server dropped the stream ({answer.interrupted})"
            notices.append(
                f"CUT OFF: the server dropped the stream ({answer.interrupted}) after {got}: the answer is partial"
            )
        elif answer.finish_reason == "length":
            reason = f"max_tokens={self.max_tokens}"
            notices.append(
                f"CUT OFF at max_tokens={self.max_tokens} (finish_reason=length): the answer is incomplete"
            )
        if answer.content and (problem := degenerate(answer.content)):
            notices.append(f"the answer looks degenerate: {problem}")
        if not answer.content and not answer.tool_calls:
            notices.append(
                "empty content: on -it models use chat completions (this tool does); if reasoning is on, "
                "raise max_tokens; check the prompt fits the server's context"
            )
        stats = answer.stats() if want_stats else None
        if stats and stats.stalled:
            notices.append(
                f"the stream stalled {stats.max_gap_ms} ms after token {stats.max_gap_after_token}: from outside "
                "this is KV-cache preemption; get_serving_status(view='metrics') shows vllm:num_preemptions_total"
            )
        return self._base(
            cut_off=reason is not None,
            cut_reason=reason,
            content=answer.content,
            reasoning=answer.reasoning or None,
            finish_reason=answer.finish_reason,
            stats=stats,
            notices=notices,
        )
