"""Base of every typed tool result: structured content for machines, a readable rendering for people.

`server.py` sends both: the model's JSON as MCP ``structuredContent`` (checked against the tool's
``outputSchema``) and `ToolResult.render_text()` as the text content block that chat clients show.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


def _render_value(value: Any, indent: int, lines: list[str], key: str | None) -> None:
    pad = "  " * indent
    label = f"{key}: " if key is not None else "- "
    if isinstance(value, dict):
        if not value:
            lines.append(f"{pad}{label}{{}}")
            return
        lines.append(f"{pad}{label.rstrip()}" if key is not None else f"{pad}-")
        for k, v in value.items():
            _render_value(v, indent + 1, lines, str(k))
    elif isinstance(value, list):
        if not value:
            lines.append(f"{pad}{label}[]")
            return
        if all(not isinstance(v, dict | list) for v in value) and sum(len(str(v)) for v in value) < 100:
            lines.append(f"{pad}{label}{', '.join(str(v) for v in value)}")
            return
        lines.append(f"{pad}{label.rstrip()}" if key is not None else f"{pad}-")
        for v in value:
            _render_value(v, indent + 1, lines, None)
    elif value is None:
        return
    elif isinstance(value, float):
        # ,.4g switches to 1.437e+04 from 10,000 up: whole-number formatting reads better there
        lines.append(f"{pad}{label}{value:,.4g}" if abs(value) < 1e4 else f"{pad}{label}{value:,.0f}")
    elif isinstance(value, str) and "\n" in value:
        lines.append(f"{pad}{label}|")
        lines.extend(f"{pad}  {line}" for line in value.splitlines())
    else:
        lines.append(f"{pad}{label}{value}")


def render_mapping(data: dict[str, Any], title: str | None = None) -> str:
    """Indented ``key: value`` text of a JSON-like mapping; ``None`` fields are left out."""
    lines: list[str] = [title] if title else []
    for k, v in data.items():
        _render_value(v, 0, lines, k)
    return "\n".join(lines)


class ToolResult(BaseModel):
    """A tool's typed result. Override `headline` or `render_text` for a better human view."""

    model_config = ConfigDict(extra="forbid")

    def headline(self) -> str | None:
        """One line that answers the question the tool was asked (None: no headline)."""
        return None

    def render_text(self) -> str:
        """Readable text shown by chat clients: the headline, then the fields."""
        return render_mapping(self.model_dump(mode="json"), self.headline())
