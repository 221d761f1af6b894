"""The `get_help` answer: configuration errors first, the settings (no secrets), where the project came
from, every toolset (enabled or not, with how to enable it) and every tool this server serves."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tpu_devops.config import Settings
from tpu_devops.host.registration import registrar_of
from tpu_devops.host.results import ToolResult
from tpu_devops.host.schemas import DEFAULT_MAX_ITEMS, DEFAULT_MAX_STRING
from tpu_devops.host.tooldocs import ToolSummary, summarize_tools
from tpu_devops.host.toolsets import enable_hint

ARGUMENT_RULES = (
    "Arguments: one left out (or null) takes its value from the configuration above; an empty string is "
    f"refused; text is limited to {DEFAULT_MAX_STRING:,} characters and lists to {DEFAULT_MAX_ITEMS} items "
    "unless the tool's schema says otherwise; unknown arguments are refused."
)


class ToolsetSummary(BaseModel):
    """One toolset: its name, whether it is enabled, what it is for, its tools, and how to enable it."""

    name: str
    enabled: bool
    summary: str
    tools: list[str]
    enable: str | None = None  # how to enable it (only when it is not)


class HelpResult(ToolResult):
    """Configuration (no secrets), where the project came from, any configuration error, every toolset and
    every tool served."""

    server: str
    configuration_errors: list[str] = []
    read_only_mode: bool
    project: str
    project_source: str
    configuration: dict[str, Any]
    notices: list[str]
    toolsets: list[ToolsetSummary]
    tools: list[ToolSummary]

    def headline(self) -> str:
        if self.configuration_errors:
            more = len(self.configuration_errors) - 1
            return f"CONFIGURATION ERROR ({self.server}): {self.configuration_errors[0]}" + (
                f" (and {more} more below)" if more else ""
            )
        mode = " (read-only mode: tools that change the cloud are hidden)" if self.read_only_mode else ""
        project = (
            f"project {self.project} (from {self.project_source})"
            if self.project
            else f"no project ({self.project_source})"
        )
        enabled = ", ".join(s.name for s in self.toolsets if s.enabled)
        return f"{self.server}: {len(self.tools)} tools in toolsets {enabled}{mode}; {project}"

    def render_text(self) -> str:
        lines = [self.headline(), ""]
        if self.configuration_errors:
            lines += ["Invalid settings (the server started anyway; tools that need them refuse):"]
            lines += [f"  - {e}" for e in self.configuration_errors] + [""]
            mode = " (read-only mode)" if self.read_only_mode else ""
            lines += [f"{self.server}: {len(self.tools)} tools{mode}", ""]
        origin = f"from {self.project_source}" if self.project else self.project_source
        lines += ["Configuration:", f"  project: {self.project or '(none)'} ({origin})"]
        lines += [f"  {k}: {v}" for k, v in self.configuration.items() if v not in (None, "")]
        if self.notices:
            lines += ["", "Notices:"] + [f"  - {n}" for n in self.notices]
        lines += ["", "Toolsets (TPU_DEVOPS_TOOLSETS):"]
        for s in self.toolsets:
            state = "on" if s.enabled else "off"
            lines.append(f"  {s.name} [{state}]: {s.summary}: {', '.join(s.tools)}")
            if s.enable:
                lines.append(f"    to enable: {s.enable}")
        lines += ["", ARGUMENT_RULES]
        lines += ["", "Tools (kind: read-only never changes anything; changes state; DESTRUCTIVE):"]
        for t in self.tools:
            flag = t.kind.upper() if t.kind == "destructive" else t.kind
            lines.append(f"  {t.name} [{flag}]: {t.summary}")
        return "\n".join(lines)


def build_help(settings: Settings, tools: list[Any], server: Any) -> HelpResult:
    """The `get_help` answer for the ``tools`` ``server`` lists (module docstring)."""
    configuration = settings.public_summary()
    errors = configuration.pop("configuration_errors", [])
    project = configuration.pop("project", "")
    source = configuration.pop("project_source", "(invalid)")
    registrar = registrar_of(server)
    toolsets = [
        ToolsetSummary(
            name=s["name"],
            enabled=s["enabled"],
            summary=s["summary"],
            tools=s["tools"],
            enable=None if s["enabled"] else enable_hint(s["name"], registrar.enabled, registrar.defaults),
        )
        for s in registrar.overview()
    ]
    return HelpResult(
        server=settings.server_name,
        configuration_errors=[*errors, *registrar.selection_errors],
        read_only_mode=settings.read_only,
        project=project if not project.startswith("(invalid") else "",
        project_source=source if not project.startswith("(invalid") else project,
        configuration=configuration,
        notices=list(settings.notices),
        toolsets=toolsets,
        tools=summarize_tools(tools),
    )
