"""Tool documentation built from the server's own ``list_tools()``: `get_help`, GemmaTools.md, snapshot.

One source for all three, so the docs cannot drift from what a client actually sees.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from tpu_devops.config import Settings
from tpu_devops.results import ToolResult


class ToolSummary(BaseModel):
    """One tool as a client sees it."""

    name: str
    title: str | None
    summary: str
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    arguments: list[str]


class HelpResult(ToolResult):
    """Configuration (no secrets) and every registered tool."""

    server: str
    read_only_mode: bool
    configuration: dict[str, Any]
    notices: list[str]
    tools: list[ToolSummary]

    def headline(self) -> str:
        mode = " (read-only mode: tools that change the cloud are hidden)" if self.read_only_mode else ""
        return f"{self.server}: {len(self.tools)} tools{mode}"

    def render_text(self) -> str:
        lines = [self.headline(), "", "Configuration:"]
        lines += [f"  {k}: {v}" for k, v in self.configuration.items() if v not in (None, "")]
        if self.notices:
            lines += ["", "Notices:"] + [f"  - {n}" for n in self.notices]
        lines += ["", "Tools:"]
        for t in self.tools:
            flag = "read-only" if t.read_only else ("DESTRUCTIVE" if t.destructive else "changes cloud")
            lines.append(f"  {t.name} [{flag}]: {t.summary}")
        return "\n".join(lines)


def _first_paragraph(text: str | None) -> str:
    return (text or "").strip().split("\n\n")[0].replace("\n", " ")


def summarize_tools(tools: list[Any]) -> list[ToolSummary]:
    """``mcp_types.Tool`` list -> `ToolSummary` list, in registration order."""
    out = []
    for t in tools:
        a = t.annotations
        out.append(
            ToolSummary(
                name=t.name,
                title=t.title,
                summary=_first_paragraph(t.description),
                read_only=bool(a and a.read_only_hint),
                destructive=bool(a and a.destructive_hint),
                idempotent=bool(a and a.idempotent_hint),
                open_world=bool(a and a.open_world_hint),
                arguments=list((t.input_schema or {}).get("properties", {})),
            )
        )
    return out


def build_help(settings: Settings, tools: list[Any]) -> HelpResult:
    """The `get_help` answer: settings (secrets reduced to set/not set) and the tool list."""
    return HelpResult(
        server=settings.server_name,
        read_only_mode=settings.read_only,
        configuration=settings.public_summary(),
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


def render_markdown(tools: list[Any]) -> str:
    """GemmaTools.md: a table of tools, then each tool's description and arguments."""
    lines = [
        "# tpu-devops tools",
        "",
        "Generated from the server's `list_tools()` by `make tools`; do not edit by hand.",
        "",
        "| tool | kind | summary |",
        "|---|---|---|",
    ]
    for s in summarize_tools(tools):
        kind = "read-only" if s.read_only else ("destructive" if s.destructive else "changes cloud")
        lines.append(f"| `{s.name}` | {kind} | {s.summary.replace('|', '/')} |")
    for t in tools:
        a = t.annotations
        lines += ["", f"## `{t.name}`", ""]
        if t.title:
            lines += [f"**{t.title}**", ""]
        lines += [(t.description or "").strip(), ""]
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
