"""How a toolset's tool becomes an MCP tool: honest annotations, toolsets and read-only mode, checked
arguments and parameter groups, errors with a fix, and the two result forms every host needs.

`server.py` lists the toolsets (`tpu_devops.host.toolsets`); everything their tools have in common lives
here:

- every tool declares its MCP annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``,
  ``openWorldHint``) explicitly through its `Kind`; there is no default to forget;
- only the enabled toolsets are declared, and in read-only mode (``TPU_DEVOPS_READ_ONLY=1``) a tool that
  changes state is not declared either, unless ``keep_in_read_only`` (``cancel_job``: read-only mode still
  starts benchmark jobs); a call of such a tool, or of an old tool name, says why and how to get it;
- the published schemas are the compact, bounded ones of `tpu_devops.host.schemas`; parameter groups
  (`tpu_devops.host.params`) are flattened into top-level arguments, and arguments are checked by
  `tpu_devops.host.arguments` before the tool runs (unknown keys, types, bounds, empty strings, NUL), then
  by the groups' own rules;
- every failure reaches the client as a tool error (``isError``) with the field, the value and the fix:
  a `TpuDevopsError` keeps its text; a refused elicitation (a headless host cannot ask the user) says what
  to pass instead; an unexpected exception is described by its kind (``File name too long``) with its
  traceback logged to stderr once, never as the SDK's bare "Error executing tool";
- a returned `ToolResult` is sent as ``structuredContent`` plus a text block, both leading with the same
  summary and each capped at `tpu_devops.host.results.MAX_RESULT_CHARS` (`ToolResult.host_forms`);
- synchronous tool bodies run in a worker thread so they never block the event loop;
- the server advertises only what it serves: tools, and the files answers link to as resources
  (`tools_only`); the roots the client declares are kept current for the file tools
  (`tpu_devops.host.roots`);
- tools are declared first and the server is built from them at the end (`Registrar.build_server`), so
  that schemas can come from `tpu_devops.host.tool_cache` and no domain module is imported until a tool runs.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import inspect
import logging
import os
import re
import weakref
from collections.abc import Callable, Iterator
from typing import Any, cast, get_args

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    ImageContent,
    ListResourcesResult,
    ListResourceTemplatesResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import ConfigDict, PrivateAttr, ValidationError

from tpu_devops.errors import InputError, TpuDevopsError
from tpu_devops.host import artifacts, deadline
from tpu_devops.host.arguments import ArgumentChecker, from_pydantic
from tpu_devops.host.pagination import refuse_unknown_cursor
from tpu_devops.host.params import flatten
from tpu_devops.host.results import MAX_IMAGE_BYTES, ToolResult, ViewResult
from tpu_devops.host.roots import ClientRoots
from tpu_devops.host.schemas import input_schema, validation_schema, wire_output_schema
from tpu_devops.host.tool_cache import DeferredTool, SchemaCache, ToolSchemas
from tpu_devops.host.toolsets import Declared, Toolset, enable_hint

log = logging.getLogger("tpu_devops.tools")

METHOD_NOT_FOUND = -32601  # JSON-RPC 2.0
# The SDK's text when a Resolve(...) parameter's elicitation was not accepted (mcp.server.mcpserver.resolve).
_ELICITATION_REFUSED = re.compile(r"Resolver for parameter '(\w+)' could not resolve: elicitation was (\w+)")


def to_call_result(result: Any) -> Any:
    """`ToolResult` -> ``CallToolResult``: its two forms fitted to the host limits, then for each file it
    offers (`tpu_devops.host.results.HostAnswer.files`) a PNG of at most `MAX_IMAGE_BYTES` as ``image``
    content and a ``resource_link``; anything else unchanged."""
    if not isinstance(result, ToolResult):
        return result
    answer = result.host_answer()
    content: list[Any] = [TextContent(type="text", text=answer.text)]
    for file in answer.files:
        if file.mime_type == "image/png" and file.bytes <= MAX_IMAGE_BYTES:
            data = _read_image(file)
            if data is not None:
                content.append(ImageContent(type="image", data=data, mime_type="image/png"))
        content.append(file.link())
    return CallToolResult(content=content, structured_content=answer.structured)


def _read_image(file: Any) -> str | None:
    """The base64 of the PNG ``file`` (an `Artifact`), or None when it is gone or not what it says."""
    try:
        with open(file.path, "rb") as handle:
            data = handle.read(MAX_IMAGE_BYTES + 1)
    except OSError as exc:
        log.warning("chart %s not sent inline: %s", file.path, exc)
        return None
    if len(data) > MAX_IMAGE_BYTES or not data.startswith(b"\x89PNG\r\n\x1a\n"):
        log.warning("chart %s not sent inline: not a PNG of at most %d bytes", file.path, MAX_IMAGE_BYTES)
        return None
    return base64.b64encode(data).decode("ascii")


class HostTool(Tool):
    """An SDK `Tool` whose calls follow this module's rules (checked arguments, errors with a fix)."""

    _checker: ArgumentChecker | None = PrivateAttr(default=None)

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        """Check the arguments, run the tool, and turn any failure into a `ToolError` with a fix.

        Raises:
            ToolError: every failure (the client sees an ``isError`` result with this text).
            MCPError: protocol-level errors, unchanged.
        """
        try:
            # A list or object sent as JSON text (Claude Desktop does) is parsed first, as the SDK would.
            arguments = self.fn_metadata.pre_parse_json(arguments)
            args = self._checker.check(arguments) if self._checker else arguments
        except InputError as exc:
            log.info("%s: arguments refused (%s)", self.name, exc.field or "several")
            raise ToolError(f"{self.name}: {exc}") from None
        try:
            return await super().run(args, context, convert_result=convert_result)
        except MCPError:
            raise
        except UnexpectedToolError as exc:
            raised = exc.__cause__ or exc
            if isinstance(raised, TpuDevopsError):  # a parameter group's own rule refused the arguments
                raise ToolError(f"{self.name}: {raised}") from exc
            raise ToolError(f"{self.name}: {self._crash(raised, args)}") from exc
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"{self.name}: {from_pydantic(self.name, cause)}") from exc
            refused = _ELICITATION_REFUSED.search(str(cause or exc))
            if refused:
                raise ToolError(f"{self.name}: {_not_confirmed(refused.group(2))}") from exc
            raise ToolError(f"{self.name}: {cause if isinstance(cause, ToolError) else exc}") from exc

    def _crash(self, cause: BaseException, args: dict[str, Any]) -> TpuDevopsError:
        """Describe an unexpected exception without a traceback; log the traceback once."""
        log.error("tool %s raised an unexpected exception", self.name, exc_info=cause)
        field = None
        if isinstance(cause, OSError):
            name = errno.errorcode.get(cause.errno or 0, "")
            what = f"{os.strerror(cause.errno)} ({name})" if cause.errno else type(cause).__name__
            field = _argument_holding(args, cause.filename)
        else:
            from tpu_devops.host.redact import redact_text

            message = redact_text(str(cause)).strip().splitlines()[0][:200] if str(cause).strip() else ""
            what = f"{type(cause).__name__}{': ' + message if message else ''}"
        return TpuDevopsError(
            f"failed with an error it does not handle: {what}",
            field=field,
            fix=(
                f"check {field}; if its value is right" if field else "check the arguments; if they are right"
            )
            + ", this is a bug: the traceback is in the server's log (stderr)",
        )


