"""Redaction: every secret kind is replaced, placeholders are stable within one Redactor."""

from __future__ import annotations

import json

import pytest

from tpu_devops.host.redact import Redactor, redact_text

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


# ---- every kind by its shape, wherever it sits: a secret goes only where it belongs ----------------

PEM_LINES = [
    "-----BEGIN PRIVATE KEY-----",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
    "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
    "Hk8=",
    "-----END PRIVATE KEY-----",
]
SECRET_VARIANTS = {
    "hf token with a suffix": ("hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567_v2", "hf_AbCdEfGhIjKlMnOpQrSt"),
    "hf token glued after an underscore": (
        "HF_TOKEN_hf_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432",
        "ZyXwVuTsRqPoNm",
    ),
    "cut hf token": ("prefix hf_" + "Q1w2E3r4T5y6", "Q1w2E3r4T5y6"),
    "--api-key VALUE": (
        "vllm serve google/gemma-4-E2B-it --api-key s3cr3t-k3y-value --port 8000",
        "s3cr3t-k3y",
    ),
    "--api-key=VALUE": ("vllm serve m --api-key=Sup3rS3cretValue9 --max-model-len 16384", "Sup3rS3cret"),
    "--hf-token VALUE": ("huggingface-cli download x --hf-token 'qwertyuiop123'", "qwertyuiop123"),
    "--token VALUE": ("tool --token abcd1234efgh", "abcd1234efgh"),
    "curl -H bearer": (
        "curl -H 'Authorization: Bearer vllm-key-0123456789' http://10.0.0.5:8000/v1/models",
        "vllm-key-0123456789",
    ),
    "authorization token scheme": (
        "Authorization: token gho_" + "16C7e42F292c6912E7710c838347Ae178B4a",
        "16C7e42F292c6912",
    ),
    "raw authorization": ('{"headers": {"Authorization": "k3y-Without-Scheme-123"}}', "k3y-Without-Scheme"),
    "HF_TOKEN=": ("export HF_TOKEN=plainvalue123 && run", "plainvalue123"),
    "VLLM_API_KEY=": ("docker run -e VLLM_API_KEY=rig-key-456789 vllm/vllm-tpu", "rig-key-456789"),
    "non-default args api_key list": (
        "non-default args: {'model': 'google/gemma-4-E2B-it', 'api_key': ['mylistkey99']}",
        "mylistkey99",
    ),
    "escaped json api key": ('{"message": "{\\"api_key\\": \\"escapedKey123\\"}"}', "escapedKey123"),
    "aws": (
        "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI",
    ),
    "aws key id": ("key id AKIAIOSFODNN7EXAMPL2 in use", "AKIAIOSFODNN7EXAMPL2"),
    "oauth": ("token ya29.a0AfH6SMBx-example_token_value_12345 expired", "a0AfH6SMBx"),
    "refresh token": ("refresh 1//0gLmN0pQrStUvWxYz-abcdefghijk used", "0gLmN0pQrStUvWx"),
    "google api key": ("key=AIzaSyA1234567890abcdefghijklmnopqrstuv_x", "SyA1234567890"),
    "openai": ("OPENAI key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx01 set", "AbCdEfGhIjKlMnOp"),
    "github": (
        "git clone https://ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789@github.com/x/y",
        "aBcDeFgHiJkLmNoP",
    ),
    "jwt": (
        "id eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36P",
        "SflKxwRJSMeKKF2QT4fw",
    ),
    "url basic auth": ("GET https://admin:pa55w0rd!@registry.example.com/v2/", "pa55w0rd"),
    "service account json": (
        '{"type": "service_account", "private_key_id": "4f3c2b1a0f9e8d7c6b5a", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n", "client_email": "sa@p.iam.gserviceaccount.com"}',
        "MIIEvQIBADANBgkq",
    ),
}


