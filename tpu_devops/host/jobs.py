"""Long operations that outlive one tool call: start, poll, cancel (DESIGN §2 "Long operations").

A job is an asyncio task owned by the server process. `JobRegistry.start` returns at once with an id;
the client polls `get_job`. Jobs report progress by mutating their `JobRecord.progress` dict and a short
`message`; a job whose partial result means something (the text a model has written so far) sets
`JobRecord.partial`, which `get_job` shows while it runs and which is kept as the result when the job is
cancelled, so nothing it produced is lost. Results must be JSON-serialisable (a pydantic model is dumped).

Work that usually fits in a tool call but may not (a model answer on a slow server) runs through
`JobRegistry.finish_or_continue`: it answers inline when the work ends in time, and otherwise the same
task continues as a job, without restarting anything.

A job may be bound (`Binding`) to what it works on, in the domain's own words: a ``scope`` that groups
the jobs of one thing (a rig) and a ``target`` within it (its TPU, one node, a GKE deployment). This kit
never interprets them; the domain asks `JobRegistry.bound` which jobs work on something it is about to
delete and ends them with `JobRegistry.end`, whose reason becomes the job's message.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.errors import JobError, TpuDevopsError
from tpu_devops.host import deadline
from tpu_devops.host.artifacts import Artifact
from tpu_devops.host.results import ToolResult, ViewResult, artifacts_of

log = logging.getLogger(__name__)

JOB_STATES = ("running", "succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Binding:
    """What a job works on, as the domain names it (this kit compares the strings, nothing more).

    ``scope``: the thing whose jobs belong together (e.g. ``rig:<project>:<id>``); ``target``: what within
    it (e.g. ``tpu``, ``node:us-west4-a/gemma4-e2b``); ``creates``: the job may create what it targets, so
    whoever deletes it must end the job first; ``label``: a short phrase for people ("find_tpu sweep");
    ``look_again_s``: how soon a status reader should look again while it runs (seconds).
    """

    scope: str
    target: str
    label: str
    creates: bool = False
    look_again_s: float | None = None

    def describe(self) -> str:
        """``"find_tpu sweep of rig:p:gemma4-e2b (tpu)"``."""
        return f"{self.label} of {self.scope} ({self.target})"


@dataclass
class JobRecord:
    """A job's state. Times are Unix seconds; ``result`` is JSON-like once succeeded."""

    id: str
    kind: str
    description: str
    state: str = "running"
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    message: str = "started"
    progress: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    result_text: str | None = None
    error: dict[str, Any] | None = None
    task: asyncio.Task[Any] | None = field(default=None, repr=False)
    # What the job has produced so far, as a ToolResult (shown while running, kept on cancel).
    partial: Callable[[], Any] | None = field(default=None, repr=False)
    # The body's own return value and exception, for a caller that waits on it inline.
    value: Any = field(default=None, repr=False)
    exception: BaseException | None = field(default=None, repr=False)
    binding: Binding | None = None
    # Why `JobRegistry.end` stopped it (shown as its message once it has stopped).
    end_reason: str | None = None

    def partial_forms(self) -> tuple[Any, str | None]:
        """(structured, text) of `partial`'s current view; (None, None) when there is none."""
        view = self.partial() if self.partial is not None else None
        if isinstance(view, ToolResult):
            return view.structured(), view.render_text()
        return None, None

    def snapshot(self) -> dict[str, Any]:
        """JSON-like view for tool output (a running job shows its partial result, if it has one)."""
        end = self.finished_at or time.time()
        result, result_text = self.result, self.result_text
        if self.state == "running" and self.partial is not None:
            result, result_text = self.partial_forms()
        return {
            "job_id": self.id,
            "kind": self.kind,
            "description": self.description,
            "state": self.state,
            "elapsed_s": round(end - self.started_at, 1),
            "message": self.message,
            "progress": dict(self.progress),
            "result": result,
            "result_text": result_text,
            "error": self.error,
            "bound_to": self.binding.describe() if self.binding else None,
        }


JobBody = Callable[[JobRecord], Awaitable[Any]]


@dataclass
class Outcome:
    """What `JobRegistry.finish_or_continue` came back with: the body's ``value`` when it finished in
    time, else the ``job`` it continues as."""

    value: Any = None
    job: JobRecord | None = None


