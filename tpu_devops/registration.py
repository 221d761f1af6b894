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
- synchronous tool bodies run in a worker thread so they never block the event loop;
- tools are declared first and the server is built from them at the end (`Registrar.build_server`), so
  that schemas can come from `tpu_devops.tool_cache` and no domain module is imported until a tool runs.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from tpu_devops.errors import TpuDevopsError
from tpu_devops.results import ToolResult
from tpu_devops.tool_cache import DeferredTool, SchemaCache, ToolSchemas

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


@dataclass(frozen=True)
class _Declared:
    fn: Callable[..., Any]
    title: str
    annotations: ToolAnnotations


class Registrar:
    """Collects the tools `server.py` declares, then builds the `MCPServer` that serves them.

    Args:
        read_only: when True, tools whose ``read_only`` flag is False are skipped.
        schema_cache: where tool schemas are cached between starts (`tpu_devops.tool_cache`), or None
            to derive every schema at startup.
    """

    def __init__(self, *, read_only: bool, schema_cache: SchemaCache | None = None) -> None:
        self.read_only = read_only
        self.schema_cache = schema_cache
        self.skipped: list[str] = []
        self._declared: dict[str, _Declared] = {}

    def tool(
        self,
        *,
        title: str,
        read_only: bool,
        destructive: bool,
        idempotent: bool,
        open_world: bool,
    ) -> Callable[[F], F]:
        """Decorator: declare ``fn`` as a tool named after the function, described by its docstring.

        Raises:
            ValueError: a tool of that name was already declared.
        """

        def decorator(fn: F) -> F:
            if fn.__name__ in self._declared or fn.__name__ in self.skipped:
                raise ValueError(f"tool {fn.__name__} is declared twice")
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
            self._declared[fn.__name__] = _Declared(fn, title, annotations)
            return fn

        return decorator

    def build_server(self, **server_options: Any) -> MCPServer:
        """The `MCPServer` (``server_options`` are its keyword arguments) serving every declared tool.

        A tool whose schemas are in the cache is listed from it and built on first call; the others are
        built now, and the cache is rewritten when any was.
        """
        cached = self.schema_cache.load() if self.schema_cache else {}
        tools = [self._tool(name, declared, cached.get(name)) for name, declared in self._declared.items()]
        if self.schema_cache is not None and not self._declared.keys() <= cached.keys():
            self.schema_cache.save(tools)
        return MCPServer(tools=tools, **server_options)

    def _tool(self, name: str, declared: _Declared, schemas: ToolSchemas | None) -> Tool:
        wrapped = _wrap(declared.fn)
        description = inspect.getdoc(declared.fn) or ""
        if schemas is not None and self.schema_cache is not None:
            try:
                return DeferredTool.from_cache(
                    wrapped,
                    name=name,
                    title=declared.title,
                    description=description,
                    annotations=declared.annotations,
                    schemas=schemas,
                    cache=self.schema_cache,
                )
            except Exception:  # an SDK whose Tool no longer takes these fields: derive the schemas instead
                log.warning(
                    "tool %s: cannot list it from the schema cache; deriving its schemas", name, exc_info=True
                )
        return Tool.from_function(
            wrapped,
            name=name,
            title=declared.title,
            description=description,
            annotations=declared.annotations,
        )


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
