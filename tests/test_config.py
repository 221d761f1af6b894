"""Settings: precedence (environment > tpu.env > defaults) and validation errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpu_devops.config import DEFAULTS, load_settings, parse_duration
from tpu_devops.errors import ConfigError


def write_env(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tpu.env"
    path.write_text(text)
    return path


def test_defaults_when_no_file_and_no_environment(tmp_path: Path) -> None:
    s = load_settings(tmp_path / "missing.env", environ={})
    assert s.zone == DEFAULTS["GOOGLE_CLOUD_ZONE"] == "us-west4-a"
    assert s.accelerator_type == "v5litepod-1"
    assert s.provisioning_model == "flex-start"
    assert s.max_run_duration_s == 4 * 3600
    assert s.env_file is None
    assert s.server_name == "tpu-devops-gemma4-e2b"


def test_file_beats_defaults_and_environment_beats_file(tmp_path: Path) -> None:
    env_file = write_env(
        tmp_path, "GOOGLE_CLOUD_REGION=us-east5\nGOOGLE_CLOUD_ZONE=us-east5-b\nMAX_MODEL_LEN=32768\n"
    )
    from_file = load_settings(env_file, environ={})
    assert (from_file.zone, from_file.max_model_len) == ("us-east5-b", 32768)
    both = load_settings(env_file, environ={"GOOGLE_CLOUD_ZONE": "us-east5-a", "MAX_MODEL_LEN": "8192"})
    assert (both.region, both.zone, both.max_model_len) == ("us-east5", "us-east5-a", 8192)
    assert both.env_file == str(env_file)


def test_empty_environment_value_still_wins_over_file(tmp_path: Path) -> None:
    env_file = write_env(tmp_path, "VLLM_URL=http://10.0.0.5:8000\n")
    assert load_settings(env_file, environ={}).vllm_url == "http://10.0.0.5:8000"
    assert load_settings(env_file, environ={"VLLM_URL": ""}).vllm_url == ""


def test_repository_tpu_env_loads_cleanly() -> None:
    s = load_settings(environ={})
    assert s.env_file and s.env_file.endswith("tpu.env")
    assert s.gpu_memory_utilization == 0.92
    assert s.hf_secret_id == "hf-token"


def test_prose_accelerator_spelling_is_translated_with_notice(tmp_path: Path) -> None:
    s = load_settings(tmp_path / "none", environ={"ACCELERATOR_TYPE": "v5e-1"})
    assert s.accelerator_type == "v5litepod-1"
    assert any("v5e-1" in n and "v5litepod-1" in n for n in s.notices)


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("GOOGLE_CLOUD_ZONE", "uswest4a", "us-west4-a"),
        ("GOOGLE_CLOUD_ZONE", "us-east5-a", "GOOGLE_CLOUD_REGION=us-east5"),
        ("ACCELERATOR_TYPE", "h100-8", "v5litepod-1"),
        ("ACCELERATOR_TYPE", "v5e-3", "v5litepod-4"),
        ("MAX_MODEL_LEN", "16k", "integer"),
        ("MAX_MODEL_LEN", "-5", "between"),
        ("TENSOR_PARALLEL_SIZE", "4", "TENSOR_PARALLEL_SIZE=1"),
        ("PROVISIONING_MODEL", "reserved", "flex-start"),
        ("MAX_RUN_DURATION", "5 minutes", "4h"),
        ("MAX_RUN_DURATION", "9d", "at most"),
        ("GPU_MEMORY_UTILIZATION", "95", "0.92"),
        ("TPU_RUNTIME_VERSION", "v2-alpha-tpuv6e", "v2-alpha-tpuv5-lite"),
        ("RESOURCE_ID", "Gemma_4", "lowercase"),
        ("LIMIT_MM_PER_PROMPT", "image=4", '{"image":4'),
        ("VLLM_URL", "10.0.0.5:8000", "http://"),
        ("TPU_DEVOPS_READ_ONLY", "maybe", "=1"),
        ("GOOGLE_CLOUD_PROJECT", "My Project", "project id"),
    ],
)
def test_invalid_values_name_variable_value_and_fix(
    tmp_path: Path, variable: str, value: str, needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path / "none", environ={variable: value})
    err = info.value
    assert err.field == variable
    assert str(err.value) == value.strip() or value in str(err)
    assert err.fix and needle in str(err)


def test_parse_duration_units() -> None:
    assert parse_duration("90m", variable="X") == 5400
    assert parse_duration("2d", variable="X") == 172800
    assert parse_duration("3600", variable="X") == 3600


def test_secrets_are_not_in_public_summary(tmp_path: Path) -> None:
    s = load_settings(tmp_path / "none", environ={"VLLM_API_KEY": "sk-planted-secret-123"})
    assert "sk-planted-secret-123" not in str(s.public_summary())


def test_cache_dir_defaults_to_xdg_cache_and_can_be_turned_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert load_settings(tmp_path / "missing.env", environ={}).cache_dir == str(
        tmp_path / "xdg" / "tpu-devops"
    )
    explicit = load_settings(tmp_path / "missing.env", environ={"TPU_DEVOPS_CACHE_DIR": str(tmp_path / "c")})
    assert explicit.cache_dir == str(tmp_path / "c")
    for off in ("off", "OFF", "none", "0"):
        assert (
            load_settings(tmp_path / "missing.env", environ={"TPU_DEVOPS_CACHE_DIR": off}).cache_dir is None
        )


@pytest.mark.parametrize("var", ["TPU_DEVOPS_STATE_DIR", "TPU_DEVOPS_CACHE_DIR"])
def test_directories_expand_home_and_refuse_relative_paths(tmp_path: Path, monkeypatch, var: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    s = load_settings(tmp_path / "missing.env", environ={var: "~/tpu"})
    assert str(tmp_path / "tpu") in (s.state_dir, s.cache_dir)
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "missing.env", environ={var: "relative/dir"})
    assert var in str(err.value) and "relative/dir" in str(err.value) and "absolute path" in str(err.value)
