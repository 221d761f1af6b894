"""A second, independent MCP client: the MCP Inspector CLI (Node.js) launches ./mcp-run.sh exactly as a
host would, lists the same tools as the Python client, and calls one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.mcp_session import ROOT, TEST_CACHE_DIR, mcp_client, server_env

INSPECTOR = ROOT / "node_modules" / ".bin" / "inspector"

pytestmark = pytest.mark.skipif(
    not INSPECTOR.exists() and os.environ.get("CI") != "true",
    reason="MCP Inspector CLI not installed: run `make setup` (needs npm)",
)


def inspector(*args: str) -> dict:
    env = server_env(TPU_DEVOPS_LOG_LEVEL="WARNING")
    out = subprocess.run(
        # The Inspector passes the server only a default environment plus -e values.
        [
            str(INSPECTOR),
            "--cli",
            "-e",
            f"TPU_DEVOPS_CACHE_DIR={TEST_CACHE_DIR}",
            str(ROOT / "mcp-run.sh"),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path("/"),  # mcp-run.sh must work from any directory
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    start = out.stdout.index("{")
    return json.JSONDecoder().raw_decode(out.stdout[start:])[0]


@pytest.mark.anyio
async def test_inspector_lists_the_same_tools_as_the_python_client() -> None:
    listed = inspector("--method", "tools/list")
    async with mcp_client(TPU_DEVOPS_TOOLSETS="") as client:  # the Inspector's server reads tpu.env: default
        python_side = (await client.list_tools()).tools
    assert [t["name"] for t in listed["tools"]] == [t.name for t in python_side]
    by_name = {t["name"]: t for t in listed["tools"]}
    for t in python_side:
        assert by_name[t.name]["annotations"]["readOnlyHint"] == t.annotations.read_only_hint


def test_inspector_calls_get_help() -> None:
    result = inspector("--method", "tools/call", "--tool-name", "get_help")
    assert result.get("isError") in (None, False)
    assert result["structuredContent"]["configuration"]["accelerator_type"] == "v5litepod-1"


def test_inspector_strict_finds_no_schema_portability_problem() -> None:
    """``--strict`` reports tool schemas other hosts may read differently (an ``items`` that constrains
    nothing, ...) as warnings on stderr: none for any toolset."""
    out = subprocess.run(
        [str(INSPECTOR), "--cli", "-e", "TPU_DEVOPS_TOOLSETS=all", "-e", f"TPU_DEVOPS_CACHE_DIR={TEST_CACHE_DIR}",
         str(ROOT / "mcp-run.sh"), "--method", "tools/list", "--strict"],
        capture_output=True, text=True, env=server_env(TPU_DEVOPS_LOG_LEVEL="WARNING"), cwd=Path("/"), timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Warning: tool" not in out.stderr, out.stderr
    assert len(json.loads(out.stdout[out.stdout.index("{") :])["tools"]) > 30
