"""A long log's tail, where the failure is, is never dropped: a capped read keeps the newest entries in
every format, and a read that stopped early never says "No failure" without saying what it did not read.

The log is 21,171 real fixture lines with the OOM at the end (`tests.long_logs`), read by the real
`FileSource`, `summarize_logs`, `diagnose_vllm_boot` and the analyst (no model: its deterministic answer).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.fakes.openai_server import closed_port_url
from tests.long_logs import (
    OOM_LINES,
    TOTAL_LINES,
    as_entries,
    failure_at_the_start,
    oom_at_the_end,
    oom_lines,
    write_json_array,
    write_json_lines,
)
from tpu_devops.config import load_settings
from tpu_devops.logs.analyst import analyze
from tpu_devops.logs.boot import diagnose_vllm_boot
from tpu_devops.logs.evidence import summarize_logs, summarize_source
from tpu_devops.logs.sources import FileSource, line_number_at, tail_start

FIRST_OOM_LINE = TOTAL_LINES - 1168 + OOM_LINES[0]  # 21,050


def _settings(tmp_path: Path, url: str = ""):
    return load_settings(
        tmp_path / "none.env",
        environ={
            "TPU_DEVOPS_FILE_ROOTS": str(tmp_path),
            "VLLM_URL": url,
            "TPU_DEVOPS_STATE_DIR": str(tmp_path),
        },
    )


def _found_the_oom(result) -> None:
    assert result.root_cause is not None, result.headline()
    assert result.root_cause.signature == "program-allocation-oom", result.headline()


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"newline": "\r\n"},
        {"prefix_stamps": True},
        {"final_newline": False},
    ],
    ids=["docker-logs", "crlf", "docker-timestamps", "no-final-newline"],
)
def test_the_default_cap_reads_the_newest_lines_and_finds_the_oom_at_the_end(
    tmp_path: Path, shape: dict
) -> None:
    path = oom_at_the_end(tmp_path / "vllm.log", **shape)
    result = summarize_logs(_settings(tmp_path), path=str(path))
    _found_the_oom(result)
    assert result.root_cause.insert_ids[0] == f"line-{FIRST_OOM_LINE}"
    assert result.entries == 20_000 and not result.read_complete
    note = next(n for n in result.notices if "not read" in n)
    assert "lines 1-1,171 (the oldest) not read" in note and "max_entries=21171" in note


@pytest.mark.parametrize("cap", [125, 500, 5_000])
def test_a_smaller_cap_still_reads_the_end(tmp_path: Path, cap: int) -> None:
    path = oom_at_the_end(tmp_path / "vllm.log")
    result = summarize_logs(_settings(tmp_path), path=str(path), max_entries=cap)
    _found_the_oom(result)
    assert f"lines 1-{TOTAL_LINES - cap:,} (the oldest) not read" in " ".join(result.notices)


def test_a_cap_that_covers_the_file_reads_it_all(tmp_path: Path) -> None:
    path = oom_at_the_end(tmp_path / "vllm.log")
    result = summarize_logs(_settings(tmp_path), path=str(path), max_entries=TOTAL_LINES)
    _found_the_oom(result)
    assert result.read_complete and result.entries == TOTAL_LINES
    assert not any("not read" in n for n in result.notices)


def test_a_read_that_missed_the_start_never_says_no_failure_plainly(tmp_path: Path) -> None:
    path = failure_at_the_start(tmp_path / "vllm.log")
    result = summarize_logs(_settings(tmp_path), path=str(path))
    headline = result.headline()
    if result.root_cause is None:
        assert headline.startswith("No failure in the 20,000 entries read, but the read stopped early")
        assert "lines 1-1,171 (the oldest) not read" in headline and "max_entries=21171" in headline
    assert not result.read_complete and "No failure after the last milestone" not in headline
    whole = summarize_logs(_settings(tmp_path), path=str(path), max_entries=TOTAL_LINES)
    _found_the_oom(whole)


@pytest.mark.parametrize("writer", [write_json_lines, write_json_array], ids=["json-lines", "json-array"])
def test_an_oldest_first_export_keeps_its_newest_entries(tmp_path: Path, writer) -> None:
    path = writer(tmp_path / "export.json", as_entries(oom_lines()))
    result = summarize_logs(_settings(tmp_path), path=str(path))
    _found_the_oom(result)
    assert "entries 1-1,171 (the oldest) not read" in " ".join(result.notices)


def test_a_newest_first_export_reads_its_head_as_gcloud_writes_it(tmp_path: Path) -> None:
    entries = as_entries(oom_lines())
    entries.reverse()  # gcloud logging read: newest first
    path = write_json_array(tmp_path / "export.json", entries)
    result = summarize_logs(_settings(tmp_path), path=str(path))
    _found_the_oom(result)
    assert "the entries after the first 20,000 (the oldest, in this newest-first file)" in " ".join(
        result.notices
    )


def test_diagnose_vllm_boot_reads_the_long_log(tmp_path: Path) -> None:
    path = oom_at_the_end(tmp_path / "vllm.log")
    diagnosis = diagnose_vllm_boot(path=str(path), settings=_settings(tmp_path))
    text = diagnosis.render_text()
    assert "RuntimeProgramAllocationFailure" in text or "compiled program" in text, text[:500]
    assert "0.92" in text


@pytest.mark.anyio
async def test_the_analyst_reads_the_long_log_right_without_a_model(tmp_path: Path) -> None:
    path = oom_at_the_end(tmp_path / "vllm.log")
    result = await analyze(
        "Why did it fail?",
        FileSource(str(path), max_entries=20_000),
        settings=_settings(tmp_path, closed_port_url()),
    )
    assert result.root_cause is not None and result.root_cause.signature == "program-allocation-oom"
    assert f"line-{FIRST_OOM_LINE}" in result.answer
    assert any("lines 1-1,171 (the oldest) not read" in n for n in result.notices)


@pytest.mark.parametrize(
    ("text", "keep", "start"),
    [
        (b"a\nb\nc\n", 2, 2),
        (b"a\nb\nc", 2, 2),
        (b"a\n\n\nb\n\nc\n\n", 2, 4),
        (b"a\r\nb\r\nc\r\n", 1, 6),
        (b"only\n", 1, None),
        (b"a\nb\n", 5, None),
        (b"\n\n  \n", 1, None),
    ],
)
def test_tail_start_finds_where_the_last_lines_begin(text: bytes, keep: int, start: int | None) -> None:
    handle = io.BytesIO(text)
    assert tail_start(handle, keep) == start


def test_tail_start_across_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from tpu_devops.logs import sources

    monkeypatch.setattr(sources, "TAIL_BLOCK_BYTES", 7)  # lines cross every block boundary
    lines = [f"line {i} " + "x" * (i % 11) for i in range(1, 200)]
    data = ("\n".join(lines) + "\n").encode()
    handle = io.BytesIO(data)
    offset = tail_start(handle, 50)
    assert offset is not None and data[offset:].decode().split("\n")[0] == lines[-50]
    assert line_number_at(handle, offset) == len(lines) - 49


def test_the_file_is_not_parsed_before_its_tail(tmp_path: Path) -> None:
    # Every head line holds a token the redactor would count if the line were ever parsed.
    path = tmp_path / "vllm.log"
    lines = oom_lines()
    head = "export HF_TOKEN=hf_" + "PlantedSecretToken0123456789abcdefXYZ" + "\n"
    path.write_bytes(head.encode() * 5000 + ("\n".join(lines) + "\n").encode())
    source = FileSource(str(path), max_entries=1000)
    records = [r for page in source.pages() for r in page]
    assert len(records) == 1000 and source.redactor.notice() is None
    assert records[0].insert_id == f"line-{5000 + TOTAL_LINES - 999}"
    assert summarize_source(FileSource(str(path), max_entries=1000)).root_cause is not None
