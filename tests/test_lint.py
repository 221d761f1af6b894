"""lint.py: the seed command is clean; every known vLLM-on-TPU trap is caught with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tpu_devops.errors import ConfigError, InputError
from tpu_devops.planning.lint import lint_vllm_flags, parse_serve_command

DATA = Path(__file__).parent / "data"
SEED = (DATA / "seed_serve_command.txt").read_text()
BASE = "vllm serve google/gemma-4-E2B-it --max-model-len 16384 --enable-auto-tool-choice --tool-call-parser gemma4 --reasoning-parser gemma4"


def ids(result) -> dict[str, str]:
    return {f.id: f.severity for f in result.findings}


def test_seed_command_lints_without_errors_or_warnings() -> None:
    result = lint_vllm_flags(SEED, accelerator_type="v5litepod-1")
    assert result.errors == 0 and result.warnings == 0, [f.id for f in result.findings]
    assert result.model == "google/gemma-4-E2B-it"
    assert result.flags["limit-mm-per-prompt"] == '{"image":4,"audio":1}'
    minimal = (
        "vllm serve google/gemma-4-E2B-it --max-model-len 16384 --gpu-memory-utilization 0.92 "
        "--tensor-parallel-size 1 --enable-auto-tool-choice --tool-call-parser gemma4 --reasoning-parser gemma4"
    )
    assert lint_vllm_flags(minimal).errors == 0
    # without a batch budget Gemma 4 likely refuses to boot (vLLM forces chunked MM input off)
    assert ids(lint_vllm_flags(minimal))["gemma4-batched-tokens-default"] == "warning"


@pytest.mark.parametrize(
    ("extra", "accelerator", "finding", "severity"),
    [
        ("--gpu-memory-utilization 0.95", "v5litepod-1", "memory-utilization-above-0.92", "error"),
        ("--gpu-memory-utilization 0.97", "v6e-1", "memory-utilization-high", "info"),
        ("--kv-cache-dtype fp8", "v5litepod-1", "kv-cache-fp8-on-v5e", "warning"),
        ("--kv-cache-dtype fp8_e5m2", "v6e-1", "kv-cache-fp8-check-allocation", "info"),
        ("--kv-cache-dtype int8", "v5litepod-1", "kv-cache-dtype-invalid", "error"),
        ("--max-num-batched-tokens 2496", "v5litepod-1", "batched-tokens-not-power-of-two", "warning"),
        (
            "--max-num-batched-tokens 2048 --disable-chunked-mm-input",
            "v5litepod-1",
            "chunked-mm-floor",
            "error",
        ),
        ("--disable-chunked-mm-input", "v5litepod-1", "chunked-mm-floor", "error"),
        ("--block-size 16", "v5litepod-1", "block-size-pinned", "warning"),
        ("--max-num-seqs 64", "v5litepod-1", "max-num-seqs-set", "info"),
        ("--tensor-parallel-size 4", "v5litepod-1", "tensor-parallel-exceeds-chips", "error"),
        ("--tensor-parallel-size 4", "v5litepod-4", "tensor-parallel-replicates-kv", "warning"),
        ("--limit-mm-per-prompt image=4", "v5litepod-1", "limit-mm-not-json", "error"),
        (
            """--additional-config '{"quantization": {"qwix": {"rules": [{"module_path": ".*", "weight_qtype": "int8"}], """
            """"use_abstract_model": true}}}'""",
            "v5litepod-1",
            "qwix-int8-abstract-gemma4",
            "warning",
        ),
        ("--additional-config '{quantization: qwix}'", "v5litepod-1", "additional-config-not-json", "error"),
        ("--block-size 256", "v6e-4", "block-size-pinned-large", "info"),
        ("--gpu-memory-utilization lots", "v5litepod-1", "not-a-number", "error"),
    ],
)
def test_each_trap_is_reported(extra: str, accelerator: str, finding: str, severity: str) -> None:
    result = lint_vllm_flags(f"{BASE} {extra}", accelerator_type=accelerator)
    found = ids(result)
    assert found.get(finding) == severity, found
    f = next(f for f in result.findings if f.id == finding)
    assert f.what_happens and f.why and f.source and f.fix


