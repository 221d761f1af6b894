"""Redaction: every secret kind is replaced, placeholders are stable within one Redactor."""

from __future__ import annotations

from tpu_devops.logs.redact import Redactor, redact_text

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
OAUTH = "ya29." + "a0AfH6SMBx-example_token_value_1234567890"
API_KEY = "AIza" + "SyA1234567890abcdefghijklmnopqrstuv"


def test_each_secret_kind_is_replaced() -> None:
    r = Redactor()
    text = (
        f"token {HF} oauth {OAUTH} key={API_KEY} Authorization: Bearer abc.def-ghi_jkl "
        "mail ops@example.com from 10.1.2.3 path projects/123456789012/secrets/hf-token "
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END PRIVATE KEY----- password=hunter22x"
    )
    out = r.redact(text)
    for secret in (
        HF,
        OAUTH,
        API_KEY,
        "abc.def-ghi_jkl",
        "ops@example.com",
        "10.1.2.3",
        "123456789012",
        "MIIEvQIBADANBgkq",
        "hunter22x",
    ):
        assert secret not in out, secret
    for kind in (
        "HF_TOKEN",
        "GOOGLE_OAUTH_TOKEN",
        "GOOGLE_API_KEY",
        "BEARER_TOKEN",
        "EMAIL",
        "IP",
        "PROJECT_NUMBER",
        "PRIVATE_KEY",
        "SECRET",
    ):
        assert f"<{kind}_1>" in out, kind
    assert "redacted" in (r.notice() or "")


def test_placeholders_are_stable_per_answer_and_restart_per_redactor() -> None:
    r = Redactor()
    a = r.redact("a@example.com then b@example.com")
    b = r.redact("again a@example.com")
    assert a == "<EMAIL_1> then <EMAIL_2>"
    assert b == "again <EMAIL_1>"
    assert redact_text("b@example.com") == "<EMAIL_1>"


def test_harmless_text_is_unchanged() -> None:
    line = "(APIServer pid=1) INFO 08-07 23:11:08 [api_server.py:1] Starting vLLM server on http://0.0.0.0:8000 version 0.26.1"
    assert redact_text(line) == line
    assert redact_text("listening on 127.0.0.1:8000") == "listening on 127.0.0.1:8000"
    assert redact_text("") == ""


def test_prefixed_secret_keys_and_basic_auth_are_replaced() -> None:
    out = redact_text(
        "VLLM_API_KEY=sk-abcdef123456 DB_PASSWORD: hunter22x Authorization: Basic dXNlcjpwYXNzd29yZA=="
    )
    assert "sk-abcdef123456" not in out and "hunter22x" not in out and "dXNlcjpwYXNzd29yZA" not in out
    assert "VLLM_API_KEY=<SECRET_1>" in out and "Basic <BASIC_AUTH_1>" in out
    for harmless in ("max_num_batched_tokens=2048", "tokenizer=google/gemma-4-E2B-it", "basic functionality"):
        assert redact_text(harmless) == harmless


def test_memo_replays_the_counts_of_a_cached_value() -> None:
    r = Redactor()
    first = r.memo(("labels", "a"), lambda: {"mail": r.redact("ops@example.com, a long label value here")})
    again = r.memo(("labels", "a"), lambda: {"mail": "not computed again"})
    assert first is again and first == {"mail": "<EMAIL_1>, a long label value here"}
    assert r.counts == {"EMAIL": 2}