class JobRegistry:
    """Holds the jobs of this server process (ids are ``<kind>-<n>``)."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobRecord] = {}
        self._counter = itertools.count(1)

    def start(
        self,
        kind: str,
        description: str,
        body: JobBody,
        *,
        listed: bool = True,
        binding: Binding | None = None,
    ) -> JobRecord:
        """Start ``body(record)`` as a background task and return its record at once.

        ``listed``: False keeps it out of `get` / `list` (and without an id) until `publish`.
        ``binding``: what it works on (`Binding`; `bound` finds it by that). Must be called from a
        running event loop.
        """
        record = JobRecord(id="", kind=kind, description=description, binding=binding)
        if listed:
            self.publish(record)
        # A job outlives the tool call that starts it: it runs outside that call's time budget.
        with deadline.outside_budget():
            context = contextvars.copy_context()
        record.task = asyncio.get_running_loop().create_task(self._run(record, body), context=context)
        return record

    def publish(self, record: JobRecord) -> JobRecord:
        """Give ``record`` its id (``<kind>-<n>``) and list it; a listed record is returned unchanged."""
        if not record.id:
            record.id = f"{record.kind}-{next(self._counter)}"
            self._jobs[record.id] = record
        return record

    async def finish_or_continue(
        self, kind: str, description: str, body: JobBody, *, wait_s: float
    ) -> Outcome:
        """Run ``body(record)``; when it ends within ``wait_s`` seconds, its value (its exception is
        raised as is), else the same task goes on as a listed job and `Outcome.job` is its record.

        The task runs outside the calling tool call's budget from the start, so continuing it as a job
        changes nothing for it. Cancelling the caller while it waits cancels the task too.

        Raises:
            Whatever ``body`` raised, when it ended within ``wait_s``.
        """
        record = self.start(kind, description, body, listed=False)
        task = record.task
        assert task is not None
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, wait_s))
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            return Outcome(job=self.publish(record))
        if record.exception is not None:
            raise record.exception
        if record.state == "cancelled":
            raise asyncio.CancelledError
        return Outcome(value=record.value)

    async def _run(self, record: JobRecord, body: JobBody) -> None:
        try:
            result = await body(record)
            record.value = result
            if isinstance(result, ToolResult):  # as the tool itself would have answered (both forms)
                record.result_text = result.render_text()
                record.result = result.structured()
            else:
                record.result = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
            # A result may end its job as failed and still carry everything it found (``job_failed``).
            failed = bool(getattr(result, "job_failed", False))
            record.state = "failed" if failed else "succeeded"
            if failed and isinstance(result, ToolResult):
                record.message = result.headline() or "failed"
            elif record.message == "started":
                record.message = "done"
        except asyncio.CancelledError:
            record.state = "cancelled"
            record.message = f"cancelled: {record.end_reason}" if record.end_reason else "cancelled"
            if record.partial is not None:  # keep what it produced before the cancel
                record.result, record.result_text = record.partial_forms()
                if record.result is not None:
                    record.message += "; the result holds what it had produced"
        except TpuDevopsError as exc:
            record.exception = exc
            record.state = "failed"
            record.error = exc.as_dict()
            record.message = str(exc)
        except Exception as exc:  # a job must never die silently; the traceback goes to stderr
            record.exception = exc
            log.exception("job %s crashed", record.id or record.kind)
            record.state = "failed"
            record.error = {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}
            record.message = "internal error (see the server's stderr)"
        finally:
            record.finished_at = time.time()

    def get(self, job_id: str) -> JobRecord:
        """The job with this id.

        Raises:
            JobError: unknown id (jobs live only as long as the server process).
        """
        try:
            return self._jobs[job_id]
        except KeyError:
            known = ", ".join(sorted(self._jobs)) or "none"
            raise JobError(
                "no such job in this server process",
                field="job_id",
                value=job_id,
                fix=f"use an id returned by the tool that started it (known: {known}); jobs do not survive a restart",
            ) from None

    def list(self) -> list[JobRecord]:
        """All jobs, newest first."""
        return sorted(self._jobs.values(), key=lambda r: r.started_at, reverse=True)

    async def cancel(self, job_id: str) -> JobRecord:
        """Cancel a running job and wait briefly for it to stop; a finished job is returned unchanged."""
        return await self.end(self.get(job_id))

    # builtins.list: inside the class, `list` is the method above
    def bound(self, scope: str, target: str | None = None) -> builtins.list[JobRecord]:
        """The running, listed jobs bound to ``scope`` (and to ``target`` when given), oldest first. A job
        whose event loop is not the running one (a loop that has ended: it will never run again) is not
        counted."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        return [
            r
            for r in reversed(self.list())
            if r.state == "running"
            and r.binding is not None
            and r.binding.scope == scope
            and (target is None or r.binding.target == target)
            and (r.task is None or loop is None or r.task.get_loop() is loop)
        ]

    async def end(self, record: JobRecord, reason: str | None = None, *, wait_s: float = 10) -> JobRecord:
        """Cancel ``record``'s task and wait up to ``wait_s`` seconds for it to stop (its own clean-up
        runs first); ``reason`` becomes its message ("cancelled: <reason>"). A finished job is returned
        unchanged. ``record.state`` says whether it stopped within ``wait_s``."""
        if record.task is None or record.task.done():
            return record
        if reason and record.end_reason is None:
            record.end_reason = reason
        record.task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(record.task), timeout=wait_s)
        except (asyncio.CancelledError, TimeoutError):
            pass
        return record