def test_tool_calling_flags() -> None:
    bare = ids(lint_vllm_flags("vllm serve google/gemma-4-E2B-it"))
    assert bare["tool-calling-disabled"] == "warning" and bare["reasoning-parser-missing"] == "info"
    half = ids(lint_vllm_flags("vllm serve google/gemma-4-E2B-it --enable-auto-tool-choice"))
    assert half["tool-parser-missing"] == "error"
    other = ids(lint_vllm_flags("vllm serve Qwen/Qwen3-8B --max-model-len 8192"))
    assert "tool-calling-disabled" not in other


def test_completions_health_check_on_it_model() -> None:
    result = lint_vllm_flags(SEED, health_check_path="/v1/completions")
    assert ids(result)["completions-health-check"] == "warning"
    assert "completions-health-check" not in ids(
        lint_vllm_flags(SEED, health_check_path="/v1/chat/completions")
    )


def test_docker_command_image_and_compile_cache() -> None:
    cmd = f"docker run -d --privileged --net host vllm/vllm-tpu:nightly {SEED}"
    found = ids(lint_vllm_flags(cmd))
    assert found["image-unpinned"] == "warning" and found["compile-cache-not-mounted"] == "warning"
    pinned = f"docker run -d -v /root/.cache/vllm:/root/.cache/vllm vllm/vllm-tpu@sha256:{'a' * 64} {SEED}"
    result = lint_vllm_flags(pinned)
    # a digest names no vLLM version: the only warning says so (tpu_devops.planning.images)
    assert result.errors == 0 and ids(result) == {"image-version-unknown": "warning"}
    assert result.image.startswith("vllm/vllm-tpu@sha256:")
    assert ids(lint_vllm_flags(SEED, image="vllm/vllm-tpu:latest"))["image-unpinned"] == "warning"


def test_flag_mapping_and_spellings_are_equivalent() -> None:
    a = lint_vllm_flags(
        "vllm serve google/gemma-4-E2B-it --gpu_memory_utilization=0.95 --max-num-batched-tokens=3000"
    )
    b = lint_vllm_flags(
        flags={"gpu_memory_utilization": 0.95, "max_num_batched_tokens": 3000}, model="google/gemma-4-E2B-it"
    )
    assert ids(a) == ids(b)
    multi = parse_serve_command("vllm serve \\\n  google/gemma-4-E2B-it \\\n  --max-model-len 8192 -tp 1")
    assert multi.model == "google/gemma-4-E2B-it" and multi.flags["tensor-parallel-size"] == "1"


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({}, InputError, "command"),
        ({"command": SEED, "flags": {"a": 1}}, InputError, "flags"),
        ({"command": "vllm serve 'unbalanced"}, InputError, "command"),
        ({"command": "python -m http.server"}, InputError, "command"),
        ({"command": SEED, "accelerator_type": "tpu9000"}, ConfigError, "accelerator_type"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict, error: type, field: str) -> None:
    with pytest.raises(error) as err:
        lint_vllm_flags(**kwargs)
    assert err.value.field == field and err.value.fix


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


@pytest.mark.parametrize(
    "command", ["vllm serve --", "vllm serve google/gemma-4-E2B-it --=5", "vllm serve -"]
)
def test_flags_without_a_name_are_refused(command: str) -> None:
    with pytest.raises(InputError) as err:
        lint_vllm_flags(command)
    assert err.value.field == "command" and "--name value" in (err.value.fix or "")


def test_flag_mapping_understands_json_booleans_and_strings() -> None:
    result = lint_vllm_flags(
        flags={"enable_auto_tool_choice": "yes", "tool_call_parser": "gemma4", "block_size": False},
        model="google/gemma-4-E2B-it",
    )
    assert "tool-calling-disabled" not in ids(result)  # "yes" turns the boolean flag on
    assert "block-size-pinned" not in ids(result)  # false means "not set", not a pinned block size


def test_lint_text_is_one_paragraph_per_finding() -> None:
    text = lint_vllm_flags(BASE + " --gpu-memory-utilization 0.95").render_text()
    assert "ERROR --gpu-memory-utilization 0.95: boot fails" in text
    assert "  fix: --gpu-memory-utilization 0.92" in text
    assert "findings:" not in text  # not the generic field dump


def test_machine_type_of_another_generation_is_flagged_against_the_configured_one() -> None:
    from tpu_devops.config import load_settings
    from tpu_devops.planning.lint import lint_with_defaults

    settings = load_settings(Path("/nonexistent/tpu.env"), {"ACCELERATOR_TYPE": "v5litepod-1"})
    result = lint_with_defaults(settings, command=BASE, accelerator_type="ct6e-standard-1t")
    assert result.accelerator_type == "v6e-1"
    assert any("v6e machine type" in n and "ct5lp-hightpu-1t" in n for n in result.notices)


