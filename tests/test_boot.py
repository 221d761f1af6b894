"""logs/boot.py: the three real boot logs, every signature, harmless noise, and bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tpu_devops.errors import InputError
from tpu_devops.logs.boot import diagnose_boot_text, diagnose_vllm_boot

LOGS = Path(__file__).parent / "data" / "vllm-logs"
OOM = LOGS / "v5e1-e2b-util095-program-oom.log"
OK = LOGS / "v6e1-e2b-boot-ok.log"
QWIX = LOGS / "v5e1-e2b-qwix-int8-abstract-fail.log"
PREFIX = "(EngineCore pid=187) ERROR 08-07 23:27:17 [core.py:1349] "

# Real-shaped lines (the rule table's wordings are tested in tests/test_logs_rules.py).
SAMPLES = {
    "smem-oom": "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory space smem. Used 1.2M of 1.0M smem.",
    "hbm-oom": "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 2.50G. That was not possible. There are 1.20G free.",
    "chunked-mm-floor": "ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is larger than max_num_batched_tokens (2048). Please increase max_num_batched_tokens.",
    "invalid-kv-cache-dtype": "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'int8' (choose from auto, bfloat16, fp8)",
    "hf-gated-repo": "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url https://huggingface.co/google/gemma-4-E2B-it/resolve/main/config.json.",
    "hf-unauthorized": "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/google/gemma-4-E2B-it",
    "tool-choice-not-enabled": 'INFO: 10.0.0.2:5000 - "POST /v1/chat/completions" 400 "auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    "engine-core-failed": "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    "vllm-c-missing": "WARNING 08-07 23:10:49 [interface.py:368] Failed to import from vllm._C: ModuleNotFoundError(\"No module named 'vllm._C'\")",
}


def test_program_oom_log() -> None:
    d = diagnose_vllm_boot(path=str(OOM))
    assert d.status == "failed" and d.lines == 1168
    assert d.vllm_version == "0.26.1rc1.dev125+ga7a204cc6" and d.tpu_type == "v5litepod-1"
    assert d.non_default_args["gpu_memory_utilization"] == 0.95
    assert (d.budget.total_hbm_gib, d.budget.cap_gib, d.budget.used_gib, d.budget.kv_avail_gib) == (
        15.75,
        14.96,
        8.97,
        5.99,
    )
    assert (d.budget.kv_tokens, d.budget.kv_blocks, d.budget.block_size) == (348_896, 10_903, 32)
    root = d.root_cause
    assert root is not None and root.id == "program-allocation-oom" and root.first_line == 1047
    assert root.details["program"] == "jit_structured_decode_fn"
    assert (root.details["wanted"], root.details["free"]) == ("384.11M", "346.77M")
    assert root.details["after"] == "KV cache init"
    assert "0.92" in root.fix and root.timestamp == "08-07 23:27:17"
    assert [f.id for f in d.findings if f.severity == "error"] == [
        "program-allocation-oom",
        "engine-core-failed",
    ]
    wrapper = next(f for f in d.findings if f.id == "engine-core-failed")
    assert wrapper.details["cause_line"] == "1047" and "line 1047" in wrapper.fix
    assert d.unrecognised == 0
    phases = [p.phase for p in d.phases]
    assert phases.index("KV cache initialized") < phases.index("failure")
    assert d.cross_check is not None and abs(d.cross_check.deviation_pct) < 0.5
    assert d.cross_check.bytes_per_token_config == 18_432
    assert d.noise["vllm-c-missing"] == 8


def test_successful_v6e_boot_has_no_false_alarm() -> None:
    d = diagnose_vllm_boot(path=str(OK))
    assert d.status == "ready" and d.root_cause is None
    assert not [f for f in d.findings if f.severity in ("error", "warning")]
    assert (d.budget.total_hbm_gib, d.budget.cap_gib, d.budget.used_gib, d.budget.kv_avail_gib) == (
        31.24,
        28.74,
        8.97,
        19.77,
    )
    assert d.budget.kv_tokens == 1_151_744 and d.budget.block_size == 64 and d.budget.max_concurrency == 35.15
    assert (
        d.compile_cache_enabled
        and d.compile_s == 393.98
        and d.engine_init_s == 447.75
        and d.weights_load_s == 49.78
    )
    assert d.phases[-1].phase == "application startup complete" and d.phases[-1].elapsed_s == 652.0
    fp8 = next(f for f in d.findings if f.id == "fp8-logged-bf16-allocated")
    assert fp8.severity == "info" and "bfloat16" in fp8.title
    assert d.cross_check is not None and abs(d.cross_check.deviation_pct) < 0.5
    assert "boot OK" in d.headline()


def test_qwix_int8_log_is_an_unsupported_weight_quantization_path() -> None:
    d = diagnose_vllm_boot(path=str(QWIX))
    assert d.status == "failed"
    assert d.root_cause is not None and d.root_cause.id == "weight-quantization-unsupported"
    assert d.root_cause.details["parameter"] == "model.language_model.layers.0.mlp.down_proj.weight"
    assert "bf16" in d.root_cause.fix


def synthetic(
    *lines: str, args: str = "{'model': 'google/gemma-4-E2B-it', 'enable_auto_tool_choice': True}"
) -> str:
    head = [
        "INFO 08-07 23:10:35 [__init__.py:76] TPU info: node_name=n | tpu_type=v5litepod-1 | worker_id=0 | num_chips=1 | num_cores_per_chip=1",
        SAMPLES["vllm-c-missing"],
        f"(APIServer pid=1) INFO 08-07 23:10:51 [api_utils.py:273] non-default args: {args}",
    ]
    return "\n".join(head + [PREFIX + line for line in lines]) + "\n"


@pytest.mark.parametrize(
    ("line", "root", "detail"),
    [
        (
            SAMPLES["chunked-mm-floor"],
            "chunked-mm-floor",
            {"mm_item_tokens": "2496", "max_num_batched_tokens": "2048"},
        ),
        (SAMPLES["invalid-kv-cache-dtype"], "invalid-kv-cache-dtype", {"value": "int8"}),
        (SAMPLES["smem-oom"], "smem-oom", {"needed": "1.2M", "available": "1.0M"}),
        (SAMPLES["hf-gated-repo"], "hf-gated-repo", {}),
    ],
)
def test_synthetic_failures_find_their_root_cause(line: str, root: str, detail: dict) -> None:
    d = diagnose_boot_text(synthetic(line, SAMPLES["engine-core-failed"]))
    assert d.status == "failed" and d.root_cause is not None and d.root_cause.id == root
    assert {k: v for k, v in d.root_cause.details.items() if k in detail} == detail


def test_rejected_tool_requests_are_not_a_failed_boot() -> None:
    text = (
        synthetic()
        + "(APIServer pid=1) INFO:     Application startup complete.\n"
        + SAMPLES["tool-choice-not-enabled"]
    )
    d = diagnose_boot_text(text)
    assert d.status == "ready" and d.root_cause is None
    assert d.after_start is not None and d.after_start.id == "tool-choice-not-enabled"
    assert d.headline().startswith("boot OK") and "requests fail" in d.headline()


def test_hbm_oom_fix_drops_quantization_only_when_configured() -> None:
    args = "{'model': 'google/gemma-4-E2B-it', 'enable_auto_tool_choice': True, 'additional_config': {'quantization': {'qwix': {}}}}"
    d = diagnose_boot_text(synthetic(SAMPLES["hbm-oom"], args=args))
    assert d.root_cause is not None and d.root_cause.id == "hbm-oom"
    assert "quantization config" in d.root_cause.fix and d.root_cause.details["quantization"] == "qwix"
    assert "needs 2.50 GiB of HBM, 1.20 GiB available (1.30 GiB over)" in d.root_cause.title
    plain = diagnose_boot_text(synthetic(SAMPLES["hbm-oom"]))
    assert plain.root_cause is not None and plain.root_cause.id == "hbm-oom"
    assert "quantiz" not in plain.root_cause.fix and "1.30 GiB over" in plain.root_cause.cause


def test_missing_tool_flags_in_args_are_flagged() -> None:
    d = diagnose_boot_text(synthetic(args="{'model': 'google/gemma-4-E2B-it', 'max_model_len': 16384}"))
    assert d.status == "incomplete" and d.root_cause is None
    assert any(f.id == "tool-flags-not-set" and f.severity == "warning" for f in d.findings)


def test_truncated_boot_is_incomplete_not_failed() -> None:
    head = "".join(OK.read_text().splitlines(keepends=True)[:120])
    d = diagnose_boot_text(head)
    assert d.status == "incomplete" and d.root_cause is None and d.budget.kv_tokens == 1_151_744


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "log_text"),
        ({"log_text": "x", "path": "/tmp/y"}, "path"),
        ({"path": "/nonexistent/boot.log"}, "path"),
        ({"log_text": "   \n"}, "log_text"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        diagnose_vllm_boot(**kwargs)
    assert err.value.field == field and err.value.fix


def test_excerpts_are_redacted() -> None:
    token = "hf_" + "A1b2C3d4E5" * 4
    d = diagnose_boot_text(synthetic(SAMPLES["hf-unauthorized"] + f" token={token}"))
    assert d.root_cause is not None and d.root_cause.excerpt
    assert token not in d.model_dump_json()


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        ("ERROR 10-25 12:00:02 [x.py:1] download failed: token={s} rejected", "hf_" + "Zq9" * 10 + "_v2"),
        (
            "ERROR 10-25 12:00:02 [x.py:1] header Authorization: Bearer {s}",
            "ya29.a0AfH6SMBx3Kq9Zz8mV7nLpQrStUvWxYz01",
        ),
        (
            "CRITICAL 10-25 12:00:02 [x.py:1] request with key {s} refused",
            "AIzaSyD-1234567890abcdefghijklmnopqrstu",
        ),
        ("RuntimeError: clone of https://oauth:{s}@github.com/x/y failed", "ghp_" + "Ab1" * 12),
        ("ValueError: bad value HF_TOKEN={s}", "hf_" + "Mn4" * 11),
    ],
)
def test_unrecognised_lines_are_redacted_everywhere(line: str, secret: str) -> None:
    # An ERROR / exception line no rule explains is quoted in the finding's title, the headline and the
    # timeline, not only in the excerpt: each must carry the redacted line.
    d = diagnose_boot_text(synthetic(line.format(s=secret)))
    assert d.unrecognised >= 1
    assert secret not in d.model_dump_json() and secret not in d.render_text() and secret not in d.headline()
    assert secret[-12:] not in d.model_dump_json() + d.render_text()


def test_secret_args_are_not_passed_on() -> None:
    d = diagnose_boot_text(
        synthetic(
            args="{'model': 'google/gemma-4-E2B-it', 'api_key': 'sk-secret-value', 'enable_auto_tool_choice': True}"
        )
    )
    assert d.non_default_args["api_key"] == "(redacted)" and "sk-secret-value" not in d.model_dump_json()


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


@pytest.mark.parametrize("text", ["hello world", "garbage\x00\xff binary\n", "INFO: nothing to see\n" * 50])
def test_text_that_is_not_a_vllm_log_is_refused_not_called_incomplete(text: str) -> None:
    with pytest.raises(InputError) as err:
        diagnose_vllm_boot(log_text=text)
    assert err.value.field == "log_text" and "no vLLM boot line" in err.value.message


def test_node_plus_pasted_log_is_ambiguous() -> None:
    from tpu_devops.logs.boot import refuse_two_sources

    with pytest.raises(InputError) as err:
        refuse_two_sources("my-node", "some log", None)
    assert err.value.field == "node"
    refuse_two_sources("my-node", None, None)


def test_diagnosis_text_is_a_timeline_and_findings() -> None:
    text = diagnose_vllm_boot(path=str(OOM)).render_text()
    assert text.splitlines()[0].startswith("boot FAILED: program 'jit_structured_decode_fn'")
    assert "KV cache sized: 348,896 tokens" in text and "cross-check: plan" in text
    assert "  fix: --gpu-memory-utilization 0.92" in text
    assert "non_default_args" not in text


# ---- newcomer trial: a Cloud Logging export, and clearer path errors -------------------------------

EXPORTS = Path(__file__).parent / "data" / "logs"


@pytest.mark.parametrize(
    ("export", "plain"),
    [("v5e1-util095-export.json", OOM), ("v6e1-boot-ok-export.json", OK)],
)
def test_a_cloud_logging_export_is_diagnosed_in_time_order(export: str, plain: Path) -> None:
    # was read as JSON text: "31,699 lines" and a timeline running backwards (negative seconds)
    d = diagnose_vllm_boot(path=str(EXPORTS / export))
    ref = diagnose_vllm_boot(path=str(plain))
    assert "Cloud Logging export" in d.source and "oldest first" in d.source
    elapsed = [p.elapsed_s for p in d.phases if p.elapsed_s is not None]
    assert elapsed and min(elapsed) >= 0 and elapsed == sorted(elapsed)
    assert d.lines < 5000  # one line per entry, not the pretty-printed JSON
    assert (d.root_cause.id if d.root_cause else None) == (ref.root_cause.id if ref.root_cause else None)
    assert d.budget == ref.budget and d.vllm_version == ref.vllm_version


def test_json_lines_export_and_json_without_entries(tmp_path: Path) -> None:
    import json

    entries = json.loads((EXPORTS / "v5e1-util095-export.json").read_text())
    lines = tmp_path / "export.jsonl"
    lines.write_text("\n".join(json.dumps(e) for e in entries))
    assert diagnose_vllm_boot(path=str(lines)).root_cause.id == "program-allocation-oom"
    (tmp_path / "eval.json").write_text('[{"id": "x", "question": "q"}]')
    with pytest.raises(InputError) as err:
        diagnose_vllm_boot(path=str(tmp_path / "eval.json"))
    assert err.value.field == "path" and "LogEntry" in err.value.message


def test_a_directory_or_device_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "boot.log"
    os.mkfifo(fifo)  # would block a plain open() for ever
    for path in (str(tmp_path), str(fifo)):
        with pytest.raises(InputError) as err:
            diagnose_vllm_boot(path=path)
        assert "not a regular file" in err.value.message and "no such file" not in err.value.message
    with pytest.raises(InputError) as err:
        diagnose_vllm_boot(path="/dev/null")  # a device, and outside the directories tools may read
    assert "outside the directories" in err.value.message


def test_no_input_names_all_three_sources() -> None:
    with pytest.raises(InputError) as err:
        diagnose_vllm_boot()
    assert "node" in err.value.message and "node" in err.value.fix
