"""verify_model_health: the passing run and every failure class, against the vLLM-shaped fake."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeVllm, ScriptedTurn, closed_port_url, gemma_tool_call_text
from tpu_devops.config import Settings, load_settings
from tpu_devops.serving.health import verify_health

pytestmark = pytest.mark.anyio


def settings_for(url: str, tmp_path: Path, **env: str) -> Settings:
    base = {"TPU_DEVOPS_STATE_DIR": str(tmp_path)}
    if url:
        base["VLLM_URL"] = url
    return load_settings(tmp_path / "none.env", environ={**base, **env})


async def test_healthy_server_passes_every_probe(tmp_path: Path) -> None:
    with FakeVllm() as fake:
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.healthy, result.render_text()
    assert [p.name for p in result.probes] == ["health", "models", "chat", "tool_call"]
    assert all(p.latency_ms is not None for p in result.probes)
    assert "get_current_time" in (result.probes[-1].detail or "")
    assert result.failure is None
    assert result.headline().startswith("healthy")


async def test_tool_probe_can_be_skipped(tmp_path: Path) -> None:
    with FakeVllm(tool_parser=False) as fake:
        result = await verify_health(settings_for(fake.url, tmp_path), tools=False)
    assert result.healthy
    assert [p.name for p in result.probes] == ["health", "models", "chat"]


async def test_no_endpoint(tmp_path: Path) -> None:
    result = await verify_health(settings_for("", tmp_path))
    assert not result.healthy
    assert result.failure == "no_endpoint"
    assert result.fix


async def test_connection_refused_means_booting_or_crashed(tmp_path: Path) -> None:
    result = await verify_health(settings_for(closed_port_url(), tmp_path))
    assert result.failure == "connection_refused"
    assert [p.name for p in result.probes] == ["health"]
    assert "port" in (result.probes[0].detail or "") and "TPU" not in (result.fix or "")


async def test_503_while_booting(tmp_path: Path) -> None:
    with FakeVllm(mode="booting") as fake:
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "booting"
    assert "Application startup complete" in (result.fix or "")


async def test_model_name_mismatch(tmp_path: Path) -> None:
    with FakeVllm() as fake:
        result = await verify_health(settings_for(fake.url, tmp_path, MODEL_NAME="google/gemma-4-E4B-it"))
    assert result.failure == "model_mismatch"
    assert result.fix == "set MODEL_NAME=google/gemma-4-E2B-it"


async def test_empty_content(tmp_path: Path) -> None:
    with FakeVllm(empty_content=True) as fake:
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "empty_content"
    assert "chat completions" in (result.fix or "")


async def test_tool_parser_missing(tmp_path: Path) -> None:
    with FakeVllm(tool_parser=False) as fake:
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "tool_parser_missing"
    assert "--tool-call-parser gemma4" in (result.fix or "")
    assert [p.ok for p in result.probes] == [True, True, True, False]


async def test_raw_gemma_tool_syntax_in_content(tmp_path: Path) -> None:
    with FakeVllm(raw_tool_syntax=True) as fake:
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "tool_call_unparsed"
    assert "<|tool_call>call:get_current_time" in (result.probes[-1].detail or "")


@pytest.mark.parametrize(
    ("flavor", "names", "never"),
    [("vllm", "--tool-call-parser gemma4", "--jinja"), ("llama.cpp", "--jinja", "--tool-call-parser")],
)
async def test_model_answers_in_text_instead_of_calling(
    tmp_path: Path, flavor: str, names: str, never: str
) -> None:
    # The fix names this server kind's own remedy: llama-server has no --tool-call-parser.
    with FakeVllm(flavor=flavor) as fake:
        fake.queue(ScriptedTurn(content="42"), ScriptedTurn(content="It is noon."))
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "tool_not_called"
    assert names in (result.fix or "") and never not in (result.fix or "")


@pytest.mark.parametrize(
    ("flavor", "names", "never"),
    [("vllm", "--reasoning-parser", "--jinja"), ("llama.cpp", "--jinja", "--reasoning-parser")],
)
async def test_empty_content_fix_names_the_servers_remedy(
    tmp_path: Path, flavor: str, names: str, never: str
) -> None:
    with FakeVllm(flavor=flavor, empty_content=True) as fake:
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "empty_content"
    assert names in (result.fix or "") and never not in (result.fix or "")


def test_gemma_syntax_helper() -> None:
    assert (
        gemma_tool_call_text("f", {"a": "x", "n": 2}) == '<|tool_call>call:f{a:<|"|>x<|"|>,n:2}<tool_call|>'
    )


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


async def test_a_server_that_accepts_but_never_answers_is_a_timeout(tmp_path: Path, monkeypatch) -> None:
    # regression: /health waited the 120 s read timeout; the probes now use the short probe timeout
    # (shortened here so the test does not sit out 10 s; a probe on the read timeout trips fail_after)
    from tests.fakes.openai_server import silent_port_url
    from tpu_devops.serving import client

    monkeypatch.setattr(client, "PROBE_TIMEOUT_S", 0.5)
    with silent_port_url() as url, anyio.fail_after(60):
        result = await verify_health(settings_for(url, tmp_path))
    assert result.failure == "timeout" and result.fix
    assert [p.name for p in result.probes] == ["health"]


async def test_a_host_name_that_does_not_resolve_is_not_called_booting(tmp_path: Path) -> None:
    result = await verify_health(settings_for("", tmp_path), base_url="http://no-such-host.invalid:8000")
    assert result.failure == "unresolvable_host"
    assert "no-such-host.invalid" in (result.probes[-1].detail or "") and "booting" not in result.fix


async def test_health_text_is_one_line_per_probe(tmp_path: Path) -> None:
    with FakeVllm() as fake:
        text = (await verify_health(settings_for(fake.url, tmp_path))).render_text()
    lines = text.splitlines()
    assert lines[0].startswith("healthy:") and len(lines) == 6
    assert lines[2].split()[:2] == ["health", "ok"]


async def test_another_service_on_the_port_is_named_not_http_none(tmp_path: Path) -> None:
    # regression: "answered HTTP None: 'list' object has no attribute 'get'"
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from tests.fakes.http_runner import ServerThread

    async def page(request):  # noqa: ANN001, ANN202 - a web page where vLLM should be
        return PlainTextResponse("<html>welcome</html>")

    with ServerThread(Starlette(routes=[Route("/{p:path}", page)])) as other:
        result = await verify_health(settings_for(other.url, tmp_path))
    assert result.failure == "not_openai_api"
    assert "<html>welcome" in (result.probes[-1].detail or "") and "HTTP None" not in result.render_text()


@pytest.mark.parametrize(
    "turn, why",
    [
        (ScriptedTurn(content="ready"), "expected 42"),
        (ScriptedTurn(content="41"), "expected 42"),
        (ScriptedTurn(content=" ".join(["model"] * 32), finish_reason="length"), "repeats"),
        (ScriptedTurn(content="<start_of_turn>user\nWhat is 17 + 25?<end_of_turn>"), "template markers"),
        (ScriptedTurn(content="42 is", finish_reason="length"), "cut off"),
    ],
)
async def test_chat_probe_judges_the_answer(tmp_path: Path, turn: ScriptedTurn, why: str) -> None:
    with FakeVllm() as fake:
        fake.queue(turn)
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert not result.healthy and result.failure == "wrong_answer"
    assert why in (result.probes[-1].detail or "") and "<untrusted-data" in (result.probes[-1].detail or "")


async def test_degenerate_llama_cpp_server_is_unhealthy(tmp_path: Path) -> None:
    with FakeVllm(flavor="llama.cpp", degenerate="repeat") as fake:
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "wrong_answer" and "repeats 'model'" in (result.probes[-1].detail or "")
    assert "llama.cpp" in (result.probes[1].detail or "") and "meta.n_ctx" in (result.probes[1].detail or "")


@pytest.mark.parametrize("arguments", ["{not json", "{}", '{"timezone": ""}', "[1, 2]"])
async def test_tool_probe_needs_a_well_formed_call(tmp_path: Path, arguments: str) -> None:
    with FakeVllm(flavor="llama.cpp") as fake:
        fake.queue(
            ScriptedTurn(content="42"),
            ScriptedTurn(tool_calls=[{"name": "get_current_time", "arguments": arguments}]),
        )
        result = await verify_health(settings_for(fake.url, tmp_path))
    assert result.failure == "tool_call_malformed" and "--jinja" in (result.fix or "")


async def test_a_llama_cpp_slot_too_small_for_the_probe_is_named_per_slot(tmp_path: Path) -> None:
    # Field report C17's server shape: the older 400 wording, n_prompt_tokens / n_ctx only in the body.
    with FakeVllm(flavor="llama.cpp", max_model_len=24, legacy_overflow_message=True) as fake:
        result = await verify_health(settings_for(fake.url, tmp_path), tools=False)
    chat = next(p for p in result.probes if p.name == "chat")
    assert not chat.ok and chat.failure == "context_overflow"
    assert (
        "per slot" in (chat.detail or "")
        and "--parallel" in (chat.fix or "")
        and "--ctx-size" in (chat.fix or "")
    )
