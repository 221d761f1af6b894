"""A `find_tpu` job's state says whether the sweep got a TPU: through the real MCP client and server.py
over stdio against the fake Google Cloud, `get_job`'s text form (Gemini CLI) and structured form (Claude
Code) both say ``failed`` with the reason and the fix when a sweep ends without a TPU of its own."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_provisioning_mcp import TOKEN, call, server, wait_job

pytestmark = pytest.mark.anyio
RIG_LABELS = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
ZONES = ["us-west4-a", "us-west4-b"]


def _every_zone(outcome: str) -> Any:
    def stage(fake_gcp: Any) -> None:
        for zone in ZONES:
            fake_gcp.tpu.script(zone, outcome)

    return stage


def _rig_tpu_exists(fake_gcp: Any) -> None:
    fake_gcp.tpu.add_foreign("us-west4-b", "gemma4-e2b", labels=RIG_LABELS)


def _first_zone(outcome: str) -> Any:
    return lambda fake_gcp: fake_gcp.tpu.script(ZONES[0], outcome)


@pytest.mark.parametrize(
    ("stage", "state", "outcome", "said"),
    [
        (_every_zone("stockout"), "failed", "no_capacity", ["no zone produced an ACTIVE TPU", "retry later"]),
        (_every_zone("wait"), "failed", "no_capacity", ["no zone produced an ACTIVE TPU", "retry later"]),
        (
            _first_zone("invalid_accelerator"),
            "failed",
            "config_error",
            ["configuration error", "ACCELERATOR_TYPE"],
        ),
        (_first_zone("permission_denied"), "failed", "config_error", ["configuration error", "Permission"]),
        (_rig_tpu_exists, "failed", "exists", ["already exists", "destroy_queued_resource"]),
        (_first_zone("stockout"), "succeeded", "found", ["ACTIVE in us-west4-b", "get_vllm_endpoint"]),
    ],
    ids=["all-stockout", "all-timeout", "bad-accelerator", "permission", "rig-tpu-exists", "found"],
)
async def test_get_job_says_whether_the_sweep_got_a_tpu(
    fake_gcp, tmp_path, stage: Any, state: str, outcome: str, said: list[str]
) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    stage(fake_gcp)
    args = {"zones": ZONES, "provisioning_model": "spot", "poll_interval_s": 0.05, "zone_budget_s": 0.3}
    async with server(fake_gcp, tmp_path) as client:
        started = await call(client, "find_tpu", args)
        job = await wait_job(client, started["job_id"])
        shown = await client.call_tool("get_job", {"job_id": started["job_id"]})
    text = shown.content[0].text
    assert not shown.is_error, text
    # structured form (Claude Code)
    assert job["state"] == state, job
    assert job["result"]["outcome"] == outcome and job["result"]["found"] is (outcome == "found"), job
    for words in said:
        assert words in job["message"], (words, job["message"])
    # text form (Gemini CLI): the state and the reason, on the first line
    first = text.splitlines()[0]
    assert f": {state} after" in first, text
    for words in said:
        assert words in first, (words, first)
    if state == "failed":
        assert "succeeded" not in text and "TPU 'gemma4-e2b' ACTIVE" not in text, text
