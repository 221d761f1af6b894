"""Chat with stats through the real openai client against the vLLM-shaped fake server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.openai_server import FakeVllm, ScriptedTurn, closed_port_url
from tpu_devops.config import Settings, load_settings
from tpu_devops.errors import InputError
from tpu_devops.serving import chat, egress, errors, models, resolve, stream
from tpu_devops.serving.errors import ServingError

pytestmark = pytest.mark.anyio


@pytest.fixture
def fake() -> Iterator[FakeVllm]:
    with FakeVllm(ttft_s=0.01, itl_s=0.002) as server:
        yield server


def settings_for(url: str, tmp_path: Path, **env: str) -> Settings:
    return load_settings(
        tmp_path / "none.env", environ={"VLLM_URL": url, "TPU_DEVOPS_STATE_DIR": str(tmp_path), **env}
    )


async def test_query_returns_the_answer_and_uses_chat_completions(fake: FakeVllm, tmp_path: Path) -> None:
    fake.queue(ScriptedTurn(content="Paris is the capital of France."))
    result = await chat.query(settings_for(fake.url, tmp_path), "Capital of France?", system="Be brief.")
    assert result.content == "Paris is the capital of France."
    assert result.model == "google/gemma-4-E2B-it"
    assert result.endpoint_source == "VLLM_URL"
    assert result.stats is None
    sent = fake.requests[-1]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}


async def test_stats_use_server_usage(fake: FakeVllm, tmp_path: Path) -> None:
    fake.queue(ScriptedTurn(content="one two three four five six"))
    result = await chat.query(settings_for(fake.url, tmp_path), "count to six please", with_stats=True)
    s = result.stats
    assert s is not None
    assert s.completion_tokens == 6
    assert s.prompt_tokens == 4 + 4  # four words + the fake's template overhead
    assert s.tokens_from == "server usage"
    assert s.output_chunks == 6
    assert s.ttft_ms is not None and s.tpot_mean_ms is not None and s.itl_median_ms is not None
    assert s.max_gap_after_token is not None
    assert not s.stalled


async def test_a_stalled_stream_is_reported(fake: FakeVllm, tmp_path: Path) -> None:
    fake.itl_s = 0.001
    fake.stall_after_tokens = 5
    fake.stall_s = 0.6
    fake.queue(ScriptedTurn(content=" ".join(["w"] * 10)))
    result = await chat.query(settings_for(fake.url, tmp_path), "go", with_stats=True)
    assert result.stats is not None and result.stats.stalled
    assert result.stats.max_gap_after_token == 5
    assert any("preemption" in n for n in result.notices)
    assert "STALLED" in result.headline()


async def test_reasoning_content_is_kept_apart(fake: FakeVllm, tmp_path: Path) -> None:
    fake.queue(ScriptedTurn(content="42", reasoning="thinking about it"))
    result = await chat.query(settings_for(fake.url, tmp_path), "meaning of life?")
    assert result.content == "42"
    assert result.reasoning == "thinking about it"


async def test_empty_content_is_noted(fake: FakeVllm, tmp_path: Path) -> None:
    fake.empty_content = True
    result = await chat.query(settings_for(fake.url, tmp_path), "hello")
    assert result.content == ""
    assert any("empty content" in n for n in result.notices)


async def test_model_falls_back_to_the_served_one_with_a_notice(fake: FakeVllm, tmp_path: Path) -> None:
    s = settings_for(fake.url, tmp_path, MODEL_NAME="google/gemma-4-E4B-it")
    result = await chat.query(s, "hi")
    assert result.model == "google/gemma-4-E2B-it"
    assert any("not served" in n for n in result.notices)


async def test_explicit_wrong_model_is_a_model_mismatch(fake: FakeVllm, tmp_path: Path) -> None:
    with pytest.raises(ServingError) as err:
        await chat.query(settings_for(fake.url, tmp_path), "hi", model="google/gemma-4-E4B-it")
    assert err.value.failure == "model_mismatch"
    assert "google/gemma-4-E2B-it" in (err.value.fix or "")


async def test_vllm_404_for_an_unknown_model_is_classified(fake: FakeVllm, tmp_path: Path) -> None:
    egress.mark_owned(fake.url, "VLLM_URL")  # a call below resolve_endpoint: the operator's endpoint
    with pytest.raises(ServingError) as err:
        await stream.stream_chat(fake.url, "gemma-typo", [{"role": "user", "content": "hi"}])
    assert err.value.failure == "model_mismatch"
    assert err.value.value == "gemma-typo"


async def test_connection_refused_and_booting(tmp_path: Path) -> None:
    with pytest.raises(ServingError) as err:
        await chat.query(settings_for(closed_port_url(), tmp_path), "hi")
    assert err.value.failure == "connection_refused"
    url = closed_port_url()
    with pytest.raises(ServingError) as err:
        await chat.query(settings_for(url, tmp_path), "hi")
    # A VLLM_URL endpoint may be a laptop server: its port, no TPU boot story or firewall advice.
    port = url.rsplit(":", 1)[1]
    assert port in err.value.message and port in (err.value.fix or "")
    assert "TPU" not in str(err.value) and "8000" not in str(err.value)
    with FakeVllm(mode="booting") as booting:
        with pytest.raises(ServingError) as err:
            await chat.query(settings_for(booting.url, tmp_path), "hi")
    assert err.value.failure == "booting"


async def test_bad_inputs_name_the_field(fake: FakeVllm, tmp_path: Path) -> None:
    s = settings_for(fake.url, tmp_path)
    for kwargs, field in (
        ({"prompt": "  "}, "prompt"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "hi", "temperature": 3.0}, "temperature"),
        ({"prompt": "hi", "base_url": "ftp://x"}, "base_url"),
    ):
        with pytest.raises(InputError) as err:
            await chat.query(s, **kwargs)
        assert err.value.field == field


async def test_no_vllm_url_and_no_discovery_is_no_endpoint(tmp_path: Path) -> None:
    s = load_settings(tmp_path / "none.env", environ={"TPU_DEVOPS_STATE_DIR": str(tmp_path)})
    with pytest.raises(ServingError) as err:
        await resolve.resolve_endpoint(s)
    assert err.value.failure == "no_endpoint"
    assert err.value.fix


def test_instruction_tuned_names() -> None:
    assert models.looks_instruction_tuned("google/gemma-4-E2B-it")
    assert models.looks_instruction_tuned("meta-llama/Llama-3.1-8B-Instruct")
    assert not models.looks_instruction_tuned("google/gemma-4-E2B")


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


async def test_errors_name_base_url_when_the_url_came_from_the_argument(tmp_path: Path) -> None:
    # regression: a failing base_url argument was reported as "VLLM_URL = ..."
    url = closed_port_url()
    with pytest.raises(ServingError) as err:  # the rig's own URL, passed as base_url
        await chat.query(settings_for(url, tmp_path), "hi", base_url=url)
    assert err.value.field == "base_url" and err.value.value == url
    with pytest.raises(ServingError) as err:
        await chat.query(settings_for(url, tmp_path), "hi")
    assert err.value.field == "VLLM_URL"


async def test_answer_text_shows_the_answer_once(fake: FakeVllm, tmp_path: Path) -> None:
    fake.queue(ScriptedTurn(content="Paris."))
    plain = await chat.query(settings_for(fake.url, tmp_path), "Capital of France?")
    assert plain.render_text().count("Paris.") == 1 and "endpoint_source" not in plain.render_text()
    fake.queue(ScriptedTurn(content="Paris."))
    measured = await chat.query(settings_for(fake.url, tmp_path), "Capital of France?", with_stats=True)
    text = measured.render_text()
    assert text.splitlines()[0].startswith(f"{measured.stats.completion_tokens} tokens: TTFT")
    assert "Paris." in text and "server usage" in text


def test_tpu_advice_only_for_the_rigs_discovered_endpoint() -> None:
    import httpx

    from tpu_devops.serving.resolve import Endpoint, for_endpoint

    def refused_httpx() -> ServingError:
        return errors.classify(httpx.ConnectError("refused"), "http://10.0.0.5:8123")

    rig = for_endpoint(refused_httpx(), Endpoint("http://10.0.0.5:8123", "discovery"))
    assert "booting" in rig.message and "tcp:8123" in (rig.fix or "")
    assert rig.field == "endpoint (discovered)"
    other = for_endpoint(refused_httpx(), Endpoint("http://10.0.0.5:8123", "argument"))
    assert "TPU" not in str(other) and "8123" in (other.fix or "") and other.field == "base_url"


def test_context_overflow_messages_of_vllm_and_llama_cpp() -> None:
    from tpu_devops.serving.errors import context_overflow

    vllm = (
        "This model's maximum context length is 8192 tokens. However, you requested 9761 tokens "
        "(9061 in the messages, 700 in the completion). Please reduce the length of the messages or completion."
    )
    llama = "request (9761 tokens) exceeds the available context size (8192 tokens), try increasing it"
    newer_vllm = (
        "This model's maximum context length is 16384 tokens. However, your request has 17020 input tokens."
    )
    assert context_overflow(vllm) == (9061, 8192)
    assert context_overflow(llama) == (9761, 8192)
    assert context_overflow(newer_vllm) == (17020, 16384)
    assert context_overflow("model not found") is None


@pytest.mark.parametrize("flavor", ["vllm", "llama.cpp"])
@pytest.mark.parametrize(
    ("prompt", "max_tokens", "field"),
    [("hello", 5000, "max_tokens"), ("two words", 2100, "max_tokens"), ("word " * 3000, 100, "prompt")],
)
async def test_an_overflow_names_what_overflows_prompt_or_max_tokens(
    flavor: str, prompt: str, max_tokens: int, field: str
) -> None:
    # A short prompt with a large max_tokens overflows because of max_tokens: the server's error must be
    # read as such and give its ceiling, not blame "10 prompt tokens" (a request that skipped the check).
    with FakeVllm(flavor=flavor, max_model_len=2048) as fake:
        egress.mark_owned(fake.url, "VLLM_URL")
        with pytest.raises(ServingError) as err:
            await stream.stream_chat(
                fake.url, fake.model, [{"role": "user", "content": prompt}], max_tokens=max_tokens
            )
    e = err.value
    assert e.failure == "context_overflow" and e.field == field and e.context_tokens == 2048
    if field == "max_tokens":
        assert e.value == max_tokens and f"at most {2048 - e.prompt_tokens:,}" in (e.fix or "")
        assert f"max_tokens {max_tokens:,}" in str(e)


@pytest.mark.parametrize("flavor", ["vllm", "llama.cpp"])
@pytest.mark.parametrize(("prompt", "max_tokens"), [("hello", 5000), ("two words", 2100), ("hi", 32768)])
async def test_max_tokens_is_lowered_to_what_the_context_leaves_before_sending(
    tmp_path: Path, flavor: str, prompt: str, max_tokens: int
) -> None:
    with FakeVllm(flavor=flavor, max_model_len=2048) as fake:
        result = await chat.query(settings_for(fake.url, tmp_path), prompt, max_tokens=max_tokens)
        sent, asked, ctx = fake.context_checks[-1]
    assert asked == result.max_tokens < max_tokens and sent + asked <= ctx == 2048
    note = next(n for n in result.notices if "lowered" in n)
    assert f"max_tokens {max_tokens:,} lowered to {asked:,}" in note and "2,048-token context" in note


@pytest.mark.parametrize("flavor", ["vllm", "llama.cpp"])
@pytest.mark.parametrize("words", [2048, 3000])
async def test_a_prompt_that_fills_the_context_is_refused_with_the_numbers(
    tmp_path: Path, flavor: str, words: int
) -> None:
    with FakeVllm(flavor=flavor, max_model_len=2048) as fake:
        with pytest.raises(InputError) as err:
            await chat.query(settings_for(fake.url, tmp_path), "word " * words, max_tokens=10)
        assert not fake.context_checks, "a prompt that cannot fit was sent"
    e = err.value
    assert e.field == "prompt" and "2,048-token context" in e.message and "no room" in e.message
    # each server kind's own remedy: vLLM's flag, or llama-server's per-slot context
    remedy = "--max-model-len" if flavor == "vllm" else "--ctx-size / --parallel"
    assert remedy in (e.fix or "") and ("--parallel" in (e.fix or "")) == (flavor == "llama.cpp")


async def test_query_stops_at_the_deadline_with_a_partial_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chat, "QUERY_DEADLINE_S", 0.5)
    with FakeVllm(itl_s=0.02, default_output_tokens=20_000, max_model_len=32_768) as fake:
        result = await chat.query(settings_for(fake.url, tmp_path), "write a lot", max_tokens=20_000)
    assert result.cut_off and result.content.startswith("tok") and result.finish_reason is None
    assert any("CUT OFF" in n and "deadline" in n for n in result.notices)
    assert "<untrusted-data" in result.render_text()


async def test_server_dying_mid_stream_keeps_the_partial_answer(tmp_path: Path) -> None:
    with FakeVllm(die_after_tokens=5, default_output_tokens=50) as fake:
        result = await chat.query(settings_for(fake.url, tmp_path), "hi", max_tokens=50)
    assert result.cut_off and result.content.split() == ["tok"] * 5
    assert any("dropped the stream" in n for n in result.notices)


async def test_degenerate_and_length_cut_answers_are_called_so(tmp_path: Path) -> None:
    with FakeVllm(flavor="llama.cpp", degenerate="repeat") as fake:
        result = await chat.query(settings_for(fake.url, tmp_path), "hi", max_tokens=40)
    assert result.cut_off and any("finish_reason=length" in n for n in result.notices)
    assert any("degenerate" in n and "'model'" in n for n in result.notices)


async def test_c17_llama_cpp_older_overflow_reads_the_numbers_from_the_body(tmp_path: Path) -> None:
    """Field report C17: llama-server's older 400 says only "the request exceeds the available context
    size, try increasing it"; the prompt and the per-slot context are in the body (n_prompt_tokens,
    n_ctx), and n_ctx is --ctx-size / --parallel."""
    import json

    report = json.loads(
        (Path(__file__).parent / "data" / "field-reports" / "C17-llamacpp-per-slot-context.json").read_text()
    )
    body = report["body"]["error"]
    assert errors.context_overflow(body["message"]) == (None, None)
    n_ctx = report["props"]["default_generation_settings"]["n_ctx"]
    assert n_ctx == 1024
    # The server's own error, as llama-server answers a request that reached it: read from the body.
    error = openai.BadRequestError(body["message"], response=_response(400), body=report["body"])
    e = errors.classify(error, "http://127.0.0.1:1", None)
    assert e.failure == "context_overflow" and e.context_tokens == n_ctx and e.field == "prompt"
    assert e.prompt_tokens == body["n_prompt_tokens"] > n_ctx
    assert f"{e.prompt_tokens:,} prompt tokens, context 1,024 per slot" in str(e)
    assert (
        "--ctx-size" in (e.fix or "")
        and "--parallel" in (e.fix or "")
        and "shorten the prompt" in (e.fix or "")
    )
    # Through query, the server's tokenizer counts the prompt first: refused before sending, the same fix.
    with FakeVllm(flavor="llama.cpp", max_model_len=n_ctx, legacy_overflow_message=True) as fake:
        with pytest.raises(InputError) as early:
            await chat.query(settings_for(fake.url, tmp_path), "word " * 1100, max_tokens=16)
    assert early.value.field == "prompt" and "--parallel" in (early.value.fix or "")
    # vLLM's overflow says nothing about slots
    with FakeVllm(max_model_len=n_ctx) as fake:
        with pytest.raises(InputError) as vllm:
            await chat.query(settings_for(fake.url, tmp_path), "word " * 1100, max_tokens=16)
    assert "--parallel" not in (vllm.value.fix or "") and "--max-model-len" in (vllm.value.fix or "")


def _response(status: int) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions"))
