"""The Makefile reads tpu.env as defaults only: a real environment variable always wins (DESIGN §2)."""

from __future__ import annotations

import os
import subprocess

from tests.mcp_session import ROOT


def make(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "TPU_DEVOPS_", "VLLM_"))}
    return subprocess.run(
        ["make", "-s", *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=300
    )


def test_environment_beats_tpu_env_through_make() -> None:
    out = make("check-config", GOOGLE_CLOUD_ZONE="us-east5-b", GOOGLE_CLOUD_REGION="us-east5")
    assert out.returncode == 0, out.stderr
    assert "zone: us-east5-b" in out.stdout and "region: us-east5" in out.stdout


def test_tpu_env_is_the_default_through_make() -> None:
    out = make("check-config")
    assert out.returncode == 0, out.stderr
    assert "zone: us-west4-a" in out.stdout


def test_invalid_value_through_make_names_the_fix() -> None:
    out = make("check-config", GOOGLE_CLOUD_ZONE="uswest4a")
    assert out.returncode != 0
    assert "GOOGLE_CLOUD_ZONE" in out.stderr and "Fix:" in out.stderr


def test_bad_log_level_is_reported_and_the_server_still_serves() -> None:
    """Issue #11 §6: an invalid setting is printed with its fix and the server starts anyway (INFO logging);
    with stdin closed it then exits cleanly."""
    out = subprocess.run(
        [str(ROOT / "mcp-run.sh")],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/tmp"),
            "TPU_DEVOPS_LOG_LEVEL": "LOUD",
        },
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert out.returncode == 0
    assert (
        "invalid configuration: TPU_DEVOPS_LOG_LEVEL = 'LOUD'" in out.stderr and "Traceback" not in out.stderr
    )
    assert "Fix: use one of DEBUG, INFO" in out.stderr
