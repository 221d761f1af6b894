"""``python -m tests.audit [--quick] [--strict]``: run the security audit and print its figures.

``--quick``: the plan ``make test`` runs (the unknown key only from the fuzz plan, no server races).
``--strict``: exit 1 when a figure misses its goal (the default reports and exits 0).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

from tests.audit.run import report, run_audit


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.audit", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick plan of make test")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a figure misses its goal")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tpu-devops-audit-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        figures = anyio.run(lambda: run_audit(state, full=not args.quick))
    lines = report(figures)
    print("\n".join(lines))
    print(f"audit finished in {time.perf_counter() - started:.0f} s")
    missed = [line for line in lines if line.startswith("NO ")]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
