"""Cached tool schemas, so that a server start does not rebuild 35 input and output JSON schemas.

Why: the MCP SDK derives every tool's ``inputSchema`` and ``outputSchema`` with pydantic when the tool
is added, and that needs every result model (and so every domain module) imported. Measured on the
2-core dev machine: ~90 ms of schema generation plus ~70 ms of imports on top of a bare `MCPServer`'s
~600 ms, most of the cold-start cost between spawn and the ``tools/list`` answer (``make bench``).

How: after a start that built the schemas, they are written to ``<TPU_DEVOPS_CACHE_DIR>/tool-schemas.json``
under a key that hashes the source of ``server.py`` and of the whole ``tpu_devops`` package plus the
Python, ``mcp``, ``pydantic`` and ``pydantic-core`` versions. Any edit or upgrade changes the key, and a
file with another key (or unreadable, or of another shape) is ignored and rewritten: like a ``.pyc``, the
cache can only make a start faster, never change what it publishes. A tool listed from the cache is a
`DeferredTool`: it answers ``tools/list`` from the cached schemas and builds the real SDK `Tool` (argument
model, output validation, resolvers) on its first call; if that build disagrees with the cache, the
cache file is deleted and a warning logged.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
import pydantic_core
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import ToolAnnotations
from pydantic import BaseModel, PrivateAttr

if TYPE_CHECKING:
    from mcp.server.mcpserver.context import Context

log = logging.getLogger("tpu_devops.tool_cache")

CACHE_FILE = "tool-schemas.json"
FORMAT = 1  # bump when the file layout changes


class ToolSchemas(BaseModel):
    """The two schemas of one tool, exactly as the SDK derived them (JSON Schema objects)."""

    parameters: dict[str, Any]
    output_schema: dict[str, Any] | None


class CacheFile(BaseModel):
    """Layout of ``tool-schemas.json``."""

    format: int
    key: str
    tools: dict[str, ToolSchemas]


def source_key(server_file: Path) -> str:
    """SHA-256 (hex) over the runtime versions and the source of ``server_file`` and every ``.py`` file of
    the ``tpu_devops`` package: what the published schemas are a function of."""
    package_dir = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    versions = (
        f"{FORMAT}|{sys.version}|mcp {metadata.version('mcp')}|pydantic {pydantic.VERSION}"
        f"|pydantic-core {pydantic_core.__version__}"
    )
    digest.update(versions.encode())
    named = [(server_file.name, server_file)]
    named += [(str(p.relative_to(package_dir.parent)), p) for p in sorted(package_dir.rglob("*.py"))]
    for name, path in named:
        digest.update(b"\0" + name.encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


class SchemaCache:
    """One cache file for one source key.

    Args:
        directory: where ``tool-schemas.json`` lives (created on save).
        key: from `source_key`; entries saved under another key are never used.
    """

    def __init__(self, directory: Path, key: str) -> None:
        self.path = directory / CACHE_FILE
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

    def discard(self) -> None:
        """Delete the cache file (it disagreed with the code); the next start rebuilds it."""
        self.path.unlink(missing_ok=True)


def open_schema_cache(cache_dir: str | None, server_file: Path) -> SchemaCache | None:
    """The cache for ``server_file`` in ``cache_dir`` (``TPU_DEVOPS_CACHE_DIR``), or None when disabled."""
    return SchemaCache(Path(cache_dir), source_key(server_file)) if cache_dir else None


class DeferredTool(Tool):
    """A `Tool` listed from cached schemas whose real SDK `Tool` is built on the first call.

    ``tools/list`` reads only ``name``, ``title``, ``description``, ``parameters``, ``output_schema`` and
    ``annotations``, which are all here; `run` builds the real tool with `Tool.from_function` (which imports
    the domain module that defines the result type) and delegates to it.
    """

    _built: Tool | None = PrivateAttr(default=None)
    _cache: SchemaCache | None = PrivateAttr(default=None)

    @classmethod
    def from_cache(
        cls,
        fn: Any,
        *,
        name: str,
        title: str,
        description: str,
        annotations: ToolAnnotations,
        schemas: ToolSchemas,
        cache: SchemaCache,
    ) -> DeferredTool:
        """A tool for ``fn`` (an async callable) whose listing comes from ``schemas``."""
        tool = cls(
            fn=fn,
            name=name,
            title=title,
            description=description,
            parameters=schemas.parameters,
            # ArgModelBase is a placeholder: arguments are validated by the real tool's model in `run`.
            fn_metadata=FuncMetadata(arg_model=ArgModelBase, output_schema=schemas.output_schema),
            is_async=True,
            annotations=annotations,
        )
        tool._cache = cache
        return tool

    def build(self) -> Tool:
        """The real SDK `Tool` (built once). Logs a warning and discards the cache if it was stale."""
        if self._built is None:
            built = Tool.from_function(
                self.fn,
                name=self.name,
                title=self.title,
                description=self.description,
                annotations=self.annotations,
            )
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
        """Build the real tool if needed and run it (argument validation, resolvers, output conversion)."""
        return await self.build().run(arguments, context, convert_result=convert_result)
