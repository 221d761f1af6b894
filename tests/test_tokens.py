"""The offline token estimate never under-counts what a Gemma tokenizer measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tpu_devops.logs.evidence import summarize_source
from tpu_devops.logs.sources import FileSource
from tpu_devops.serving.tokens import cut_to_tokens, estimate_tokens, local_tokenizer

CALIBRATION = json.loads((FIXTURES / "tokens" / "calibration.json").read_text())
# Figures measured with llama.cpp's /tokenize on a Gemma GGUF (chars -> tokens).
MEASURED = {
    "evidence pack of the v5e1-util095 export": (17_956, 9_554),
    "evidence pack of the qwix int8 abstract-fail log": (17_963, 8_847),
    "evidence pack of the v6e1 boot-ok export": (17_972, 9_453),
}


@pytest.mark.parametrize("case", CALIBRATION["issue_16"], ids=lambda c: c["what"])
def test_issue_16_evidence_packs_are_never_under_counted(case: dict) -> None:
    chars, measured = MEASURED[case["what"]]
    assert (len(case["text"]), case["measured"]) == (chars, measured)  # the very texts measured
    estimate = estimate_tokens(case["text"])
    assert estimate >= measured, f"{case['what']}: estimate {estimate} < measured {measured}"
    assert estimate <= 1.3 * measured  # conservative, not wasteful (the old ceil(chars/3) said 5,986)


def test_20_entry_search_results_are_never_under_counted() -> None:
    results = CALIBRATION["search_results"]
    assert len(results) >= 10 and all(len(r["text"]) == 1_869 for r in results)
    # the issue's range (1,049-1,113 for 1,869 characters) lies inside what these measured
    assert min(r["measured"] for r in results) <= 1_049 and max(r["measured"] for r in results) >= 1_113
    for r in results:
        assert estimate_tokens(r["text"]) >= r["measured"], r["what"]
    assert estimate_tokens(results[0]["text"][: len(results[0]["text"])]) >= 1_113 * 0.95


def test_first_production_request_is_never_under_counted() -> None:
    from tpu_devops.serving.tokenize import estimate_request

    req = CALIBRATION["request"]
    messages = [{"role": "system", "content": req["system"]}, {"role": "user", "content": req["user"]}]
    assert estimate_request(messages, req["tools"]) >= req["measured"] == 10_138


def test_log_windows_and_synthetic_secrets() -> None:
    # 120 windows of bundled logs, field reports and packs: never under-counted.
    for w in CALIBRATION["windows"]:
        assert estimate_tokens(w["text"]) >= w["measured"], w["what"]
    # base64, API keys, hex, UUIDs, CJK, emoji, JSON: at most 2% under (pure hex is the worst kind).
    for s in CALIBRATION["synthetic"]:
        assert estimate_tokens(s["text"]) >= 0.98 * s["measured"], (s["what"], s["text"][:40])


def test_packs_fit_their_budget_by_the_estimate() -> None:
    for budget in (3000, 6000):
        summary = summarize_source(
            FileSource(str(FIXTURES / "logs" / "v5e1-util095-export.json")), token_budget=budget
        )
        assert summary.evidence_tokens == estimate_tokens(summary.evidence) <= budget


def test_cut_to_tokens() -> None:
    text = "\n".join(f"line {i}: value {i * 37} at 2026-08-07T23:08:{i % 60:02d}Z" for i in range(200))
    cut = cut_to_tokens(text, 300)
    assert estimate_tokens(cut) <= 300 and text.startswith(cut) and cut.endswith(("Z", "\n")) is True
    assert cut_to_tokens("short", 300) == "short"


def test_local_tokenizer_from_the_hugging_face_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tokenizers
    from tokenizers import models, pre_tokenizers

    # A tiny tokenizer.json written by the tokenizers library, placed where the HF cache keeps it.
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    snap = tmp_path / "hub" / "models--acme--tiny-it" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    tok.save(str(snap / "tokenizer.json"))
    (tmp_path / "hub" / "models--acme--tiny-it" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny-it" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    local_tokenizer.cache_clear()
    count = local_tokenizer("acme/tiny-it")
    assert count is not None and count("hello world hello") == 3
    assert local_tokenizer(str(snap)) is not None  # a local directory works too
    assert local_tokenizer("acme/not-cached") is None
    local_tokenizer.cache_clear()
