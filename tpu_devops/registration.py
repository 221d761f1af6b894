"""How `server.py` registers a tool: honest annotations, read-only mode, typed errors, text + structure.

`server.py` stays a thin list of tools; everything they have in common lives here:

- every tool declares its MCP annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``,
  ``openWorldHint``) explicitly; there is no default to forget;
- in read-only mode (``TPU_DEVOPS_READ_ONLY=1``) a tool that is not read-only is not registered at all;
- a `TpuDevopsError` becomes an MCP tool error (``isError``) whose text names the field, the value and
  the fix; an unexpected exception is logged with its traceback to stderr and reaches the client as
  a generic tool error (the MCP SDK hides its text);
- a returned `ToolResult` is sent as ``structuredContent`` (validated against ``outputSchema``) plus a
  readable text block from `ToolResult.render_text`;
- synchronous tool bodies run in a worker thread so they never block the event loop.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from tpu_devops.errors import TpuDevopsError
from tpu_devops.results import ToolResult

log = logging.getLogger("tpu_devops.tools")

F = TypeVar("F", bound=Callable[..., Any])


def to_call_result(result: Any) -> Any:
    """`ToolResult` -> ``CallToolResult`` with text and structured content; anything else unchanged."""
    if isinstance(result, ToolResult):
        return CallToolResult(
            content=[TextContent(type="text", text=result.render_text())],
            structured_content=result.model_dump(mode="json", by_alias=True),
        )
    return result


class Registrar:
    """Registers tools on one `MCPServer`, honouring read-only mode.

    Args:
        server: the MCP server.
        read_only: when True, tools whose ``read_only`` flag is False are skipped.
    """

    def __init__(self, server: MCPServer, *, read_only: bool) -> None:
        self.server = server
        self.read_only = read_only
        self.skipped: list[str] = []

    def tool(
        self,
        *,
        title: str,
        read_only: bool,
        destructive: bool,
        idempotent: bool,
        open_world: bool,
    ) -> Callable[[F], F]:
        """Decorator: register ``fn`` as a tool named after the function, described by its docstring."""

        def decorator(fn: F) -> F:
            if self.read_only and not read_only:
                self.skipped.append(fn.__name__)
                return fn
            annotations = ToolAnnotations(
                title=title,
                read_only_hint=read_only,
                destructive_hint=destructive,
                idempotent_hint=idempotent,
                open_world_hint=open_world,
            )
            self.server.add_tool(
                _wrap(fn),
                name=fn.__name__,
                title=title,
                description=inspect.getdoc(fn),
                annotations=annotations,
            )
            return fn

        return decorator


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    is_async = inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            if is_async:
                result = await fn(*args, **kwargs)
            else:
                result = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except TpuDevopsError as exc:
            log.debug("%s refused: %s", fn.__name__, exc)  # the SDK logs the tool error itself
            raise ToolError(str(exc)) from exc
        return to_call_result(result)

    return wrapper
