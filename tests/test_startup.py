"""startup.py: the single flag builder, the rendered startup script (bash -n, shellcheck, quoting,
no token anywhere) and a full run of the rendered script against stand-in curl/docker/logger."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import anyio
import pytest

from tests.startup_vm import PLANTED, PLANTED_KEY, SHELLCHECK, render, run_startup_script, settings
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError
from tpu_devops.planning import startup
from tpu_devops.planning.deployment import deployment_config, deployment_view


def test_flags_are_built_once_and_cover_the_seed_command():
    flags = startup.vllm_serve_flags(settings())
    joined = shlex.join(flags)
    assert "--max-model-len 16384" in joined
    assert "--gpu-memory-utilization 0.92" in joined
    assert "--tensor-parallel-size 1" in joined
    assert "--enable-auto-tool-choice --tool-call-parser gemma4 --reasoning-parser gemma4" in joined
    assert flags[flags.index("--limit-mm-per-prompt") + 1] == '{"image":4,"audio":1}'
    assert "--block-size" not in flags and "--max-num-seqs" not in flags
    argv = startup.vllm_serve_argv(settings())
    assert argv[:3] == ["vllm", "serve", "google/gemma-4-E2B-it"] and argv[3:] == flags


def test_non_gemma_model_gets_no_gemma_parsers():
    flags = startup.vllm_serve_flags(settings(MODEL_NAME="Qwen/Qwen3-8B", MAX_NUM_BATCHED_TOKENS=""))
    assert "--tool-call-parser" not in flags and "--max-num-batched-tokens" not in flags


def test_gemma4_gets_a_batch_budget_above_the_multimodal_floor_by_default():
    flags = startup.vllm_serve_flags(load_settings(Path("/nonexistent/tpu.env"), {}))
    assert flags[flags.index("--max-num-batched-tokens") + 1] == "4096"
    from tpu_devops.planning.lint import lint_vllm_flags

    assert (
        lint_vllm_flags(
            shlex.join(startup.vllm_serve_argv(load_settings(Path("/nonexistent/tpu.env"), {})))
        ).errors
        == 0
    )


def test_rendered_script_passes_bash_n_and_shellcheck(tmp_path):
    path = render(tmp_path, GOOGLE_CLOUD_PROJECT="my-tpu-project")
    subprocess.run(["bash", "-n", str(path)], check=True)
    proc = subprocess.run([str(SHELLCHECK), "-S", "style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_literal_braces_survive_rendering(tmp_path):
    text = render(tmp_path).read_text()
    assert '"${VLLM_ARGS[@]}"' in text
    assert "'{{.State.Running}}'" in text
    assert "${MD}/instance/guest-attributes/tpu-devops/stage" in text
    assert '\'{"image":4,"audio":1}\'' in text
    import re

    # docker's Go templates ('{{.State.Running}}') are the only double braces a rendered script keeps
    assert "{{" not in re.sub(r"'\{\{[^{}']*\}\}'", "", text)


def test_token_never_in_script_output_or_record(tmp_path):
    os.environ["HF_TOKEN"] = PLANTED
    try:
        s = load_settings(Path("/nonexistent/tpu.env"), {"HF_TOKEN": PLANTED, "VLLM_API_KEY": PLANTED_KEY})
        rendered = startup.render_startup_script(s)
        config = anyio.run(deployment_config, s)
    finally:
        del os.environ["HF_TOKEN"]
    for secret in (PLANTED, PLANTED_KEY):
        assert secret not in rendered.model_dump_json()
        assert secret not in rendered.render_text()
        assert secret not in config.model_dump_json() and secret not in config.render_text()


@pytest.mark.parametrize(
    "value",
    [
        "google/gemma-4-E2B-it; touch /tmp/pwned",
        "$(id)`whoami`",
        'it\'s "quoted" & | > < * ? ! ${HOME}',
    ],
)
def test_metacharacters_in_settings_are_quoted(tmp_path, value):
    path = render(tmp_path, MODEL_NAME=value)
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    block = text[text.index("# ---- settings (rendered) ----") : text.index("# ---- end settings ----")]
    probe = block + '\nprintf "%s\\n" "$MODEL_NAME"\nprintf "%s\\n" "${VLLM_ARGS[@]}"\n'
    out = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == value
    flags = startup.vllm_serve_flags(settings(MODEL_NAME=value))
    port = flags.index("--port")
    assert out[1:] == flags[:port] + flags[port + 2 :]  # the script adds each engine's --port itself


def test_control_characters_are_rejected():
    with pytest.raises(ConfigError) as err:
        startup.render_startup_script(settings(MODEL_NAME="google/gemma\nrm -rf /"))
    assert err.value.field == "MODEL_NAME"
    with pytest.raises(ConfigError):
        startup.apply_overrides(settings(), vllm_image="vllm/vllm-tpu:v1; rm -rf /")
    with pytest.raises(ConfigError) as err:
        startup.apply_overrides(settings(), max_model_len=-5)
    assert err.value.field == "max_model_len"


@pytest.mark.parametrize("batched", [16, 2048, 8192, 1_048_576])
def test_the_batch_budget_override_reaches_the_serve_line(batched: int) -> None:
    # reconfigure_vllm and render_startup_script take the batch budget like the other serving flags.
    script = startup.render_startup_script(
        startup.apply_overrides(settings(), max_num_batched_tokens=batched)
    )
    assert f"--max-num-batched-tokens {batched}" in script.script


@pytest.mark.parametrize("bad", [0, 15, 1_048_577, -4096, True])
def test_a_batch_budget_out_of_range_is_refused_naming_the_argument(bad: int) -> None:
    from tpu_devops.config import MAX_NUM_BATCHED_TOKENS_RANGE

    with pytest.raises(ConfigError) as err:
        startup.apply_overrides(settings(), max_num_batched_tokens=bad)
    assert (
        err.value.field == "max_num_batched_tokens"
        and f"{MAX_NUM_BATCHED_TOKENS_RANGE[1]:,}" in err.value.message
    )


def test_override_ranges_are_the_shared_ones():
    from tpu_devops.config import GPU_MEMORY_UTILIZATION_RANGE, MAX_MODEL_LEN_RANGE

    lo, hi = MAX_MODEL_LEN_RANGE
    ulo, uhi = GPU_MEMORY_UTILIZATION_RANGE
    assert (
        startup.apply_overrides(settings(), max_model_len=lo, gpu_memory_utilization=ulo).max_model_len == lo
    )
    with pytest.raises(ConfigError) as err:
        startup.apply_overrides(settings(), max_model_len=hi + 1)
    assert f"{hi:,}" in err.value.message
    with pytest.raises(ConfigError):
        startup.apply_overrides(settings(), gpu_memory_utilization=uhi + 0.005)


# ---- running the rendered script with stand-ins for curl, docker, logger and sleep ----------------


def run_script(
    tmp_path: Path, secret_failures: int = 0, gcplogs_fail: bool = False
) -> tuple[subprocess.CompletedProcess, Path]:
    script = render(tmp_path, GOOGLE_CLOUD_PROJECT="my-tpu-project")
    run, _ = run_startup_script(script, tmp_path, secret_failures=secret_failures, gcplogs_fail=gcplogs_fail)
    return run.proc, run.fake


def test_script_run_fetches_secret_starts_vllm_and_keeps_token_off_command_lines(tmp_path):
    proc, fake = run_script(tmp_path, secret_failures=2)
    assert proc.returncode == 0, proc.stderr
    argv = (fake / "argv.log").read_text()
    syslog = (fake / "syslog").read_text()
    # the token and the API key reached only the 0600 env file handed to docker --env-file
    for secret in (PLANTED, PLANTED_KEY):
        assert secret not in argv and secret not in syslog and secret not in proc.stdout + proc.stderr
        assert secret not in (tmp_path / "startup.sh").read_text()
    assert (fake / "env_mode").read_text().strip() == "600"
    env_file = (fake / "env_copy").read_text().splitlines()
    assert f"HF_TOKEN={PLANTED}" in env_file and f"VLLM_API_KEY={PLANTED_KEY}" in env_file
    assert not (tmp_path / "fs" / "run" / "tpu-devops" / "vllm.env").exists()
    # retried while IAM was not granted yet, then succeeded; then the API key on the first try
    assert (fake / "secret_calls").read_text().strip() == "4"
    assert "STAGE waiting-for-secret hf-token attempt 1" in syslog
    assert "STAGE secret-fetched hf-token attempt 3" in syslog
    assert "STAGE secret-fetched vllm-api-key attempt 1" in syslog
    urls = (fake / "secret_urls").read_text()
    assert "projects/my-tpu-project/secrets/hf-token/versions/latest:access" in urls
    assert "projects/my-tpu-project/secrets/vllm-api-key/versions/latest:access" in urls
    # no key on vLLM's command line: it reads VLLM_API_KEY from its environment
    assert "--api-key" not in argv
    # pinned image, compile cache mount, gcplogs, the flags from vllm_serve_flags
    run_line = next(line for line in argv.splitlines() if line.startswith("docker run"))
    assert "--log-driver=gcplogs" in run_line
    # one compile-cache directory per cache key (shape flags, image digest) under ~/.cache/vllm
    assert f"{tmp_path}/fs/root/.cache/vllm/" in run_line and ":/root/.cache/vllm " in run_line
    assert "vllm/vllm-tpu:v0.30.0 vllm serve google/gemma-4-E2B-it --host 0.0.0.0" in run_line
    assert "docker pull vllm/vllm-tpu:v0.30.0" in argv
    record = json.loads((tmp_path / "fs" / "var" / "lib" / "tpu-devops" / "serving-flags.json").read_text())
    assert record["flags"] == startup.vllm_serve_flags(settings(GOOGLE_CLOUD_PROJECT="my-tpu-project"))
    assert "tpu-devops/serving-flags" in (fake / "guest_attributes").read_text()
    assert "STAGE ready" in syslog
    assert stat.S_IMODE((tmp_path / "fs" / "run" / "tpu-devops").stat().st_mode) == 0o700


def test_script_gives_up_on_the_secret_after_the_deadline(tmp_path):
    script = render(tmp_path)
    text = script.read_text().replace("readonly SECRET_WAIT_S=1800", "readonly SECRET_WAIT_S=0")
    script.write_text(text)
    run, _ = run_startup_script(script, tmp_path / "deadline", secret_failures=1000)
    proc, fake = run.proc, run.fake
    assert proc.returncode != 0
    syslog = (fake / "syslog").read_text()
    assert "STAGE secret-failed" in syslog and "roles/secretmanager.secretAccessor" in syslog
    assert "docker run" not in (fake / "argv.log").read_text()


def test_script_falls_back_to_local_logs_when_gcplogs_is_refused(tmp_path):
    proc, fake = run_script(tmp_path, gcplogs_fail=True)
    assert proc.returncode == 0, proc.stderr
    runs = [line for line in (fake / "argv.log").read_text().splitlines() if line.startswith("docker run")]
    assert "--log-driver=gcplogs" in runs[0] and "--log-driver=json-file" in runs[1]
    syslog = (fake / "syslog").read_text()
    assert (
        "STAGE log-driver-fallback" in syslog
        and "roles/logging.logWriter" in syslog
        and "STAGE ready" in syslog
    )
    assert PLANTED not in (fake / "argv.log").read_text()


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


@pytest.mark.parametrize("name", ["evil'; rm -rf / #", "{x}{{", "a model", "$(id)"])
def test_model_name_override_must_be_a_repo_id_or_path(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        startup.apply_overrides(settings(), model_name=name)
    assert err.value.field == "model_name" and err.value.value == name


def test_a_known_trap_in_the_rendered_flags_is_said_next_to_the_script() -> None:
    risky = startup.apply_overrides(settings(), gpu_memory_utilization=0.95)
    notes = anyio.run(deployment_view, risky, "script").chosen().notes
    assert any(n.startswith("LINT ERROR --gpu-memory-utilization 0.95") for n in notes)
    assert any("LINT" in n for n in anyio.run(deployment_config, risky).notes)
    assert not any("LINT" in n for n in anyio.run(deployment_view, settings(), "script").chosen().notes)


def test_deployment_config_text_is_copyable_commands() -> None:
    text = anyio.run(deployment_config, settings()).render_text()
    assert "# docker run on the TPU VM" in text and "# create" in text and "# health check" in text
    assert "gcloud_commands:" not in text