# ---- newcomer trial: values the CLI rejects, missing values, unknown flags -----------------------


@pytest.mark.parametrize(
    ("extra", "finding", "flag"),
    [
        ("--max-model-len abc", "not-a-number", "--max-model-len"),
        ("--max-model-len -5", "flag-value-range", "--max-model-len"),
        ("--max-model-len 0", "flag-value-range", "--max-model-len"),
        ("--max-num-seqs 2.5", "not-a-number", "--max-num-seqs"),
        ("--tensor-parallel-size 0", "flag-value-range", "--tensor-parallel-size"),
        ("--max-num-batched-tokens", "flag-missing-value", "--max-num-batched-tokens"),
        ("--max-num-batched-tokens --enforce-eager", "flag-missing-value", "--max-num-batched-tokens"),
    ],
)
def test_values_the_cli_rejects_are_errors(extra: str, finding: str, flag: str) -> None:
    result = lint_vllm_flags(f"{BASE} {extra}")
    hits = [f for f in result.findings if f.id == finding]
    assert hits and hits[0].severity == "error" and hits[0].flag == flag and hits[0].fix.startswith(flag)
    assert result.errors >= 1
    if finding == "flag-value-range":
        assert ">= 1" in hits[0].why
    # a missing value is not reported as "default (2048)"
    assert not any(f.value == "default (2048)" for f in result.findings if f.flag == flag)


@pytest.mark.parametrize("value", ["16384", "16k", "16K", "1M", "auto", "-1"])
def test_forms_vllm_accepts_for_max_model_len(value: str) -> None:
    result = lint_vllm_flags(f"{BASE} --max-model-len {value}")
    assert not [f for f in result.findings if f.flag == "--max-model-len"], value


def test_flag_mapping_values_and_unknown_flags() -> None:
    result = lint_vllm_flags(flags={"max_model_len": "abc"})
    assert ids(result).get("not-a-number") == "error" and result.errors == 1
    result = lint_vllm_flags(flags={"bogus_flag": 1})
    found = [f for f in result.findings if f.id == "unknown-flag"]
    assert found and found[0].severity == "warning" and "not a vLLM serve flag" in found[0].why
    assert "no findings" not in result.render_text()
    typo = lint_vllm_flags(flags={"max_model_lenght": 16384})
    assert "--max-model-len" in [f for f in typo.findings if f.id == "unknown-flag"][0].fix
    assert lint_vllm_flags(flags={"max_model_len": 16384, "enforce_eager": True}).findings == []


def test_maintainer_verified_qwix_command_is_not_said_to_fail() -> None:
    # vllm-project/tpu-inference#2333 (field report B11): Gemma 4 31B on v6e-4 with qwix float8 weights and
    # activations, fp8 KV, 0.98 utilization and block size 256 serves; no finding may say it fails to load.
    command = (FIXTURES / "field-reports" / "B11-lint-gemma4-31b-v6e4-maintainer.txt").read_text()
    result = lint_vllm_flags(command, accelerator_type="v6e-4")
    assert result.errors == 0
    assert not [f for f in result.findings if "fails to load" in f.what_happens or "quantiz" in f.id]
    assert {f.id for f in result.findings if f.severity == "warning"} == {"tool-calling-disabled"}
    # the failing shape is still caught, and only for it
    bad = command.replace(
        '"weight_qtype": "float8_e4m3fn", "act_qtype": "float8_e4m3fn"}]',
        '"weight_qtype": "int8"}], "use_abstract_model": true',
    )
    assert "qwix-int8-abstract-gemma4" in ids(lint_vllm_flags(bad, accelerator_type="v6e-4"))
    concrete = command.replace(
        '"weight_qtype": "float8_e4m3fn", "act_qtype": "float8_e4m3fn"}]', '"weight_qtype": "int8"}]'
    )
    assert "qwix-int8-abstract-gemma4" not in ids(lint_vllm_flags(concrete, accelerator_type="v6e-4"))


