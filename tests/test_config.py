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


# ---- Starting with an invalid configuration (shown in the host) and the project from ADC -------------


def test_every_variable_says_which_settings_it_sets() -> None:
    from tpu_devops.config import VARIABLE_FIELDS, Settings

    missing = sorted(set(DEFAULTS) - set(VARIABLE_FIELDS))
    assert missing == [], f"add {missing} to config.VARIABLE_FIELDS (the Settings fields each one sets)"
    for var, fields in VARIABLE_FIELDS.items():
        assert set(fields) <= set(Settings.model_fields), var


def test_an_invalid_variable_is_recorded_and_only_its_fields_refuse(tmp_path: Path) -> None:
    from tpu_devops.config import load_settings_or_errors

    env_file = write_env(tmp_path, "GOOGLE_CLOUD_ZONE=europe-west4-a\nGOOGLE_CLOUD_REGION=us-west4\n")
    s = load_settings_or_errors(
        env_file, environ={"VLLM_PORT": "80000", "GOOGLE_CLOUD_PROJECT": "demo-project"}
    )
    assert [e.variable for e in s.config_errors] == ["GOOGLE_CLOUD_ZONE", "VLLM_PORT"]
    assert (
        s.config_errors[0].value == "europe-west4-a"
        and "GOOGLE_CLOUD_REGION=europe-west4" in s.config_errors[0].fix
    )
    for field in ("zone", "region", "vllm_port"):
        with pytest.raises(ConfigError) as err:
            getattr(s, field)
        assert err.value.field in ("GOOGLE_CLOUD_ZONE", "VLLM_PORT") and "restart the server" in err.value.fix
    assert s.model_name == "google/gemma-4-E2B-it" and s.project == "demo-project"  # the rest works
    summary = s.public_summary()
    assert list(summary)[0] == "configuration_errors" and summary["zone"] == "(invalid: GOOGLE_CLOUD_ZONE)"
    with pytest.raises(ConfigError):  # the strict loader is unchanged
        load_settings(env_file, environ={})


def test_read_only_and_cache_fail_closed_and_a_valid_configuration_has_no_errors(tmp_path: Path) -> None:
    from tpu_devops.config import load_settings_or_errors

    s = load_settings_or_errors(
        tmp_path / "none", environ={"TPU_DEVOPS_READ_ONLY": "maybe", "TPU_DEVOPS_CACHE_DIR": "rel"}
    )
    assert s.read_only is True and s.cache_dir is None
    assert {e.variable for e in s.config_errors} == {"TPU_DEVOPS_READ_ONLY", "TPU_DEVOPS_CACHE_DIR"}
    clean = load_settings_or_errors(tmp_path / "none", environ={})
    assert clean.config_errors == () and clean == load_settings(tmp_path / "none", environ={})


def test_project_falls_back_to_application_default_credentials_and_says_so(
    tmp_path: Path, monkeypatch
) -> None:
    """Gemini CLI strips GOOGLE_CLOUD_PROJECT and GOOGLE_APPLICATION_CREDENTIALS: the ADC file gcloud wrote
    still names the project (here a service-account key in the gcloud config directory)."""
    import json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tpu_devops.config import require_project
    from tpu_devops.gcp.project import detected_project

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    gcloud = tmp_path / "gcloud"
    gcloud.mkdir()
    (gcloud / "application_default_credentials.json").write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "adc-project-42",
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": "sa@adc-project-42.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    for var in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(gcloud))
    s = load_settings(tmp_path / "none", environ={})
    assert s.project == "adc-project-42" and require_project(s) == "adc-project-42"
    assert (
        s.project_source
        == f"Application Default Credentials ({gcloud / 'application_default_credentials.json'})"
    )
    assert s.public_summary()["project_source"] == s.project_source
    explicit = load_settings(tmp_path / "none", environ={"GOOGLE_CLOUD_PROJECT": "my-own-project"})
    assert explicit.project == "my-own-project"
    assert explicit.project_source == "the environment (GOOGLE_CLOUD_PROJECT)"
    assert detected_project() == detected_project(wait=False)


