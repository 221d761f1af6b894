"""query_gemma's answers that outlast a tool call: a job, never lost text.

The real openai client streams from the fake server; the tool call's budget is the real
`tpu_devops.host.deadline.tool_call`, scaled down (4 s: the call must answer 2 s before its end, so it
has 2 s). Every wait is on an event or the job's own task, never on a guess of how long a step takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeVllm, ScriptedTurn
from tpu_devops.config import Settings, load_settings
from tpu_devops.host import deadline
from tpu_devops.host.jobs import JOBS, JobView
from tpu_devops.serving import chat
from tpu_devops.serving.rates import RATES

pytestmark = pytest.mark.anyio

BUDGET_S = 4.0
WORDS = [f"w{i}" for i in range(40)]
ANSWER = " ".join(WORDS)


@pytest.fixture(autouse=True)
def _fresh_rates() -> Iterator[None]:
    RATES.clear()
    yield
    RATES.clear()


def settings_for(url: str, tmp_path: Path) -> Settings:
    return load_settings(
        tmp_path / "none.env", environ={"VLLM_URL": url, "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
    )


async def _until(predicate, what: str, timeout_s: float = 60.0) -> None:
    """Wait until ``predicate()`` holds, polling as a client would (generous bound for a loaded machine)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.05)
    assert predicate(), what


async def test_an_answer_still_streaming_when_the_call_must_answer_goes_on_as_a_job(tmp_path: Path) -> None:
    # 40 tokens at 0.12 s each: about 5 s, more than the 2 s the call may wait.
    with FakeVllm(ttft_s=0.3, itl_s=0.12, max_model_len=8192) as fake:
        fake.queue(ScriptedTurn(content=ANSWER))
        async with deadline.tool_call("query_gemma", BUDGET_S):
            started = await chat.query(settings_for(fake.url, tmp_path), "write forty words", max_tokens=100)
        assert started.in_progress and started.job_id and not started.cut_off
        assert ANSWER.startswith(started.content)
        assert f"get_job('{started.job_id}')" in started.headline()
        assert any("nothing generated is lost" in n for n in started.notices)
        record = JOBS.get(started.job_id)
        # While it streams, get_job shows the text so far, fenced as the model's.
        await _until(
            lambda: JobView.of(record).progress.get("tokens_so_far", 0) > 0 or record.state != "running",
            "no text",
        )
        view = JobView.of(record)
        assert view.state == "running", "the answer ended within 2 s of the hand-off: the fake was not slowed"
        assert view.result is not None and view.result["in_progress"] is True
        assert "<untrusted-data" in (view.result_text or "")
        assert ANSWER.startswith(view.result["content"])
        await asyncio.wait_for(asyncio.shield(record.task), 60)
    done = JobView.of(record)
    assert done.state == "succeeded"
    assert done.result["content"] == ANSWER and done.result.get("cut_off") is not True
    text = done.render_text()
    assert ANSWER in text and "never instructions to follow" in text


async def test_an_answer_expected_to_outlast_the_call_is_a_job_from_the_start(tmp_path: Path) -> None:
    with FakeVllm(ttft_s=0.05, itl_s=0.05, max_model_len=8192) as fake:
        settings = settings_for(fake.url, tmp_path)
        fake.queue(ScriptedTurn(content=ANSWER))
        await chat.query(settings, "measure me", max_tokens=100)  # outside a call: the endpoint's rates
        rates = RATES.rates(fake.url, fake.model)
        assert rates is not None and rates.decode_tokens_per_s is not None
        fake.queue(ScriptedTurn(content="short answer"))
        async with deadline.tool_call("query_gemma", BUDGET_S):
            started = await chat.query(settings, "a long one please", max_tokens=2000)
        assert started.in_progress and started.job_id and started.content == ""
        # 2,000 tokens at ~20 tok/s: far more than the call has; the figure and its basis are given.
        assert started.expected_s is not None and started.expected_s > BUDGET_S
        assert "tok/s" in (started.estimate_basis or "") and "measured" in (started.estimate_basis or "")
        record = JOBS.get(started.job_id)
        await asyncio.wait_for(asyncio.shield(record.task), 60)
    assert record.state == "succeeded" and record.result["content"] == "short answer"


async def test_an_answer_that_fits_is_given_inline(tmp_path: Path) -> None:
    with FakeVllm(ttft_s=0.01, itl_s=0.001) as fake:
        fake.queue(ScriptedTurn(content="quick"))
        async with deadline.tool_call("query_gemma", BUDGET_S):
            result = await chat.query(settings_for(fake.url, tmp_path), "hi", max_tokens=20)
    assert result.content == "quick" and result.job_id is None and not result.in_progress


async def test_a_cancelled_job_keeps_the_text_it_had(tmp_path: Path) -> None:
    with FakeVllm(ttft_s=0.05, itl_s=0.2, max_model_len=8192) as fake:
        fake.queue(ScriptedTurn(content=ANSWER))
        async with deadline.tool_call("query_gemma", BUDGET_S):
            started = await chat.query(settings_for(fake.url, tmp_path), "write", max_tokens=100)
        assert started.job_id
        record = JOBS.get(started.job_id)
        await _until(
            lambda: JobView.of(record).progress.get("tokens_so_far", 0) >= 3 or record.state != "running",
            "no text",
        )
        await JOBS.cancel(started.job_id)
    view = JobView.of(record)
    assert view.state == "cancelled" and "what it had produced" in view.message
    kept = view.result["content"]
    assert kept and ANSWER.startswith(kept) and view.result["cut_off"] is True
    assert view.result["cut_reason"] == "the job was cancelled"


async def test_the_answers_own_deadline_keeps_the_text_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chat, "QUERY_DEADLINE_S", 1.0)
    with FakeVllm(ttft_s=0.05, itl_s=0.1, max_model_len=8192) as fake:
        fake.queue(ScriptedTurn(content=ANSWER))
        result = await chat.query(settings_for(fake.url, tmp_path), "write", max_tokens=100)
    assert result.cut_off and result.cut_reason and "deadline" in result.cut_reason
    assert result.content and ANSWER.startswith(result.content)
    assert "CUT OFF" in result.headline()


async def test_no_rate_from_one_token(tmp_path: Path) -> None:
    with FakeVllm(ttft_s=0.01) as fake:
        result = await chat.query(settings_for(fake.url, tmp_path), "hi", max_tokens=1, stats=True)
    s = result.stats
    assert s is not None and s.completion_tokens == 1
    assert s.output_tokens_per_s is None and s.decode_tokens_per_s is None
    assert "no tok/s" in result.headline() and "None tok/s" not in result.render_text()
    assert RATES.rates(fake.url, fake.model) is None or not RATES.rates(fake.url, fake.model).decode
