"""One time budget per tool call, enforced end to end.

MCP hosts give up on a tool call after about 60 s (Claude Code, Gemini CLI and the Inspector default to
60 s) and most send no progress; a call held under 30 s, half of that, still answers over a slow link.
So every call runs inside one budget (`TOOL_BUDGET_S`, 25 s): the
registration wrapper opens it (`tool_call`), Google adapters and HTTP clients size each request's
timeout and their retry deadline from what is left (`timeout`), loops over pages stop when it runs out
(`check`), and the wrapper's hard limit turns an overrun into a `DeadlineError` with a fix instead of a
host-side hang. Long operations are jobs that run outside any call's budget (`outside_budget`).

The budget lives in a context variable: asyncio tasks and worker threads started with ``anyio`` or
``asyncio.to_thread`` inherit it.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Iterator

import anyio

from tpu_devops.errors import DeadlineError

# One tool call, end to end. Hosts give up at ~60 s; every call is held under 30 s (half, so a slow
# link still gets its answer), so the budget plus the grace stays below that. Longer work is a job.
TOOL_BUDGET_S = 25.0
GRACE_S = 3.0  # past the budget before the wrapper gives up on a body that ignores it
MIN_REQUEST_S = 1.0  # less than this left: a new request would only time out, so it is not sent
# A call that hands unfinished work to a job answers this long before its budget ends: building and
# sending the answer must never meet the wrapper's hard limit.
ANSWER_MARGIN_S = 2.0
_FIX = (
    "try again; if it keeps timing out, narrow the request (a shorter window, fewer zones or entries), "
    "or use the tool's job form and poll get_job"
)

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("tpu_devops_deadline", default=None)
# What the current call has sent that may take effect whatever becomes of the call (a create on its way):
# a list shared by the call's tasks and threads, read by `tool_call` when the budget runs out.
_in_flight: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "tpu_devops_in_flight", default=None
)


def remaining() -> float | None:
    """Seconds left in the current tool call's budget (may be negative), or None outside any call."""
    end = _deadline.get()
    return None if end is None else end - time.monotonic()


def time_to_answer() -> float | None:
    """Seconds the current call may keep working before it must answer (what is left of its budget
    minus `ANSWER_MARGIN_S`, at least 0), or None outside any call (no budget: work to the end)."""
    left = remaining()
    return None if left is None else max(0.0, left - ANSWER_MARGIN_S)


def timeout(cap_s: float, action: str = "the request") -> float:
    """A timeout for one request or retry loop: ``cap_s``, cut to what is left of the budget.

    Raises:
        DeadlineError: less than `MIN_REQUEST_S` left (the request is not worth sending).
    """
    left = remaining()
    if left is None:
        return cap_s
    if left < MIN_REQUEST_S:
        raise expired(action)
    return min(cap_s, left)


def check(action: str) -> None:
    """Raise DeadlineError when the budget has run out (call it between pages, zones, rounds)."""
    left = remaining()
    if left is not None and left <= 0:
        raise expired(action)


def expired(action: str) -> DeadlineError:
    """The error for a call whose budget ran out while doing ``action``."""
    return DeadlineError(
        f"stopped {action}: the tool call's {TOOL_BUDGET_S:.0f} s budget ran out (MCP hosts give up at ~60 s)",
        field="deadline",
        fix=_FIX,
    )


@contextlib.contextmanager
def in_flight(what: str, fix: str) -> Iterator[None]:
    """Inside the block a request that may land even if the call gives up is on its way (``what``: which,
    with its request id and where to look; ``fix``: how to find out and how to repeat it safely). If the
    call's budget runs out in the block, the `DeadlineError` says so instead of "try again"."""
    notes = _in_flight.get()
    if notes is None:
        notes = []
        _in_flight.set(notes)
    entry = (what, fix)
    notes.append(entry)
    try:
        yield
    finally:
        notes.remove(entry)


def expired_in_flight(action: str) -> DeadlineError:
    """`expired`, naming what the call sent that may still land (`in_flight`), with its fix."""
    notes = _in_flight.get() or []
    if not notes:
        return expired(action)
    what, fix = notes[-1]
    return DeadlineError(
        f"stopped {action}: the tool call's {TOOL_BUDGET_S:.0f} s budget ran out while {what}",
        field="deadline",
        fix=fix,
    )


@contextlib.contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Run the block with at most ``seconds`` left (never more than an enclosing budget allows)."""
    end = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _deadline.reset(token)


@contextlib.contextmanager
def outside_budget() -> Iterator[None]:
    """Run the block with no budget: for a job that outlives the tool call that started it."""
    token = _deadline.set(None)
    try:
        yield
    finally:
        _deadline.reset(token)


@contextlib.asynccontextmanager
async def tool_call(name: str, seconds: float = TOOL_BUDGET_S) -> AsyncIterator[None]:
    """The budget of one tool call: sets it for everything the body awaits or starts, and cancels the body
    `GRACE_S` (at most a tenth of ``seconds``) after it ends.

    Raises:
        DeadlineError: the body did not finish in time (named, with the fix).
    """
    token = _in_flight.set([])
    try:
        with budget(seconds):
            try:
                with anyio.fail_after(seconds + min(GRACE_S, seconds / 10)):
                    yield
            except TimeoutError:
                raise expired_in_flight(f"{name} before it finished") from None
    finally:
        _in_flight.reset(token)
