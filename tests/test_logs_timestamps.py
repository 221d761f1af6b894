"""Leading timestamps of plain-text log lines (`tpu_devops.logs.timestamps`), syslog's yearless stamp
included, read through `FileSource` and `summarize_logs` over the real MCP client."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.mcp_session import mcp_client
from tpu_devops.logs.sources import FileSource
from tpu_devops.logs.timestamps import leading_timestamp

DATA = Path(__file__).parent / "data" / "logs"
SYSLOG = DATA / "syslog-startup-pull-denied.log"  # a GCE VM's /var/log/syslog around a failed pull
REF = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "stamp", "rest"),
    [
        # BSD syslog (RFC 3164) as /var/log/syslog and journalctl's short output write it
        ("Nov 30 21:04:05 host program[123]: started", "2026-11-30T21:04:05Z", "host program[123]: started"),
        ("Nov  3 01:02:03 host kernel: x", "2026-11-03T01:02:03Z", "host kernel: x"),  # day padded with a space
        ("<34>Oct 11 22:14:15 mymachine su: 'su root' failed", "2026-10-11T22:14:15Z", "mymachine su: 'su root' failed"),
        ("Nov 30 21:04:05.123456 host app: y", "2026-11-30T21:04:05.123456Z", "host app: y"),
        # no year: the most recent occurrence at or before the reference
        ("Dec 31 23:59:59 host cron[1]: z", "2025-12-31T23:59:59Z", "host cron[1]: z"),
        ("Nov 30 23:00:00 host a: later today", "2025-11-30T23:00:00Z", "host a: later today"),
        ("Feb 29 10:00:00 host a: leap", "2024-02-29T10:00:00Z", "host a: leap"),
        # RFC 5424, journalctl -o short-iso (offset without a colon), Docker --timestamps (nanoseconds kept)
        ("<165>1 2026-10-11T22:14:15.003Z mymachine evntslog - ID47 - hi", "2026-10-11T22:14:15.003Z",
         "mymachine evntslog - ID47 - hi"),
        ("2026-11-30T21:04:05+0000 host sshd[9]: a", "2026-11-30T21:04:05Z", "host sshd[9]: a"),
        ("2026-11-30T22:04:05+01:00 host sshd[9]: b", "2026-11-30T21:04:05Z", "host sshd[9]: b"),
        ("2026-08-07T23:08:35.123456789Z INFO up", "2026-08-07T23:08:35.123456789Z", "INFO up"),
    ],
)  # fmt: skip
def test_leading_stamps_become_rfc3339_utc(line: str, stamp: str, rest: str) -> None:
    assert leading_timestamp(line, REF) == (stamp, rest)


@pytest.mark.parametrize(
    "line",
    [
        "Nov 31 10:00:00 host a: no such day",
        "Novel 30 21:04:05 x",
        "INFO 08-07 23:27:17 [core.py:1] vLLM",
        "",
        "Nov 30",
    ],
)
def test_lines_without_a_stamp_are_left_alone(line: str) -> None:
    assert leading_timestamp(line, REF) is None


def _syslog_copy(tmp_path: Path, mtime: datetime) -> Path:
    path = tmp_path / "syslog"
    path.write_bytes(SYSLOG.read_bytes())
    os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return path


def test_a_syslog_file_takes_the_year_from_its_mtime(tmp_path: Path) -> None:
    # read in January, the November lines are last year's
    path = _syslog_copy(tmp_path, datetime(2027, 1, 2, 8, 0, tzinfo=UTC))
    records = [r for page in FileSource(str(path)).pages() for r in page]
    assert [r.timestamp for r in records][:2] == ["2026-11-30T21:03:58Z", "2026-11-30T21:04:01Z"]
    assert all(not r.message.startswith("Nov") for r in records)


@pytest.mark.anyio
async def test_summarize_logs_shows_when_a_syslog_failure_happened(tmp_path: Path) -> None:
    path = _syslog_copy(tmp_path, REF)
    env = {"TPU_DEVOPS_STATE_DIR": str(tmp_path), "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env")}
    async with mcp_client(**env) as client:
        result = await client.call_tool("summarize_logs", {"path": str(path)})
    text, data = result.content[0].text, result.structured_content
    assert not result.is_error, text
    assert data["root_cause"]["signature"] == "image-pull-failed", data["root_cause"]
    assert data["root_cause"]["first_seen"] == "2026-11-30T21:04:05Z"
    assert (data["first_seen"], data["last_seen"]) == ("2026-11-30T21:03:58Z", "2026-11-30T21:04:06Z")
    assert "first ?" not in text and "first 2026-11-30T21:04:05Z" in text.splitlines()[0], text
    assert "WINDOW 2026-11-30T21:03:58Z .. 2026-11-30T21:04:06Z" in text
