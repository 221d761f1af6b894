"""A scripted fake of OpenAI's model APIs for driving the real Codex CLI and Qwen Code.

Codex CLI (``@openai/codex``) speaks only the Responses API to a custom provider (``wire_api =
"responses"``; 0.171 refuses ``"chat"``): ``POST {base_url}/responses`` with ``stream: true``, answered
with server-sent events ``response.created``, one ``response.output_item.done`` per output item (a
``function_call`` with ``call_id``/``name``/``arguments``, or an assistant ``message`` with
``output_text`` content) and ``response.completed`` with the usage (openai/codex
``codex-rs/codex-api/src/sse/responses.rs``: the stream must end with ``response.completed``). Tool answers
come back as ``function_call_output`` input items.

Qwen Code (``@qwen-code/qwen-code``) speaks Chat Completions to ``OPENAI_BASE_URL``: ``POST
{base_url}/chat/completions``, streaming (``data: {chunk}`` lines, ``tool_calls`` deltas, ``finish_reason:
"tool_calls"``, a final usage chunk, ``data: [DONE]``) or not; tool answers come back as ``role: "tool"``
messages. Shapes as documented in the OpenAI API reference (platform.openai.com/docs/api-reference).

Each model turn comes from the script: a function call, or text computed from the request (a model
summarising a tool's answer for the user). Every request body is recorded. Loopback only.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.scripted_api import ScriptedApi


@dataclass
class Turn:
    """One model turn: call ``function`` with ``args``, or answer ``text`` (a string, or a function of the
    request body)."""

    function: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    text: str | Callable[[dict[str, Any]], str] | None = None
    namespace: str | None = None  # Responses API: the tool namespace the function belongs to


def responses_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The function tools a Responses request offers, by name (namespaced tools flattened)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        if tool.get("type") == "function":
            out[tool["name"]] = tool
        for sub in tool.get("tools") or []:  # a namespace of tools
            if sub.get("type") == "function":
                out[f"{tool.get('name', '')}{sub['name']}"] = sub
    return out


def chat_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The function tools a Chat Completions request offers, by name (``{name, description, parameters}``)."""
    return {
        t["function"]["name"]: t["function"] for t in body.get("tools") or [] if t.get("type") == "function"
    }


def tool_outputs(body: dict[str, Any]) -> list[str]:
    """The tool answers a request carries, in order: Responses ``function_call_output`` items or Chat
    ``role: "tool"`` messages, as text."""
    out = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            out.append(output if isinstance(output, str) else json.dumps(output))
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            out.append(str(content))
    return out


class FakeOpenAiHosts(ScriptedApi[Turn]):
    """``with FakeOpenAiHosts() as api: api.script(Turn(...), ...); ... api.requests``; ``api.url`` + ``/v1``
    is the base URL either CLI is given."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []  # model requests (responses / chat), in order
        self.paths: list[str] = []  # every request path, to see what else a CLI asks for
        self.app = Starlette(
            routes=[
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/{rest:path}", self._other, methods=["GET", "POST"]),
            ]
        )

    def _next(self, body: dict[str, Any]) -> tuple[Turn, str]:
        turn = self.turns.popleft() if self.turns else Turn(text="done")
        text = turn.text(body) if callable(turn.text) else turn.text
        return turn, text or ""

    async def _other(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        return JSONResponse({"error": {"message": "not found", "type": "invalid_request_error"}}, 404)

    async def _models(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        return JSONResponse({"object": "list", "data": []})

    # ---- Responses API (Codex) ---------------------------------------------------------------------

    async def _responses(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        body = json.loads(await request.body() or b"{}")
        self.requests.append(body)
        turn, text = self._next(body)
        function, args = turn.function, turn.args
        rid = f"resp_{secrets.token_hex(8)}"
        if function:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{secrets.token_hex(8)}",
                "call_id": f"call_{secrets.token_hex(8)}",
                "name": function,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            if turn.namespace:
                item["namespace"] = turn.namespace
        else:
            item = {
                "type": "message",
                "id": f"msg_{secrets.token_hex(8)}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        }
        events = [
            {"type": "response.created", "response": {"id": rid, "status": "in_progress"}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {"id": rid, "status": "completed", "usage": usage}},
        ]

        async def stream() -> Any:
            for event in events:
                yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    # ---- Chat Completions (Qwen Code) --------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        body = json.loads(await request.body() or b"{}")
        self.requests.append(body)
        turn, text = self._next(body)
        function, args = turn.function, turn.args
        cid = f"chatcmpl-{secrets.token_hex(8)}"
        created = int(time.time())
        model = body.get("model", "fake-model")
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        call = {
            "id": f"call_{secrets.token_hex(8)}",
            "type": "function",
            "function": {"name": function, "arguments": json.dumps(args)},
        }
        finish = "tool_calls" if function else "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": None if function else text}
            if function:
                message["tool_calls"] = [call]
            return JSONResponse(
                {
                    "id": cid, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage,
                }
            )  # fmt: skip

        def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
            data = {
                "id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra,
            }  # fmt: skip
            return f"data: {json.dumps(data)}\n\n"

        async def stream() -> Any:
            yield chunk({"role": "assistant", "content": ""})
            if function:
                yield chunk({"tool_calls": [{"index": 0, **call}]})
            else:
                yield chunk({"content": text})
            yield chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
                yield f"data: {json.dumps({**data, 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")