SECRET_VARIANTS.update(
    {
        "slack webhook": (
            "POST https://hooks.slack.com/services/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",
            "xQ9wErTyUiOpAsDf",
        ),
        "discord webhook": (
            "https://discord.com/api/webhooks/123456789012345678/AbCdEfGhIjKlMnOpQrStUvWx-yz",
            "AbCdEfGhIjKlMnOp",
        ),
        "slack app token": ("SLACK xapp-1-A0AUDIT-1234567890-abcdef0123456789", "A0AUDIT-1234567890"),
        "google oauth client secret": (
            '{"client_id": "x.apps.googleusercontent.com", "client_secret": "GOCSPX-AuditClientSecret01"}',
            "AuditClientSecret01",
        ),
        "bare GOCSPX": ("secret GOCSPX-AuditClientSecret02 rotated", "AuditClientSecret02"),
        "npm token": (
            "//registry.npmjs.org/:_authToken npm_AuditNpmToken0123456789abcdefghij",
            "AuditNpmToken0123",
        ),
        "pypi token": ("TWINE_PASSWORD pypi-AgEIcHlwaS5vcmcAuditPypiToken0123456789", "AuditPypiToken0123"),
        "docker hub pat": ("login dckr_pat_AuditDockerPat0123456789ab", "AuditDockerPat0123"),
        "sendgrid": ("SG.AuditSendGridKey0123.AuditSendGridSecret0123456789 used", "AuditSendGridSecret"),
        "cookie header": ("Cookie: session=AuditSessionCookie0123456789; theme=dark", "AuditSessionCookie"),
        "set-cookie": ("Set-Cookie: sid=AuditSetCookieValue987654; HttpOnly", "AuditSetCookieValue"),
        "azure account key": (
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=AuditAzureKey0123456789+/==;",
            "AuditAzureKey0123",
        ),
        "kubeconfig client key data": (
            "    client-key-data: LS0tLS1CRUdJTiBBdWRpdEt1YmVLZXk0NTY=",
            "LS0tLS1CRUdJTiBBdWRpdEt1YmVLZXk0",
        ),
        "x-goog-api-key header": ("x-goog-api-key: AuditGoogApiKeyHeader01", "AuditGoogApiKeyHeader01"),
        "postgres dsn": ("DATABASE_URL=postgres://app:AuditDbPassw0rd@db.internal:5432/x", "AuditDbPassw0rd"),
        "aws session token": ("aws_session_token = FwoGZXIvYXdzEAuditSessionToken0123", "FwoGZXIvYXdzEAudit"),
    }
)


def test_every_secret_variant_is_replaced() -> None:
    for name, (text, secret_part) in SECRET_VARIANTS.items():
        out = redact_text(text)
        assert secret_part not in out, (name, out)
    out = redact_text(SECRET_VARIANTS["service account json"][0])
    assert "4f3c2b1a0f9e8d7c6b5a" not in out and "sa@p.iam" not in out


def test_diagnostic_text_is_kept() -> None:
    for harmless in (
        "--max-num-batched-tokens 2048 --max-model-len 16384 --tokenizer google/gemma-4-E2B-it",
        "Fast download using 'hf_transfer' is enabled; hf_hub_download took 3.2 s",
        "max_tokens=512 tokenizer_mode=auto 'pad_token': '<pad>' hf_token: None api_key=None",
        "image vllm/vllm-tpu@sha256:" + "0123456789abcdef" * 4,
        "GPU KV cache size: 321,376 tokens; Maximum concurrency for 16,384 tokens per request: 19.61x",
        "token budget 6000, key cache layers 15, secret manager secret hf-token",
        "request 3f2a9c1e-8b7d-4e6f-a5c4-b3d2e1f0a9b8 finished",
    ):
        assert redact_text(harmless) == harmless, harmless


def test_pem_block_logged_one_line_per_entry_in_either_order() -> None:
    for lines in (PEM_LINES, list(reversed(PEM_LINES))):
        r = Redactor()
        out = [r.redact_message(line) for line in ["INFO starting", *lines, "INFO key loaded"]]
        body = "\n".join(out)
        for secret in PEM_LINES[1:5]:
            assert secret not in body, body
        assert out[0] == "INFO starting" and out[-1] == "INFO key loaded"
        assert len({line for line in out[1:-1]}) == 1  # one placeholder for the whole block


def test_secret_cut_across_adjacent_fields_and_lines() -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
    for cut in (2, 5, 12, 30):
        fields = Redactor().redact_fields(["upload with " + token[:cut], token[cut:], "done"])
        joined = " ".join(fields)
        assert token[cut:][:8] not in joined and token[:cut][-8:] not in joined or cut < 8, (cut, fields)
        assert fields[2] == "done" and "<HF_TOKEN_1>" in fields[1]
    r = Redactor()
    first = r.redact_message("curl -H 'Authorization: Bearer")
    second = r.redact_message("sk-proj-abcdefghijklmnop0123' http://10.0.0.5:8000")
    assert "abcdefghijklmnop0123" not in first + second
    r = Redactor()
    assert r.redact_message("vllm serve m --api-key") == "vllm serve m --api-key"
    assert "VeryS3cretKey" not in r.redact_message("VeryS3cretKey --port 8000")