def _argument_holding(args: dict[str, Any], filename: Any) -> str | None:
    """The argument whose value is (or contains) ``filename``, if any."""
    if not isinstance(filename, str) or not filename:
        return None
    for name, value in args.items():
        if isinstance(value, str) and (value == filename or filename.startswith(value) or value in filename):
            return name
    return None


def _not_confirmed(action: str) -> TpuDevopsError:
    if action == "decline":
        return TpuDevopsError(
            "nothing was deleted: you declined the confirmation",
            fix="none needed; call it again when you want the deletion",
        )
    return TpuDevopsError(
        f"nothing was deleted: this host could not ask you to confirm (its confirmation request was "
        f"{action}led; headless runs such as `gemini -p` or `claude -p` cannot ask)",
        fix="call it with dry_run=true: its answer lists exactly what would be deleted and gives a confirm_token "
        "with the exact next_call; show the user the steps, and only if they agree make that call (it must echo "
        "the token before it expires)",
    )


def _accepts_str(annotation: Any) -> bool:
    if annotation is str:
        return True
    return any(_accepts_str(arg) for arg in get_args(annotation))


class ArgumentsMetadata(FuncMetadata):
    """The SDK's `FuncMetadata` without one surprise: its pre-parse turns JSON text into a list or object
    for any argument not annotated exactly ``str``, so a pasted log export given to an optional string
    argument (``log_text: str | None``) arrived as a list and was refused. A string stays a string where
    the argument accepts one."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        fields = self.arg_model.model_fields
        for key, value in data.items():
            field = fields.get(key)
            if isinstance(value, str) and field is not None and _accepts_str(field.annotation):
                parsed[key] = value
        return parsed


def published_output_schema(output: type[ToolResult]) -> dict[str, Any]:
    """The ``outputSchema`` of a tool returning ``output``: a `ViewResult`'s own (`ViewResult.wire_schema`),
    else `tpu_devops.host.schemas.wire_output_schema` of the model's serialization schema."""
    if issubclass(output, ViewResult):
        return output.wire_schema()
    return wire_output_schema(output.model_json_schema(mode="serialization"))


