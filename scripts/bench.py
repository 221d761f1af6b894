"""`make bench`: every benchmark of the project, each printed as ratios against a baseline measured
in the same process. A module is listed here once its area exists."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCHMARKS = [
    ("startup", "scripts.bench_startup"),
    ("credentials", "scripts.bench_credentials"),
    ("planning", "scripts.bench_planning"),
    ("provisioning", "scripts.bench_provisioning"),
    ("serving", "scripts.bench_serving"),
    ("scaleout", "scripts.bench_scaleout"),
    ("logs", "scripts.bench_logs"),
    ("tools", "scripts.bench_tools"),
    ("hosts", "scripts.bench_hosts"),
    ("warmboot", "scripts.bench_warmboot"),
]


def main() -> int:
    selected = set(sys.argv[1:])
    for name, module in BENCHMARKS:
        if selected and name not in selected:
            continue
        print(f"== {name}", flush=True)
        for line in importlib.import_module(module).run():
            print(f"   {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
