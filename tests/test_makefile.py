"""The Makefile reads tpu.env as defaults only: a real environment variable always wins (DESIGN §2)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

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
    """An invalid setting is printed with its fix and the server starts anyway (INFO logging);
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


def test_setup_installs_the_node_tools_from_the_lock_file() -> None:
    """`make setup` runs a locked install (`npm ci`): `npm install` rewrote package-lock.json in a fresh
    clone whenever npm resolved more than the lock recorded, leaving the clone modified."""
    out = subprocess.run(
        ["make", "-n", "-B", "node_modules/.installed"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    npm_lines = [line for line in out.stdout.splitlines() if line.startswith("npm ")]
    assert npm_lines and all(line.startswith("npm ci ") for line in npm_lines), out.stdout


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is needed to read the lock file")
def test_the_lock_file_is_in_step_with_package_json(tmp_path: Path) -> None:
    """`npm ci` refuses a lock that is missing an entry package.json needs (even an optional one for
    another OS): checked offline, with an empty cache, in a copy so nothing is installed here."""
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / name, tmp_path / name)
    out = subprocess.run(
        ["npm", "ci", "--dry-run", "--offline", "--no-audit", "--no-fund", "--cache", str(tmp_path / "cache")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert not (tmp_path / "node_modules").exists()


def test_make_test_runs_in_random_order_and_can_repeat_one() -> None:
    """CI runs `make test`: in a new random order each time (pytest-randomly), one that `SEED=N` repeats."""
    for args, seed in (((), "default"), (("SEED=1234",), "1234")):
        out = subprocess.run(
            ["make", "-n", *args, "test"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        pytest_line = next(line for line in out.stdout.splitlines() if " -m pytest " in line)
        assert f"-p randomly --randomly-seed={seed}" in pytest_line, pytest_line


def test_the_readme_override_of_the_zone_alone_brings_its_region() -> None:
    """`GOOGLE_CLOUD_ZONE=us-east5-a make run` (README, tpu.env, Makefile): tpu.env's region us-west4 is
    for tpu.env's zone; the zone set by hand brings its own region, and says so."""
    out = make("check-config", GOOGLE_CLOUD_ZONE="us-east5-a")
    assert out.returncode == 0, out.stderr
    assert "zone: us-east5-a" in out.stdout and "region: us-east5\n" in out.stdout
    assert "GOOGLE_CLOUD_REGION: us-east5, the region of GOOGLE_CLOUD_ZONE=us-east5-a" in out.stderr


def test_check_config_fails_on_a_misspelt_tpu_env_key(tmp_path) -> None:
    env_file = tmp_path / "tpu.env"
    env_file.write_text("GPU_MEMORY_UTILISATION=0.95\nMAX_RUN_DURATON=1h\n")
    out = make("check-config", TPU_DEVOPS_ENV_FILE=str(env_file))
    assert out.returncode != 0
    assert (
        "GPU_MEMORY_UTILISATION: unknown key" in out.stderr
        and "rename it to GPU_MEMORY_UTILIZATION" in out.stderr
    )
    assert "MAX_RUN_DURATON: unknown key" in out.stderr and "rename it to MAX_RUN_DURATION" in out.stderr
    assert "configuration is valid" not in out.stdout


def test_check_config_fails_on_an_unknown_toolset_name() -> None:
    out = make("check-config", TPU_DEVOPS_TOOLSETS="plan,gkee")
    assert out.returncode != 0
    assert "'gkee' is no toolset (did you mean gke?)" in out.stderr
    assert make("check-config", TPU_DEVOPS_TOOLSETS="plan,gke").returncode == 0