def build_tool(
    fn: Callable[..., Any],
    *,
    name: str,
    title: str | None,
    description: str,
    annotations: ToolAnnotations,
    meta: dict[str, Any] | None = None,
) -> HostTool:
    """The `HostTool` for ``fn``: the SDK derives the argument model and output type; this module publishes
    the compact input schema, the wire output schema and checks arguments strictly.

    Raises:
        TypeError: ``fn`` is not annotated to return a `ToolResult` subclass (both forms come from it).
    """
    base = Tool.from_function(
        _wrap(flatten(fn)),
        name=name,
        title=title,
        description=description,
        annotations=annotations,
        meta=meta,
    )
    fm = base.fn_metadata
    output = fm.output_model
    if not (isinstance(output, type) and issubclass(output, ToolResult)) or fm.output_schema is None:
        raise TypeError(f"tool {name} must be annotated to return a ToolResult subclass, not {output!r}")
    strict = cast(  # type() builds a subclass of the SDK's argument model
        "type[ArgModelBase]",
        type(
            fm.arg_model.__name__,
            (fm.arg_model,),
            {"model_config": ConfigDict(**fm.arg_model.model_config, extra="forbid"), "__module__": __name__},
        ),
    )
    arg_schema = strict.model_json_schema(by_alias=True)
    fields = {k: getattr(base, k) for k in Tool.model_fields}
    fields.update(
        parameters=input_schema(arg_schema),
        # The structured form is built by ToolResult.structured and described by the wire schema; the SDK
        # would validate it against the model instead, which requires the fields the wire form prunes.
        # Serialization mode: fields declared Field(exclude=True) never reach the structured form.
        fn_metadata=ArgumentsMetadata(arg_model=strict, output_schema=published_output_schema(output)),
    )
    tool = HostTool(**fields)
    tool._checker = ArgumentChecker(name, validation_schema(arg_schema))
    return tool


