"""`initialize` and `tools/list` must not pay for heavy imports: loading server.py imports no Google
client, openai, matplotlib, drain3, prometheus_client or huggingface_hub."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.mcp_session import ROOT, server_env

HEAVY = (
    "google.cloud",
    "google.api_core",
    "openai",
    "matplotlib",
    "drain3",
    "prometheus_client",
    "huggingface_hub",
)


def test_server_import_and_tools_list_stay_light() -> None:
    code = (
        "import asyncio, json, sys\n"
        "import server\n"
        "asyncio.run(server.mcp.list_tools())\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({HEAVY!r}))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=server_env(), check=True
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"heavy modules imported at startup: {loaded}"