def test_no_arguments_lints_the_configured_deployment() -> None:
    from tpu_devops.config import load_settings
    from tpu_devops.planning.lint import lint_with_defaults
    from tpu_devops.planning.startup import vllm_serve_flags

    settings = load_settings(
        environ={
            "TPU_DEVOPS_ENV_FILE": "/nonexistent",
            "GPU_MEMORY_UTILIZATION": "0.95",
            "MODEL_NAME": "google/gemma-4-E2B-it",
        }
    )
    result = lint_with_defaults(settings)
    assert result.notices[0].startswith("no command or flags given: linted the configured deployment")
    assert result.model == "google/gemma-4-E2B-it" and result.image == settings.vllm_image
    assert result.flags[
        "gpu-memory-utilization"
    ] == "0.95" and "--gpu-memory-utilization" in vllm_serve_flags(settings)
    assert ids(result)["memory-utilization-above-0.92"] == "error"  # the configured 0.95 on v5e is caught
    assert "compile-cache-not-mounted" not in ids(result)  # the startup script mounts the cache


@pytest.mark.parametrize(
    ("batched", "warned"),
    [(None, True), (2048, True), (1024, True), (2495, True), (2496, False), (4096, False), (8192, False)],
)
def test_a_batch_budget_under_one_gemma4_item_is_flagged_given_or_defaulted(batched, warned) -> None:
    # vLLM forces chunked multimodal input off for Gemma 4: one 2,496-token item must fit the budget,
    # whether the budget is vLLM's default or a value the user passed (reconfigure_vllm takes it too).
    flags = f" --max-num-batched-tokens {batched}" if batched else ""
    found = {f.id: f for f in lint_vllm_flags(BASE + flags, accelerator_type="v5litepod-1").findings}
    assert ("gemma4-batched-tokens-default" in found) is warned
    if warned:
        assert str(batched or 2048) in found["gemma4-batched-tokens-default"].what_happens


# ---- round three: docker run -e / --env-file, the TPU quantization list, parser families, version traps --

C08 = (FIXTURES / "field-reports" / "C08-lint-xla-cache-disabled.txt").read_text()
MOUNTED = "docker run -d --net host -v /root/.cache/vllm:/root/.cache/vllm"


def test_c08_an_empty_xla_cache_path_turns_the_compile_cache_off() -> None:
    result = lint_vllm_flags(C08)
    found = ids(result)
    assert found["xla-cache-path-empty"] == "warning" and "compile-cache-not-mounted" not in found
    finding = next(f for f in result.findings if f.id == "xla-cache-path-empty")
    assert finding.flag == "-e VLLM_XLA_CACHE_PATH" and "drop VLLM_XLA_CACHE_PATH" in finding.fix
    assert "857 s" in finding.what_happens and "#15567" in finding.source
    assert result.env == {"VLLM_XLA_CACHE_PATH": ""}


@pytest.mark.parametrize(
    ("options", "finding"),
    [
        ("-e VLLM_XLA_CACHE_PATH=", "xla-cache-path-empty"),
        ("--env VLLM_XLA_CACHE_PATH=", "xla-cache-path-empty"),
        ("--env=VLLM_XLA_CACHE_PATH=", "xla-cache-path-empty"),
        ("-eVLLM_XLA_CACHE_PATH=", "xla-cache-path-empty"),
        ("-e VLLM_DISABLE_COMPILE_CACHE=1", "compile-cache-disabled"),
        ("-e VLLM_XLA_CACHE_PATH=gs://bucket/xla-cache", "xla-cache-on-cloud-storage"),
        ("-e JAX_COMPILATION_CACHE_DIR=gs://bucket/jax", "xla-cache-on-cloud-storage"),
    ],
)
def test_docker_env_options_are_read(options: str, finding: str) -> None:
    result = lint_vllm_flags(f"{MOUNTED} {options} vllm/vllm-tpu:v0.30.0 {SEED}")
    assert ids(result)[finding] == "warning", ids(result)
    if finding == "xla-cache-on-cloud-storage":
        f = next(f for f in result.findings if f.id == finding)
        assert "marin-community/marin#2318" in f.source and "local disk" in f.fix


