"""Pagination: every list this server answers fits one page, so no cursor it was sent can be its own.

The MCP specification (server utilities, pagination: "Invalid cursors SHOULD result in an error with code
-32602 (Invalid params)") and JSON-RPC 2.0 (-32602). The SDK's list handlers ignore ``params.cursor`` and
answer the first page again, so a client that loops on a stale or made-up cursor would be handed the same
tools as a new page. `refuse_unknown_cursor` answers it as the specification asks.
"""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError

INVALID_PARAMS = -32602  # JSON-RPC 2.0


async def refuse_unknown_cursor(ctx: Any, call_next: Any) -> Any:
    """Server middleware: a ``*/list`` request with a ``cursor`` gets -32602 (this server never hands
    one out: each list is a single page)."""
    method = getattr(ctx, "method", "") or ""
    params = getattr(ctx, "params", None)
    cursor = params.get("cursor") if isinstance(params, dict) else getattr(params, "cursor", None)
    if method.endswith("/list") and cursor is not None:
        raise MCPError(
            code=INVALID_PARAMS,
            message="Invalid params: unknown cursor (this server lists everything in one page; "
            "send the request without a cursor)",
            data={"cursor": str(cursor)[:200]},
        )
    return await call_next(ctx)
