"""Cached tool schemas, so that a server start does not rebuild 35 input and output JSON schemas.

Why: the MCP SDK derives every tool's ``inputSchema`` and ``outputSchema`` with pydantic when the tool
is added, and that needs every result model (and so every domain module) imported. Measured on the
2-core dev machine: ~90 ms of schema generation plus ~70 ms of imports on top of a bare `MCPServer`'s
~600 ms, most of the cold-start cost between spawn and the ``tools/list`` answer (``make bench``).

How: after a start that built the schemas, they are written to
``<TPU_DEVOPS_CACHE_DIR>/tool-schemas-<key>.json``, where the key hashes the source of ``server.py`` and of
the whole ``tpu_devops`` package plus the Python, ``mcp``, ``pydantic`` and ``pydantic-core`` versions.
Any edit or upgrade changes the key (two checkouts sharing one cache directory keep a file each; the
newest few are kept). A file that is unreadable or of another shape is ignored and rewritten, and a
cache that cannot be read or written only makes the start slower. A tool listed from the cache is a
`DeferredTool`: it answers ``tools/list`` from the cached schemas and builds the real SDK `Tool` (argument
model, output validation, resolvers) on its first call. Arguments are always validated by the code's own
model; if its schema disagrees with the cached one (only possible if a schema depended on something the
key does not cover), the file is deleted and a warning logged, and the next start publishes the right one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
import pydantic_core
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import ToolAnnotations
from pydantic import BaseModel, PrivateAttr

if TYPE_CHECKING:
    from mcp.server.mcpserver.context import Context

log = logging.getLogger("tpu_devops.host.tool_cache")

FORMAT = 2  # bump when the file layout or the meaning of the cached schemas changes
KEEP_FILES = 4  # cache files kept per directory (one per source tree / version in use)


class ToolSchemas(BaseModel):
    """The two schemas of one tool, exactly as the SDK derived them (JSON Schema objects)."""

    parameters: dict[str, Any]
    output_schema: dict[str, Any] | None


class CacheFile(BaseModel):
    """Layout of a ``tool-schemas-<key>.json`` file."""

    format: int
    key: str
    tools: dict[str, ToolSchemas]


def source_key(server_file: Path) -> str:
    """SHA-256 (hex) over the runtime versions and the source of ``server_file`` and every ``.py`` module of
    the ``tpu_devops`` package: what the published schemas are a function of.

    Raises:
        OSError: a source file could not be read.
    """
    package_dir = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    versions = (
        f"{FORMAT}|{sys.version}|mcp {_mcp_version()}|pydantic {pydantic.VERSION}"
        f"|pydantic-core {pydantic_core.__version__}"
    )
    digest.update(versions.encode())
    named = [(server_file.name, server_file)]
    modules = [p for p in sorted(package_dir.rglob("*.py")) if _is_module(p.relative_to(package_dir))]
    named += [(str(p.relative_to(package_dir.parent)), p) for p in modules]
    for name, path in named:
        digest.update(b"\0" + name.encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _mcp_version() -> str:
    """The installed ``mcp`` distribution's version. Read from its ``.dist-info`` directory's name next to
    the package: ``importlib.metadata`` scans every path entry first, about 0.1 s of each start that hosts
    wait for (measured on the 2-core dev machine)."""
    import mcp

    site = Path(mcp.__file__).resolve().parent.parent
    found = sorted(site.glob("mcp-*.dist-info"))
    if len(found) == 1:
        return found[0].name.removeprefix("mcp-").removesuffix(".dist-info")
    return metadata.version("mcp")


def _is_module(relative: Path) -> bool:
    # Editors leave dot-files such as Emacs' dangling ``.#sizing.py`` lock link next to edited modules.
    return not any(part.startswith(".") for part in relative.parts)


class SchemaCache:
    """The cache file of one source key.

    Args:
        directory: where ``tool-schemas-<key>.json`` lives (created on save).
        key: from `source_key`; a file whose content carries another key is never used.
    """

    def __init__(self, directory: Path, key: str) -> None:
        self.path = directory / f"tool-schemas-{key[:16]}.json"
        self.key = key

    def load(self) -> dict[str, ToolSchemas]:
        """Schemas by tool name; empty when the file is missing, unreadable, of another shape or key."""
        try:
            cached = CacheFile.model_validate_json(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            log.debug("ignoring tool schema cache %s: %s", self.path, exc)
            return {}
        if cached.format != FORMAT or cached.key != self.key:
            log.debug("tool schema cache %s is for other sources; rebuilding", self.path)
            return {}
        return cached.tools

    def save(self, tools: list[Tool]) -> None:
        """Write the schemas of ``tools`` atomically (a concurrent reader sees the old or the new file).

        A failure to write (read-only home, full disk) is logged and otherwise ignored: the next start
        is only slower.
        """
        payload = CacheFile(
            format=FORMAT,
            key=self.key,
            tools={
                t.name: ToolSchemas(parameters=t.parameters, output_schema=t.output_schema) for t in tools
            },
        ).model_dump_json()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tool-schemas-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(payload)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.info(
                "tool schema cache not written to %s (%s); startup stays correct, only slower", self.path, exc
            )
            return
        self._prune()

    def discard(self) -> None:
        """Delete the cache file (it disagreed with the code); the next start rebuilds it."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not delete the stale tool schema cache %s: %s", self.path, exc)

    def _prune(self) -> None:
        """Keep the `KEEP_FILES` newest cache files; drop temp files a killed writer left an hour ago."""
        try:
            files = sorted(
                self.path.parent.glob("tool-schemas-*.json"), key=lambda p: p.stat().st_mtime, reverse=True
            )
            stale = files[KEEP_FILES:]
            stale += [
                p
                for p in self.path.parent.glob(".tool-schemas-*.tmp")
                if time.time() - p.stat().st_mtime > 3600
            ]
            for old in stale:
                old.unlink(missing_ok=True)
        except OSError as exc:  # another server pruning at the same moment, or a read-only directory
            log.debug("tool schema cache pruning skipped: %s", exc)