def test_the_cache_path_must_lie_in_a_mount() -> None:
    elsewhere = f"docker run -e VLLM_XLA_CACHE_PATH=/cache/xla -v /data:/data vllm/vllm-tpu:v0.30.0 {SEED}"
    found = next(f for f in lint_vllm_flags(elsewhere).findings if f.id == "compile-cache-not-mounted")
    assert found.value == "/cache/xla" and "-v /var/cache/xla:/cache/xla" in found.fix
    for ok in (
        f"docker run -e VLLM_XLA_CACHE_PATH=/cache/xla -v /data:/cache vllm/vllm-tpu:v0.30.0 {SEED}",
        f"docker run --mount type=bind,source=/var/cache/vllm,target=/root/.cache/vllm vllm/vllm-tpu:v0.30.0 {SEED}",
        f"docker run --volume=/root/.cache:/root/.cache vllm/vllm-tpu:v0.30.0 {SEED}",
        f"docker run -e XDG_CACHE_HOME=/xdg -v /x:/xdg/vllm vllm/vllm-tpu:v0.30.0 {SEED}",
        # the value comes from the host's environment: nothing to judge
        f"docker run -e VLLM_XLA_CACHE_PATH vllm/vllm-tpu:v0.30.0 {SEED}",
    ):
        assert not {"compile-cache-not-mounted", "xla-cache-path-empty"} & set(ids(lint_vllm_flags(ok))), ok


def test_env_files_are_read_in_docker_order_and_secrets_never_shown(tmp_path: Path) -> None:
    env_file = tmp_path / "vllm.env"
    env_file.write_text(
        "# written by the startup script\nHF_TOKEN=hf_PlantedTokenValue9876543210zyxwvu\nVLLM_XLA_CACHE_PATH=\n"
        "MODEL_IMPL_TYPE=flax_nnx\n"
    )
    cmd = f"{MOUNTED} --env-file {env_file} vllm/vllm-tpu:v0.30.0 {SEED}"
    result = lint_vllm_flags(cmd, read_env_file=lambda p: Path(p).read_text())
    finding = next(f for f in result.findings if f.id == "xla-cache-path-empty")
    assert finding.flag == f"--env-file {env_file}: VLLM_XLA_CACHE_PATH"
    assert result.env["HF_TOKEN"] == "(set)" and "hf_Planted" not in result.render_text()
    assert result.env["MODEL_IMPL_TYPE"] == "flax_nnx"
    # -e beats the env file; the env argument beats both
    fixed = f"{MOUNTED} --env-file {env_file} -e VLLM_XLA_CACHE_PATH=/root/.cache/vllm/xla vllm/vllm-tpu:v0.30.0 {SEED}"
    assert "xla-cache-path-empty" not in ids(
        lint_vllm_flags(fixed, read_env_file=lambda p: Path(p).read_text())
    )
    again = lint_vllm_flags(
        fixed, env={"VLLM_XLA_CACHE_PATH": ""}, read_env_file=lambda p: Path(p).read_text()
    )
    assert next(f for f in again.findings if f.id == "xla-cache-path-empty").flag == "env VLLM_XLA_CACHE_PATH"
    # without a reader the file is named as unread, never silently skipped
    unread = lint_vllm_flags(cmd)
    assert "xla-cache-path-empty" not in ids(unread)
    assert any(f"--env-file {env_file} was not read" in n for n in unread.notices)


def test_env_files_go_through_the_read_roots(tmp_path: Path) -> None:
    from tpu_devops.config import load_settings
    from tpu_devops.planning.lint import lint_with_defaults

    inside = tmp_path / "vllm.env"
    inside.write_text("VLLM_DISABLE_COMPILE_CACHE=1\n")
    settings = load_settings(
        environ={"TPU_DEVOPS_ENV_FILE": "/nonexistent", "TPU_DEVOPS_FILE_ROOTS": str(tmp_path)}
    )
    cmd = f"{MOUNTED} --env-file {inside} vllm/vllm-tpu:v0.30.0 {SEED}"
    assert ids(lint_with_defaults(settings, command=cmd))["compile-cache-disabled"] == "warning"
    outside = lint_with_defaults(
        settings, command=f"{MOUNTED} --env-file /etc/shadow vllm/vllm-tpu:v0.30.0 {SEED}"
    )
    assert any("--env-file /etc/shadow was not read" in n for n in outside.notices)
    # the configured deployment's env file lives on the VM: said so, not read
    configured = lint_with_defaults(settings)
    assert any("written on the TPU VM at boot" in n for n in configured.notices)


def test_env_must_map_names_to_strings() -> None:
    with pytest.raises(InputError) as err:
        lint_vllm_flags(SEED, env={"VLLM_XLA_CACHE_PATH": 3})  # type: ignore[dict-item]
    assert err.value.field == "env"