# ---- by value: whatever the key order, the split, or where the value comes back ---------------------------

SPLIT = "hf_" + "SplitAnyOrderToken0123456789XYZabc"


@pytest.mark.parametrize("cut", [5, 9, 15, 24])
@pytest.mark.parametrize(
    "keys",
    [
        ("message", "token_rest"),  # the rest's key sorts after
        ("message", "a_rest"),  # ... before the message's
        ("zz_head", "aa_rest"),  # no message key: the payload is shown as sorted JSON
        ("aa_head", "zz_rest"),
        ("msg", "rest", "middle"),  # a field between the two parts
    ],
)
@pytest.mark.parametrize("rest_first", [False, True])  # the order the fields come in
def test_a_token_split_across_fields_is_replaced_in_any_order(
    keys: tuple[str, ...], cut: int, rest_first: bool
) -> None:
    from tpu_devops.logs.sources import record_from_entry

    head_key, rest_key = keys[0], keys[1]
    fields = [(head_key, f"hub login with {SPLIT[:cut]}"), (rest_key, SPLIT[cut:])]
    if len(keys) == 3:
        fields.insert(1, (keys[2], "INFO unrelated words in between"))
    if rest_first:
        fields.reverse()
    entry = {"insertId": "x1", "severity": "INFO", "jsonPayload": dict(fields)}
    record = record_from_entry(entry, Redactor())
    shown = record.message + json.dumps(record.labels)
    for part in (SPLIT[3:cut], SPLIT[cut:]):
        assert len(part) < 8 or part[:8] not in shown, (fields, shown)


def test_a_secret_seen_once_is_replaced_wherever_it_comes_back() -> None:
    r = Redactor()
    first = r.redact_message("docker run -e VLLM_API_KEY=rig-key-value-0042 vllm/vllm-tpu")
    assert "rig-key-value-0042" not in first
    again = r.redact_message("client connected with rig-key-value-0042 from the proxy")  # no name, no shape
    assert "rig-key-value-0042" not in again and r.placeholder("SECRET", "rig-key-value-0042") in again
    # the rest of a cut token, alone in a later field, takes the token's placeholder
    fields = r.redact_fields(["upload with hf_Abc", "DefGhiJklMnoPqrStu0123", "done"])
    later = r.redact("retrying DefGhiJklMnoPqrStu0123")
    assert "DefGhiJklMnoPqrStu0123" not in " ".join(fields) + later
    # personal data is not replaced by value (an address is no secret), and a new answer forgets
    assert "rig-key-value-0042" in Redactor().redact("rig-key-value-0042")


def test_by_value_leaves_short_and_harmless_text_alone() -> None:
    r = Redactor()
    r.redact("token=abc1 password: Sup3rLongSecretValue")
    assert r.redact("abc1 is a short word") == "abc1 is a short word"  # under MIN_KNOWN_CHARS
    assert r.redact("GPU KV cache size: 321,376 tokens") == "GPU KV cache size: 321,376 tokens"


def test_by_value_with_many_secrets_sharing_prefixes() -> None:
    """Hundreds of remembered values, nested prefixes included (a hostile log): each comes back replaced,
    the longest known value wins, and the matcher compiles (no recursion limit, no alternation blow-up)."""
    r = Redactor()
    values = [f"password={'Q' * 7}{'y' * i}Z9" for i in range(1, 1_200)]
    for v in values:
        r.redact(v)
    later = " ".join(v.split("=", 1)[1] for v in values[::37])
    out = r.redact(later)
    assert "QQQQQQQ" not in out and out.count("<SECRET_") == len(values[::37]), out[:300]
    # a known value inside a longer run of the same characters: the longest known one is replaced
    assert r.redact("QQQQQQQyyZ9") == r.placeholder("SECRET", "QQQQQQQyyZ9")


def test_a_payload_nested_thousands_of_levels_deep_is_read() -> None:
    from tpu_devops.logs.sources import record_from_entry

    deep: dict = {"token": "hf_" + "DeepNestedToken0123456789abcdefXY"}
    for _ in range(5_000):
        deep = {"k": deep}
    record = record_from_entry(
        {"insertId": "d1", "severity": "ERROR", "jsonPayload": {"zz": deep}}, Redactor()
    )
    assert "nested deeper than 9 levels" in record.message and "DeepNestedToken" not in record.message
