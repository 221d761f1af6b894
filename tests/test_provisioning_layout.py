"""The provisioning package's data flows down only: no import cycle through its modules or `quota`.

Imports are read from the source (module level and inside functions alike: a lazy import that closes
a cycle is still a cycle in the design, it only fails later), across every `tpu_devops` module, so a
cycle that passes through another module (``queued -> pricing -> queued``) is caught too.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERED = ("tpu_devops.provisioning", "tpu_devops.provisioning.quota")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path, package: str = "tpu_devops") -> dict[str, set[str]]:
    """Module -> the `package` modules it imports (``from a import b`` counts ``a.b`` when that is a module)."""
    files = {_module_name(p, root): p for p in (root / package).rglob("*.py")}
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
            # the package __init__ of a submodule import is not a dependency of interest here (lazy)
            deps.update(t for t in targets if t in files and t != name and files[t].name != "__init__.py")
        graph[name] = deps
    return graph


def cycle_through(graph: dict[str, set[str]], prefixes: tuple[str, ...]) -> list[str] | None:
    """A cycle of ``graph`` restricted to the modules reachable with a layered module on it, or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        cycle = list(err.args[1])
        if any(m.startswith(prefixes) for m in cycle):
            return cycle
        # a cycle elsewhere: drop one of its edges and look again for one through our modules
        pruned = {k: set(v) for k, v in graph.items()}
        pruned[cycle[0]].discard(cycle[1])
        pruned[cycle[1]].discard(cycle[0])
        return cycle_through(pruned, prefixes)
    return None


def test_no_import_cycle_through_the_provisioning_package() -> None:
    graph = import_graph(ROOT)
    assert {m for m in graph if m.startswith(LAYERED)} >= {
        "tpu_devops.provisioning.requests",
        "tpu_devops.provisioning.failures",
        "tpu_devops.provisioning.queued",
        "tpu_devops.provisioning.sweep",
        "tpu_devops.provisioning.store",
        "tpu_devops.provisioning.quota",
    }
    assert cycle_through(graph, LAYERED) is None


@pytest.mark.parametrize("lazy", [False, True])
def test_the_cycle_check_sees_a_cycle(tmp_path: Path, lazy: bool) -> None:
    pkg = tmp_path / "tpu_devops" / "provisioning"
    pkg.mkdir(parents=True)
    (tmp_path / "tpu_devops" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "queued.py").write_text("from tpu_devops.provisioning.store import open_store\n")
    body = (
        "def f():\n    from tpu_devops.provisioning import queued\n"
        if lazy
        else "import tpu_devops.provisioning.queued\n"
    )
    (pkg / "store.py").write_text(body)
    cycle = cycle_through(import_graph(tmp_path), LAYERED)
    assert cycle is not None and set(cycle) == {
        "tpu_devops.provisioning.queued",
        "tpu_devops.provisioning.store",
    }
