"""The vLLM-shaped fake itself, read through the real openai client: scripted turns (structured tool
calls, raw Gemma syntax, errors), non-streaming usage, /v1/completions on -it models."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError

from tests.fakes.openai_server import TOOL_PARSER_MISSING, FakeVllm, ScriptedTurn, gemma_tool_call_text
from tpu_devops.serving import egress
from tpu_devops.serving.stream import stream_chat

pytestmark = pytest.mark.anyio

TOOL = {
    "type": "function",
    "function": {
        "name": "search_logs",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


async def test_scripted_turns_in_order_non_streaming() -> None:
    with FakeVllm() as fake:
        fake.queue(
            ScriptedTurn(tool_calls=[{"name": "search_logs", "arguments": {"q": "OOM"}}]),
            ScriptedTurn(content=gemma_tool_call_text("search_logs", {"q": "OOM"})),
            ScriptedTurn(content="Root cause: memory utilization 0.95."),
        )
        async with AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="EMPTY", max_retries=0) as client:
            msgs = [{"role": "user", "content": "why did it crash?"}]
            first = await client.chat.completions.create(model=fake.model, messages=msgs, tools=[TOOL])
            second = await client.chat.completions.create(model=fake.model, messages=msgs, tools=[TOOL])
            third = await client.chat.completions.create(model=fake.model, messages=msgs)
    call = first.choices[0].message.tool_calls[0]
    assert call.id.startswith("chatcmpl-tool-") and call.type == "function"
    assert call.function.name == "search_logs" and json.loads(call.function.arguments) == {"q": "OOM"}
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content is None
    assert second.choices[0].message.content == '<|tool_call>call:search_logs{q:<|"|>OOM<|"|>}<tool_call|>'
    assert not second.choices[0].message.tool_calls
    assert third.choices[0].message.content == "Root cause: memory utilization 0.95."
    assert third.usage.prompt_tokens == 4 + 4 and third.usage.completion_tokens == 5
    assert len(fake.requests) == 3 and fake.requests[0]["tools"] == [TOOL]


async def test_streamed_tool_call_is_assembled_from_fragments() -> None:
    with FakeVllm() as fake:
        fake.queue(
            ScriptedTurn(
                tool_calls=[{"name": "search_logs", "arguments": {"q": "RuntimeProgramAllocationFailure"}}]
            )
        )
        egress.mark_owned(fake.url, "VLLM_URL")  # the operator's endpoint (a call below resolve_endpoint)
        answer = await stream_chat(fake.url, fake.model, [{"role": "user", "content": "look"}], tools=[TOOL])
    (call,) = answer.tool_calls
    assert call["name"] == "search_logs"
    assert json.loads(call["arguments"]) == {"q": "RuntimeProgramAllocationFailure"}
    assert answer.finish_reason == "tool_calls"


async def test_tool_parser_missing_and_scripted_errors() -> None:
    with FakeVllm(tool_parser=False) as fake:
        async with AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="EMPTY", max_retries=0) as client:
            msgs = [{"role": "user", "content": "x"}]
            with pytest.raises(BadRequestError) as err:
                await client.chat.completions.create(model=fake.model, messages=msgs, tools=[TOOL])
            assert TOOL_PARSER_MISSING in str(err.value)
            fake.queue(ScriptedTurn(status=400, error="scripted failure"))
            with pytest.raises(BadRequestError):
                await client.chat.completions.create(model=fake.model, messages=msgs)


async def test_completions_endpoint_returns_empty_text_like_vllm_on_it_models() -> None:
    with FakeVllm() as fake:
        body = httpx.post(f"{fake.url}/v1/completions", json={"model": fake.model, "prompt": "hi"}).json()
    assert body["choices"][0]["text"] == ""


def test_the_fake_serves_the_vllm_of_the_pinned_default_image() -> None:
    """A demo or test against the fake never shows a vLLM the product would refuse for Gemma 4."""
    from tests.fakes.openai_server import PINNED_VERSION, FakeVllm
    from tpu_devops.config import load_settings
    from tpu_devops.planning.images import check_image

    settings = load_settings(Path("/nonexistent/tpu.env"), {})
    assert settings.vllm_image.endswith(f":v{PINNED_VERSION}") and FakeVllm().version == PINNED_VERSION
    served = check_image(f"vllm/vllm-tpu:v{FakeVllm().version}", settings.model_name)
    assert served.status == "supported", served.message
