"""Long logs built from the real fixture lines, with the failure where a capped read must still find it.

`oom_at_the_end`: 20,003 polls of ``GET /v1/models`` (the last line of the healthy boot log
`v6e1-e2b-boot-ok.log`: uvicorn's access line, with no timestamp of its own), then the v5e boot that
dies of ``RuntimeProgramAllocationFailure`` (`v5e1-e2b-util095-program-oom.log`, 1,168 lines): 21,171
lines, the failure in the last 125. The first 20,000 lines (the default ``max_entries``) hold no
failure.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import FIXTURES

VLLM_LOGS = FIXTURES / "vllm-logs"
BOOT_OK = VLLM_LOGS / "v6e1-e2b-boot-ok.log"
OOM = VLLM_LOGS / "v5e1-e2b-util095-program-oom.log"
TOTAL_LINES = 21_171
OOM_LINES = (1047, 1099)  # the RuntimeProgramAllocationFailure lines within the OOM log


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\n")[:-1]  # the fixtures end with a newline


def oom_lines() -> list[str]:
    """The 21,171 lines, oldest first."""
    oom = _lines(OOM)
    return [poll_line()] * (TOTAL_LINES - len(oom)) + oom


def poll_line() -> str:
    """``(APIServer pid=1) INFO:     127.0.0.1:36518 - "GET /v1/models HTTP/1.1" 200 OK``, as logged."""
    poll = _lines(BOOT_OK)[-1]
    assert "GET /v1/models" in poll
    return poll


def oom_at_the_end(
    path: Path, *, newline: str = "\n", prefix_stamps: bool = False, final_newline: bool = True
) -> Path:
    """Write the long log to ``path`` as ``docker logs`` would (``prefix_stamps``: ``docker logs
    --timestamps``; ``newline``: ``\\r\\n`` for a file that went through Windows)."""
    lines = oom_lines()
    if prefix_stamps:
        lines = [
            f"2026-08-07T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}.{i % 1000:03d}000000Z {x}"
            for i, x in enumerate(lines)
        ]
    text = newline.join(lines) + (newline if final_newline else "")
    path.write_bytes(text.encode())
    return path


def failure_at_the_start(path: Path) -> Path:
    """The OOM boot first, then the polls: a read of the newest 20,000 lines misses the failure (and
    must say it did not read everything)."""
    oom = _lines(OOM)
    lines = oom + [poll_line()] * (TOTAL_LINES - len(oom))
    path.write_bytes(("\n".join(lines) + "\n").encode())
    return path


def as_entries(lines: list[str]) -> list[dict]:
    """The lines as Cloud Logging entries (Docker gcplogs driver), oldest first, one second apart."""
    assert len(lines) < 86_400
    out = []
    for i, line in enumerate(lines, 1):
        out.append(
            {
                "insertId": f"e{i:06d}",
                "timestamp": f"2026-08-07T{i // 3600:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z",
                "severity": "ERROR" if " ERROR " in line else "INFO",
                "logName": "projects/my-project/logs/gcplogs-docker-driver",
                "jsonPayload": {"message": line},
            }
        )
    return out


def write_json_lines(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def write_json_array(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps(entries))
    return path
