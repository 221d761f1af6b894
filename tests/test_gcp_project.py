"""The project without gcloud (`tpu_devops.gcp.project`): read from the files gcloud and google-auth keep
(ADC's ``project_id`` / ``quota_project_id``, the active gcloud configuration), each answer saying where it
came from; and where a configured project came from (the environment, tpu.env, tpu.env through
mcp-run.sh). A ``gcloud`` on PATH that records being run proves it is never run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tpu_devops.config import load_settings
from tpu_devops.gcp import metadata
from tpu_devops.gcp.project import active_gcloud_configuration, detected_project

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def gcloud_dir(tmp_path: Path, monkeypatch) -> Path:
    """An empty gcloud configuration directory (CLOUDSDK_CONFIG), no project variables, and a ``gcloud``
    on PATH that writes a marker if anything runs it."""
    config = tmp_path / "gcloud"
    config.mkdir()
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(config))
    for var in (
        "GOOGLE_CLOUD_PROJECT",
        "GCLOUD_PROJECT",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "CLOUDSDK_CORE_PROJECT",
        "CLOUDSDK_ACTIVE_CONFIG_NAME",
        *metadata.HINT_VARIABLES,
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # these tests are about files; the metadata server has its own
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(f"#!/bin/sh\ntouch {tmp_path / 'gcloud-was-run'}\necho other-project\n")
    (bin_dir / "gcloud").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield config
    assert not (tmp_path / "gcloud-was-run").exists(), "gcloud was run"


def user_adc(path: Path, quota_project: str | None = None) -> Path:
    """An ADC file as ``gcloud auth application-default login`` writes it."""
    info = {"type": "authorized_user", "client_id": "c.apps.googleusercontent.com", "client_secret": "s",
            "refresh_token": "r", "account": "alice@example.com"}  # fmt: skip
    if quota_project:
        info["quota_project_id"] = quota_project
    path.write_text(json.dumps(info))
    return path


def gcloud_config(config: Path, name: str, project: str | None, active: bool = True) -> Path:
    (config / "configurations").mkdir(exist_ok=True)
    path = config / "configurations" / f"config_{name}"
    core = f"project = {project}\n" if project else ""
    path.write_text(f"[core]\naccount = alice@example.com\n{core}\n[compute]\nzone = us-west4-a\n")
    if active:
        (config / "active_config").write_text(name)
    return path


def test_the_quota_project_of_a_user_adc_file_names_the_project(gcloud_dir: Path) -> None:
    adc = user_adc(gcloud_dir / "application_default_credentials.json", "quota-project-1")
    found = detected_project()
    assert found and found.project == "quota-project-1"
    assert found.source == f"the quota project of Application Default Credentials ({adc})"
    s = load_settings(Path(os.devnull), environ={})
    assert s.project == "quota-project-1" and s.project_source == found.source


def test_the_active_gcloud_configuration_names_the_project(gcloud_dir: Path) -> None:
    user_adc(gcloud_dir / "application_default_credentials.json", "quota-project-1")
    gcloud_config(gcloud_dir, "default", "other-config-project", active=False)
    work = gcloud_config(gcloud_dir, "work", "work-project-9")
    found = detected_project()
    # as `gcloud config get-value project` (what google-auth asks gcloud for): before the quota project
    assert found and found.project == "work-project-9"
    assert found.source == f"the gcloud configuration 'work' ({work})"
    assert active_gcloud_configuration() == ("work", work)


def test_without_an_active_config_file_the_default_configuration_is_read(
    gcloud_dir: Path, monkeypatch
) -> None:
    default = gcloud_config(gcloud_dir, "default", "default-project-1", active=False)
    found = detected_project()
    assert found and (found.project, found.source) == (
        "default-project-1",
        f"the gcloud configuration 'default' ({default})",
    )
    other = gcloud_config(gcloud_dir, "other", "other-project-2", active=False)
    monkeypatch.setenv("CLOUDSDK_ACTIVE_CONFIG_NAME", "other")  # gcloud's own override of the active one
    assert detected_project().source == f"the gcloud configuration 'other' ({other})"
    monkeypatch.setenv("CLOUDSDK_CORE_PROJECT", "env-project-3")
    assert detected_project().source == "the gcloud configuration (CLOUDSDK_CORE_PROJECT)"


def test_a_service_account_key_names_its_own_project_first(
    gcloud_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    gcloud_config(gcloud_dir, "default", "config-project-1")
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "project_id": "key-project-2"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    found = detected_project()
    assert found and (found.project, found.source) == (
        "key-project-2",
        f"Application Default Credentials ({key})",
    )


@pytest.mark.parametrize(
    "adc_text",
    ["{not json", "[]", json.dumps({"type": "authorized_user", "quota_project_id": 7}), "\x00" * 16],
)
def test_broken_files_name_no_project_and_never_raise(gcloud_dir: Path, adc_text: str) -> None:
    (gcloud_dir / "application_default_credentials.json").write_text(adc_text)
    (gcloud_dir / "configurations").mkdir()
    (gcloud_dir / "configurations" / "config_default").write_text("project = no section header\n[core\n")
    assert detected_project() is None
    s = load_settings(Path(os.devnull), environ={})
    assert s.project == ""
    assert "GOOGLE_CLOUD_PROJECT is unset" in s.project_source and "gcloud configuration" in s.project_source


def test_an_empty_project_in_the_configuration_falls_through(gcloud_dir: Path) -> None:
    gcloud_config(gcloud_dir, "default", None)
    user_adc(gcloud_dir / "application_default_credentials.json", "quota-project-1")
    assert detected_project().project == "quota-project-1"


def test_a_configured_project_says_whether_tpu_env_or_the_environment_set_it(tmp_path: Path) -> None:
    env_file = tmp_path / "tpu.env"
    env_file.write_text("GOOGLE_CLOUD_PROJECT=file-project-1\n")
    from_file = load_settings(env_file, environ={})
    assert from_file.project_source == f"tpu.env ({env_file})"
    from_env = load_settings(env_file, environ={"GOOGLE_CLOUD_PROJECT": "env-project-2"})
    assert from_env.project_source == "the environment (GOOGLE_CLOUD_PROJECT)"
    # mcp-run.sh exports tpu.env values and names them: still the file's
    launched = {
        "GOOGLE_CLOUD_PROJECT": "file-project-1",
        "TPU_DEVOPS_ENV_FILE": str(env_file),
        "TPU_DEVOPS_FROM_ENV_FILE": "GOOGLE_CLOUD_PROJECT",
    }
    assert load_settings(environ=launched).project_source == f"tpu.env ({env_file})"
    # ... unless the value was changed after it was exported, or came from another file
    changed = {**launched, "GOOGLE_CLOUD_PROJECT": "env-project-2"}
    assert load_settings(environ=changed).project_source == "the environment (GOOGLE_CLOUD_PROJECT)"


def test_through_mcp_run_sh_the_tpu_env_project_is_labelled_tpu_env(tmp_path: Path) -> None:
    """The real launcher and the real server: `--check-config` prints where the project came from."""
    import shutil

    rig = tmp_path / "rig"
    rig.mkdir()
    shutil.copy(ROOT / "mcp-run.sh", rig / "mcp-run.sh")
    (rig / "tpu.env").write_text("GOOGLE_CLOUD_PROJECT=file-project-1\n")
    # the venv itself (a lone link to its python would start the base interpreter, without the packages)
    (rig / ".venv").symlink_to(Path(os.sys.prefix), target_is_directory=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "NO_GCE_CHECK": "true"}
    out = subprocess.run(
        [str(rig / "mcp-run.sh"), "--check-config"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert f"project_source: tpu.env ({rig / 'tpu.env'})" in out.stdout, out.stdout