def open_schema_cache(cache_dir: str | None, server_file: Path) -> SchemaCache | None:
    """The cache for ``server_file`` in ``cache_dir`` (``TPU_DEVOPS_CACHE_DIR``), or None when disabled or
    when the sources cannot be read (the start then derives every schema, as without a cache)."""
    if not cache_dir:
        return None
    try:
        return SchemaCache(Path(cache_dir), source_key(server_file))
    except OSError as exc:
        log.info("tool schema cache off for this start: cannot read the sources (%s)", exc)
        return None


class DeferredTool(Tool):
    """A `Tool` listed from cached schemas whose real tool is built on the first call.

    ``tools/list`` reads only ``name``, ``description``, ``parameters``, ``output_schema``, ``annotations``
    and ``meta``, which are all here; `run` calls the builder (which imports the domain module that defines
    the result type, and builds the tool exactly as a start without the cache would) and delegates to it.
    """

    _built: Tool | None = PrivateAttr(default=None)
    _cache: SchemaCache | None = PrivateAttr(default=None)
    _builder: Callable[[], Tool] | None = PrivateAttr(default=None)

    @classmethod
    def from_cache(
        cls,
        builder: Callable[[], Tool],
        *,
        name: str,
        description: str,
        annotations: ToolAnnotations,
        schemas: ToolSchemas,
        cache: SchemaCache,
        meta: dict[str, Any] | None = None,
    ) -> DeferredTool:
        """A tool listed from ``schemas`` whose real tool ``builder()`` makes on the first call."""

        async def not_built(**_: Any) -> Any:  # never called: run() delegates to the built tool
            raise RuntimeError(f"tool {name} was not built")

        tool = cls(
            fn=not_built,
            name=name,
            description=description,
            parameters=schemas.parameters,
            # ArgModelBase is a placeholder: arguments are validated by the real tool's model in `run`.
            fn_metadata=FuncMetadata(arg_model=ArgModelBase, output_schema=schemas.output_schema),
            is_async=True,
            annotations=annotations,
            meta=meta,
        )
        tool._cache = cache
        tool._builder = builder
        return tool

    def build(self) -> Tool:
        """The real tool (built once). Logs a warning and discards the cache if it was stale."""
        if self._built is None:
            assert self._builder is not None
            built = self._builder()
            if built.parameters != self.parameters or built.output_schema != self.output_schema:
                log.warning(
                    "tool %s: cached schema differs from the code; the cache is deleted and rebuilt at the "
                    "next start (reconnect the client to see the current schema)",
                    self.name,
                )
                if self._cache is not None:
                    self._cache.discard()
            self._built = built
        return self._built

    async def run(
        self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False
    ) -> Any:
        """Build the real tool if needed and run it (argument checks, resolvers, output conversion).

        Raises:
            ToolError: the tool could not be built (its module failed to import): the client learns that
                and where the traceback is (logged here, once).
        """
        try:
            tool = self.build()
        except Exception as exc:
            log.error("tool %s could not be built", self.name, exc_info=True)
            raise ToolError(
                f"{self.name}: the tool could not be loaded ({type(exc).__name__}); the server's log (stderr) "
                "has the traceback"
            ) from exc
        return await tool.run(arguments, context, convert_result=convert_result)
