"""The deterministic part of the analyst evaluation (scripts/eval_analyst.py) runs in CI."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("eval_analyst", ROOT / "scripts" / "eval_analyst.py")
assert spec and spec.loader
eval_analyst = importlib.util.module_from_spec(spec)
spec.loader.exec_module(eval_analyst)
CASES = eval_analyst.load_cases()


def test_the_set_has_failures_and_a_healthy_boot() -> None:
    assert len(CASES) >= 3
    assert all(c["root_cause_insert_ids"] for c in CASES if c["root_cause_regex"])
    assert any(not c["root_cause_regex"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_root_cause_first_and_cited_within_budget(case: dict) -> None:
    row = eval_analyst.deterministic(case)
    assert row["root_cause_first"], row
    assert row["cited"], row
    assert row["tokens"] <= 6000


def test_converted_exports_look_like_cloud_logging() -> None:
    log = ROOT / "tests" / "data" / "vllm-logs" / "v5e1-e2b-qwix-int8-abstract-fail.log"
    lines = [x for x in log.read_bytes().decode().split("\n") if x.strip()]
    entries = eval_analyst.convert(log)
    docker = [e for e in entries if e["logName"].endswith("/gcplogs-docker-driver")]
    startup = [e for e in entries if e["logName"].endswith("/google_metadata_script_runner")]
    assert len(startup) == 3 and len(docker) == len(lines)
    assert all("message" in e["jsonPayload"] for e in docker)
    stamps = [e["timestamp"] for e in entries]
    assert stamps == sorted(stamps, reverse=True) and len({e["insertId"] for e in entries}) == len(entries)
