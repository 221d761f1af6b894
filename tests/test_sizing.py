"""sizing.py: KV bytes per token from config geometry, HBM budget, block rounding, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tpu_devops.errors import ConfigError, InputError
from tpu_devops.planning import sizing

CONFIGS = Path(__file__).parent / "data" / "model-configs"
E2B = CONFIGS / "gemma-4-E2B-it.config.json"


def geometry(name: str) -> sizing.ModelGeometry:
    cfg, _, _ = sizing.load_model_config(str(CONFIGS / name))
    return sizing.geometry_from_config(cfg, model=name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gemma-4-E2B-it.config.json", 18_432),
        ("gemma-4-E4B-it.config.json", 57_344),
        ("Llama-3.1-8B-Instruct.config.json", 131_072),
        ("Qwen3-8B.config.json", 147_456),
    ],
)
def test_kv_bytes_per_token_from_config(name: str, expected: int) -> None:
    assert sizing.kv_breakdown(geometry(name)).bytes_per_token == expected


def test_gemma4_groups_use_their_own_head_dims_and_skip_shared_layers() -> None:
    kv = sizing.kv_breakdown(geometry("gemma-4-E2B-it.config.json"))
    sliding, full = kv.groups
    assert (sliding.kind, sliding.layers, sliding.head_dim, sliding.bytes_per_token) == (
        "sliding",
        12,
        256,
        12_288,
    )
    assert (full.kind, full.layers, full.head_dim, full.bytes_per_token) == ("full", 3, 512, 6_144)
    assert full.layer_indexes == [4, 9, 14]
    assert (kv.cache_owning_layers, kv.kv_shared_layers) == (15, 20)
    # one head_dim for every layer would give 15 KiB: a 17% error the code must not make
    assert kv.bytes_per_token != 15 * 1024
    assert kv.single_head_dim_error_pct == pytest.approx(-16.7)


def test_llama_head_dim_is_derived_only_when_the_config_lacks_it() -> None:
    g = geometry("Llama-3.1-8B-Instruct.config.json")
    assert g.head_dim == 128 and "hidden_size" in g.head_dim_source
    assert geometry("gemma-4-E2B-it.config.json").head_dim == 256  # not 1536 / 8 = 192


def test_seed_budget_on_v5e_at_16k() -> None:
    plan = sizing.plan_capacity(str(E2B), "v5litepod-1", 0.92, 16_384)
    assert plan.kv.bytes_per_token == 18_432
    assert plan.kv_tokens == pytest.approx(321_376, rel=0.005)
    assert plan.kv_tokens == 321_376
    assert plan.block_size == 32 and plan.kv_blocks * 32 == plan.kv_tokens
    b = plan.budget
    assert (b.total_gib, b.cap_gib) == (15.75, 14.49)
    assert b.weights_gib == pytest.approx(8.97, abs=0.005)
    assert b.kv_pool_gib == pytest.approx(5.52, abs=0.005)
    assert b.outside_cap_gib == pytest.approx(1.26)
    assert plan.max_concurrency == pytest.approx(19.62)


def test_block_size_scales_with_max_model_len() -> None:
    assert [sizing.block_size_for(n) for n in (2048, 8192, 16_384, 32_768, 131_072)] == [16, 16, 32, 64, 256]
    plan = sizing.plan_capacity("google/gemma-4-E2B-it", "v5litepod-1", 0.92, 32_768)
    assert plan.block_size == 64
    assert plan.kv_tokens == pytest.approx(321_344, rel=0.005)
    assert plan.kv_tokens == 321_344


def test_v6e_at_32k_matches_the_fixture_boot() -> None:
    plan = sizing.plan_capacity("google/gemma-4-E2B-it", "v6e-1", 0.92, 32_768)
    assert plan.kv_tokens == 1_151_744
    assert plan.budget.cap_gib == pytest.approx(28.74, abs=0.005)
    assert plan.budget.kv_pool_gib == pytest.approx(19.77, abs=0.005)


def test_utilization_095_on_v5e_sizes_the_pool_of_the_failed_boot_and_warns() -> None:
    plan = sizing.plan_capacity("google/gemma-4-E2B-it", "v5e-1", 0.95, 16_384)
    assert plan.kv_tokens == 348_896  # fixtures/vllm-logs/v5e1-e2b-util095-program-oom.log
    assert plan.accelerator_type == "v5litepod-1" and plan.notices
    assert any("RuntimeProgramAllocationFailure" in w for w in plan.warnings)


def test_tensor_parallel_with_one_kv_head_replicates_the_cache() -> None:
    one = sizing.plan_capacity("google/gemma-4-E2B-it", "v5litepod-4", 0.92, 16_384, tensor_parallel_size=1)
    four = sizing.plan_capacity("google/gemma-4-E2B-it", "v5litepod-4", 0.92, 16_384, tensor_parallel_size=4)
    assert four.kv.bytes_per_token == 4 * one.kv.bytes_per_token
    assert all(g.replication == 4 for g in four.kv.groups)
    assert any("multiplied" in w for w in four.warnings)


def test_clients_times_context_against_the_pool() -> None:
    busy = sizing.plan_capacity(str(E2B), "v5litepod-1", clients=64, context_tokens=8192)
    assert busy.concurrency is not None and not busy.concurrency.fits
    assert busy.concurrency.safe_limit_tokens == pytest.approx(250_000, rel=0.01)
    calm = sizing.plan_capacity(str(E2B), "v5litepod-1", clients=16, context_tokens=8192)
    assert calm.concurrency is not None and calm.concurrency.fits


def test_fp8_kv_on_v5e_gives_no_capacity() -> None:
    plan = sizing.plan_capacity(str(E2B), "v5litepod-1", kv_cache_dtype="fp8")
    assert plan.kv.bytes_per_token == 18_432 and "no capacity gain" in plan.warnings[0]


def test_weights_estimate_from_a_local_safetensors_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "Qwen3-8B.config.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16 * 2**30}})
    )
    plan = sizing.plan_capacity(str(tmp_path), "v6e-1", max_model_len=8192)
    assert plan.budget.weights_gib == pytest.approx(16.0) and "estimate" in plan.budget.weights_source


def test_unknown_weights_still_give_every_weight_independent_figure(tmp_path) -> None:
    # The plan used to be refused whole when the weights were unknown. They are now estimated from the
    # config (test_fit.py); a config too partial to count them (no intermediate_size) still plans around them.
    cfg = json.loads((CONFIGS / "Llama-3.1-8B-Instruct.config.json").read_text())
    del cfg["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    plan = sizing.plan_capacity(str(tmp_path), "v5litepod-1", clients=4, context_tokens=4096)
    assert plan.kv.bytes_per_token == 131_072 and plan.block_size == 32
    assert plan.budget.cap_gib == pytest.approx(14.49) and plan.budget.weights_gib is None
    assert plan.kv_tokens is None and plan.kv_blocks is None and plan.max_concurrency is None
    assert plan.kv_tokens_per_gib == 8192 and plan.request_kv_gib == pytest.approx(2.0)
    assert plan.max_weights_gib == pytest.approx(12.49)
    assert plan.weights_missing and "weights_gib" in plan.weights_missing
    assert plan.concurrency is not None and plan.concurrency.fits is None
    assert "at most 11.93 GiB" in plan.concurrency.verdict
    text = plan.render_text()
    assert "weights unknown" in plan.headline() and "8,192 KV tokens" in plan.headline()
    assert "131,072 B/token" in text and "pass weights_gib" in text
    qwen = sizing.plan_capacity(str(CONFIGS / "Qwen3-8B.config.json"), "v6e-1")
    assert qwen.kv.bytes_per_token == 147_456 and qwen.kv_tokens == 98_176  # weights estimated: 8.19 B x 2 B
    assert qwen.budget.weights_source.startswith("estimate: 8.19 B parameters from config.json")
    # a weights_gib that is given but wrong is still refused
    with pytest.raises(InputError) as err:
        sizing.plan_capacity(str(CONFIGS / "Qwen3-8B.config.json"), "v6e-1", weights_gib=-1)
    assert err.value.field == "weights_gib"


def test_weights_that_do_not_fit_are_refused() -> None:
    # was a plan with "-85.51 GiB pool" (newcomer trial: weights_gib=100)
    for weights in (14.96, 100):
        with pytest.raises(InputError) as err:
            sizing.plan_capacity(
                str(CONFIGS / "Llama-3.1-8B-Instruct.config.json"), "v5litepod-1", weights_gib=weights
            )
        assert err.value.field == "weights_gib" and err.value.value == weights
        assert "does not fit" in err.value.message and "cap 14.49 GiB" in err.value.message
        assert "tensor_parallel_size" in err.value.fix


def test_tensor_parallel_below_one_says_so() -> None:
    # was "v5litepod-1 has 1 chip(s)" for tensor_parallel_size=-2
    for tp in (0, -2):
        with pytest.raises(InputError) as err:
            sizing.plan_capacity("google/gemma-4-E2B-it", tensor_parallel_size=tp, weights_gib=9)
        assert err.value.field == "tensor_parallel_size" and ">= 1" in err.value.message


def test_ranges_match_settings_and_startup() -> None:
    from tpu_devops.config import GPU_MEMORY_UTILIZATION_RANGE, MAX_MODEL_LEN_RANGE

    lo, hi = MAX_MODEL_LEN_RANGE
    ulo, uhi = GPU_MEMORY_UTILIZATION_RANGE
    for kwargs in (
        {"max_model_len": lo - 1},
        {"max_model_len": hi + 1},
        {"gpu_memory_utilization": uhi + 0.005},
    ):
        with pytest.raises(InputError):
            sizing.plan_capacity("google/gemma-4-E2B-it", weights_gib=9, **kwargs)
    assert sizing.plan_capacity(
        "google/gemma-4-E2B-it", max_model_len=lo, gpu_memory_utilization=ulo, weights_gib=1
    )


@pytest.mark.parametrize(
    ("content", "field_part"),
    [
        ("{not json", "model"),
        (json.dumps({"model_type": "llama", "hidden_size": 4096}), "model"),
        (
            json.dumps(
                {
                    "model_type": "gemma4",
                    "num_hidden_layers": 35,
                    "num_attention_heads": 8,
                    "hidden_size": 1536,
                }
            ),
            "model",
        ),
        (json.dumps({"num_hidden_layers": -3, "num_attention_heads": 8}), "model"),
    ],
)
def test_bad_config_files_name_the_field(tmp_path: Path, content: str, field_part: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(InputError) as err:
        sizing.plan_capacity(str(path), weights_gib=5)
    assert field_part in (err.value.field or "") and err.value.fix


def test_missing_attention_fields_are_named(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    with pytest.raises(InputError) as err:
        sizing.plan_capacity(str(path), weights_gib=5)
    assert err.value.value == "num_hidden_layers"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_model_len": -1}, "max_model_len"),
        ({"max_model_len": 10**9}, "max_model_len"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"tensor_parallel_size": 2}, "tensor_parallel_size"),
        ({"weights_gib": -1.0}, "weights_gib"),
        ({"clients": 4}, "context_tokens"),
        ({"clients": 0, "context_tokens": 100}, "clients"),
    ],
)
def test_bad_numbers_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        sizing.plan_capacity(str(E2B), "v5litepod-1", **kwargs)
    assert err.value.field == field


def test_unknown_accelerator_and_missing_file() -> None:
    with pytest.raises(ConfigError) as err:
        sizing.plan_capacity(str(E2B), "v9z-1")
    assert err.value.field == "accelerator_type"
    with pytest.raises(InputError) as err:
        sizing.plan_capacity(str(Path(tempfile.gettempdir()) / "nonexistent" / "config.json"))
    assert err.value.field == "model" and "config.json" in (err.value.fix or "")
    with pytest.raises(InputError) as err:  # outside the directories tools may read
        sizing.plan_capacity("/nonexistent/config.json")
    assert err.value.field == "model" and "TPU_DEVOPS_FILE_ROOTS" in (err.value.fix or "")
    with pytest.raises(InputError):
        sizing.plan_capacity("not a repo id")


def test_offline_repo_id_that_is_not_bundled_says_to_pass_a_path(tmp_path: Path) -> None:
    code = (
        "from tpu_devops.planning import sizing\n"
        "from tpu_devops.errors import InputError\n"
        "try:\n    sizing.plan_capacity('someone/unknown-model-xyz')\n"
        "except InputError as e:\n    print(e.field, '|', e.fix)\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert out.stdout.startswith("model |") and "local config.json" in out.stdout, out.stderr


# ---- a repo id that is not bundled: the real huggingface_hub client against a local fake Hub ------


def _fake_hub():
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    body = (CONFIGS / "Llama-3.1-8B-Instruct.config.json").read_bytes()

    async def resolve(request: Request) -> Response:
        repo = f"{request.path_params['owner']}/{request.path_params['name']}"
        if repo == "acme/gated":
            return JSONResponse(
                {"error": f"Access to model {repo} is restricted."}, 403, {"X-Error-Code": "GatedRepo"}
            )
        if repo != "acme/tiny-llama":
            return JSONResponse({"error": "Repository not found"}, 404, {"X-Error-Code": "RepoNotFound"})
        headers = {"X-Repo-Commit": "a" * 40, "ETag": '"cafe"', "Content-Length": str(len(body))}
        return Response(
            b"" if request.method == "HEAD" else body, 200, headers, media_type="application/json"
        )

    return Starlette(routes=[Route("/{owner}/{name}/resolve/{rev}/{file}", resolve, methods=["GET", "HEAD"])])


def test_repo_id_is_fetched_from_the_hub_with_huggingface_hub(tmp_path: Path) -> None:
    from tests.fakes.http_runner import ServerThread

    code = (
        "import sys\n"
        "from tpu_devops.planning import sizing\n"
        "from tpu_devops.errors import InputError\n"
        "plan = sizing.plan_capacity('acme/tiny-llama', 'v6e-1', weights_gib=15.0, max_model_len=8192)\n"
        "print(plan.kv.bytes_per_token, plan.config_source)\n"
        "for repo in ('acme/gated', 'acme/nothing-here'):\n"
        "    try:\n        sizing.plan_capacity(repo, weights_gib=1)\n"
        "    except InputError as e:\n        print(e.field, '|', e.message)\n"
    )
    with ServerThread(_fake_hub()) as hub:
        env = {
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf"),
            "PATH": "/usr/bin:/bin",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parent.parent,
        )
    lines = out.stdout.splitlines()
    assert lines[0] == "131072 huggingface.co/acme/tiny-llama/config.json", out.stderr[-2000:]
    assert lines[1].startswith("model |") and "gated" in lines[1]
    assert lines[2].startswith("model |") and "no such Hugging Face repository" in lines[2]


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("global_head_dim", "abc"),
        ("global_head_dim", -512),
        ("num_kv_shared_layers", [1]),
        ("max_position_embeddings", "big"),
        ("num_global_key_value_heads", 1.5),
    ],
)
def test_malformed_optional_config_fields_are_named_not_crashes(key: str, value: object) -> None:
    cfg = json.loads(E2B.read_text())
    cfg["text_config"][key] = value
    with pytest.raises(InputError) as err:
        sizing.geometry_from_config(cfg, model="bad.json")
    assert key in err.value.message and err.value.value == value and err.value.fix


def test_range_errors_print_whole_numbers_readably() -> None:
    with pytest.raises(InputError) as err:
        sizing.plan_capacity("google/gemma-4-E2B-it", max_model_len=0)
    assert "1,048,576" in str(err.value) and "e+06" not in str(err.value)


def test_machine_type_of_another_generation_warns_against_the_configured_accelerator() -> None:
    from tpu_devops.config import load_settings

    settings = load_settings(Path("/nonexistent/tpu.env"), {"ACCELERATOR_TYPE": "v5litepod-1"})
    plan = sizing.plan_capacity_with_defaults(settings, accelerator_type="ct6e-standard-1t")
    assert plan.accelerator_type == "v6e-1"
    assert "v6e machine type" in plan.warnings[0] and "ct5lp-hightpu-1t" in plan.warnings[0]
    same = sizing.plan_capacity_with_defaults(settings, accelerator_type="ct5lp-hightpu-1t")
    assert not any("machine type" in w for w in same.warnings)


def test_plan_text_is_a_short_summary_not_a_field_dump() -> None:
    text = sizing.plan_capacity("google/gemma-4-E2B-it", clients=64, context_tokens=8192).render_text()
    assert text.splitlines()[0].startswith("google/gemma-4-E2B-it on v5litepod-1: 321,376 KV tokens")
    assert "12 x 1 x 2 x 256 x 2 B + 3 x 1 x 2 x 512 x 2 B = 18,432 B/token" in text
    assert "cap 14.49" in text and "load: 64 x 8,192" in text
    assert "layer_indexes" not in text and len(text.splitlines()) < 20
