"""One time budget per tool call: requests sized from what is left, overruns become errors."""

from __future__ import annotations

import anyio
import pytest

from tpu_devops.errors import DeadlineError
from tpu_devops.host import deadline


def test_requests_are_cut_to_what_is_left() -> None:
    assert deadline.remaining() is None and deadline.timeout(30) == 30  # outside a tool call
    with deadline.budget(10):
        assert 9 < deadline.timeout(30) <= 10 and deadline.timeout(5) == 5
        with deadline.budget(100):  # an inner budget never extends the outer one
            assert deadline.remaining() <= 10
        with deadline.outside_budget():  # a job started here runs unbounded
            assert deadline.remaining() is None
    with deadline.budget(0.5), pytest.raises(DeadlineError) as err:
        deadline.timeout(30, "calling Google Cloud")  # less than a second left: not sent
    assert err.value.field == "deadline" and "calling Google Cloud" in err.value.message and err.value.fix
    with deadline.budget(-1), pytest.raises(DeadlineError):
        deadline.check("reading pages")


@pytest.mark.anyio
async def test_a_body_that_ignores_the_budget_is_stopped_with_an_error() -> None:
    with pytest.raises(DeadlineError) as err:
        async with deadline.tool_call("slow_tool", seconds=0.2):
            await anyio.sleep(30)
    assert "slow_tool" in err.value.message and "try again" in err.value.fix


@pytest.mark.anyio
async def test_a_hung_google_call_ends_within_the_budget(fake_gcp, gcp_settings) -> None:
    from tpu_devops.gcp.tpu import TpuApi

    fake_gcp.tpu.latency_s = 2.5  # every call hangs past the budget below
    api = TpuApi(gcp_settings)
    with deadline.budget(1.2), pytest.raises(DeadlineError) as err:
        await anyio.to_thread.run_sync(api.list_queued_resources, "us-west4-a")
    assert err.value.kind == "deadline"
    fake_gcp.tpu.latency_s = 0.0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.2, "0.2 s"), (1.5, "1.5 s"), (12.0, "12 s"), (40.0, "40 s")]
)
async def test_the_message_names_the_budget_the_call_ran_on(seconds: float, shown: str) -> None:
    async with deadline.tool_call("t", seconds=seconds):
        checked = deadline.expired("reading pages").message  # what check() / timeout() raise
    with pytest.raises(DeadlineError) as hard:  # the wrapper's hard limit on a body that ignores it
        async with deadline.tool_call("slow_tool", seconds=min(seconds, 0.2)):
            await anyio.sleep(30)
    assert f"the tool call's {shown} budget ran out" in checked and "25 s" not in checked
    assert "the tool call's 0.2 s budget ran out" in hard.value.message


@pytest.mark.anyio
async def test_an_inner_budget_that_ends_first_is_named_and_a_longer_one_is_not() -> None:
    async with deadline.tool_call("t", seconds=20.0):
        with deadline.budget(3.0):
            assert "the 3 s budget" in deadline.expired("refreshing the token").message
            with deadline.budget(0.5, "the token refresh's"):
                assert "the token refresh's 0.5 s budget" in deadline.expired("x").message
        with deadline.budget(100.0):  # cannot extend the call's: the call's stays the one named
            assert "the tool call's 20 s budget" in deadline.expired("x").message
        with deadline.outside_budget():
            assert "the tool call's 25 s budget" in deadline.expired("x").message  # the default
        with deadline.in_flight("the create (requestId r-1) was on its way", "describe it"):
            err = deadline.expired_in_flight("creating")
        assert "the tool call's 20 s budget ran out while the create (requestId r-1)" in err.message
