"""The tool surface as hosts pay for it: how many tools the real server lists with the default toolsets
and with every toolset, the bytes of their declarations as Gemini CLI sends them on every model turn
(`tests.host_scenarios.declaration_bytes`) against the budgets (default <= 20,000 B, all <= 30,000 B),
and the share of arguments that carry a description (goal 100%). Read from ``tools/list`` of the server
spawned over stdio by the official MCP client, once per selection."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


async def _listed(toolsets: str, state: str) -> list[Any]:
    from tests.mcp_session import mcp_client

    # an empty TPU_DEVOPS_TOOLSETS is the default selection (tests' server_env would enable all)
    async with mcp_client(TPU_DEVOPS_TOOLSETS=toolsets, TPU_DEVOPS_STATE_DIR=state) as client:
        return list((await client.list_tools()).tools)


def run() -> list[str]:
    from tests.host_scenarios import (
        DECLARATION_BUDGET,
        DEFAULT_DECLARATION_BUDGET,
        TOOL_LIMIT,
        declaration_bytes,
        described_arguments,
    )

    with tempfile.TemporaryDirectory() as state:
        default = asyncio.run(_listed("", state))
        every = asyncio.run(_listed("all", state))
    out = [
        f"tools: default toolsets {len(default)}, every toolset {len(every)} (limit {TOOL_LIMIT})"
        + ("" if len(every) <= TOOL_LIMIT else "  OVER THE LIMIT")
    ]
    for which, tools, budget in (
        ("default toolsets", default, DEFAULT_DECLARATION_BUDGET),
        ("every toolset", every, DECLARATION_BUDGET),
    ):
        size = declaration_bytes(tools)
        flag = "" if size <= budget else "  OVER BUDGET"
        out.append(
            f"declarations, {which}: {size:,} bytes (budget {budget:,}: {size / budget:.3f}x, "
            f"{budget - size:,} left){flag}"
        )
    for which, tools in (("default toolsets", default), ("every toolset", every)):
        described, total = described_arguments(tools)
        share = described / total if total else 1.0
        flag = "" if described == total else f"  {total - described} WITHOUT A DESCRIPTION"
        out.append(f"arguments described, {which}: {described}/{total} ({share:.0%}){flag}")
    return out


if __name__ == "__main__":
    for line in run():
        print(line)
