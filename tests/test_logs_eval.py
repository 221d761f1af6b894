"""The analyst evaluation (scripts/eval_analyst.py) can fail: garbage and echoed answers score 0, correct
answers score full marks, through the real analyst against the fake OpenAI server; the deterministic part
(root cause first and cited) runs on every case in CI."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT
from tests.fakes.openai_server import FakeVllm, ScriptedTurn
from tpu_devops.config import load_settings

spec = importlib.util.spec_from_file_location("eval_analyst", ROOT / "scripts" / "eval_analyst.py")
assert spec and spec.loader
eval_analyst = importlib.util.module_from_spec(spec)
sys.modules["eval_analyst"] = eval_analyst  # dataclasses look their module up by name
spec.loader.exec_module(eval_analyst)
CASES = eval_analyst.load_cases()


def test_the_set_has_forty_cases_across_the_failure_classes_each_with_a_rubric() -> None:
    assert len(CASES) >= 40
    classes = {c["root"] for c in CASES if c["root"]}
    assert len(classes) >= 15 and any(c["root"] is None for c in CASES)
    for c in CASES:
        assert c["question"] and c["cause_any"] and c["root_insert_ids"], c["id"]
        assert c["fix_any"] or c["root"] is None, c["id"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_root_cause_first_and_cited_within_budget(case: dict) -> None:
    row = eval_analyst.deterministic(case)
    assert row["root_cause_first"], row
    assert row["cited"], row
    assert row["tokens"] <= 6000


def test_converted_exports_look_like_cloud_logging() -> None:
    log = ROOT / "tests" / "data" / "vllm-logs" / "v5e1-e2b-qwix-int8-abstract-fail.log"
    lines = [x for x in log.read_bytes().decode().split("\n") if x.strip()]
    entries = eval_analyst.convert(log)
    docker = [e for e in entries if e["logName"].endswith("/gcplogs-docker-driver")]
    startup = [e for e in entries if e["logName"].endswith("/google_metadata_script_runner")]
    assert len(startup) == 3 and len(docker) == len(lines)
    assert all("message" in e["jsonPayload"] for e in docker)
    stamps = [e["timestamp"] for e in entries]
    assert stamps == sorted(stamps, reverse=True) and len({e["insertId"] for e in entries}) == len(entries)


# ---- the scorer ---------------------------------------------------------------------------------------

CASE = next(c for c in CASES if c["id"].startswith("B01"))
OK_CASE = next(c for c in CASES if c["root"] is None)


def _cite(ref: str, verified: bool = True) -> SimpleNamespace:
    return SimpleNamespace(ref=ref, kind="entry", verified=verified)


def _correct(case: dict) -> str:
    ref = case["root_insert_ids"][0]
    if case["root"] is None:
        return f"Yes: the server {case['cause_any'][0]} and is serving [{ref}]; nothing needs to be fixed."
    return (
        f"The root cause is {case['cause_any'][0]} as logged in [{ref}]. "
        f"Fix: {case['fix_any'][0]}, then restart the server."
    )


def test_score_parts() -> None:
    ref = CASE["root_insert_ids"][0]
    full = eval_analyst.score_answer(CASE, _correct(CASE), [_cite(ref)], "prompt")
    assert (full.total, full.maximum) == (3, 3)
    no_cite = eval_analyst.score_answer(CASE, _correct(CASE), [], "prompt")
    assert no_cite.parts == {"cause": 1, "fix": 1, "citation": 0}
    wrong_entry = eval_analyst.score_answer(CASE, _correct(CASE), [_cite("line-1")], "prompt")
    assert wrong_entry.parts["citation"] == 0
    unverified = eval_analyst.score_answer(CASE, _correct(CASE), [_cite(ref, verified=False)], "prompt")
    assert unverified.parts["citation"] == 0
    # the healthy boot: no fix part, and calling it a failure costs the cause point
    ok_ref = OK_CASE["root_insert_ids"][0]
    ok = eval_analyst.score_answer(OK_CASE, _correct(OK_CASE), [_cite(ok_ref)], "prompt")
    assert (ok.total, ok.maximum) == (2, 2)
    claim = eval_analyst.score_answer(OK_CASE, "The server started but then crashed badly [x].", [], "prompt")
    assert claim.parts["cause"] == 0


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("", "empty"),
        ("model " * 300, "repeats"),
        ("<start_of_turn>model\nKV cache [x]<end_of_turn>", "template markers"),
        ("KV cache 5632", "fewer than"),
    ],
)
def test_unusable_answers_score_nothing(answer: str, why: str) -> None:
    ref = CASE["root_insert_ids"][0]
    s = eval_analyst.score_answer(CASE, answer, [_cite(ref)], "prompt")
    assert s.total == 0 and s.unusable and why in s.unusable


def test_an_echo_of_the_prompt_scores_nothing_even_with_the_right_words() -> None:
    ref = CASE["root_insert_ids"][0]
    prompt = (
        f"KNOWN SIGNATURES kv-cache-too-small: KV cache holds 5,632 tokens, less than one max-model-len request; "
        f"fix: lower --max-model-len to 5,632 or less, or raise --gpu-memory-utilization [{ref}] and more text"
    )
    s = eval_analyst.score_answer(CASE, prompt, [_cite(ref)], prompt)
    assert s.total == 0 and "echo" in (s.unusable or "")


def test_not_consulted_scores_nothing() -> None:
    s = eval_analyst.score_answer(CASE, _correct(CASE), [], "p", consulted=False)
    assert s.total == 0 and s.unusable == "the model was not consulted"


# ---- end to end: the real analyst against the fake server, scripted ------------------------------------

GARBAGE = ("model " * 120, "blorp quang fizzle wombat drizzle snorkel " * 3 + "the of and")


async def _run(vllm: FakeVllm, answers: list[str]) -> list:
    settings = load_settings(environ={"VLLM_URL": vllm.url, "TPU_DEVOPS_ENV_FILE": "/nonexistent"})
    scores = []
    for case, answer in zip(CASES, answers, strict=True):
        vllm.scripted.clear()
        vllm.queue(ScriptedTurn(content=answer, finish_reason="stop"))
        scores.append(await eval_analyst.model_score(case, settings))
    return scores


def _echo(case: dict) -> str:
    prompt, _ = eval_analyst._evidence(case["path"], case["question"], tuple(case["root_insert_ids"]))
    return prompt.split("\n", 1)[1]  # the evidence pack the model was shown


@pytest.mark.anyio
async def test_the_evaluation_can_fail_and_can_pass() -> None:
    with FakeVllm() as vllm:
        garbage = await _run(vllm, [GARBAGE[i % 2] for i in range(len(CASES))])
        echo = await _run(vllm, [_echo(c) for c in CASES])
        correct = await _run(vllm, [_correct(c) for c in CASES])
    assert sum(s.total for s in garbage) == 0, [s.row() for s in garbage if s.total]
    assert sum(s.total for s in echo) == 0, [s.row() for s in echo if s.total]
    assert all(s.total == s.maximum for s in correct), [s.row() for s in correct if s.total < s.maximum]
    line = eval_analyst.report(correct)
    maximum = sum(s.maximum for s in correct)
    assert (
        line.startswith(f"model score: {maximum}/{maximum} over {len(CASES)} cases (cause ")
        and "citation" in line
    )
    assert "0 of" in line and f"{len(CASES)} answers unusable" in eval_analyst.report(garbage)


def test_every_case_file_exists() -> None:
    assert all(Path(c["path"]).is_file() for c in CASES)


# ---- answers that are wrong, in the right words -----------------------------------------------------

B01 = next(c for c in CASES if c["id"].startswith("B01"))  # KV cache too small; fix 5632
OOM_CASE = next(c for c in CASES if c["id"] == "v5e1-e2b-util095-program-oom")  # fix 0.92
HF429 = next(c for c in CASES if c["id"].startswith("B03"))  # 429; fix wait / retry / token
PREEMPTED = next(c for c in CASES if c["id"] == "v6e1-preempted-export")

# (case, answer): each names the rubric's words without stating them. The first two are the issue's:
# "success" inside "unsuccessful" scored a failed boot as healthy, and a denied cause scored as the cause.
WRONG = [
    (OK_CASE, "The boot was unsuccessful: the engine core failed at startup [{ref}]. Restart it."),
    (
        B01,
        "The failure was not caused by the KV cache [{ref}]; the VM could not reach huggingface.co, fix DNS.",
    ),
    (B01, "There is no sign of a KV-cache problem [{ref}]: the image pull was refused. Pin a digest."),
    (
        B01,
        "The KV cache is fine [{ref}]; the network dropped. Set max-model-len to 56320 and retry the pull.",
    ),
    (B01, "Rather than the KV cache, the TPU was preempted [{ref}]. Recreate it as spot or on-demand."),
    (OK_CASE, "The server never started; it crashed while loading weights [{ref}]. Nothing became ready."),
    (OK_CASE, "The server is not ready and not healthy [{ref}]: the engine died during compilation."),
    (OK_CASE, "It was unhealthy and already failing [{ref}]; the container restarted, see the crash above."),
    (
        OOM_CASE,
        "HBM was not exhausted [{ref}]; the tokenizer config is broken. Set --gpu-memory-utilization to 0.925.",
    ),
    (
        OOM_CASE,
        "This has nothing to do with HBM or out of memory [{ref}]. Do not lower the memory setting; fix the image.",
    ),
    (
        HF429,
        "The tokenizer could not be parsed [{ref}]; it is not a 429 or a rate limit. Rebuild the tokenizer files.",
    ),
    (PREEMPTED, "The TPU was not preempted [{ref}]: vLLM ran out of HBM. Lower --gpu-memory-utilization."),
]


@pytest.mark.parametrize(
    ("case", "answer"), WRONG, ids=[f"{c['id'][:12]}-{i}" for i, (c, _) in enumerate(WRONG)]
)
def test_known_wrong_answers_score_zero(case: dict, answer: str) -> None:
    ref = case["root_insert_ids"][0]
    s = eval_analyst.score_answer(case, answer.format(ref=ref), [_cite(ref)], "prompt")
    assert s.total == 0, (s.row(), answer)


def test_the_analysts_verdict_zeroes_the_score_and_both_are_printed() -> None:
    ref = CASE["root_insert_ids"][0]
    judged = eval_analyst.score_answer(
        CASE, _correct(CASE), [_cite(ref)], "prompt", verdict=["it cites no entry or template that exists"]
    )
    assert judged.total == 0 and judged.rubric_total == 3
    assert "the analyst judged it not usable: it cites no entry" in (judged.unusable or "")
    assert judged.row()["rubric_alone"] == "3/3"
    line = eval_analyst.report([judged])
    assert line.startswith("model score: 0/3 over 1 cases") and line.endswith(
        "ignoring the analyst's verdict: 3/3"
    )


def test_the_right_line_cited_for_a_wrong_cause_earns_nothing() -> None:
    ref = CASE["root_insert_ids"][0]
    s = eval_analyst.score_answer(
        CASE, "The image pull failed [" + ref + "]. Pin a digest and retry.", [_cite(ref)], "p"
    )
    assert s.total == 0


def test_the_readme_states_the_case_count_the_evaluation_prints() -> None:
    readme = (ROOT / "README.md").read_text()
    import re

    stated = re.search(r"make eval-analyst`[^.]*?\((\d+) cases\)", readme)
    assert stated, "README.md no longer states the evaluation's case count"
    assert int(stated.group(1)) == len(CASES)
