"""startup.py: the single flag builder and the rendered startup script (bash -n, shellcheck, quoting, no
token anywhere). The script's runs on a simulated VM are tests/test_startup_vm.py."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import anyio
import pytest

from tests.startup_vm import PLANTED, PLANTED_KEY, SHELLCHECK, render, settings
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
    assert "${MD}/instance/guest-attributes/tpu-devops/${key}" in text and "-w '%{http_code}'" in text
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
def test_metacharacters_in_a_model_name_are_refused_everywhere_it_could_reach_the_script(tmp_path, value):
    """A model name is a Hugging Face repo id (`tpu_devops.names`): shell syntax never gets as far as the
    quoting, in the settings, an override or a copy of the settings handed to the renderer."""
    with pytest.raises(ConfigError) as err:
        settings(MODEL_NAME=value)
    assert err.value.field == "MODEL_NAME"
    with pytest.raises(ConfigError) as err:
        startup.apply_overrides(settings(), model_name=value)
    assert err.value.field == "model_name"
    with pytest.raises(ConfigError) as err:
        startup.render_startup_script(settings().model_copy(update={"model_name": value}))
    assert err.value.field == "MODEL_NAME"


def test_every_rendered_setting_is_quoted(tmp_path):
    path = render(tmp_path, MODEL_NAME="/models/gemma-4-E2B-it", VLLM_IMAGE_REPOSITORIES="localhost:5000/a/b")
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    block = text[text.index("# ---- settings (rendered) ----") : text.index("# ---- end settings ----")]
    probe = (
        block
        + '\nprintf "%s\\n" "$MODEL_NAME" "${IMAGE_REPOSITORIES[@]}"\nprintf "%s\\n" "${VLLM_ARGS[@]}"\n'
    )
    out = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[:3] == ["/models/gemma-4-E2B-it", "docker.io/vllm/vllm-tpu", "localhost:5000/a/b"]
    flags = startup.vllm_serve_flags(settings(MODEL_NAME="/models/gemma-4-E2B-it"))
    port = flags.index("--port")
    assert out[3:] == flags[:port] + flags[port + 2 :]  # the script adds each engine's --port itself


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


# The rendered script's run on a VM (secrets, env file, gcplogs, the deadline): tests/test_startup_vm.py.


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


@pytest.mark.parametrize("accel", ["v5litepod-1", "v5litepod-4", "v5litepod-8"])
def test_the_rendered_script_fits_one_answer_and_keeps_no_comment_but_its_header(
    accel: str, tmp_path: Path
) -> None:
    from tpu_devops.host.results import HOST_COMBINED_LIMIT, json_chars

    s = settings(GOOGLE_CLOUD_PROJECT="my-tpu-project", ACCELERATOR_TYPE=accel)
    result = startup.render_startup_script(s)
    saved = result.with_file(str(tmp_path))  # the answer carries the file, not the script
    text, structured = saved.host_forms()
    assert text == saved.render_text() and len(text) + json_chars(structured) <= HOST_COMBINED_LIMIT
    assert Path(saved.file.path).read_text() == result.script and structured["file"]["uri"] in text
    assert "script" not in structured and result.script not in text
    assert saved.settings_block in result.script and "VLLM_ARGS=(" in saved.settings_block
    # without a writable state directory the text carries the script itself (cut only if it must be)
    assert startup.render_startup_script(s).with_file("/proc/no-such-dir").file is None
    inline = startup.render_startup_script(s).render_text()
    assert result.script in inline
    lines = result.script.splitlines()
    assert lines[0] == "#!/bin/bash" and "startup_script.sh.tmpl" in lines[2]
    comments = [x for x in lines[3:] if x.lstrip().startswith("#")]
    assert comments == ["# ---- settings (rendered) ----", "# ---- end settings ----"]
    # a # inside a line stays, and so does the watcher unit's here-document
    assert "set -Eeuo pipefail" in result.script and "${#names[@]}" in result.script
    assert "[Service]" in result.script and "Restart=always" in result.script
