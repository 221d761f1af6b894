"""`initialize` and `tools/list` must not pay for heavy imports: loading server.py imports no Google
client, openai, matplotlib, drain3, prometheus_client or huggingface_hub, and with the tool schema cache
written no domain module at all (each loads when one of its tools first runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


# What a start from the schema cache may load: settings and what registering tools needs.
STARTUP_MODULES = {
    "tpu_devops",
    "tpu_devops.catalog",
    "tpu_devops.config",
    "tpu_devops.errors",
    "tpu_devops.types",  # the shared value types the argument types check with
    "tpu_devops.names",  # model ids, relative names, allowed images: the settings check with them
    "tpu_devops.host",
    "tpu_devops.host.arguments",
    "tpu_devops.host.artifacts",  # the files answers link to, served by resources/read
    "tpu_devops.host.files",  # the read roots the client's roots extend
    "tpu_devops.host.roots",  # asks the client for its roots after initialize  # argument rules (jsonschema itself loads at a tool's first call)
    "tpu_devops.host.deadline",  # the per-call time budget the registration wrapper opens
    "tpu_devops.host.pagination",  # refuses a list cursor it never handed out
    "tpu_devops.host.params",
    "tpu_devops.host.registration",
    "tpu_devops.host.results",
    "tpu_devops.host.schemas",
    "tpu_devops.host.tool_cache",
    "tpu_devops.host.toolsets",
    # the toolsets: their declarations only (bodies name the domain lazily)
    "tpu_devops.tools",
    "tpu_devops.tools.args",
    *(f"tpu_devops.tools.{name}" for name in ("bench", "gke", "help", "jobs", "logs", "planning")),
    *(f"tpu_devops.tools.{name}" for name in ("provisioning", "scaleout", "serving")),
}


def _modules_after_listing(env: dict[str, str], call: str | None = None) -> set[str]:
    code = (
        "import asyncio, json, sys\n"
        "import server\n"
        "asyncio.run(server.mcp.list_tools())\n"
        + (f"asyncio.run(server.mcp.call_tool({call!r}, {{}}))\n" if call else "")
        + "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tpu_devops'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_start_from_the_schema_cache_imports_no_domain_module(tmp_path: Path) -> None:
    env = server_env(TPU_DEVOPS_CACHE_DIR=str(tmp_path))
    _modules_after_listing(env)  # the first start writes the cache
    assert _modules_after_listing(env) == STARTUP_MODULES
    after_call = _modules_after_listing(env, call="get_job")
    assert "tpu_devops.host.jobs" in after_call and "tpu_devops.provisioning" not in after_call