class Registrar:
    """Builds the `MCPServer` that serves the enabled toolsets' tools.

    Args:
        toolsets: every toolset of the product (`tpu_devops.host.toolsets.Toolset`), in the order
            ``tools/list`` shows them.
        enabled: the names of the toolsets to declare (`tpu_devops.host.toolsets.select`).
        read_only: when True, tools that change state are not declared (unless ``keep_in_read_only``).
        schema_cache: where tool schemas are cached between starts (`tpu_devops.host.tool_cache`), or None
            to derive every schema at startup.
        selection_errors: what was wrong with the operator's toolset names (`get_help` leads with them).
        state_dir: the settings' state directory: answers' files go under it (`tpu_devops.host.artifacts`)
            and are served as resources; None keeps no files (an answer too large is cut, without a copy).
    """

    def __init__(
        self,
        toolsets: list[Toolset],
        *,
        enabled: tuple[str, ...],
        read_only: bool,
        schema_cache: SchemaCache | None = None,
        selection_errors: tuple[str, ...] = (),
        state_dir: str | None = None,
    ) -> None:
        self.toolsets = toolsets
        self.state_dir = state_dir
        self.selection_errors = selection_errors
        self.defaults = tuple(s.name for s in toolsets if s.default)
        self.enabled = enabled
        self.read_only = read_only
        self.schema_cache = schema_cache
        self.declared: dict[str, Declared] = {}
        self.skipped: dict[str, str] = {}  # tool name -> why it is not declared ("read-only" / its toolset)
        self.renames: dict[str, str] = {}
        for toolset in toolsets:
            self.renames.update(toolset.renames)
            for name, declared in toolset.tools.items():
                if name in self.declared or name in self.skipped:
                    raise ValueError(f"tool {name} is declared in two toolsets")
                if toolset.name not in enabled:
                    self.skipped[name] = toolset.name
                elif read_only and not declared.annotations.read_only_hint and not declared.keep_in_read_only:
                    self.skipped[name] = READ_ONLY
                else:
                    self.declared[name] = declared

    def build_server(self, **server_options: Any) -> MCPServer:
        """The `MCPServer` (``server_options`` are its keyword arguments) serving every declared tool.

        A tool whose schemas are in the cache is listed from it and built on first call; the others are
        built now, and the cache is rewritten when any was.
        """
        cached = self.schema_cache.load() if self.schema_cache else {}
        tools = [self._tool(name, declared, cached.get(name)) for name, declared in self.declared.items()]
        if self.schema_cache is not None and not self.declared.keys() <= cached.keys():
            self.schema_cache.save(tools)
        artifacts.configure(self.state_dir)
        with _logging_configured_once():
            server = MCPServer(tools=tools, **server_options)
        server.middleware.append(tools_only)
        server.middleware.append(ClientRoots())
        server.middleware.append(refuse_unknown_cursor)
        server.middleware.append(functools.partial(explain_unknown_tool, self))
        _REGISTRARS[server] = self
        return server

    def details(self) -> dict[str, str]:
        """Each declared tool's long explanation (its docstring after the first paragraph), by name."""
        return {name: d.details for name, d in self.declared.items()}

    def overview(self) -> list[dict[str, Any]]:
        """Every toolset: ``name``, ``summary``, ``enabled``, ``default`` and its ``tools`` (names)."""
        return [
            {
                "name": s.name,
                "summary": s.summary,
                "enabled": s.name in self.enabled,
                "default": s.default,
                "tools": list(s.tools),
            }
            for s in self.toolsets
        ]

    def why_not_served(self, name: Any) -> str:
        """What a call of the tool ``name`` that this server does not serve answers (`unknown_tool_message`)."""
        return unknown_tool_message(self, name)

    def _tool(self, name: str, declared: Declared, schemas: ToolSchemas | None) -> Tool:
        description = declared.description
        build = functools.partial(
            build_tool,
            declared.fn,
            name=name,
            title=None,
            description=description,
            annotations=declared.annotations,
            meta=declared.meta,
        )
        if schemas is not None and self.schema_cache is not None:
            try:
                return DeferredTool.from_cache(
                    build,
                    name=name,
                    description=description,
                    annotations=declared.annotations,
                    meta=declared.meta,
                    schemas=schemas,
                    cache=self.schema_cache,
                )
            except Exception:  # an SDK whose Tool no longer takes these fields: derive the schemas instead
                log.warning(
                    "tool %s: cannot list it from the schema cache; deriving its schemas", name, exc_info=True
                )
        return build()


@contextlib.contextmanager
def _logging_configured_once() -> Iterator[None]:
    """Construct the SDK's server without its logging setup when this process has set up logging already.

    `MCPServer` configures logging on construction with a rich handler; once the root logger has a handler
    (`tpu_devops.main` logs to stderr before the server is built), that ``basicConfig`` changes nothing,
    but importing rich for it took about 0.2 s of every start, a third of what hosts wait for before
    ``initialize`` is answered (measured on the 2-core dev machine; Codex gives a server 1 s). A process
    that has not configured logging (a script importing ``server``) gets the SDK's setup unchanged.
    """
    from mcp.server.mcpserver import server as sdk

    original = sdk.configure_logging
    if logging.getLogger().handlers:
        sdk.configure_logging = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        sdk.configure_logging = original


READ_ONLY = "(read-only mode)"  # `Registrar.skipped` value for a tool read-only mode hides
_REGISTRARS: weakref.WeakKeyDictionary[MCPServer, Registrar] = weakref.WeakKeyDictionary()


def registrar_of(server: MCPServer) -> Registrar:
    """The `Registrar` that built ``server`` (`get_help` reads the toolsets from it).

    Raises:
        KeyError: ``server`` was not built by `Registrar.build_server`.
    """
    return _REGISTRARS[server]


INVALID_PARAMS = -32602  # JSON-RPC 2.0


