"""GemmaTools.md, README's tool table and the tool snapshot are generated from list_tools(); stale
copies fail here."""

from __future__ import annotations

import json

from scripts.gen_tools import generated
from tests.mcp_session import ROOT


def test_gemmatools_md_and_readme_table_are_current() -> None:
    readme = (ROOT / "README.md").read_text()
    texts = generated(readme)
    assert (ROOT / "GemmaTools.md").read_text() == texts["markdown"], (
        "GemmaTools.md is stale: run `make tools` and commit the result"
    )
    assert readme == texts["readme"], "README.md's tool table is stale: run `make tools`"


def test_every_toolset_snapshot_has_no_unreviewed_changes() -> None:
    snapshots = generated()["snapshots"]
    folder = ROOT / "tests" / "data" / "toolsets"
    assert sorted(p.stem for p in folder.glob("*.json")) == sorted(snapshots), "run `make snapshot`"
    for name, snapshot in snapshots.items():
        current = (folder / f"{name}.json").read_text()
        if current != snapshot:
            old, new = json.loads(current), json.loads(snapshot)
            changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            raise AssertionError(
                f"toolset {name}: tool names/schemas/annotations changed for {changed}: review, then run "
                "`make snapshot`"
            )
