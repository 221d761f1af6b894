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
