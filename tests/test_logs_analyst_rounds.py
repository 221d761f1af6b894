"""The analyst ends with an answer and keeps what the model said: a later round that fails or runs out of
time is followed by one more request without tools; an answer cut at the deadline is kept; results no
round read are named; inside a tool call a slow consultation goes on as a job.

The real analyst and openai client against the scripted fake, with per-turn latency; deadlines are
scaled down (`Limits`, and the real `tpu_devops.host.deadline.tool_call` with a 4 s budget)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.conftest import FIXTURES
from tests.fakes.openai_server import FakeVllm, ScriptedTurn
from tpu_devops.config import Settings, load_settings
from tpu_devops.host import deadline
from tpu_devops.host.jobs import JOBS, JobView
from tpu_devops.logs.analyst import FINAL_PROMPT, Limits, analyze
from tpu_devops.logs.sources import FileSource
from tpu_devops.serving.rates import RATES

pytestmark = pytest.mark.anyio

EXPORT = FIXTURES / "logs" / "v5e1-util095-export.json"
ROOT_ID = "3a808ea2a697db"
SEARCH = ScriptedTurn(
    tool_calls=[{"name": "search_logs", "arguments": {"text": "RuntimeProgramAllocationFailure"}}]
)
COUNT = ScriptedTurn(tool_calls=[{"name": "count_by", "arguments": {"field": "severity"}}])
ANSWER = (
    f"The engine ran out of HBM loading a compiled program [{ROOT_ID}]: the KV cache took too much. "
    "Lower --gpu-memory-utilization to 0.92 and restart the server so the program fits again."
)


@pytest.fixture(autouse=True)
def _fresh_rates() -> Iterator[None]:
    RATES.clear()
    yield
    RATES.clear()


def _settings(url: str) -> Settings:
    return load_settings(environ={"VLLM_URL": url, "TPU_DEVOPS_ENV_FILE": "/nonexistent"})


async def _analyze(fake: FakeVllm, limits: Limits | None = None):
    return await analyze(
        "Why did vLLM die?", FileSource(str(EXPORT)), settings=_settings(fake.url), limits=limits
    )


@pytest.mark.parametrize("status", [500, 503, 400])
async def test_a_later_round_that_fails_is_followed_by_an_answer_without_tools(status: int) -> None:
    with FakeVllm() as fake:
        fake.queue(SEARCH, ScriptedTurn(status=status, error="engine hiccup"), ScriptedTurn(content=ANSWER))
        result = await _analyze(fake)
        final = fake.requests[-1]
    assert "tools" not in final and final["messages"][-1] == {"role": "user", "content": FINAL_PROMPT}
    assert result.model_consulted and result.model_answer_usable and ROOT_ID in result.answer
    assert [r.outcome.split(":")[0] for r in result.rounds] == ["1 tool call(s)", "failed", "answer"]
    assert result.steps[0].used is True
    assert any("asked once more without tools" in n for n in result.notices)


async def test_when_the_answer_cannot_be_had_the_unused_results_are_named() -> None:
    with FakeVllm() as fake:
        fake.queue(
            SEARCH,
            COUNT,
            ScriptedTurn(status=500, error="engine died"),
            ScriptedTurn(status=500, error="still dead"),
        )
        result = await _analyze(fake)
    search, count = result.steps
    assert search.used is True  # the round after it (the count_by call) read it
    assert count.used is False and count.unused
    note = next(n for n in result.notices if n.startswith("gathered but not used"))
    # the model's arguments are its text: quoted as untrusted data inside our own words
    assert (
        "count_by(<untrusted-data" in note and '{"field": "severity"}' in note and "search_logs" not in note
    )
    assert "NOT USED" in result.render_text()
    assert not result.model_answer_usable and result.deterministic_summary


async def test_a_later_tool_round_that_runs_out_of_time_leaves_time_for_the_answer() -> None:
    # The second round (tools offered) never starts writing before its share of the deadline ends; the
    # time kept back is enough for the final request, which answers at once.
    with FakeVllm() as fake:
        fake.queue(SEARCH, ScriptedTurn(content="too late", ttft_s=60), ScriptedTurn(content=ANSWER))
        result = await _analyze(fake, Limits(deadline_s=12))
        final = fake.requests[-1]
    assert "tools" not in final and final["messages"][-1]["content"] == FINAL_PROMPT
    assert result.model_answer_usable and ROOT_ID in result.answer
    assert result.rounds[1].outcome.startswith("failed: timeout") and result.rounds[2].outcome == "answer"


async def test_an_answer_cut_at_the_deadline_is_kept_and_said_to_be_partial() -> None:
    words = ANSWER.split(" ")
    with FakeVllm() as fake:
        fake.queue(ScriptedTurn(content=ANSWER, ttft_s=0.05, itl_s=2.0))  # ~2 s per word
        result = await _analyze(fake, Limits(deadline_s=5))
    assert result.model_consulted and result.answer and result.cut_reason == "cut off by the deadline"
    assert ANSWER.startswith(result.answer) and len(result.answer.split(" ")) < len(words)
    assert not result.model_answer_usable
    assert any("cut off by the deadline: the answer is partial" in p for p in result.answer_problems)


async def test_inside_a_tool_call_a_slow_answer_goes_on_as_a_job() -> None:
    with FakeVllm(max_model_len=16384) as fake:
        fake.queue(ScriptedTurn(content=ANSWER, ttft_s=0.2, itl_s=0.15))  # ~5 s in all
        async with deadline.tool_call("analyze_cloud_logging", 4.0):
            started = await _analyze(fake)
        assert started.in_progress and started.job_id and not started.model_consulted
        assert started.deterministic_summary and started.answer == started.deterministic_summary
        assert f"get_job('{started.job_id}')" in started.headline()
        record = JOBS.get(started.job_id)
        running = JobView.of(record)
        assert running.state == "running" and running.result["in_progress"] is True
        assert ANSWER.startswith(running.result.get("answer_so_far", ""))
        await asyncio.wait_for(asyncio.shield(record.task), 60)
    done = JobView.of(record)
    assert done.state == "succeeded" and done.result["model_answer_usable"] is True
    assert done.result["answer"] == ANSWER  # nothing the model wrote was lost
    assert ROOT_ID in (done.result_text or "")


async def test_inside_a_tool_call_an_endpoint_known_to_be_slow_gets_a_job_at_once() -> None:
    with FakeVllm(max_model_len=16384) as fake:
        fake.queue(ScriptedTurn(content=ANSWER, itl_s=0.05))  # measures ~20 tok/s decode, outside a call
        await _analyze(fake)
        fake.queue(ScriptedTurn(content=ANSWER))
        async with deadline.tool_call("analyze_cloud_logging", 4.0):
            started = await _analyze(fake)
        assert started.in_progress and started.job_id and started.expected_s and started.expected_s > 4
        assert "tok/s" in (started.estimate_basis or "")
        record = JOBS.get(started.job_id)
        await asyncio.wait_for(asyncio.shield(record.task), 60)
    assert record.state == "succeeded" and record.result["answer"] == ANSWER


@pytest.mark.parametrize(
    ("context", "budget", "said"), [(32768, 500, "token_budget you gave"), (4096, 6000, "server's context")]
)
async def test_the_evidence_cut_names_what_cut_it(context: int, budget: int, said: str) -> None:
    with FakeVllm(max_model_len=context) as fake:
        fake.queue(ScriptedTurn(content=ANSWER))
        result = await _analyze(fake, Limits(evidence_token_budget=budget))
    note = next(n for n in result.notices if n.startswith("the evidence summary was cut"))
    assert said in note
    other = "server's context" if said.startswith("token_budget") else "token_budget you gave"
    assert other not in note


async def test_a_small_context_lowers_the_answers_max_tokens_with_a_note() -> None:
    with FakeVllm(max_model_len=2048) as fake:
        fake.queue(ScriptedTurn(content=ANSWER))
        result = await _analyze(fake, Limits(evidence_token_budget=500))
        asked = {c[1] for c in fake.context_checks}
    assert asked == {512}
    assert any("at most 512 tokens" in n and "2,048-token context" in n for n in result.notices)


async def test_a_cancelled_analysis_keeps_what_the_model_had_written() -> None:
    with FakeVllm(max_model_len=16384) as fake:
        fake.queue(ScriptedTurn(content=ANSWER, ttft_s=0.05, itl_s=0.3))  # ~10 s in all
        async with deadline.tool_call("analyze_cloud_logging", 4.0):
            started = await _analyze(fake)
        assert started.job_id
        record = JOBS.get(started.job_id)
        async with asyncio.timeout(60):
            while not JobView.of(record).result.get("answer_so_far"):
                await asyncio.sleep(0.05)
        await JOBS.cancel(started.job_id)
    view = JobView.of(record)
    assert view.state == "cancelled" and view.result["model_consulted"] is True
    kept = view.result["answer"]
    assert kept and ANSWER.startswith(kept) and view.result["cut_reason"] == "cut off by a cancel"
    assert view.result["model_answer_usable"] is False
