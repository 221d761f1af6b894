"""The serving package stays small modules with one job each, importing each other one way only: every
import counts, also those made inside a function (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

SERVING = ROOT / "tpu_devops" / "serving"


def _imports(path: Path) -> set[str]:
    """The ``tpu_devops.serving.<module>`` names ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("tpu_devops.serving."):
                found.add(node.module.split(".")[2])
            elif node.module == "tpu_devops.serving":
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("tpu_devops.serving."))
    return found - {path.stem}


def test_no_import_cycle_in_the_serving_package() -> None:
    graph = {p.stem: _imports(p) for p in SERVING.glob("*.py") if p.stem != "__init__"}
    assert graph["endpoint"].isdisjoint({"chat", "resolve"}), graph["endpoint"]

    def cycle_from(start: str, node: str, path: list[str]) -> list[str] | None:
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, nxt]
            if nxt not in path and (found := cycle_from(start, nxt, [*path, nxt])):
                return found
        return None

    for module in graph:
        assert cycle_from(module, module, [module]) is None, " -> ".join(
            cycle_from(module, module, [module]) or []
        )


def test_chat_is_split_into_small_modules() -> None:
    for name in ("errors", "resolve", "models", "stream", "chat"):
        lines = len((SERVING / f"{name}.py").read_text().splitlines())
        assert lines < 600, f"serving/{name}.py has {lines} lines"