def test_public_summary_shows_list_settings_as_plain_text(tmp_path: Path) -> None:
    """A tuple setting reads as a comma-separated list, never as a Python repr like ('/tmp',)."""
    roots = [tmp_path / "a", tmp_path / "b"]
    for r in roots:
        r.mkdir()
    s = load_settings(tmp_path / "none", environ={"TPU_DEVOPS_FILE_ROOTS": ":".join(map(str, roots))})
    summary = s.public_summary()
    assert summary["file_roots"] == f"{roots[0]}, {roots[1]}"
    assert not any(isinstance(v, tuple) or "('" in str(v) for v in summary.values())
    assert load_settings(tmp_path / "none", environ={}).public_summary()["file_roots"].startswith("(none")


@pytest.mark.parametrize(
    "value, unattended, error",
    [
        ("", False, None),
        ("gemma4-e2b", True, None),
        (" gemma4-e2b ", True, None),
        ("1", False, "not a rig id"),
        ("true", False, "names rig 'true'"),  # a boolean reads as a rig id: still another rig's
        ("other-rig", False, "names rig 'other-rig', but this server's RESOURCE_ID is 'gemma4-e2b'"),
        ("GEMMA4-E2B", False, "not a rig id"),
        ("*", False, "not a rig id"),
    ],
)
def test_the_standing_deletion_permission_names_this_rig_and_fails_closed(
    tmp_path: Path, value: str, unattended: bool, error: str | None
) -> None:
    from tpu_devops.config import load_settings_or_errors

    s = load_settings_or_errors(tmp_path / "none", environ={"TPU_DEVOPS_UNATTENDED_DELETE": value})
    assert s.unattended_delete is unattended and s.deletion_policy().unattended is unattended
    assert s.resource_id == "gemma4-e2b"  # nothing else refuses because of it
    if error is None:
        assert s.config_errors == ()
    else:
        [err] = s.config_errors
        assert err.variable == "TPU_DEVOPS_UNATTENDED_DELETE" and error in err.message
        assert "TPU_DEVOPS_UNATTENDED_DELETE=gemma4-e2b" in (err.fix or "")
    copied = load_settings_or_errors(
        tmp_path / "none", environ={"TPU_DEVOPS_UNATTENDED_DELETE": "gemma4-e2b", "RESOURCE_ID": "rig-b"}
    )
    assert copied.unattended_delete is False  # a tpu.env copied to another rig does not carry it


def test_host_answers_count_unless_turned_off_and_an_invalid_value_turns_them_off(tmp_path: Path) -> None:
    from tpu_devops.config import load_settings_or_errors

    assert load_settings_or_errors(tmp_path / "none", environ={}).deletion_policy().ask is True
    assert (
        load_settings_or_errors(tmp_path / "n", environ={"TPU_DEVOPS_ELICITATION": "off"}).elicitation
        is False
    )
    bad = load_settings_or_errors(tmp_path / "none", environ={"TPU_DEVOPS_ELICITATION": "sometimes"})
    assert bad.deletion_policy().ask is False and bad.config_errors[0].variable == "TPU_DEVOPS_ELICITATION"


