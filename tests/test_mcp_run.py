"""mcp-run.sh: resolves its own directory (any cwd, through a symlink) and exports tpu.env values only
where the variable is unset. A tiny fake interpreter prints the environment it was exec'd with."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def make_rig(tmp_path: Path) -> Path:
    rig = tmp_path / "rig"
    (rig / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "mcp-run.sh", rig / "mcp-run.sh")
    (rig / "tpu.env").write_text(
        "# comment\nGOOGLE_CLOUD_ZONE=us-west4-a\nMODEL_NAME=google/gemma-4-E2B-it\n"
        'LIMIT_MM_PER_PROMPT={"image":4,"audio":1}\nQUOTED="with spaces"\nEMPTY_ONE=\n'
        "COMMENTED=us-east5-a   # my zone\nHASHED=a#b\nQUOTED_HASH='x # y'\n"
    )
    fake_python = rig / ".venv" / "bin" / "python"
    fake_python.write_text('#!/bin/sh\necho "ARGS=$*"\nenv\n')
    fake_python.chmod(0o755)
    return rig


def run(script: Path, cwd: Path, **env: str) -> dict[str, str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(cwd)}
    out = subprocess.run(
        [str(script)], cwd=cwd, env={**base, **env}, capture_output=True, text=True, check=True
    )
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_unset_variables_are_exported_from_tpu_env(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    env = run(rig / "mcp-run.sh", tmp_path)
    assert env["GOOGLE_CLOUD_ZONE"] == "us-west4-a"
    assert env["LIMIT_MM_PER_PROMPT"] == '{"image":4,"audio":1}'
    assert env["QUOTED"] == "with spaces"
    # Inline comments are read as python-dotenv reads them (the server reads the same file with it).
    assert env["COMMENTED"] == "us-east5-a"
    assert env["HASHED"] == "a#b"
    assert env["QUOTED_HASH"] == "x # y"
    assert env["ARGS"] == "-m tpu_devops.main"


def test_set_variable_is_not_overwritten_even_when_empty(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    env = run(rig / "mcp-run.sh", tmp_path, GOOGLE_CLOUD_ZONE="us-east5-a", MODEL_NAME="")
    assert env["GOOGLE_CLOUD_ZONE"] == "us-east5-a"
    assert env["MODEL_NAME"] == ""


def test_works_through_a_symlink_from_another_directory(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = elsewhere / "tpu-devops"
    link.symlink_to(rig / "mcp-run.sh")
    env = run(link, elsewhere)
    assert env["GOOGLE_CLOUD_ZONE"] == "us-west4-a"


def test_missing_venv_names_the_fix(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    shutil.rmtree(rig / ".venv")
    out = subprocess.run([str(rig / "mcp-run.sh")], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 127
    assert "make setup" in out.stderr
    assert out.stdout == ""


def _run_on_a_terminal(keys: bytes) -> tuple[int | None, str]:
    """Start ./mcp-run.sh with a pseudo-terminal as its controlling terminal (a person in a shell), wait
    for its hint, type ``keys``; return (exit code, everything it printed)."""
    import os
    import pty
    import select
    import signal
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes the server
        os.chdir(str(Path(__file__).resolve().parent.parent))
        os.environ["NO_GCE_CHECK"] = "true"
        os.execv("/bin/bash", ["bash", "./mcp-run.sh"])
    out, typed, deadline = b"", False, time.monotonic() + 60
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal (it exited)
                chunk = b""
            if not chunk:
                break
            out += chunk
        if not typed and b"Ctrl-D quits" in out:
            os.write(fd, keys)
            typed = True
    for _ in range(100):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None, out.decode("utf-8", "replace")


@pytest.mark.parametrize(("keys", "code"), [(b"\x03", 130), (b"\x04", 0)], ids=["ctrl-c", "ctrl-d"])
def test_on_a_terminal_it_says_what_it_is_and_quits_cleanly(keys: bytes, code: int) -> None:
    status, out = _run_on_a_terminal(keys)
    assert "waiting for an MCP client" in out and "make demo" in out and "inspector --cli" in out
    assert status == code, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
