"""Regenerate GemmaTools.md, README's tool table and/or the tool snapshot from the server's list_tools().

Usage: python scripts/gen_tools.py [--markdown PATH] [--readme PATH] [--snapshot PATH] [--check]
With --check nothing is written; the exit code is 1 if a file is stale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generated(readme: str | None = None) -> dict[str, str]:
    """Texts for the full tool set (read-only mode off): ``markdown`` (GemmaTools.md), ``snapshot``
    (JSON), and ``readme`` (the given README text with its tool table replaced) when ``readme`` is given."""
    os.environ["TPU_DEVOPS_READ_ONLY"] = "0"
    os.environ["TPU_DEVOPS_CACHE_DIR"] = "off"  # documents are generated from schemas derived now
    sys.path.insert(0, str(ROOT))
    import server
    from tpu_devops.host import tooldocs

    tools = asyncio.run(server.mcp.list_tools())
    out = {
        "markdown": tooldocs.render_markdown(tools, server.tools.details()),
        "snapshot": json.dumps(tooldocs.snapshot(tools), indent=2, sort_keys=True) + "\n",
    }
    if readme is not None:
        out["readme"] = tooldocs.splice_readme(readme, tools)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--readme", type=Path)
    parser.add_argument("--snapshot", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    texts = generated(args.readme.read_text() if args.readme else None)
    stale = False
    for path, key in ((args.markdown, "markdown"), (args.readme, "readme"), (args.snapshot, "snapshot")):
        if path is None:
            continue
        if args.check:
            if not path.exists() or path.read_text() != texts[key]:
                print(f"{path} is stale: run make tools / make snapshot and review the diff", file=sys.stderr)
                stale = True
        else:
            path.write_text(texts[key])
            print(f"wrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
