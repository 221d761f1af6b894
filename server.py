"""tpu-devops MCP server: the list of toolsets it serves. No logic lives here.

Each toolset is one file in ``tpu_devops/tools/`` (its area's table of contents); the operator picks the
ones declared with ``TPU_DEVOPS_TOOLSETS`` (default: plan, provision, serve, logs, jobs and help; GKE,
scale-out and benchmarks are opt-in), and read-only mode hides every tool that changes the cloud. Logic
lives in the domain packages and is imported when a tool first runs; the tool schemas are cached between
starts (`tpu_devops.host.tool_cache`), so ``initialize`` and ``tools/list`` stay fast.
Run with ``tpu-devops-mcp`` or ``./mcp-run.sh``.
"""

from __future__ import annotations

if __name__ == "__main__":  # `python server.py`: the entry point validates settings, then imports us
    import runpy

    runpy.run_module("tpu_devops.main", run_name="__main__")
    raise SystemExit(0)

from pathlib import Path

from tpu_devops import __version__
from tpu_devops.config import get_settings
from tpu_devops.host.registration import Registrar
from tpu_devops.host.tool_cache import open_schema_cache
from tpu_devops.host.toolsets import select
from tpu_devops.tools import bench, gke, help, jobs, logs, planning, provisioning, scaleout, serving

TOOLSETS = [
    help.toolset,  # get_help, check_setup (always on)
    planning.toolset,  # plan_capacity, lint_vllm_flags, render_startup_script, estimate_deployment_cost
    provisioning.toolset,  # quota, plan / create / find / describe / list / destroy, HF token, reconfigure
    serving.toolset,  # endpoint, health, query_gemma, serving status
    logs.toolset,  # Cloud Logging, node logs, summaries, the analyst, boot diagnosis
    jobs.toolset,  # get_job, cancel_job
    bench.toolset,  # opt-in: run_benchmark (or import results)
    scaleout.toolset,  # opt-in: plan_scale_out
    gke.toolset,  # opt-in: plan / apply / benchmark / tear down on GKE
]

settings = get_settings()
selection = select(TOOLSETS, settings.toolsets)
if "help" not in selection.enabled:  # get_help is how a host learns the rest: always served
    selection = type(selection)(enabled=("help", *selection.enabled), errors=selection.errors)
tools = Registrar(
    TOOLSETS,
    enabled=selection.enabled,
    read_only=settings.read_only,
    schema_cache=open_schema_cache(settings.cache_dir, Path(__file__)),
    selection_errors=selection.errors,
    state_dir=settings.state_dir,
)
mcp = tools.build_server(
    name=settings.server_name,
    version=__version__,
    instructions=(
        "DevOps/SRE tools for self-hosted Gemma 4 on Google Cloud TPU with vLLM. Start with get_help. "
        "Planning tools need no cloud account. Long operations return a job id: poll get_job."
    ),
)
