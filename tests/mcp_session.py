"""Start `server.py` through the official MCP client over stdio, exactly as a host would."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent

# One tool schema cache for the test session's servers: the first start writes it, the others list
# their tools from it, as a host's repeated starts do. Never the developer's own ~/.cache.
TEST_CACHE_DIR = tempfile.mkdtemp(prefix="tpu-devops-test-cache-")
atexit.register(shutil.rmtree, TEST_CACHE_DIR, ignore_errors=True)


def server_env(**overrides: str) -> dict[str, str]:
    """A clean environment for the server: PATH/HOME plus explicit overrides (no tpu.env surprises)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT")}
    env["NO_GCE_CHECK"] = "true"  # no probe of the GCE metadata server from a test
    env["TPU_DEVOPS_CACHE_DIR"] = TEST_CACHE_DIR
    # Tests hand the server files under pytest's temporary directories: a root it may read and write
    # (`tpu_devops.host.files`); a test of the roots themselves overrides it.
    env["TPU_DEVOPS_FILE_ROOTS"] = tempfile.gettempdir()
    # Every toolset, so that each tool can be tested; tests of the default set pass TPU_DEVOPS_TOOLSETS="".
    env["TPU_DEVOPS_TOOLSETS"] = "all"
    env.update(overrides)
    if "TPU_DEVOPS_GCP_ENDPOINT" not in env:  # a plan's public-IP lookup must not leave the machine
        env.setdefault("PUBLIC_IP_LOOKUP_URL", "http://127.0.0.1:9/public-ip")
    return env


@contextlib.asynccontextmanager
async def mcp_client(
    errlog: Any = None, *, client_kwargs: dict[str, Any] | None = None, **env: str
) -> AsyncIterator[Client]:
    """An initialized MCP `Client` talking to a fresh server process over stdio.

    ``errlog``: a file that receives the server's stderr (default: this process's stderr);
    ``client_kwargs``: more `Client` arguments (an ``elicitation_callback``: a host that asks its user).
    """
    params = StdioServerParameters(
        command=sys.executable, args=[str(ROOT / "server.py")], env=server_env(**env), cwd=str(ROOT)
    )
    transport = stdio_client(params, errlog=errlog) if errlog is not None else params
    async with Client(transport, read_timeout_seconds=120, **(client_kwargs or {})) as client:
        yield client
