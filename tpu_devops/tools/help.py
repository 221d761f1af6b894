"""Help: what this server is, how it is configured, which toolsets and tools it serves, and whether the
cloud project is ready."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

import tpu_devops
from tpu_devops.config import get_settings
from tpu_devops.host.toolsets import READ, Toolset

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.setup_check
    import tpu_devops.tools.helpdoc

toolset = Toolset("help", "get_help and the setup check and status dashboard (always on)", default=True)
toolset.renamed("get_system_status", "check_setup with view='status'")
tool = toolset.tool

# Claude Code defers MCP tools behind a search step; alwaysLoad keeps this one loaded from the first turn
# (read by Claude Code; other hosts ignore _meta; see anthropics/claude-code#56551).
HELP_META = {"anthropic/alwaysLoad": True, "anthropic/searchHint": "tpu-devops help start here"}


@tool(title="Help: configuration, toolsets and tools", kind=READ, open_world=False, meta=HELP_META)
async def get_help(ctx: Context) -> tpu_devops.tools.helpdoc.HelpResult:
    """Start here: tpu-devops configuration, errors, toolsets, tools.

    Tools marked read-only never change anything in the cloud. Toolsets not enabled are listed with the
    setting that enables them."""
    server = ctx.mcp_server
    return tpu_devops.tools.helpdoc.build_help(get_settings(), await server.list_tools(), server)


@tool(title="Check setup / status dashboard", kind=READ, open_world=True)
async def check_setup(
    view: Annotated[
        Literal["setup", "status"],
        Field(description="setup or status"),
    ] = "setup",
) -> tpu_devops.setup_check.SetupView:
    """Is the project ready (with fixes), or status now.

    view=setup checks credentials, project, TPU and Cloud Quotas APIs, the Hugging Face secret, quota for the
    configured model in the configured zone, and our current TPUs with cost so far; each failure comes with
    its fix. view=status is one dashboard: configuration, our reservation (state, IP, expiry, cost), the
    endpoint, running jobs and the latest zone attempts; a failing part is listed under problems."""
    return await tpu_devops.setup_check.check_setup_view(get_settings(), view)
