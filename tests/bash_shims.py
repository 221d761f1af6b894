"""Running bash with stand-in commands first on PATH (the harness the shell-script tests share).

A stand-in is a small bash script installed as an executable under ``<workdir>/bin``, which is put
before the real PATH; stand-ins record what they were asked in ``$FAKE_DIR`` (``<workdir>/fake``), a
folder the test reads afterwards. Everything not stood in for (coreutils, sed, python3) is the real one.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ShimRun:
    """One bash run: its ``proc`` (text output) and ``fake``, the folder the stand-ins wrote into."""

    proc: subprocess.CompletedProcess[str]
    fake: Path


def install_shims(bin_dir: Path, shims: Mapping[str, str]) -> None:
    """Write each ``name -> script text`` into ``bin_dir`` as an executable file (``bin_dir`` is created)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in shims.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def run_bash(
    args: list[str], workdir: Path, shims: Mapping[str, str], env: Mapping[str, str] | None = None
) -> ShimRun:
    """``bash ARGS`` with ``shims`` first on PATH, ``FAKE_DIR`` set, plus ``env``; nothing else inherited.

    ``workdir`` holds ``bin/`` (the stand-ins) and ``fake/`` (their records); both are created and must
    not exist yet, so two runs in one test need two workdirs. Times out after 60 s.
    """
    bin_dir, fake = workdir / "bin", workdir / "fake"
    fake.mkdir(parents=True)
    install_shims(bin_dir, shims)
    full_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(fake), **(env or {})}
    proc = subprocess.run(["bash", *args], env=full_env, capture_output=True, text=True, timeout=60)
    return ShimRun(proc, fake)
