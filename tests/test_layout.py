"""The layout keeps its shape: server.py is the list of toolsets, the host kit imports no domain module,
data flows one way between the layers, and no module imports itself back through others.

The contracts live in pyproject.toml (``[tool.importlinter]``) and are checked here with import-linter's
own engine; the module-level cycle check reads every import statement (lazy ones too: a lazy import that
closes a cycle is still a cycle in the design, it only fails later).
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_server_py_reads_as_the_list_of_toolsets() -> None:
    text = (ROOT / "server.py").read_text()
    assert len(text.splitlines()) <= 300
    tree = ast.parse(text)
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    import importlib

    from server import TOOLSETS

    files = {p.stem for p in (ROOT / "tpu_devops" / "tools").glob("*.py")} - {"__init__", "args", "helpdoc"}
    declared = [importlib.import_module(f"tpu_devops.tools.{stem}").toolset for stem in sorted(files)]
    assert sorted(ts.name for ts in declared) == sorted(
        ts.name for ts in TOOLSETS
    )  # one per file, all listed


def test_import_contracts_hold() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and out.stdout.count("KEPT") >= 3


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``tpu_devops`` modules it imports (``from a import b`` counts ``a.b`` when that is a
    module); a package's own ``__init__`` is not counted as a dependency (its submodules load lazily)."""
    files = {_module_name(p): p for p in (ROOT / "tpu_devops").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            deps.update(t for t in targets if t in files and t != name and files[t].name != "__init__.py")
        graph[name] = deps
    return graph


def test_no_module_imports_itself_back() -> None:
    graph = import_graph()
    assert len(graph) > 100
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        raise AssertionError(f"import cycle: {' -> '.join(err.args[1])}") from None


def test_the_graph_sees_lazy_imports() -> None:
    """A function-level import is an edge too (the render view adds the lint notes lazily or not: either way
    ``deployment -> lint`` is in the graph), so a cycle closed by a lazy import is caught."""
    graph = import_graph()
    assert "tpu_devops.planning.lint" in graph["tpu_devops.planning.deployment"]
    assert "tpu_devops.planning.startup" in graph["tpu_devops.planning.lint"]  # lint_notes renders lazily
