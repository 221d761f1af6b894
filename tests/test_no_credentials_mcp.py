"""A user with no project and no credentials, over MCP, without ``NO_GCE_CHECK``: the first `get_help`,
`check_setup` and `plan_queued_resource` answer without waiting on a metadata server, whether none is
configured, one is configured on a loopback port that never answers, or on one that drops the connection
attempt. Every server runs under `tests.loopback_only`: a dial beyond loopback (google-auth's
169.254.169.254, a DNS lookup of metadata.google.internal) is refused and logged, and the log must stay
empty. Timings are measured by ``scripts/bench_credentials.py`` (ratios to ``NO_GCE_CHECK=true``); here the
bound is structural: how often the metadata port was dialled."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.fakes.dead_ports import dropping_port, silent_port
from tests.fakes.vm.metadata import FakeMetadata
from tests.mcp_session import ROOT, TEST_CACHE_DIR

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def env_without_credentials(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An empty HOME (no gcloud files), no tpu.env, no project, and no NO_GCE_CHECK."""
    import os

    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        "TPU_DEVOPS_ENV_FILE": "none",
        "TPU_DEVOPS_CACHE_DIR": TEST_CACHE_DIR,
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "ALLOWED_SOURCE_RANGES": "203.0.113.7/32",
        "LOOPBACK_ONLY_LOG": str(tmp_path / "dials.jsonl"),
        **extra,
    }


async def first_calls(env: dict[str, str]) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.loopback_only", "server.py"], env=env, cwd=str(ROOT)
    )
    out = {}
    async with Client(params, read_timeout_seconds=60) as client:
        for tool in ("get_help", "check_setup", "plan_queued_resource"):
            result = await client.call_tool(tool, {})
            out[tool] = (result.is_error, result.structured_content or {}, result.content[0].text)
    return out


def dials(tmp_path: Path) -> list[str]:
    log = tmp_path / "dials.jsonl"
    return log.read_text().splitlines() if log.exists() else []


async def test_no_metadata_server_configured_nothing_is_dialled(tmp_path: Path) -> None:
    out = await first_calls(env_without_credentials(tmp_path))
    assert dials(tmp_path) == []  # google-auth's ping of 169.254.169.254 would be logged here
    _, help_, text = out["get_help"]
    assert help_["project"] == "" and "GOOGLE_CLOUD_PROJECT is unset" in help_["project_source"]
    assert "no project (GOOGLE_CLOUD_PROJECT is unset" in text
    _, setup, _ = out["check_setup"]
    credentials = next(c for c in setup["checks"] if c["name"] == "credentials")
    assert not credentials["ok"] and "no metadata server was asked" in credentials["detail"]
    assert (
        str(tmp_path / ".config" / "gcloud" / "application_default_credentials.json") in credentials["detail"]
    )
    is_error, plan, _ = out["plan_queued_resource"]
    assert not is_error and plan["queued_resource_id"] == "gemma4-e2b"


@pytest.mark.parametrize("port", [silent_port, dropping_port], ids=["never-answers", "drops"])
async def test_a_configured_metadata_server_that_does_not_answer_is_asked_once(tmp_path: Path, port) -> None:
    with port() as (address, accepted):
        env = env_without_credentials(tmp_path, GCE_METADATA_HOST=address, GCE_METADATA_IP=address)
        out = await first_calls(env)
    assert dials(tmp_path) == []
    assert len(accepted) <= 1  # one probe for the whole session, not google-auth's 3 tries per lookup
    _, setup, _ = out["check_setup"]
    credentials = next(c for c in setup["checks"] if c["name"] == "credentials")
    assert not credentials["ok"] and address in credentials["detail"]
    assert "did not answer" in credentials["detail"]
    assert not out["plan_queued_resource"][0]
    assert out["get_help"][1]["project"] == ""


async def test_on_a_vm_the_metadata_server_names_the_project(tmp_path: Path) -> None:
    fake = FakeMetadata(project="vm-project-7").start()
    try:
        address = fake.url.removeprefix("http://")
        out = await first_calls(
            env_without_credentials(tmp_path, GCE_METADATA_HOST=address, GCE_METADATA_IP=address)
        )
    finally:
        fake.stop()
    # with the VM's credentials found, check_setup goes on to call Google's APIs (refused here): nothing
    # else left the machine, and nothing asked 169.254.169.254 or metadata.google.internal
    assert all("googleapis.com" in d for d in dials(tmp_path)), dials(tmp_path)
    help_ = out["get_help"][1]
    # get_help does not wait for the probe: the project is there once it answered (it had by now or not)
    assert help_["project"] in ("", "vm-project-7")
    _, setup, _ = out["check_setup"]
    project = next(c for c in setup["checks"] if c["name"] == "project")
    assert project["ok"] and project["detail"] == f"vm-project-7 (from the metadata server ({address}))"
    assert ("GET", "/") in fake.requests and ("GET", "project/project-id") in fake.requests
