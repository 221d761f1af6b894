"""plan_scale_out: the per-replica curve, the step model, sizing and ranking of the three shapes, and the
idle-chip checks in plan_capacity and lint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import gcp_environ
from tests.mcp_session import mcp_client
from tpu_devops.config import load_settings
from tpu_devops.errors import InputError
from tpu_devops.planning import lint, scaleout, sizing
from tpu_devops.serving.benchmark import BenchmarkResult, Cell

pytestmark = pytest.mark.anyio

BENCH = Path(__file__).parent / "data" / "bench"
SEED_RATIOS = {16: 1.39, 64: 2.52, 256: 3.36}  # DESIGN §3: four one-chip E2B engines vs one TP=4, v5e-4


@pytest.fixture
def settings(tmp_path: Path):
    return load_settings(
        environ={"TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"), "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
    )


async def plan(settings, **kw):
    kw.setdefault("usd_per_chip_hour", 0.6)
    return await scaleout.plan_scale_out(settings, **kw)


# ---- the curve ------------------------------------------------------------------------------------


def test_bundled_curve_is_the_seed_sweep_and_says_so() -> None:
    curve = scaleout.load_curve(None)
    assert curve.bundled and "BUNDLED FIXTURE" in curve.source
    assert [p.concurrency for p in curve.points] == [1, 64]
    assert curve.prompt_tokens == 128 and curve.output_tokens == 128
    assert 1024 in curve.other_prompt_lengths and 8192 in curve.other_prompt_lengths
    near_8k = scaleout.load_curve(None, prompt_tokens=7000)
    assert near_8k.prompt_tokens == 8192 and [p.concurrency for p in near_8k.points] == [16, 64]


def test_curve_from_run_benchmark_results_json(tmp_path: Path) -> None:
    def cell(c: int, rate: float, tpot: float) -> Cell:
        return Cell(
            concurrency=c, prompt_tokens_target=512, prompt_tokens_measured=509.0, output_tokens_mean=128.0,
            requests=2 * c, completed=2 * c, failures=0, duration_s=10.0, output_tokens_per_s=rate,
            median_ttft_ms=50.0 + c, p99_ttft_ms=None, median_tpot_ms=tpot, per_stream_tokens_per_s=None,
            usd_per_million_output_tokens=None, kv_tokens_demand=None, source="measured",
        )  # fmt: skip

    result = BenchmarkResult(
        endpoint="http://127.0.0.1:1", model="google/gemma-4-E2B-it", output_len=128, price=None,
        kv_pool_tokens=None, kv_pool_source=None, best=None, files={},
        cells=[cell(1, 100.0, 9.0), cell(8, 600.0, 12.0), cell(32, 1200.0, 25.0)],
    )  # fmt: skip
    path = tmp_path / "results.json"
    path.write_text(json.dumps(result.model_dump(mode="json")))
    curve = scaleout.load_curve(str(path))
    assert not curve.bundled and curve.model == "google/gemma-4-E2B-it"
    assert [p.concurrency for p in curve.points] == [1, 8, 32]
    assert curve.points[0].source == "run_benchmark: results.json"


def test_curve_needs_two_concurrency_levels_at_one_prompt_length(tmp_path: Path) -> None:
    for name in ("v5e1-e2b-c128-u64.json", "v5e1-e2b-c1024-u16.json"):
        (tmp_path / name).write_bytes((BENCH / name).read_bytes())
    with pytest.raises(InputError) as err:
        scaleout.load_curve(str(tmp_path))
    assert err.value.field == "curve" and "two" in err.value.message
    with pytest.raises(InputError) as err:
        scaleout.load_curve(str(tmp_path / "missing"))
    assert err.value.field == "curve"
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError):
        scaleout.load_curve(str(tmp_path / "bad.json"))


def test_a_curve_that_does_not_slow_down_is_refused(tmp_path: Path, settings) -> None:
    for c, rate in ((1, 100.0), (64, 9000.0)):  # 64 streams faster per stream than 1: no extrapolation
        data = json.loads((BENCH / "v5e1-e2b-c128-u64.json").read_text())
        data.update(max_concurrency=c, output_throughput=rate)
        (tmp_path / f"u{c}.json").write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        import anyio

        anyio.run(
            lambda: scaleout.plan_scale_out(settings, streams=64, curve=str(tmp_path), usd_per_chip_hour=1)
        )
    assert err.value.field == "curve" and "does not grow" in err.value.message


# ---- the model against the seed measurements ---------------------------------------------------------


@pytest.mark.parametrize("streams", [16, 64, 256])
async def test_one_chip_engines_beat_tp4_on_a_v5e4_near_the_seed_ratios(settings, streams: int) -> None:
    result = await plan(settings, streams=streams, chips=4)
    assert result.winner == "engines-per-host"
    by = {o.shape: o for o in result.options}
    assert [o.shape for o in result.options].index("tensor-parallel") > 0
    tp = by["tensor-parallel"]
    assert tp.kv_replication == 4 and tp.tensor_parallel_size == 4 and tp.chips == 4
    ratio = by["engines-per-host"].output_tokens_per_s / tp.output_tokens_per_s
    assert result.tp_ratio == pytest.approx(ratio, rel=1e-3)
    assert ratio == pytest.approx(SEED_RATIOS[streams], rel=0.06)  # predicted from the v5e-1 curve alone
    assert by["engines-per-host"].usd_per_hour == pytest.approx(2.4)
    assert by["single-chip-nodes"].usd_per_hour == pytest.approx(2.4 + scaleout.GKE_CLUSTER_FEE_USD_PER_HOUR)
    text = result.render_text()
    assert "BUNDLED" in text and "host-side" in result.why and "KV replicated 4x" in text


async def test_step_model_splits_device_and_host_time(settings) -> None:
    result = await plan(settings, streams=64, chips=4)
    m = result.step_model
    assert m.fixed_ms == pytest.approx(7.74, abs=0.05)  # 1 / 119.9 tok/s and 64 / 1,381.5 tok/s
    assert m.per_stream_ms == pytest.approx(0.603, abs=0.005)
    assert m.device_fixed_ms + m.host_fixed_ms == pytest.approx(m.fixed_ms, abs=1e-3)
    assert m.streamed_weight_gb == pytest.approx(3.38, abs=0.05)  # dense E2B weights, no per-layer embeddings
    assert m.host_per_stream_ms / m.per_stream_ms > 0.9


async def test_throughput_target_sizes_each_shape(settings) -> None:
    result = await plan(settings, target_output_tokens_per_s=5000, tpot_ms=40)
    by = {o.shape: o for o in result.options}
    assert result.winner == "engines-per-host" and by["engines-per-host"].accelerator_type == "v5litepod-4"
    nodes = by["single-chip-nodes"]
    assert nodes.feasible and nodes.hosts == 4  # ceil(5000 / 1,255 tok/s per chip at TPOT <= 40 ms)
    assert nodes.median_tpot_ms <= 40
    assert not by["tensor-parallel"].feasible and "at most" in by["tensor-parallel"].why_not
    assert by["engines-per-host"].usd_per_million_output_tokens == pytest.approx(
        2.4 / (5000 * 3600) * 1e6, rel=1e-3
    )


async def test_ttft_objective_adds_nodes_and_a_small_load_prefers_one_chip(settings) -> None:
    loose = await plan(settings, streams=100)
    assert loose.winner == "single-chip-nodes" and loose.options[0].hosts == 1  # one chip holds 100 streams
    tight = await plan(settings, streams=100, ttft_ms=300)
    nodes = next(o for o in tight.options if o.shape == "single-chip-nodes")
    assert nodes.hosts == 2 and nodes.median_ttft_ms <= 300
    tp = next(o for o in tight.options if o.shape == "tensor-parallel")
    assert not tp.feasible and "TTFT" in tp.why_not


async def test_impossible_objective_says_nothing_meets_it(settings) -> None:
    result = await plan(settings, streams=8, tpot_ms=1)
    assert result.winner is None and not any(o.feasible for o in result.options)
    assert result.headline().startswith("no shape meets 8 streams within TPOT <= 1 ms")


async def test_kv_pool_caps_streams_per_engine_at_long_context(settings, tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:  # 64 x 8K overflows the pool: only one cell left to fit
        await plan(settings, streams=64, prompt_tokens=8192, chips=4)
    assert err.value.field == "curve" and "KV pool" in err.value.message
    for c, rate in ((1, 110.0), (16, 700.0)):
        data = json.loads((BENCH / "v5e1-e2b-c128-u64.json").read_text())
        n = data["completed"]
        data.update(max_concurrency=c, output_throughput=rate, total_input_tokens=2048 * n)
        (tmp_path / f"u{c}.json").write_text(json.dumps(data))
    result = await plan(settings, streams=256, chips=4, curve=str(tmp_path))
    host = next(o for o in result.options if o.shape == "engines-per-host")
    # 78% of 321,376 tokens / (2,048 + 128) = 115 streams per one-chip engine
    assert host.max_streams_per_engine == 115 and host.feasible
    tp = next(o for o in result.options if o.shape == "tensor-parallel")
    assert tp.max_streams_per_engine == 255 and not tp.feasible and "holds" in tp.why_not


@pytest.mark.parametrize(
    "kw, field",
    [
        ({}, "target_output_tokens_per_s"),
        ({"streams": 4, "target_output_tokens_per_s": 10.0}, "streams"),
        ({"streams": 0}, "streams"),
        ({"target_output_tokens_per_s": -5.0}, "target_output_tokens_per_s"),
        ({"streams": 4, "chips": 3}, "chips"),
        ({"streams": 4, "tpot_ms": 0}, "tpot_ms"),
        ({"streams": 4, "provisioning_model": "cheap"}, "provisioning_model"),
    ],
)
async def test_bad_input_names_the_field(settings, kw: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        await plan(settings, **kw)
    assert err.value.field == field


async def test_live_price_from_the_billing_fake(fake_gcp, tmp_path: Path) -> None:
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    result = await scaleout.plan_scale_out(settings, streams=64, chips=4, provisioning_model="spot")
    assert (
        result.usd_per_chip_hour
        and "Billing Catalog" in result.price_source
        or "fallback" in result.price_source
    )
    host = next(o for o in result.options if o.shape == "engines-per-host")
    assert host.usd_per_hour == pytest.approx(4 * result.usd_per_chip_hour)


# ---- idle chips: plan_capacity and lint ------------------------------------------------------------------


def test_plan_capacity_on_v5litepod8_with_tp1_says_one_chip_of_eight() -> None:
    result = sizing.plan_capacity("google/gemma-4-E2B-it", "v5litepod-8")
    assert "uses 1 of 8 chips" in result.headline()
    assert any("1 of the 8 chips" in w and "idle" in w for w in result.warnings)
    assert result.budget.chips == 1 and result.budget.slice_chips == 8
    full = sizing.plan_capacity("google/gemma-4-E2B-it", "v5litepod-1")
    assert "chips" not in full.headline() and not any("idle" in w for w in full.warnings)


@pytest.mark.parametrize(
    "command, accel, engines, idle",
    [
        ("vllm serve google/gemma-4-E2B-it", "v5litepod-8", 1, "7 of the 8 chips"),
        ("vllm serve google/gemma-4-E2B-it --tensor-parallel-size 2", "v5litepod-4", 1, "2 of the 4 chips"),
        ("vllm serve google/gemma-4-E2B-it -tp=1", "v5litepod-4", 2, "2 of the 4 chips"),
        ("vllm serve google/gemma-4-E2B-it", "v5litepod-4", 4, None),
        ("vllm serve google/gemma-4-E2B-it --tensor-parallel-size 4", "v5litepod-4", 1, None),
        ("vllm serve google/gemma-4-E2B-it", "v5litepod-1", 1, None),
    ],
)
def test_lint_flags_chips_paid_for_and_idle(command: str, accel: str, engines: int, idle: str | None) -> None:
    result = lint.lint_vllm_flags(command=command, accelerator_type=accel, engines=engines)
    found = [f for f in result.findings if f.id == "chips-idle"]
    if idle is None:
        assert not found
        return
    assert len(found) == 1 and idle in found[0].what_happens and found[0].severity == "warning"
    assert "fits one chip" in found[0].fix  # E2B: 8.97 GiB of weights on a 15.75 GiB chip


def test_lint_flags_tp_that_replicates_the_kv_cache_and_unknown_models_get_a_generic_fix() -> None:
    tp4 = lint.lint_vllm_flags(
        command="vllm serve google/gemma-4-E2B-it --tensor-parallel-size 4", accelerator_type="v5litepod-4"
    )
    assert any(f.id == "tensor-parallel-replicates-kv" for f in tp4.findings)
    other = lint.lint_vllm_flags(command="vllm serve someone/unknown-model", accelerator_type="v5litepod-8")
    idle = next(f for f in other.findings if f.id == "chips-idle")
    assert "fits one chip" not in idle.fix and "engine(s) of --tensor-parallel-size 1" in idle.fix
    with pytest.raises(InputError) as err:
        lint.lint_vllm_flags(
            command="vllm serve google/gemma-4-E2B-it", accelerator_type="v5litepod-4", engines=5
        )
    assert err.value.field == "engines"


# ---- over stdio --------------------------------------------------------------------------------------


async def test_plan_scale_out_over_stdio(tmp_path: Path) -> None:
    env = {"TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"), "TPU_DEVOPS_STATE_DIR": str(tmp_path / "s")}
    async with mcp_client(**env) as client:
        result = await client.call_tool(
            "plan_scale_out", {"streams": 64, "chips": 4, "usd_per_chip_hour": 0.6}
        )
        assert not result.is_error, result.content[0].text
        data = result.structured_content
        assert data["winner"] == "engines-per-host" and data["curve"]["bundled"] is True
        text = result.content[0].text
        assert "one-chip engines on one host" in text and "BUNDLED" in text and "$/M" in text
        bad = await client.call_tool("plan_scale_out", {"streams": 64, "target_output_tokens_per_s": 5})
        assert bad.is_error and "streams" in bad.content[0].text and "Traceback" not in bad.content[0].text
