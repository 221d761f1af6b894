"""Toolsets: tools grouped by area, each set enabled or not by the operator (``TPU_DEVOPS_TOOLSETS``).

A `Toolset` collects the tools of one area (planning, provisioning, serving, ...) as its file in
`tpu_devops.tools` declares them, with one line saying what the set is for. Which sets a server declares
is the operator's choice: `select` reads the requested names (``default`` stands for every set marked
default, ``all`` for every set) and says what is wrong with a name, with the closest known one. Read-only
mode is a filter over the declared tools (`tpu_devops.host.registration.Registrar`), not a toolset.

A toolset also keeps the names its tools had before (`Toolset.renamed`), so a host or a script that calls
an old name is told which tool replaced it and with which arguments.

Anchors: containers/kubernetes-mcp-server (``pkg/toolsets/<area>``, ``--toolsets``, a default set),
GoogleCloudPlatform/gke-mcp (delete tools only when enabled).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mcp_types import ToolAnnotations

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT = "default"  # the requested name that stands for every toolset marked default
ALL = "all"  # ... for every toolset


@dataclass(frozen=True)
class Kind:
    """A tool's honest MCP annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``); each
    tool states its own ``openWorldHint`` (whether it reaches outside this process)."""

    read_only: bool
    destructive: bool
    idempotent: bool


READ = Kind(read_only=True, destructive=False, idempotent=True)  # never changes anything
LOADS = Kind(
    read_only=True, destructive=False, idempotent=False
)  # changes nothing, but each call costs (a benchmark)
WRITE = Kind(read_only=False, destructive=False, idempotent=False)  # creates or writes only what it names
WRITE_ONCE = Kind(
    read_only=False, destructive=False, idempotent=True
)  # ... and a repeat changes nothing more
DESTROY = Kind(read_only=False, destructive=True, idempotent=True)  # deletes what it lists


@dataclass(frozen=True)
class Declared:
    """One tool as its toolset declared it."""

    fn: Callable[..., Any]
    toolset: str
    title: str
    annotations: ToolAnnotations
    meta: dict[str, Any] | None
    keep_in_read_only: bool
    description: str  # the docstring's first paragraph: what hosts send the model on every turn
    details: str  # the rest: GemmaTools.md only

    @property
    def name(self) -> str:
        return self.fn.__name__


def split_docstring(fn: Callable[..., Any]) -> tuple[str, str]:
    """(first paragraph as one line, the rest) of ``fn``'s docstring.

    Hosts send every tool's description to the model on every turn (Gemini CLI: about 1 KB per tool with
    its schema), so the description is only what a model needs to choose and call the tool; the long
    explanation stays in the docstring's later paragraphs, which GemmaTools.md carries.
    """
    import inspect

    doc = inspect.getdoc(fn) or ""
    first, _, rest = doc.strip().partition("\n\n")
    return " ".join(first.split()), rest.strip()


@dataclass
class Toolset:
    """The tools of one area.

    Args:
        name: what ``TPU_DEVOPS_TOOLSETS`` calls it (lowercase, no spaces).
        summary: one line: what the set is for (shown by ``get_help``).
        default: declared when the operator names no toolsets (or names ``default``).
    """

    name: str
    summary: str
    default: bool
    tools: dict[str, Declared] = field(default_factory=dict)
    renames: dict[str, str] = field(default_factory=dict)  # old tool name -> the call that replaces it

    def __post_init__(self) -> None:
        _DECLARED.append(self)

    def tool(
        self,
        *,
        title: str,
        kind: Kind,
        open_world: bool,
        keep_in_read_only: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Decorator: declare ``fn`` as a tool of this set, named after the function, described by its
        docstring (first paragraph for hosts, the rest for GemmaTools.md).

        ``keep_in_read_only``: a state-changing tool read-only mode still needs (it only acts on what
        read-only tools started). ``meta``: the tool's ``_meta`` in ``tools/list``.

        Raises:
            ValueError: a tool of that name was already declared in this set.
        """

        def decorator(fn: F) -> F:
            if fn.__name__ in self.tools:
                raise ValueError(f"tool {fn.__name__} is declared twice in toolset {self.name}")
            annotations = ToolAnnotations(
                title=title,
                read_only_hint=kind.read_only,
                destructive_hint=kind.destructive,
                idempotent_hint=kind.idempotent,
                open_world_hint=open_world,
            )
            description, details = split_docstring(fn)
            self.tools[fn.__name__] = Declared(
                fn, self.name, title, annotations, meta, keep_in_read_only, description, details
            )
            return fn

        return decorator

    def renamed(self, old: str, replacement: str) -> None:
        """Answer a call of the tool ``old`` (a name this set's tools had before) with ``replacement``:
        the call to make instead, e.g. ``"query_gemma with stats=true"``."""
        self.renames[old] = replacement


_DECLARED: list[Toolset] = []
# The package whose toolsets are this server's (a test may declare toolsets of its own elsewhere).
SERVER_TOOLS_PACKAGE = "tpu_devops.tools."


def declared_tool_names() -> frozenset[str]:
    """Every tool name this server's toolsets declared in this process, enabled or not, and the names they
    had before (`Toolset.renamed`): what a log line or a model answer must never get to call
    (`tpu_devops.host.untrusted`). ``server.py`` imports every toolset at start, so in the server this is
    the whole surface; elsewhere it is what has been imported."""
    names: set[str] = set()
    for toolset in _DECLARED:
        ours = [d.name for d in toolset.tools.values() if d.fn.__module__.startswith(SERVER_TOOLS_PACKAGE)]
        names.update(ours)
        if ours:
            names.update(toolset.renames)
    return frozenset(names)


@dataclass(frozen=True)
class Selection:
    """Which toolsets a server declares, and what was wrong with the request (one message per name)."""

    enabled: tuple[str, ...]
    errors: tuple[str, ...] = ()


def select(toolsets: Iterable[Toolset], requested: Iterable[str]) -> Selection:
    """The toolsets to declare for the ``requested`` names (empty: the default sets).

    ``default`` and ``all`` expand as the module docstring says; a name that is no toolset is left out
    and reported (with the closest known name), so a typo never disables the server: the default sets
    are still declared when nothing valid remains.
    """
    sets = list(toolsets)
    names = [s.name for s in sets]
    defaults = [s.name for s in sets if s.default]
    wanted: list[str] = []
    errors: list[str] = []
    requested = [r.strip().lower() for r in requested if r.strip()]
    for name in requested or [DEFAULT]:
        if name == DEFAULT:
            wanted += defaults
        elif name == ALL:
            wanted += names
        elif name in names:
            wanted.append(name)
        else:
            close = difflib.get_close_matches(name, [*names, DEFAULT, ALL], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            errors.append(
                f"TPU_DEVOPS_TOOLSETS: {name!r} is no toolset{hint}. Fix: use a comma list of "
                f"{', '.join(names)}, or {DEFAULT} / {ALL}"
            )
    if not wanted:
        wanted = defaults
    return Selection(enabled=tuple(n for n in names if n in wanted), errors=tuple(errors))


def enable_hint(toolset: str, enabled: Iterable[str], defaults: Iterable[str] = ()) -> str:
    """How the operator enables ``toolset`` next to the ones enabled now (``default`` standing for the
    ``defaults`` when all of them are enabled)."""
    on, base = list(enabled), list(defaults)
    if base and set(base) <= set(on):
        on = [DEFAULT, *(n for n in on if n not in base)]
    names = ",".join([*on, toolset])
    return (
        f"set TPU_DEVOPS_TOOLSETS={names} (or all) in this server's environment (MCP client config or "
        "tpu.env) and restart it"
    )
