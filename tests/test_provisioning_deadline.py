"""A create whose answer does not come back within the call's budget says that it may have landed, with
its request id and where to look; the same create repeated makes no second TPU."""

from __future__ import annotations

import threading

import pytest

from tpu_devops.errors import DeadlineError
from tpu_devops.host import deadline
from tpu_devops.provisioning.queued import _unanswered_creates, create_queued_resource

pytestmark = pytest.mark.anyio
TOKEN = "hf_" + "DeadlineTestToken0123456789abcdefgh"


async def test_a_create_answered_after_the_budget_says_it_may_have_landed(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    release = threading.Event()
    # Google commits the create, then its answer is slow: the fake holds the answer until released (an
    # event, not a sleep: the call's budget ends first whatever the machine's load).
    fake_gcp.tpu.on_create(lambda rec: release.wait(120))
    try:
        with pytest.raises(DeadlineError) as caught:
            async with deadline.tool_call("create_queued_resource", seconds=12.0):
                await create_queued_resource(gcp_settings)
    finally:
        release.set()
    err = caught.value
    sent = [r for r in fake_gcp.tpu.requests if r["method"] == "POST" and "queuedResourceId" in r["query"]]
    request_id = sent[0]["query"].split("requestId=")[1].split("&")[0]
    assert f"requestId {request_id}" in err.message and "may have committed" in err.message
    assert "describe_queued_resource" in (err.fix or "") and "try again; if it keeps" not in (err.fix or "")
    # the same create repeated: nothing second, the one that landed is reported as ours
    again = await create_queued_resource(gcp_settings)
    assert again.queued_resource_id == gcp_settings.resource_id and again.ours
    assert len(fake_gcp.tpu.queued) == 1
    _unanswered_creates.clear()