@pytest.mark.parametrize(
    ("line", "closest"),
    [
        ("GPU_MEMORY_UTILISATION=0.95", "GPU_MEMORY_UTILIZATION"),
        ("MAX_RUN_DURATON=1h", "MAX_RUN_DURATION"),
        ("GOOGLE_CLOUD_ZONEE=us-east5-a", "GOOGLE_CLOUD_ZONE"),
        ("gpu_memory_utilization=0.9", "GPU_MEMORY_UTILIZATION"),
        ("TPU_DEVOPS_READONLY=1", "TPU_DEVOPS_READ_ONLY"),
        ("GOOGLE_APLICATION_CREDENTIALS=/k.json", "GOOGLE_APPLICATION_CREDENTIALS"),
    ],
)
def test_an_unknown_tpu_env_key_is_reported_with_the_closest_known_one(
    tmp_path: Path, line: str, closest: str
) -> None:
    from tpu_devops.config import load_settings_or_errors

    env_file = write_env(tmp_path, f"# mine\n{line}\nMODEL_NAME=google/gemma-4-E2B-it\n")
    s = load_settings_or_errors(env_file, environ={})
    key = line.split("=", 1)[0]
    (err,) = s.config_errors
    assert err.unknown and err.variable == key and err.value is None  # the value may be a secret
    assert str(err) == (
        f"{key}: unknown key in {env_file} (ignored): did you mean {closest}? Fix: rename it to {closest}"
    )
    assert s.invalid_fields == frozenset()  # every setting still reads (the key is simply ignored)
    assert s.gpu_memory_utilization == 0.92 and s.max_run_duration_s == 4 * 3600
    assert s.public_summary()["configuration_errors"] == [str(err)]


def test_keys_for_google_libraries_are_known_and_a_stranger_is_named_without_a_guess(tmp_path: Path) -> None:
    from tpu_devops.config import load_settings_or_errors

    env_file = write_env(
        tmp_path,
        "GOOGLE_APPLICATION_CREDENTIALS=/k.json\nHTTPS_PROXY=http://127.0.0.1:3128\nNO_GCE_CHECK=true\n"
        "HF_TOKN=hf_secret_value\n",
    )
    s = load_settings_or_errors(env_file, environ={})
    (err,) = s.config_errors
    assert err.variable == "HF_TOKN" and "hf_secret_value" not in str(err) and "HF_TOKEN" in str(err)
    env_file.write_text("COLOUR_SCHEME=dark\n")
    (err,) = load_settings_or_errors(env_file, environ={}).config_errors
    assert "did you mean" not in str(err) and "remove it" in err.fix


def test_unknown_keys_in_the_environment_are_not_reported(tmp_path: Path) -> None:
    from tpu_devops.config import load_settings_or_errors

    s = load_settings_or_errors(tmp_path / "none", environ={"GPU_MEMORY_UTILISATION": "0.95", "TERM": "x"})
    assert s.config_errors == ()


def test_a_zone_from_the_environment_brings_its_region_when_the_region_is_tpu_envs(tmp_path: Path) -> None:
    """`GOOGLE_CLOUD_ZONE=us-east5-a make run` with tpu.env's GOOGLE_CLOUD_REGION=us-west4."""
    env_file = write_env(tmp_path, "GOOGLE_CLOUD_REGION=us-west4\nGOOGLE_CLOUD_ZONE=us-west4-a\n")
    s = load_settings(env_file, environ={"GOOGLE_CLOUD_ZONE": "us-east5-a"})
    assert (s.region, s.zone) == ("us-east5", "us-east5-a")
    assert any(
        n.startswith("GOOGLE_CLOUD_REGION: us-east5, the region of GOOGLE_CLOUD_ZONE=us-east5-a")
        and f"not us-west4 from tpu.env ({env_file})" in n
        for n in s.notices
    ), s.notices
    default_region = load_settings(tmp_path / "none", environ={"GOOGLE_CLOUD_ZONE": "asia-northeast1-b"})
    assert default_region.region == "asia-northeast1"
    empty = load_settings(
        tmp_path / "none", environ={"GOOGLE_CLOUD_REGION": "", "GOOGLE_CLOUD_ZONE": "us-east5-a"}
    )
    assert empty.region == "us-east5"
    # through mcp-run.sh both arrive as environment variables; the region is still tpu.env's
    launched = {
        "GOOGLE_CLOUD_REGION": "us-west4",
        "GOOGLE_CLOUD_ZONE": "us-east5-a",
        "TPU_DEVOPS_ENV_FILE": str(env_file),
        "TPU_DEVOPS_FROM_ENV_FILE": "GOOGLE_CLOUD_REGION",
    }
    assert load_settings(environ=launched).region == "us-east5"


