"""drain3 mining: masking, per-template statistics and exemplars with insertIds."""

from __future__ import annotations

from tests.conftest import FIXTURES
from tpu_devops.host.redact import Redactor
from tpu_devops.logs.mining import LogMiner, mine
from tpu_devops.logs.sources import FileSource, record_from_entry

EXPORT = FIXTURES / "logs" / "v5e1-util095-export.json"


def _entry(i: int, msg: str, sev: str = "INFO", minute: int = 0) -> dict:
    return {
        "insertId": f"id{i}",
        "timestamp": f"2026-08-07T23:{minute:02d}:{i % 60:02d}Z",
        "severity": sev,
        "textPayload": msg,
    }


def test_numbers_ips_hex_and_times_are_masked_into_one_template() -> None:
    r = Redactor()
    miner = LogMiner()
    msgs = [
        "Loaded shard 3 of 12 in 4.51s from 10.0.0.7 id 9f86d081884c7d65",
        "Loaded shard 4 of 12 in 0.37s from 10.0.0.9 id 2c26b46b68ffc68f",
        "Loaded shard 11 of 12 in 12.1s from 10.0.0.12 id fcde2b2edba56bf4",
    ]
    ids = {miner.add(record_from_entry(_entry(i, m, minute=i), r)) for i, m in enumerate(msgs)}
    result = miner.result()
    assert ids == {"T1"} and len(result.templates) == 1
    t = result.templates[0]
    assert t.count == 3 and "<NUM>" in t.template and "10.0.0" not in t.template
    assert [e.insert_id for e in t.exemplars] == ["id0", "id2"]  # first and latest


def test_statistics_of_the_real_export() -> None:
    result = mine(FileSource(str(EXPORT)).pages())
    assert result.total == 1175 and result.severities["ERROR"] == 165
    by_text = {t.template: t for t in result.templates}
    oom = next(t for text, t in by_text.items() if "RuntimeProgramAllocationFailure" in text)
    assert oom.count == 2 and oom.severity == "ERROR"
    assert {e.insert_id for e in oom.exemplars} == {"3a808ea2a697db", "13736e5d29147d"}
    assert oom.first_seen.startswith("2026-08-07T23:27:17")
    assert result.window_s is not None and 1100 < result.window_s < 1130
    rate = result.rate_per_min(oom)
    assert rate is not None and 0.1 < rate < 0.11
    view = result.view(oom)
    assert view.exemplars[0]["insert_id"] in {"3a808ea2a697db", "13736e5d29147d"}


def test_severity_is_the_highest_seen() -> None:
    r = Redactor()
    miner = LogMiner()
    miner.add(record_from_entry(_entry(1, "disk usage at 91 percent", "WARNING"), r))
    miner.add(record_from_entry(_entry(2, "disk usage at 99 percent", "ERROR"), r))
    (t,) = miner.result().templates
    assert t.severity == "ERROR" and t.severities == {"WARNING": 1, "ERROR": 1}
