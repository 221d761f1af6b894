"""The field-report corpus: every log of ../shared/fixtures/field-reports, the earlier
fixtures, and new variants of each fault kind written from other public reports (tests/data/field-variants,
sources in its README and in corpus.json) read right by `diagnose_vllm_boot`, `summarize_logs` and the
deterministic path of `analyze_cloud_logging`: the class, the numbers read out, the fix, and the same
root cause in all three. A property over the whole corpus: no ERROR / exception / traceback line is ever
left out of the diagnosis (explained by a rule, listed as unrecognised, or counted as known noise).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakes.openai_server import closed_port_url
from tpu_devops.config import load_settings
from tpu_devops.logs.boot import BootDiagnosis, BootFinding, diagnose_vllm_boot, read_export_text
from tpu_devops.logs.evidence import summarize_source
from tpu_devops.logs.sources import FileSource

DATA = Path(__file__).parent / "data"
CORPUS = json.loads((DATA / "field-reports" / "corpus.json").read_text())
LOGS = [c for c in CORPUS if c["kind"] == "log"]


def _path(case: dict) -> str:
    return str(DATA / case["file"])


def _cause(d: BootDiagnosis, case: dict) -> BootFinding | None:
    return {"after start": d.after_start, "beside": d.beside}.get(case["when"], d.root_cause)


def test_the_corpus_covers_every_field_report_and_fault_kind() -> None:
    shared = {p.name for p in (DATA / "field-reports").glob("[BC]*")}
    covered = {Path(c["file"]).name for c in CORPUS} | {
        "B11-lint-gemma4-31b-v6e4-maintainer.txt",  # tests/test_lint.py
        "B13-gcp-quota-metric-rate-limit.txt",  # below (log rule) and the sweep's classifier (cloud-core)
        "B15-bench-no-max-concurrency.json",  # tests/test_serving_benchmark.py
        "C08-lint-xla-cache-disabled.txt",  # tests/test_lint.py
        "C17-llamacpp-per-slot-context.json",  # tests/test_serving_chat.py (a llama-server-like fake)
    }
    assert shared <= covered
    variants = {p.name for p in (DATA / "field-variants").iterdir() if p.name != "README.md"}
    assert variants <= {Path(c["file"]).name for c in CORPUS}
    # every failure class the issue names has a handed example or a new variant, most have both
    roots = {c["root"] for c in LOGS}
    for kind in (
        "kv-cache-too-small",
        "hf-rate-limited",
        "chat-template-missing",
        "vmem-oom",
        "tp-sharding-mismatch",
        "torchax-model-failure",
        "image-pull-failed",
        "unrecognised-failure",
        "program-allocation-oom",
        "hbm-oom",
        "smem-oom",
        # round three: Kubernetes events, signals, causes on the next line, wording variants, versions
        "k8s-node-selector-mismatch",
        "k8s-insufficient-tpu",
        "k8s-scale-up-quota",
        "k8s-hpa-no-custom-metrics",
        "k8s-hpa-metric-missing",
        "killed-by-startup-probe",
        "killed-by-liveness-probe",
        "quantization-unsupported-on-platform",
        "parser-tokens-missing",
        "transformers-per-layer-attribute",
        "transformers-unknown-model-type",
        "torchax-tensor-elem",
        "container-name-conflict",
        "port-in-use",
    ):
        assert kind in roots, kind
    assert all(c["source"] for c in CORPUS)


@pytest.mark.parametrize("case", LOGS, ids=[Path(c["file"]).stem for c in LOGS])
def test_diagnosis_reads_the_class_the_numbers_and_the_fix(case: dict) -> None:
    d = diagnose_vllm_boot(path=_path(case))
    assert d.status == case["status"], d.headline()
    cause = _cause(d, case)
    if case["root"] is None:
        expected = "boot OK" if case["status"] == "ready" else "boot incomplete"
        assert d.root_cause is None and d.after_start is None and d.beside is None, d.headline()
        assert d.headline().startswith(expected), d.headline()
        return
    assert cause is not None and cause.id == case["root"], d.headline()
    for key, value in case["read_out"].items():
        assert cause.details.get(key) == value, (key, cause.details)
    for text in case["fix_has"]:
        assert text in cause.fix, (text, cause.fix)
    for text in case["fix_lacks"]:
        assert text not in cause.fix, (text, cause.fix)
    if case["exception_type"]:
        assert cause.exception_type == case["exception_type"]
    if case["when"] == "after start":
        assert "but" in d.headline() and "boot FAILED" not in d.headline()
    elif case["when"] == "beside":  # around a server that serves: never a boot failure
        assert "boot FAILED" not in d.headline() and "serving not affected" in d.headline()
        assert cause.title in d.headline() and cause.fix in d.headline()
    else:
        assert d.headline().startswith("boot FAILED") and f"(line {cause.first_line})" in d.headline()


@pytest.mark.parametrize("case", LOGS, ids=[Path(c["file"]).stem for c in LOGS])
def test_summary_and_diagnosis_agree_on_the_root_cause(case: dict) -> None:
    d = diagnose_vllm_boot(path=_path(case))
    s = summarize_source(FileSource(_path(case)))
    cause = _cause(d, case)
    if case["root"] is None:
        assert s.root_cause is None, s.headline()
        return
    rc = s.root_cause
    assert rc is not None and cause is not None, s.headline()
    assert (rc.signature or "unrecognised-failure") == cause.id == case["root"], (rc.title, cause.title)
    if cause.id == "unrecognised-failure":  # the same line
        assert rc.line and rc.line.strip().endswith(cause.details["line"][-60:].strip())
    else:
        assert (
            rc.fix == cause.fix or case["fix_has"] and all(t in (rc.fix or "") for t in case["fix_has"][:1])
        )


def _closed_settings():
    return load_settings(environ={"VLLM_URL": closed_port_url(), "TPU_DEVOPS_ENV_FILE": "/nonexistent"})


@pytest.mark.anyio
@pytest.mark.parametrize("case", LOGS, ids=[Path(c["file"]).stem for c in LOGS])
async def test_analyst_without_a_model_agrees(case: dict) -> None:
    from tpu_devops.logs.analyst import analyze

    # A closed port: the model is not reachable, the analyst answers from the deterministic summary.
    question = case["question"] or "what failed?"
    result = await analyze(question, FileSource(_path(case)), settings=_closed_settings())
    assert not result.model_consulted
    rc = result.root_cause
    if case["root"] is None:
        assert rc is None and "No failure" in result.answer
        return
    assert rc is not None and (rc.signature or "unrecognised-failure") == case["root"]
    assert (rc.fix or "") in result.answer


# ---- the property: no error line is ever dropped ------------------------------------------------------

_ERROR_LINE = re.compile(
    r"^(?:\S+ )?(?:\([^)]*\) )?(?:ERROR|CRITICAL)\b"  # a logger's error level
    r"|^(?:\([^)]*\) )?\s*(?:[\w]+\.)*[A-Z]\w*(?:Error|Exception)(?::|$)"  # a Python exception line
    r"|Traceback \(most recent call last\)"
)


def _text(path: str) -> str:
    if path.endswith(".json"):
        return read_export_text(path)[0]
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:  # lone \r stays in its line
        return fh.read()


@pytest.mark.parametrize("case", LOGS, ids=[Path(c["file"]).stem for c in LOGS])
def test_no_error_line_is_absent_from_the_diagnosis(case: dict) -> None:
    path = _path(case)
    d = diagnose_vllm_boot(path=path)
    spans = [span for f in d.findings for span in f.spans]
    noise = {n for lines in d.noise_lines.values() for n in lines}
    missing = []
    for number, line in enumerate(_text(path).split("\n"), 1):
        if not _ERROR_LINE.search(line):
            continue
        if number in noise or any(a <= number <= b for a, b in spans):
            continue
        missing.append((number, line[:120]))
    assert not missing, missing
    # an unexplained failure after the last milestone is never called "boot OK" or "no failure"
    late = [f for f in d.findings if f.severity == "error" and f.when in ("boot", "after start")]
    if late:
        assert not re.fullmatch(r"boot OK \([^)]*\)", d.headline()) and "no failure" not in d.headline()


def test_known_noise_at_error_severity_is_never_the_root_cause() -> None:
    path = str(DATA / "field-variants" / "V19-metadata-noise-at-error-boot-ok-export.json")
    s = summarize_source(FileSource(path))
    assert s.root_cause is None and s.noise.get("metadata-404") == 1 and s.severities.get("ERROR") == 2
    d = diagnose_vllm_boot(path=path)
    assert d.status == "ready" and d.noise["metadata-404"] == 1 and d.headline().startswith("boot OK")


def test_a_failure_logged_at_info_is_not_an_all_clear() -> None:
    s = summarize_source(
        FileSource(str(DATA / "field-reports" / "B08-docker-pull-manifest-unknown-export.json"))
    )
    assert set(s.severities) == {"INFO"}
    assert s.root_cause is not None and s.root_cause.signature == "image-pull-failed"
    assert "exit status 125" in s.evidence  # the symptom is listed too
    d = diagnose_vllm_boot(path=str(DATA / "field-variants" / "V27-docker-device-error-export.json"))
    exit_status = next(f for f in d.findings if f.id == "startup-script-failed")
    assert d.root_cause is not None and d.root_cause.id == "unrecognised-failure"
    assert exit_status.details["cause_line"] == str(d.root_cause.first_line)


def test_wrappers_point_at_the_specific_line_or_say_it_is_missing() -> None:
    b01 = diagnose_vllm_boot(path=str(DATA / "field-reports" / "B01-kv-too-small-tpu-v5e8.log"))
    wrapper = next(f for f in b01.findings if f.id == "engine-core-failed")
    assert wrapper.details["cause_line"] == "7" and "line 7" in wrapper.fix
    only = diagnose_vllm_boot(path=str(DATA / "field-variants" / "V22-wrapper-only.log"))
    assert only.root_cause is not None and only.root_cause.id == "engine-core-failed"
    assert "read the root-cause finding above" not in only.root_cause.fix
    assert "whole container log" in only.root_cause.fix


def test_b13_rate_limit_line_is_transient_not_a_chip_quota() -> None:
    from tpu_devops.logs.signatures import read_line

    line = (DATA / "field-reports" / "B13-gcp-quota-metric-rate-limit.txt").read_text().split("|", 1)[1]
    reading = read_line(line)
    assert reading is not None and reading.id == "api-rate-limited" and "back off" in reading.fix


# ---- one reading, whatever the tool: every log fixture in tests/data ----------------------------------

NOT_LOGS = {
    "corpus.json",  # the expectations, not a log
    "eval_set.json",  # the analyst evaluation set
    "B15-bench-no-max-concurrency.json",  # a benchmark result
    "C17-llamacpp-per-slot-context.json",  # an HTTP answer (tests/test_serving_chat.py)
}
FIXTURE_LOGS = sorted(
    p
    for folder in ("field-reports", "field-variants", "vllm-logs", "logs")
    for p in (DATA / folder).iterdir()
    if p.suffix in (".log", ".json", ".jsonl") and p.name not in NOT_LOGS
)


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=[p.stem for p in FIXTURE_LOGS])
def test_diagnosis_and_summary_agree_on_every_fixture(path: Path) -> None:
    """The headline finding of diagnose_vllm_boot (boot failure, failure after start or beside serving)
    is the summary's root cause: the same rule, or the same unrecognised line."""
    d = diagnose_vllm_boot(path=str(path))
    s = summarize_source(FileSource(str(path)))
    shown = d.root_cause or d.after_start or d.beside
    if shown is None:
        assert s.root_cause is None, (d.headline(), s.headline())
        return
    rc = s.root_cause
    assert rc is not None, (d.headline(), s.headline())
    assert (rc.signature or "unrecognised-failure") == shown.id, (d.headline(), s.headline())
    if shown.id == "unrecognised-failure":
        assert rc.line and rc.line.strip().endswith(shown.details["line"][-60:].strip())
        assert rc.details.get("cause") == shown.details.get("cause")  # the reason on the next line, both
    else:
        assert rc.fix == shown.fix, (rc.fix, shown.fix)


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=[p.stem for p in FIXTURE_LOGS])
def test_the_scan_sees_every_line_the_classifier_calls_a_failure(path: Path) -> None:
    """One definition of a failure line (`logs.failure_lines`): a line the fallback classifies as a
    failure, or a rule explains, is a candidate of the boot scan's anchor pass."""
    from tpu_devops.logs import signatures as sg
    from tpu_devops.logs.scan import candidate_lines

    text = _text(str(path))
    seen = {n for n, _, _ in candidate_lines(text)}
    for number, line in enumerate(text.split("\n"), 1):
        if sg.classify(sg.split_line(line)) in sg.FALLBACK or sg.match_line(line):
            assert number in seen, (number, line[:120])


@pytest.mark.parametrize(
    "line",
    [
        "KeyboardInterrupt: terminated",
        "SystemExit: 1",
        "concurrent.futures._base.TimeoutError: ",
        "torchax.tensor.OperatorNotFound: aten::foo",
        "RuntimeProgramAllocationFailure: program x",
        "startup-script: FAILED to start the container",
        "startup-script: Permission DENIED",
        "E0807 12:00:01.123456  123 tpu_client.cc:42] device halted",
        "F0807 12:00:01.123456  123 tpu_client.cc:42] check failed",
        "container exited with code 137",
    ],
)
def test_fallback_signals_are_anchored(line: str) -> None:
    from tpu_devops.logs import signatures as sg
    from tpu_devops.logs.scan import candidate_lines

    assert sg.classify(sg.split_line(line)) in sg.FALLBACK, line
    assert candidate_lines(f"INFO ok\n{line}\nINFO ok") == [(2, 8, 8 + len(line))]
