"""Regenerate GemmaTools.md, README's tool table and/or the per-toolset tool snapshots from the server's
list_tools() (every toolset enabled).

Usage: python scripts/gen_tools.py [--markdown PATH] [--readme PATH] [--snapshots DIR] [--check]
With --check nothing is written; the exit code is 1 if a file is stale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def generated(readme: str | None = None) -> dict[str, Any]:
    """Texts for the full tool set (every toolset, read-only mode off): ``markdown`` (GemmaTools.md),
    ``snapshots`` (toolset name -> JSON text), and ``readme`` (the given README text with its tool table
    replaced) when ``readme`` is given."""
    sys.path.insert(0, str(ROOT))
    from server import TOOLSETS
    from tpu_devops.host import tooldocs
    from tpu_devops.host.registration import Registrar

    # Documents are generated from schemas derived now, whatever this process's settings say.
    every = Registrar(TOOLSETS, enabled=tuple(ts.name for ts in TOOLSETS), read_only=False, schema_cache=None)
    tools = asyncio.run(every.build_server(name="tpu-devops").list_tools())
    toolset_of = {name: ts.name for ts in TOOLSETS for name in ts.tools}
    out: dict[str, Any] = {
        "markdown": tooldocs.render_markdown(tools, every.details(), toolset_of),
        "snapshots": {
            ts.name: json.dumps(
                tooldocs.snapshot([t for t in tools if t.name in ts.tools]), indent=2, sort_keys=True
            )
            + "\n"
            for ts in TOOLSETS
        },
    }
    if readme is not None:
        out["readme"] = tooldocs.splice_readme(readme, tools, toolset_of)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--readme", type=Path)
    parser.add_argument("--snapshots", type=Path, help="directory of <toolset>.json snapshots")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    texts = generated(args.readme.read_text() if args.readme else None)
    stale = False
    targets = [(args.markdown, texts["markdown"]), (args.readme, texts.get("readme"))]
    if args.snapshots is not None:
        targets += [(args.snapshots / f"{name}.json", text) for name, text in texts["snapshots"].items()]
    for path, text in targets:
        if path is None:
            continue
        if args.check:
            if not path.exists() or path.read_text() != text:
                print(f"{path} is stale: run make tools / make snapshot and review the diff", file=sys.stderr)
                stale = True
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