@pytest.mark.parametrize(
    ("file_text", "environ"),
    [
        ("GOOGLE_CLOUD_REGION=us-west4\nGOOGLE_CLOUD_ZONE=us-east5-a\n", {}),  # one file, two regions
        ("", {"GOOGLE_CLOUD_REGION": "us-west4", "GOOGLE_CLOUD_ZONE": "us-east5-a"}),  # both set by hand
        ("GOOGLE_CLOUD_ZONE=us-east5-a\n", {"GOOGLE_CLOUD_REGION": "us-west4"}),  # the region is the stronger
    ],
)
def test_a_zone_and_region_set_as_strongly_must_agree(tmp_path: Path, file_text: str, environ: dict) -> None:
    env_file = write_env(tmp_path, file_text)
    with pytest.raises(ConfigError) as err:
        load_settings(env_file, environ=environ)
    assert err.value.field == "GOOGLE_CLOUD_ZONE" and "GOOGLE_CLOUD_REGION=us-east5" in err.value.fix


def test_tpu_env_is_found_at_its_documented_places(tmp_path: Path, monkeypatch) -> None:
    from tpu_devops.config import env_file_places, read_environment

    cwd, config = tmp_path / "work", tmp_path / "xdg"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    user = config / "tpu-devops" / "tpu.env"
    places = env_file_places({"XDG_CONFIG_HOME": str(config)})
    assert places[0] == cwd / "tpu.env" and places[-1] == user
    user.parent.mkdir(parents=True)
    user.write_text("MAX_MODEL_LEN=8192\n")
    environ = {"XDG_CONFIG_HOME": str(config)}
    checkout = places[1] if len(places) == 3 else None  # running from this checkout: its tpu.env
    assert read_environment(environ=environ).env_file == str(checkout or user)
    (cwd / "tpu.env").write_text("MAX_MODEL_LEN=4096\n")
    assert load_settings(environ=environ).max_model_len == 4096  # ./tpu.env first
    explicit = tmp_path / "mine.env"
    explicit.write_text("MAX_MODEL_LEN=2048\n")
    assert load_settings(environ={**environ, "TPU_DEVOPS_ENV_FILE": str(explicit)}).max_model_len == 2048
    off = load_settings(environ={**environ, "TPU_DEVOPS_ENV_FILE": "none"})
    assert off.env_file is None and off.max_model_len == 16384
    missing = load_settings(environ={**environ, "TPU_DEVOPS_ENV_FILE": str(tmp_path / "gone.env")})
    assert missing.env_file is None
    assert any("gone.env, which is not a file" in n for n in missing.notices)


def test_the_user_config_directory_is_read_by_an_installed_server(tmp_path: Path, monkeypatch) -> None:
    """An installed wheel has no checkout: ~/.config/tpu-devops/tpu.env is read from any directory."""
    from tpu_devops import config

    monkeypatch.setattr(config, "checkout_env_file", lambda: None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "xdg" / "tpu-devops").mkdir(parents=True)
    (tmp_path / "xdg" / "tpu-devops" / "tpu.env").write_text("GOOGLE_CLOUD_PROJECT=user-project-1\n")
    s = load_settings(environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert s.project == "user-project-1"
    assert s.project_source == f"tpu.env ({tmp_path / 'xdg' / 'tpu-devops' / 'tpu.env'})"


def test_google_library_variables_in_tpu_env_reach_the_process_environment(tmp_path: Path) -> None:
    from tpu_devops.config import export_passthrough, read_environment

    env_file = write_env(
        tmp_path, "GOOGLE_APPLICATION_CREDENTIALS=/k.json\nCLOUDSDK_CONFIG=/g\nMODEL_NAME=x\n"
    )
    target = {"CLOUDSDK_CONFIG": "/mine"}
    names = export_passthrough(read_environment(env_file, environ={}), target)
    assert names == ["GOOGLE_APPLICATION_CREDENTIALS"]
    assert target == {"CLOUDSDK_CONFIG": "/mine", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json"}