async def tools_only(ctx: Any, call_next: Any) -> Any:
    """Server middleware: serve tools, and as resources only the files tool answers link to
    (`tpu_devops.host.artifacts`); no prompts.

    `MCPServer` always registers prompt and resource handlers, so its ``initialize`` answer advertises both
    even with none to offer, and hosts then add their resource tools to every model request. Resources are
    advertised (without subscriptions) only when the server keeps artifacts: a ``resource_link`` in an
    answer is then readable with ``resources/read``; ``resources/list`` lists the newest files, in one page.
    """
    method = getattr(ctx, "method", "")
    keeps_files = artifacts.configured() is not None
    if method.startswith("resources/") and keeps_files:
        params = getattr(ctx, "params", None) or {}
        if method == "resources/read":
            return await anyio.to_thread.run_sync(artifacts.read, params.get("uri"))
        if method in ("resources/list", "resources/templates/list"):
            if params.get("cursor") is not None:  # one page, never a cursor: any cursor is not ours
                raise MCPError(code=INVALID_PARAMS, message="Invalid params: unknown cursor", data=method)
            if method == "resources/templates/list":
                return ListResourceTemplatesResult(resource_templates=[])
            return ListResourcesResult(resources=await anyio.to_thread.run_sync(artifacts.listing))
    if method.startswith(("prompts/", "resources/")):
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method)
    result = await call_next(ctx)
    if method in ("initialize", "server/discover") and isinstance(result, dict):
        capabilities = result.get("capabilities")
        if isinstance(capabilities, dict):
            capabilities.pop("prompts", None)
            if keeps_files:
                capabilities["resources"] = {}
            else:
                capabilities.pop("resources", None)
    return result


def unknown_tool_message(registrar: Registrar, name: Any) -> str:
    """What a call of a tool this server does not serve answers: which tool replaced an old name (and with
    which arguments); that a tool belongs to a toolset that is not enabled (and how to enable it); that
    read-only mode hides it (and how to turn that off); else the closest served names."""
    shown = str(name)[:60]
    if name in registrar.renames:
        return str(
            InputError(
                "this tool was renamed or merged into another",
                field="name",
                value=shown,
                fix=f"call {registrar.renames[name]} (get_help lists every tool)",
            )
        )
    why = registrar.skipped.get(name)
    if why == READ_ONLY:
        return str(
            InputError(
                "a tool that changes the cloud, and this server runs read-only (TPU_DEVOPS_READ_ONLY is on, or "
                "its value is invalid: read-only is then the safe reading), so it does not serve it",
                field="name",
                value=shown,
                fix="set TPU_DEVOPS_READ_ONLY=0 in this server's environment (MCP client config or tpu.env) and "
                "restart it; read-only tools (get_help lists them) keep working meanwhile",
            )
        )
    if why is not None:
        return str(
            InputError(
                f"a tool of the toolset '{why}', which this server does not enable",
                field="name",
                value=shown,
                fix=enable_hint(why, registrar.enabled, registrar.defaults),
            )
        )
    import difflib

    close = difflib.get_close_matches(str(name), list(registrar.declared), n=2, cutoff=0.6)
    fix = f"did you mean {' or '.join(close)}? " if close else ""
    return str(
        InputError(
            "unknown tool",
            field="name",
            value=shown,
            fix=f"{fix}get_help lists every tool this server serves",
        )
    )


async def explain_unknown_tool(registrar: Registrar, ctx: Any, call_next: Any) -> Any:
    """Server middleware: a ``tools/call`` of a tool this server does not serve gets an error result that
    says why and what to do (`unknown_tool_message`), not the SDK's bare "Unknown tool: x"."""
    params = getattr(ctx, "params", None)
    name = (
        params.get("name")
        if getattr(ctx, "method", "") == "tools/call" and isinstance(params, dict)
        else None
    )
    if name is None or name in registrar.declared:
        return await call_next(ctx)
    text = unknown_tool_message(registrar, name)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    is_async = inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            # One time budget per call (`tpu_devops.host.deadline`): a body that overruns it is abandoned with
            # a DeadlineError; the worker thread of a synchronous body stops at its next budget check.
            async with deadline.tool_call(fn.__name__):
                if is_async:
                    result = await fn(*args, **kwargs)
                else:
                    result = await anyio.to_thread.run_sync(
                        functools.partial(fn, *args, **kwargs), abandon_on_cancel=True
                    )
        except TpuDevopsError as exc:
            log.debug("%s refused: %s", fn.__name__, exc)  # the SDK logs the tool error itself
            raise ToolError(str(exc)) from exc
        return to_call_result(result)

    return wrapper
