"""The code base stays ruff-clean (lint and format), as DESIGN §5 asks; CI enforces it through here."""

from __future__ import annotations

import subprocess
import sys

from tests.mcp_session import ROOT


def test_ruff_check_and_format_are_clean() -> None:
    for args in (["check", "."], ["format", "--check", "."]):
        out = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, (
            f"ruff {' '.join(args)} failed (run `make format`):\n{out.stdout}{out.stderr}"
        )
