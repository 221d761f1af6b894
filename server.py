"""tpu-devops MCP server: a thin, readable list of tools, grouped by area. No logic lives here.

Each tool's docstring is its MCP description. Logic lives in ``tpu_devops/``; heavy imports (Google
clients, openai, matplotlib, drain3) happen inside the domain modules when a tool is called, so
``initialize`` and ``tools/list`` stay fast. Run with ``tpu-devops-mcp`` or ``./mcp-run.sh``.
"""

from __future__ import annotations

if __name__ == "__main__":  # `python server.py`: the entry point validates settings before importing us
    from tpu_devops.main import main

    raise SystemExit(main())

from mcp.server.mcpserver import MCPServer  # noqa: E402

from tpu_devops import __version__, tooldocs  # noqa: E402
from tpu_devops.config import get_settings  # noqa: E402
from tpu_devops.jobs import JOBS, JobList, JobView  # noqa: E402
from tpu_devops.registration import Registrar  # noqa: E402

settings = get_settings()
mcp = MCPServer(
    name=settings.server_name,
    version=__version__,
    instructions=(
        "DevOps/SRE tools for self-hosted Gemma 4 on Google Cloud TPU with vLLM. Start with get_help. "
        "Planning tools need no cloud account. Long operations return a job id: poll get_job."
    ),
)
tools = Registrar(mcp, read_only=settings.read_only)
READ = dict(read_only=True, destructive=False, idempotent=True)


# ----------------------------------------------------------------------------------------------
# Help and jobs
# ----------------------------------------------------------------------------------------------


@tools.tool(title="Help: configuration and tools", open_world=False, **READ)
async def get_help() -> tooldocs.HelpResult:
    """Summarise this server: its configuration (secrets never shown) and every tool it offers.

    Start here. Tools marked read-only never change anything in the cloud.
    """
    return tooldocs.build_help(settings, await mcp.list_tools())


@tools.tool(title="Get job status", open_world=False, **READ)
def get_job(job_id: str) -> JobView:
    """Poll a long operation (zone sweep, wait for ACTIVE, benchmark) by the id its tool returned.

    Returns its state (running / succeeded / failed / cancelled), progress so far, and the result.
    """
    return JobView.of(JOBS.get(job_id))


@tools.tool(title="List jobs", open_world=False, **READ)
def list_jobs() -> JobList:
    """List the long operations started by this server process, newest first."""
    return JobList(jobs=[JobView.of(r) for r in JOBS.list()])


@tools.tool(title="Cancel a job", open_world=False, read_only=False, destructive=False, idempotent=True)
async def cancel_job(job_id: str) -> JobView:
    """Cancel a running job. A zone sweep stops before its next create; resources it already
    created are left as they are (use destroy_queued_resource for those)."""
    return JobView.of(await JOBS.cancel(job_id))
