"""Tool documentation built from the server's own ``list_tools()``: `get_help`, GemmaTools.md, snapshot.

One source for all three, so the docs cannot drift from what a client actually sees.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from tpu_devops.config import Settings
from tpu_devops.host.results import ToolResult
from tpu_devops.host.schemas import DEFAULT_MAX_ITEMS, DEFAULT_MAX_STRING


class ToolSummary(BaseModel):
    """One tool as a client sees it: its name, kind and the first paragraph of its description."""

    name: str
    kind: str  # read-only, changes state, destructive (see `kind_of`)
    summary: str


def kind_of(annotations: Any) -> str:
    """``read-only``, ``destructive`` or ``changes state`` (creates or writes only what it names)."""
    if annotations is not None and annotations.read_only_hint:
        return "read-only"
    return "destructive" if annotations is not None and annotations.destructive_hint else "changes state"


ARGUMENT_RULES = (
    "Arguments: one left out (or null) takes its value from the configuration above; an empty string is "
    f"refused; text is limited to {DEFAULT_MAX_STRING:,} characters and lists to {DEFAULT_MAX_ITEMS} items "
    "unless the tool's schema says otherwise; unknown arguments are refused."
)


class HelpResult(ToolResult):
    """Configuration (no secrets), where the project came from, any configuration error, every tool."""

    server: str
    configuration_errors: list[str] = []
    read_only_mode: bool
    project: str
    project_source: str
    configuration: dict[str, Any]
    notices: list[str]
    tools: list[ToolSummary]

    def headline(self) -> str:
        if self.configuration_errors:
            more = len(self.configuration_errors) - 1
            return f"CONFIGURATION ERROR ({self.server}): {self.configuration_errors[0]}" + (
                f" (and {more} more below)" if more else ""
            )
        mode = " (read-only mode: tools that change the cloud are hidden)" if self.read_only_mode else ""
        project = f"project {self.project}" if self.project else "no project"
        return f"{self.server}: {len(self.tools)} tools{mode}; {project} (from {self.project_source})"

    def render_text(self) -> str:
        lines = [self.headline(), ""]
        if self.configuration_errors:
            lines += ["Invalid settings (the server started anyway; tools that need them refuse):"]
            lines += [f"  - {e}" for e in self.configuration_errors] + [""]
            mode = " (read-only mode)" if self.read_only_mode else ""
            lines += [f"{self.server}: {len(self.tools)} tools{mode}", ""]
        lines += ["Configuration:", f"  project: {self.project or '(none)'} (from {self.project_source})"]
        lines += [f"  {k}: {v}" for k, v in self.configuration.items() if v not in (None, "")]
        if self.notices:
            lines += ["", "Notices:"] + [f"  - {n}" for n in self.notices]
        lines += ["", ARGUMENT_RULES]
        lines += ["", "Tools (kind: read-only never changes anything; changes state; DESTRUCTIVE):"]
        for t in self.tools:
            flag = t.kind.upper() if t.kind == "destructive" else t.kind
            lines.append(f"  {t.name} [{flag}]: {t.summary}")
        return "\n".join(lines)


def _first_paragraph(text: str | None) -> str:
    return (text or "").strip().split("\n\n")[0].replace("\n", " ")


def summarize_tools(tools: list[Any]) -> list[ToolSummary]:
    """``mcp_types.Tool`` list -> `ToolSummary` list, in registration order."""
    return [
        ToolSummary(name=t.name, kind=kind_of(t.annotations), summary=_first_paragraph(t.description))
        for t in tools
    ]


def build_help(settings: Settings, tools: list[Any]) -> HelpResult:
    """The `get_help` answer: configuration errors first, the settings (secrets reduced to set / not set),
    where the project came from, and the tool list."""
    configuration = settings.public_summary()
    errors = configuration.pop("configuration_errors", [])
    project = configuration.pop("project", "")
    source = configuration.pop("project_source", "(invalid)")
    return HelpResult(
        server=settings.server_name,
        configuration_errors=errors,
        read_only_mode=settings.read_only,
        project=project if not project.startswith("(invalid") else "",
        project_source=source if not project.startswith("(invalid") else project,
        configuration=configuration,
        notices=list(settings.notices),
        tools=summarize_tools(tools),
    )


def snapshot(tools: list[Any]) -> dict[str, Any]:
    """Names, input schemas and annotations: the contract a change must not alter unreviewed."""
    return {
        t.name: {
            "input_schema": t.input_schema,
            "annotations": t.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            if t.annotations
            else None,
        }
        for t in sorted(tools, key=lambda t: t.name)
    }


def _schema_type(prop: dict[str, Any]) -> str:
    if "type" in prop:
        return str(prop["type"])
    if "anyOf" in prop:
        return " | ".join(_schema_type(p) for p in prop["anyOf"])
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "enum" in prop:
        return "enum"
    return "any"


README_START = "<!-- tools:start (generated by `make tools`) -->"
README_END = "<!-- tools:end -->"


def render_table(tools: list[Any]) -> list[str]:
    """Markdown table lines: tool, kind (read-only / changes state / destructive), one-line summary."""
    lines = ["| tool | kind | summary |", "|---|---|---|"]
    for s in summarize_tools(tools):
        lines.append(f"| `{s.name}` | {s.kind} | {s.summary.replace('|', '/')} |")
    return lines


def splice_readme(readme: str, tools: list[Any]) -> str:
    """README text with the tool table between `README_START` and `README_END` replaced.

    Raises:
        ValueError: the markers are missing.
    """
    head, sep, rest = readme.partition(README_START)
    _, sep2, tail = rest.partition(README_END)
    if not sep or not sep2:
        raise ValueError(f"README.md lacks the {README_START!r} ... {README_END!r} markers")
    return "\n".join([head + README_START, *render_table(tools), README_END]) + tail


def render_markdown(tools: list[Any], details: dict[str, str] | None = None) -> str:
    """GemmaTools.md: a table of tools, then each tool's description, its long explanation (``details``,
    by tool name: what hosts are not sent on every turn) and its arguments."""
    lines = [
        "# tpu-devops tools",
        "",
        "Generated from the server's `list_tools()` by `make tools`; do not edit by hand.",
        "",
        *render_table(tools),
    ]
    for t in tools:
        a = t.annotations
        lines += ["", f"## `{t.name}`", ""]
        title = t.title or (a.title if a else None)
        if title:
            lines += [f"**{title}**", ""]
        lines += [(t.description or "").strip(), ""]
        if details and details.get(t.name):
            lines += [details[t.name], ""]
        lines.append(
            f"Annotations: readOnly={a.read_only_hint}, destructive={a.destructive_hint}, "
            f"idempotent={a.idempotent_hint}, openWorld={a.open_world_hint}"
        )
        props = (t.input_schema or {}).get("properties", {})
        required = set((t.input_schema or {}).get("required", []))
        if props:
            lines += ["", "| argument | type | required | default | description |", "|---|---|---|---|---|"]
            for name, prop in props.items():
                default = json.dumps(prop["default"]) if "default" in prop else ""
                desc = (prop.get("description") or "").replace("|", "/").replace("\n", " ")
                lines.append(
                    f"| `{name}` | {_schema_type(prop)} | {'yes' if name in required else 'no'} | {default} | {desc} |"
                )
    return "\n".join(lines) + "\n"