@pytest.mark.parametrize(
    ("extra", "finding", "severity"),
    [
        ("--quantization gptq", "quantization-unsupported-on-tpu", "error"),  # field report C15
        ("-q bitsandbytes", "quantization-unsupported-on-tpu", "error"),
        ("--quantization=gguf", "quantization-unsupported-on-tpu", "error"),
        ("--quantization awq", "quantization-name-changed", "warning"),  # tpu-inference renamed it auto_awq
        ("--quantization tpu_int8", "quantization-name-changed", "warning"),
        ("--quantization fp8", None, None),
        ("--quantization compressed-tensors", None, None),
    ],
)
def test_quantization_is_checked_against_the_tpu_platform_list(
    extra: str, finding: str | None, severity: str | None
) -> None:
    found = ids(lint_vllm_flags(f"{SEED} {extra}"))
    quant = {k: v for k, v in found.items() if "quantization" in k}
    assert quant == ({finding: severity} if finding else {}), found
    if finding == "quantization-unsupported-on-tpu":
        f = next(f for f in lint_vllm_flags(f"{SEED} {extra}").findings if f.id == finding)
        assert "tpu_platform.py" in f.source and "compressed-tensors" in f.fix and "bf16" in f.fix


def test_a_pre_quantized_checkpoint_is_checked_too(tmp_path: Path) -> None:
    import json

    by_name = ids(lint_vllm_flags("vllm serve example-org/gemma-4-E2B-it-GPTQ-Int4 --max-model-len 8192"))
    assert by_name["checkpoint-quantization-unsupported-on-tpu"] == "warning"
    assert "checkpoint-quantization-unsupported-on-tpu" not in ids(
        lint_vllm_flags("vllm serve example-org/gemma-4-E2B-it-AWQ --max-model-len 8192")
    )
    local = tmp_path / "ckpt"
    local.mkdir()
    (local / "config.json").write_text(
        json.dumps({"model_type": "gemma4", "quantization_config": {"quant_method": "gptq", "bits": 4}})
    )
    assert (
        ids(lint_vllm_flags(f"vllm serve {local}"))["checkpoint-quantization-unsupported-on-tpu"] == "error"
    )


def test_gemma4_parsers_on_another_family() -> None:
    c16 = (
        "vllm serve google/gemma-3-12b-it --enable-auto-tool-choice --tool-call-parser gemma4 "
        "--reasoning-parser gemma4 --max-model-len 8192 --tensor-parallel-size 2"
    )
    result = lint_vllm_flags(c16, accelerator_type="v5litepod-4")
    mismatches = {f.flag: f.severity for f in result.findings if f.id == "parser-family-mismatch"}
    assert mismatches == {"--reasoning-parser": "error", "--tool-call-parser": "warning"}
    reasoning = next(f for f in result.findings if f.flag == "--reasoning-parser")
    assert "could not locate think start/end tokens" in reasoning.what_happens
    assert "drop --reasoning-parser gemma4" in reasoning.fix and "recipes#515" in reasoning.source
    # the right family, another family's own parser, or a local path that names no family: no finding
    for ok in (
        SEED,
        "vllm serve Qwen/Qwen3-8B --reasoning-parser qwen3",
        "vllm serve /models/x --reasoning-parser gemma4",
    ):
        assert "parser-family-mismatch" not in ids(lint_vllm_flags(ok)), ok


def test_known_version_traps_are_flagged_by_lint() -> None:
    trap = lint_vllm_flags(f"{MOUNTED} vllm/vllm-tpu:v0.27.1 {SEED}")
    finding = next(f for f in trap.findings if f.id == "image-version-trap")
    assert finding.severity == "warning" and "0.28.0" in finding.fix and "5.15" in finding.fix
    assert "#49797" in finding.source
    for ok in ("v0.28.0", "v0.26.2", "v0.30.0"):
        assert "image-version-trap" not in ids(lint_vllm_flags(f"{MOUNTED} vllm/vllm-tpu:{ok} {SEED}")), ok
    # another family on the same image is not hit
    qwen = f"{MOUNTED} vllm/vllm-tpu:v0.27.1 vllm serve Qwen/Qwen3-8B --max-model-len 8192"
    assert "image-version-trap" not in ids(lint_vllm_flags(qwen))
