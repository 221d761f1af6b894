"""Benchmark: importing the real `vllm bench serve` fixtures (figures and costs) and a small measured
sweep against the fake server (cells, measured prompt lengths, failures, KV warnings, files)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gcp import FakeGcp
from tests.fakes.openai_server import FakeVllm
from tpu_devops.config import Settings, load_settings
from tpu_devops.errors import InputError
from tpu_devops.host.jobs import JOBS
from tpu_devops.host.results import table_records
from tpu_devops.planning import pricing
from tpu_devops.serving import benchmark

pytestmark = pytest.mark.anyio

BENCH = Path(__file__).parent / "data" / "bench"


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    pricing.clear_cache()
    with FakeGcp() as fake:
        yield fake
    pricing.clear_cache()


def settings_for(gcp: FakeGcp, tmp_path: Path, **env: str) -> Settings:
    base = {
        "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
        "TPU_DEVOPS_STATE_DIR": str(tmp_path),
        "PROVISIONING_MODEL": "spot",
    }
    return load_settings(tmp_path / "none.env", environ={**base, **env})


async def test_import_fixture_yields_its_throughput_and_cost(gcp: FakeGcp, tmp_path: Path) -> None:
    result = await benchmark.import_results(
        settings_for(gcp, tmp_path), str(BENCH / "v5e1-e2b-c128-u64.json")
    )
    (cell,) = result.cells
    assert cell.output_tokens_per_s == pytest.approx(1381.5, abs=0.05)
    assert cell.concurrency == 64
    assert cell.prompt_tokens_measured == 128
    assert cell.median_ttft_ms == pytest.approx(359.1, abs=0.1)
    assert cell.median_tpot_ms == pytest.approx(43.9, abs=0.1)
    assert result.price is not None and result.price.source == "live"
    expected = 0.5779 / (1381.513274418273 * 3600) * 1e6  # $/M = $/h / (tok/s x 3600) x 1e6
    assert cell.usd_per_million_output_tokens == pytest.approx(expected, rel=1e-6)
    assert cell.usd_per_million_output_tokens == pytest.approx(0.1162, abs=1e-4)
    assert set(result.files) == {"csv", "json", "png"}
    for path in result.files.values():
        assert Path(path).stat().st_size > 0


async def test_import_directory_flags_the_kv_over_subscribed_cell(gcp: FakeGcp, tmp_path: Path) -> None:
    result = await benchmark.import_results(settings_for(gcp, tmp_path), str(BENCH), write=False)
    assert len(result.cells) == 5
    assert result.kv_pool_tokens == 321_376  # plan_capacity for E2B on v5litepod-1 at 0.92
    flagged = {(c.concurrency, c.prompt_tokens_measured) for c in result.cells if c.kv_warning}
    assert (64, 8192) in flagged  # 64 x 8,320 = 532,480 tokens > 321,376
    assert (1, 128) not in flagged
    assert "1,381.5 output tok/s at 64 clients" in (result.best or "")
    assert result.files == {}


async def test_import_rejects_what_is_not_a_vllm_result(gcp: FakeGcp, tmp_path: Path) -> None:
    s = settings_for(gcp, tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    for path in (str(bad), str(tmp_path / "missing.json"), str(BENCH / "v5e1-e2b-c128-u64.bench.log")):
        with pytest.raises(InputError) as err:
            await benchmark.import_results(s, path, write=False)
        assert err.value.field == "results_path"


def test_sweep_validation() -> None:
    for args, field in (
        (([], [128], 128, None), "concurrency"),
        (([0], [128], 128, None), "concurrency"),
        (([1], [], 128, None), "prompt_lengths"),
        (([1], [128], 0, None), "output_len"),
        (([1], [128], 128, 0), "requests_per_cell"),
        ((list(range(1, 10)), list(range(1, 10)), 128, None), "concurrency x prompt_lengths"),
    ):
        with pytest.raises(InputError) as err:
            benchmark.validate_sweep(*args)
        assert err.value.field == field
    assert benchmark.requests_for(64, None) == 128
    assert benchmark.requests_for(1, None) == 8


async def test_measured_sweep_to_completion(gcp: FakeGcp, tmp_path: Path) -> None:
    with FakeVllm(ttft_s=0.01, itl_s=0.002) as fake:
        s = settings_for(gcp, tmp_path, VLLM_URL=fake.url)
        # VLLM_URL is not the rig's discovered TPU: the TPU rate applies only when asked for.
        started = await benchmark.start_benchmark(
            s,
            concurrency=[1, 4],
            prompt_lengths=[16, 200],
            output_len=6,
            requests_per_cell=4,
            provisioning_model="spot",
        )
        record = JOBS.get(started.job_id)
        assert record.task is not None
        await record.task
    assert record.state == "succeeded", record.error
    result = record.result
    cells = table_records(result["cells"])
    assert len(cells) == 4
    for cell in cells:
        assert cell["completed"] == 4 and cell["failures"] == 0
        assert cell["output_tokens_mean"] == 6
        # prompt length is measured from usage; the calibration makes it hit the target
        assert cell["prompt_tokens_measured"] == pytest.approx(cell["prompt_tokens_target"], abs=1)
        assert cell["usd_per_million_output_tokens"] is not None
    assert result["kv_pool_source"].startswith("server /metrics")
    where = Path(result["files"].pop("dir"))  # the structured form names the directory once
    assert set(result["files"]) == {"csv", "json", "png"} and where.parent == tmp_path / "results"
    rows = list(csv.DictReader(open(where / result["files"]["csv"], encoding="utf-8")))
    assert len(rows) == 4
    saved = json.loads((where / result["files"]["json"]).read_text())
    assert saved["cells"][0]["concurrency"] == 1 and saved["best"] and saved["best"] in result["summary"]
    assert (where / result["files"]["png"]).read_bytes()[:4] == b"\x89PNG"
    # every benchmark request asked for exactly output_len tokens
    bench_requests = [r for r in fake.requests if r.get("max_tokens") == 6]
    assert len(bench_requests) == 16 and all(r.get("ignore_eos") for r in bench_requests)


async def test_failures_are_counted_and_kv_pressure_warned(gcp: FakeGcp, tmp_path: Path) -> None:
    with FakeVllm(max_model_len=300, num_gpu_blocks=5, block_size=32) as fake:
        s = settings_for(gcp, tmp_path, VLLM_URL=fake.url)
        started = await benchmark.start_benchmark(
            s, concurrency=[2], prompt_lengths=[100, 400], output_len=4, requests_per_cell=2
        )
        assert any("max_model_len" in n for n in (await _finished(started.job_id))["notices"])
    result = JOBS.get(started.job_id).result
    ok, too_long = table_records(result["cells"])
    assert ok["failures"] == 0
    assert too_long["failures"] == 2 and "context_overflow" in too_long["first_error"]
    assert result["kv_pool_tokens"] == 160
    assert "> KV pool 160" in ok["kv_warning"]  # 2 clients x (100 + 4) = 208 tokens


async def _finished(job_id: str) -> dict:
    record = JOBS.get(job_id)
    assert record.task is not None
    await record.task
    assert record.state == "succeeded", record.error
    return record.result


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


async def test_empty_lists_and_unknown_provisioning_model_are_refused_before_anything_runs(
    gcp: FakeGcp, tmp_path: Path
) -> None:
    # regression: [] silently became the default 12-cell sweep; "bogus" silently dropped the $/M column
    s = settings_for(gcp, tmp_path)
    for args, field in (
        ({"concurrency": []}, "concurrency"),
        ({"prompt_lengths": []}, "prompt_lengths"),
        ({"concurrency": [1], "prompt_lengths": [16], "provisioning_model": "bogus"}, "provisioning_model"),
    ):
        with pytest.raises(InputError) as err:
            await benchmark.start_benchmark(s, base_url="http://127.0.0.1:9", **args)
        assert err.value.field == field
    with pytest.raises(InputError) as err:
        await benchmark.import_results(s, str(BENCH / "v5e1-e2b-c128-u64.json"), provisioning_model="bogus")
    assert err.value.field == "provisioning_model"


@pytest.mark.parametrize(
    ("key", "value"), [("completed", "abc"), ("output_throughput", None), ("max_concurrency", -1)]
)
async def test_import_names_a_malformed_field(gcp: FakeGcp, tmp_path: Path, key: str, value: object) -> None:
    data = json.loads((BENCH / "v5e1-e2b-c128-u64.json").read_text())
    data[key] = value
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        await benchmark.import_results(settings_for(gcp, tmp_path), str(bad), write=False)
    assert err.value.field == "results_path" and key in err.value.message


async def test_benchmark_text_is_a_table(gcp: FakeGcp, tmp_path: Path) -> None:
    result = await benchmark.import_results(settings_for(gcp, tmp_path), str(BENCH), write=False)
    lines = result.render_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("clients"))
    assert lines[header + 1].split()[:3] == ["1", "128", "119.9"]
    assert any(line.strip().startswith("! 64 clients x") for line in lines)
    assert "best: best:" not in result.render_text() and not (result.best or "").startswith("best")


async def test_directory_import_skips_other_json_and_says_so(gcp: FakeGcp, tmp_path: Path) -> None:
    # e.g. re-importing a results directory that also holds this tool's own results.json
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "v5e1-e2b-c128-u64.json").write_text((BENCH / "v5e1-e2b-c128-u64.json").read_text())
    (folder / "results.json").write_text('{"cells": []}')
    result = await benchmark.import_results(settings_for(gcp, tmp_path), str(folder), write=False)
    assert len(result.cells) == 1
    assert any(n.startswith("skipped results.json") for n in result.notices)
    (folder / "v5e1-e2b-c128-u64.json").unlink()
    with pytest.raises(InputError) as err:
        await benchmark.import_results(settings_for(gcp, tmp_path), str(folder), write=False)
    assert err.value.field == "results_path" and "results.json" in err.value.message


def test_huge_sweeps_are_refused_before_prompts_are_built() -> None:
    with pytest.raises(InputError) as err:
        benchmark.validate_sweep([256], [1_048_576], 128, None)
    assert err.value.field == "concurrency x prompt_lengths" and "64 x 8,192" in (err.value.fix or "")
    benchmark.validate_sweep([64], [8192], 128, None)  # the seed's largest cell is fine


FIELD = Path(__file__).parent / "data" / "field-reports"


async def test_import_accepts_max_concurrency_null(gcp: FakeGcp, tmp_path: Path) -> None:
    # vllm bench serve --save-result writes max_concurrency null without --max-concurrency
    result = await benchmark.import_results(
        settings_for(gcp, tmp_path), str(FIELD / "B15-bench-no-max-concurrency.json"), write=False
    )
    (cell,) = result.cells
    assert cell.output_tokens_per_s == pytest.approx(16.13)
    assert cell.concurrency == 10  # request rate inf: all 10 prompts in flight
    assert any("max_concurrency null" in n for n in result.notices)
    # the KV pool of the configured Gemma 4 E2B says nothing about a 72B Qwen run
    assert result.kv_pool_tokens is None and cell.kv_warning is None
    assert any("not the configured google/gemma-4-E2B-it" in n for n in result.notices)


async def test_kv_check_uses_the_results_own_model(gcp: FakeGcp, tmp_path: Path) -> None:
    data = json.loads((BENCH / "v5e1-e2b-c8192-u64.json").read_text())
    same = tmp_path / "same.json"
    same.write_text(json.dumps({**data, "model_id": "google/gemma-4-E2B-it", "max_concurrency": None}))
    result = await benchmark.import_results(settings_for(gcp, tmp_path), str(same), write=False)
    assert result.kv_pool_tokens == 321_376 and result.cells[0].kv_warning  # the configured model: checked
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**data, "model_id": "meta-llama/Llama-3.1-8B-Instruct"}))
    result = await benchmark.import_results(settings_for(gcp, tmp_path), str(other), write=False)
    assert result.kv_pool_tokens is None and not result.cells[0].kv_warning
    rate = tmp_path / "rate.json"
    rate.write_text(json.dumps({**data, "max_concurrency": None, "request_rate": 4.0}))
    result = await benchmark.import_results(settings_for(gcp, tmp_path), str(rate), write=False)
    assert result.cells[0].concurrency == 0 and any("concurrency unknown" in n for n in result.notices)


async def test_a_non_rig_llama_cpp_endpoint_is_not_priced_or_checked_against_the_tpu_pool(
    gcp: FakeGcp, tmp_path: Path
) -> None:
    with FakeVllm(flavor="llama.cpp", max_model_len=4096) as fake:
        s = settings_for(gcp, tmp_path, VLLM_URL=fake.url)
        started = await benchmark.start_benchmark(
            s, concurrency=[1], prompt_lengths=[16, 8192], output_len=6, requests_per_cell=2
        )
        record = JOBS.get(started.job_id)
        assert record.task is not None
        await record.task
    result = record.result
    assert result.get("price") is None and all(
        c.get("usd_per_million_output_tokens") is None for c in table_records(result["cells"])
    )
    assert result.get("kv_pool_tokens") is None
    notes = " ".join(result["notices"])
    assert "not this rig's TPU" in notes and "llama.cpp" in notes
    assert "meta.n_ctx" in notes and "4096" in notes  # the 8192-token cell cannot fit this server's context


async def test_a_model_with_unknown_weights_skips_the_kv_check_and_says_why(
    gcp: FakeGcp, tmp_path: Path
) -> None:
    # A config too partial to count its parameters: the plan has no KV pool, and the note says why
    # instead of reporting plan_capacity as failed.
    cfg = json.loads((BENCH.parent / "model-configs" / "Llama-3.1-8B-Instruct.config.json").read_text())
    del cfg["intermediate_size"]
    model = tmp_path / "partial-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(cfg))
    settings = settings_for(gcp, tmp_path, MODEL_NAME=str(model), ACCELERATOR_TYPE="v5litepod-1")
    pool, source, notes = await benchmark.kv_pool(settings, None)
    assert pool is None and source is None
    (note,) = notes
    assert "weights of MODEL_NAME are unknown" in note and "failed" not in note
