"""Fit before money (`tpu_devops.planning.fit`, `params`, `checkpoint`): the weights of a model that is
not downloaded are estimated from its config.json, and a model that cannot fit the slice beside one
request's KV cache is refused, naming a slice that fits; a base checkpoint is flagged for chat.

Published parameter counts the estimate is checked against (the models' Hugging Face pages): Llama 3.1 8B
8.03 B, Qwen3 8B 8.19 B (its cross-check: a vLLM boot of a Qwen3 8B reported "Model loading took 15.27
GiB"; the estimate is 15.26 GiB), Gemma 3 27B 27.4 B, Llama 3.1 70B 70.6 B.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.hub import config_bytes, hub_app, seed_cache
from tpu_devops.errors import ConfigError, InputError
from tpu_devops.planning import fit, lint, params, sizing
from tpu_devops.planning.checkpoint import chat_checkpoint

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "model-configs"
GEMMA3 = CONFIGS / "gemma-3-27b-it.config.json"


def cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.config.json").read_text())


@pytest.mark.parametrize(
    ("name", "billions", "gib"),
    [
        ("Llama-3.1-8B-Instruct", 8.03, 14.96),
        ("Qwen3-8B", 8.19, 15.26),
        ("gemma-3-27b-it", 27.43, 51.09),
        ("Llama-3.1-70B-Instruct", 70.55, 131.42),
    ],
)
def test_the_parameter_count_matches_the_published_one(name: str, billions: float, gib: float) -> None:
    count = params.count_parameters(cfg(name), model=name)
    assert count.total / 1e9 == pytest.approx(billions, abs=0.01), count.parts
    estimate = params.estimate_from_config(f"nobody/{name}", cfg(name))
    assert estimate.gib == pytest.approx(gib, abs=0.01) and "parameters from config.json" in estimate.source
    assert "x 2 B (bfloat16 checkpoint" in estimate.source and count.formula in estimate.source


def test_gemma3_fields_left_out_of_its_config_take_the_transformers_defaults() -> None:
    count = params.count_parameters(cfg("gemma-3-27b-it"))
    assert "vocab_size 262,208 is the gemma3_text default" in count.notes[0]
    assert count.parts["vision"] == pytest.approx(417e6, rel=0.01)  # SigLIP 27 layers + projector
    assert count.parts["embedding"] == 262_208 * 5376  # tied: counted once


def test_moe_quantized_and_partial_configs() -> None:
    moe = {
        "model_type": "qwen3_moe", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "hidden_size": 256, "intermediate_size": 1024, "moe_intermediate_size": 128,
        "num_experts": 8, "vocab_size": 1000, "tie_word_embeddings": False,
    }  # fmt: skip
    count = params.count_parameters(moe)
    assert count.parts["mlp"] == 4 * (8 * 3 * 256 * 128 + 256 * 8) and "8 experts" in count.notes[0]
    assert (
        params.served_bytes_per_parameter({"quantization_config": {"quant_method": "awq", "bits": 4}})[0]
        == 0.5
    )
    assert params.served_bytes_per_parameter({"quantization_config": {"quant_method": "fp8"}})[0] == 1.0
    assert params.served_bytes_per_parameter({"torch_dtype": "float32"})[0] == 2.0
    with pytest.raises(InputError) as err:  # nothing to count the MLP with: said, not guessed
        params.count_parameters(
            {k: v for k, v in moe.items() if k not in ("num_experts", "intermediate_size")}
        )
    assert "intermediate_size" in err.value.message


def test_gemma3_27b_does_not_fit_one_v5e_chip_and_the_fix_names_slices_that_fit() -> None:
    found = (cfg("gemma-3-27b-it"), "test", None)
    verdict = fit.check_fit("google/gemma-3-27b-it", "v5litepod-1", max_model_len=16384, found=found)
    assert verdict.fits is False and verdict.weights_gib == pytest.approx(51.085, abs=0.01)
    assert verdict.cap_gib == pytest.approx(14.49) and verdict.request_kv_gib == pytest.approx(7.75)
    assert verdict.fitting == ["v5litepod-8 (TENSOR_PARALLEL_SIZE=8)", "v6e-4 (TENSOR_PARALLEL_SIZE=4)"]
    assert "does not fit v5litepod-1" in verdict.message() and "ACCELERATOR_TYPE=v5litepod-8" in verdict.fix()
    four = fit.check_fit("google/gemma-3-27b-it", "v5litepod-4", tensor_parallel_size=4, max_model_len=16384,
                         found=found)  # fmt: skip
    assert four.fits is False and four.max_model_len_that_fits == 14336  # 51.09 + 7.75 > 57.96 GiB
    shorter = fit.check_fit("google/gemma-3-27b-it", "v5litepod-4", tensor_parallel_size=4, max_model_len=14336,
                            found=found)  # fmt: skip
    assert shorter.fits is True
    whole = fit.check_fit("google/gemma-3-27b-it", "v5litepod-8", tensor_parallel_size=8, found=found)
    assert whole.max_model_len == 131_072 and "max_position_embeddings" in whole.max_model_len_source


@pytest.mark.parametrize(
    ("name", "accel", "tp", "fits"),
    [
        ("Llama-3.1-8B-Instruct", "v5litepod-1", 1, False),  # 14.96 GiB of weights over a 14.49 GiB cap
        ("Llama-3.1-8B-Instruct", "v6e-1", 1, True),
        ("Llama-3.1-8B-Instruct", "v5litepod-4", 4, True),
        ("Qwen3-8B", "v5litepod-1", 1, False),
        ("Qwen3-8B", "v6e-1", 1, True),
        ("Llama-3.1-70B-Instruct", "v5litepod-8", 8, False),
        ("Llama-3.1-70B-Instruct", "v6e-8", 8, True),
        ("gemma-4-E2B-it", "v5litepod-1", 1, True),  # measured 8.97 GiB
    ],
)
def test_fit_verdicts(name: str, accel: str, tp: int, fits: bool) -> None:
    verdict = fit.check_fit(f"x/{name}", accel, tensor_parallel_size=tp, max_model_len=16384,
                            found=(cfg(name), "test", None))  # fmt: skip
    assert verdict.fits is fits, verdict.message()
    if not fits:
        assert verdict.fitting, verdict


def test_a_model_whose_config_is_not_here_is_not_checked_and_not_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    verdict = fit.check_fit("someone/not-here", "v5litepod-1")
    assert verdict.fits is None and "not on this machine" in verdict.unknown_because


def _plan_in(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin", "NO_GCE_CHECK": "true", **env},
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


def test_config_in_the_hf_cache_without_weights_is_estimated_and_refused(tmp_path) -> None:
    """The issue's reproduction: google/gemma-3-27b-it's config.json in the Hugging Face cache (put there
    by the real client), no weights; offline. plan_capacity and the settings' gate refuse it on
    v5litepod-1, naming v5litepod-8; with the safetensors index cached too, its size is used instead."""
    seed_cache(tmp_path / "hf", "google/gemma-3-27b-it", {"config.json": config_bytes(GEMMA3)})
    code = (
        "from tpu_devops.planning import sizing, fit\n"
        "from tpu_devops.config import load_settings\n"
        "from tpu_devops.errors import InputError, ConfigError\n"
        "try:\n    sizing.plan_capacity('google/gemma-3-27b-it', 'v5litepod-1')\n"
        "except InputError as e:\n    print('PLAN', e.field, '|', e.message, '|', e.fix)\n"
        f"s = load_settings(environ={{'MODEL_NAME': 'google/gemma-3-27b-it', 'TPU_DEVOPS_ENV_FILE': '{tmp_path}/none'}})\n"
        "try:\n    fit.fit_gate(s)\n"
        "except ConfigError as e:\n    print('GATE', e.field, '|', e.message, '|', e.fix)\n"
    )
    out = _plan_in({"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}, code)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("PLAN model | the model does not fit: weights 51.08 GiB"), (
        out.stdout + out.stderr[-2000:]
    )
    assert "27.43 B parameters from config.json" in lines[0] and "v5litepod-8" in lines[0]
    assert lines[1].startswith("GATE MODEL_NAME | google/gemma-3-27b-it does not fit v5litepod-1"), lines
    assert "ACCELERATOR_TYPE=v5litepod-8 (TENSOR_PARALLEL_SIZE=8)" in lines[1]
    seed_cache(tmp_path / "hf", "google/gemma-3-27b-it", {
        "model.safetensors.index.json": json.dumps({"metadata": {"total_size": 54_813_410_048}}).encode()
    })  # fmt: skip
    out = _plan_in({"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}, code)
    assert "checkpoint size from the cached model.safetensors.index.json" in out.stdout, out.stdout


def test_the_hub_metadata_is_used_where_the_config_comes_from_the_hub(tmp_path) -> None:
    from tests.fakes.http_runner import ServerThread

    app = hub_app({"acme/big": {"config.json": config_bytes(GEMMA3)}},
                  parameters={"acme/big": {"BF16": 27_432_406_640}})  # fmt: skip
    code = (
        "from tpu_devops.planning import sizing\n"
        "from tpu_devops.errors import InputError\n"
        "try:\n    sizing.plan_capacity('acme/big', 'v5litepod-1')\n"
        "except InputError as e:\n    print(e.message)\n"
    )
    with ServerThread(app) as hub:
        out = _plan_in({"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT),
                        "HF_HUB_DISABLE_TELEMETRY": "1"}, code)  # fmt: skip
    assert "27.43 B parameters (Hugging Face Hub safetensors metadata)" in out.stdout, (
        out.stdout + out.stderr[-2000:]
    )


def test_lint_refuses_a_model_that_cannot_fit_and_flags_a_base_model(tmp_path) -> None:
    big = tmp_path / "gemma-3-27b-it"
    big.mkdir()
    (big / "config.json").write_bytes(GEMMA3.read_bytes())
    result = lint.lint_vllm_flags(
        command=f"vllm serve {big} --max-model-len 16384 --gpu-memory-utilization 0.92", accelerator_type="v5litepod-1"
    )  # fmt: skip
    found = {f.id: f for f in result.findings}
    assert found["model-does-not-fit"].severity == "error" and result.errors >= 1
    assert "v5litepod-8" in found["model-does-not-fit"].fix
    fits = lint.lint_vllm_flags(
        command=f"vllm serve {big} --max-model-len 16384 --tensor-parallel-size 8", accelerator_type="v5litepod-8"
    )  # fmt: skip
    assert "model-does-not-fit" not in {f.id for f in fits.findings}
    base = lint.lint_vllm_flags(
        command="vllm serve google/gemma-4-e2b --enable-auto-tool-choice --tool-call-parser gemma4",
        accelerator_type="v5litepod-1",
    )
    flagged = {f.id: f for f in base.findings}["base-model-for-chat"]
    assert flagged.severity == "warning" and "google/gemma-4-e2b-it" in flagged.fix
    assert "tool" in flagged.what_happens
    assert "base-model-for-chat" not in {f.id for f in lint.lint_vllm_flags(
        command="vllm serve google/gemma-4-E2B-it", accelerator_type="v5litepod-1").findings}  # fmt: skip


@pytest.mark.parametrize(
    ("model", "verdict"),
    [
        ("google/gemma-4-E2B-it", "instruct"),
        ("google/gemma-4-e2b", "base"),
        ("google/gemma-3-27b-pt", "base"),
        ("meta-llama/Llama-3.1-8B-Instruct", "instruct"),
        ("meta-llama/Llama-3.1-8B", "base"),
        ("mistralai/Mistral-7B-v0.1", "base"),
        ("Qwen/Qwen2.5-7B", "base"),
        ("Qwen/Qwen3-8B", "unknown"),  # Qwen3's plain ids are post-trained; -Base is the base one
        ("Qwen/Qwen3-8B-Base", "base"),
        ("/models/gemma-4-E2B-it/config.json", "instruct"),
        ("acme/something", "unknown"),
    ],
)
def test_instruction_tuned_checkpoints_by_their_publishers_naming(model: str, verdict: str) -> None:
    judged = chat_checkpoint(model)
    assert judged.verdict == verdict, judged
    assert (judged.warning() is not None) == (verdict == "base")


def test_the_gate_refuses_with_the_model_field(gcp_settings) -> None:
    settings = gcp_settings.model_copy(update={"model_name": str(GEMMA3)})
    with pytest.raises(ConfigError) as err:
        fit.fit_gate(settings)
    assert err.value.field == "MODEL_NAME" and "v5litepod-8" in err.value.fix
    assert fit.fit_gate(gcp_settings) == []  # the default Gemma 4 E2B on v5litepod-1 fits


def test_sizing_helpers_agree_with_the_plan() -> None:
    geom = sizing.geometry_from_config(cfg("Llama-3.1-8B-Instruct"))
    one = sizing.resolve_accelerator_type("v5litepod-1")
    assert not sizing.fit_of(geom, one, 14.96, 1, 0.92, 16384).fits
    assert sizing.fit_of(geom, one, 12.0, 1, 0.92, 16384).fits
    assert sizing.longest_that_fits(geom, one, 13.0, 1, 0.92) == 11264
