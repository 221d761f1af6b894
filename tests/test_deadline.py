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