JOBS = JobRegistry()


class JobView(ToolResult):
    """A job as `get_job` / `cancel_job` return it. ``elapsed_s`` in seconds."""

    job_id: str
    kind: str
    description: str
    state: str
    elapsed_s: float
    message: str
    progress: dict[str, Any]
    result: dict[str, Any] | list[dict[str, Any] | str | float] | str | float | None = None
    # The result's own text rendering: the text form shows it, the structured form has ``result`` instead.
    result_text: str | None = Field(default=None, exclude=True)
    error: dict[str, Any] | None = None
    bound_to: str | None = Field(default=None, description="what the job works on (e.g. a rig's TPU)")
    # The finished result's files (a benchmark's chart): offered beside the answer as the tool itself
    # would have (`tpu_devops.host.results.artifacts_of`); ``result`` already describes them.
    result_files: list[Artifact] = Field(default_factory=list, exclude=True)

    def headline(self) -> str:
        return f"job {self.job_id} ({self.kind}): {self.state} after {self.elapsed_s:.0f}s: {self.message}"

    def render_text(self) -> str:
        """The headline, progress, then the finished result in its own readable form."""
        if self.result_text is None:
            return super().render_text()
        lines = [self.headline(), f"what: {self.description}"]
        if self.bound_to:
            lines.append(f"bound_to: {self.bound_to}")
        if self.progress:
            lines.append("progress: " + ", ".join(f"{k}={v}" for k, v in self.progress.items()))
        lines += ["", self.result_text]
        # A result holding untrusted text (a model's answer) carries its notice in the text form too.
        marker = self.result.get("untrusted") if isinstance(self.result, dict) else None
        notice = marker.get("notice") if isinstance(marker, dict) else None
        if isinstance(notice, str) and notice not in self.result_text:
            lines.append(f"untrusted: {notice}")
        return "\n".join(lines)

    def structured(self) -> dict[str, Any]:
        """The structured form without the finished result's summary when ``message`` already says it."""
        data = super().structured()
        result = data.get("result")
        if isinstance(result, dict) and result.get("summary") == self.message:
            data["result"] = {k: v for k, v in result.items() if k != "summary"}
        return data

    @classmethod
    def of(cls, record: JobRecord) -> JobView:
        files = artifacts_of(record.value) if isinstance(record.value, BaseModel) else []
        return cls(**record.snapshot(), result_files=files if record.state != "running" else [])


class JobList(ToolResult):
    """Every job of this server process, newest first."""

    jobs: list[JobView]

    def headline(self) -> str:
        running = sum(1 for j in self.jobs if j.state == "running")
        return f"{len(self.jobs)} job(s), {running} running"


class JobAnswer(ViewResult):
    """`get_job`'s answer: one job (``view="job"``) or, without a job id, every job (``"jobs"``)."""

    job: JobView | None = None
    jobs: JobList | None = None


def job_answer(job_id: str | None) -> JobAnswer:
    """The job ``job_id`` (`JobRegistry.get`), or every job of this process, newest first.

    Raises:
        JobError: no job ``job_id`` (as `JobRegistry.get`).
    """
    if job_id is None:
        return JobAnswer(view="jobs", jobs=JobList(jobs=[JobView.of(r) for r in JOBS.list()]))
    return JobAnswer(view="job", job=JobView.of(JOBS.get(job_id)))
