"""The job registry: work that finishes in time answers inline, work that does not goes on as a job
(the same task), and a job's partial result is shown while it runs and kept when it is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from tpu_devops.errors import InputError
from tpu_devops.host.jobs import JobRegistry, JobView
from tpu_devops.host.results import ToolResult

pytestmark = pytest.mark.anyio


class Words(ToolResult):
    words: list[str]
    done: bool = False

    def headline(self) -> str:
        return f"{len(self.words)} words{'' if self.done else ' so far'}"


async def test_work_that_ends_in_time_answers_inline_and_is_not_listed() -> None:
    jobs = JobRegistry()

    async def body(record):
        return Words(words=["a"], done=True)

    outcome = await jobs.finish_or_continue("w", "quick", body, wait_s=30)
    assert outcome.job is None and outcome.value.words == ["a"]
    assert jobs.list() == []


async def test_an_error_within_the_wait_is_raised_as_is() -> None:
    jobs = JobRegistry()

    async def body(record):
        raise InputError("bad", field="x", value=1, fix="use 2")

    with pytest.raises(InputError) as err:
        await jobs.finish_or_continue("w", "fails", body, wait_s=30)
    assert err.value.field == "x" and jobs.list() == []


async def test_unfinished_work_goes_on_as_a_listed_job_with_its_partial_result() -> None:
    jobs = JobRegistry()
    release = asyncio.Event()
    words: list[str] = []

    async def body(record):
        record.partial = lambda: Words(words=list(words))
        words.append("first")
        await release.wait()
        words.append("second")
        return Words(words=list(words), done=True)

    outcome = await jobs.finish_or_continue("w", "slow", body, wait_s=0.05)
    assert outcome.job is not None and outcome.job.id == "w-1" and jobs.get("w-1") is outcome.job
    running = JobView.of(outcome.job)
    assert running.state == "running" and running.result["words"] == ["first"]
    assert "1 words so far" in (running.result_text or "")
    release.set()
    await asyncio.wait_for(asyncio.shield(outcome.job.task), 10)
    done = JobView.of(outcome.job)
    assert done.state == "succeeded" and done.result["words"] == ["first", "second"]


async def test_a_cancelled_job_keeps_its_partial_result() -> None:
    jobs = JobRegistry()

    async def body(record):
        record.partial = lambda: Words(words=["kept"])
        await asyncio.Event().wait()

    record = jobs.start("w", "forever", body)
    await asyncio.sleep(0)
    await jobs.cancel(record.id)
    view = JobView.of(record)
    assert view.state == "cancelled" and view.result["words"] == ["kept"]
    assert "what it had produced" in view.message


async def test_a_bound_job_is_found_by_its_binding_and_ended_with_its_reason() -> None:
    from tpu_devops.host.jobs import Binding

    jobs = JobRegistry()
    cleaned: list[str] = []

    async def body(record):
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(record.id)  # its own clean-up runs before it is reported stopped

    sweep = jobs.start("sweep", "s", body, binding=Binding("rig:p:r", "tpu", "find_tpu sweep", creates=True))
    other = jobs.start("wait", "w", body, binding=Binding("rig:p:other", "tpu", "wait"))
    free = jobs.start("plain", "p", body)
    await asyncio.sleep(0)
    assert jobs.bound("rig:p:r") == [sweep] and jobs.bound("rig:p:r", "node:z/x") == []
    ended = await jobs.end(sweep, "rig r was torn down")
    assert ended.state == "cancelled" and ended.message == "cancelled: rig r was torn down"
    assert cleaned == [sweep.id] and jobs.bound("rig:p:r") == []
    view = JobView.of(sweep)
    assert view.bound_to == "find_tpu sweep of rig:p:r (tpu)" and "torn down" in view.headline()
    assert JobView.of(free).bound_to is None
    for r in (other, free):
        await jobs.cancel(r.id)
