"""A scripted fake of the Gemini API (Generative Language v1beta) for driving the real Gemini CLI.

Gemini CLI talks to ``GOOGLE_GEMINI_BASE_URL`` when it is set (with ``GEMINI_API_KEY``); this fake answers
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` (server-sent events, one
``GenerateContentResponse`` per ``data:`` line), ``:generateContent`` and ``:countTokens``, following the
documented shapes (https://ai.google.dev/api/generate-content). Each model turn comes from the script: a
function call, or text computed from the request (e.g. echoing a tool's answer back to the user, as a
model summarising it would). Every request body is recorded for the test to inspect. Loopback only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.fakes.scripted_api import ScriptedApi


@dataclass
class Turn:
    """One model turn: call ``function`` with ``args``, or answer ``text`` (a string, or a function of the
    request body)."""

    function: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    text: str | Callable[[dict[str, Any]], str] | None = None


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``functionResponse`` parts of a request's last user turn."""
    contents = body.get("contents") or []
    parts = contents[-1].get("parts", []) if contents else []
    return [p["functionResponse"] for p in parts if "functionResponse" in p]


def declarations(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every function declaration a request offers the model."""
    return [d for tool in body.get("tools") or [] for d in tool.get("functionDeclarations") or []]


class FakeGeminiApi(ScriptedApi[Turn]):
    """``with FakeGeminiApi() as api: api.script(Turn(...), ...); ... api.requests``"""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []  # streamGenerateContent / generateContent bodies, in order
        self.app = Starlette(routes=[Route("/v1beta/models/{call:path}", self._models, methods=["POST"])])

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        turn = self.turns.popleft() if self.turns else Turn(text="done")
        if turn.function:
            part: dict[str, Any] = {"functionCall": {"name": turn.function, "args": turn.args}}
        else:
            text = turn.text(body) if callable(turn.text) else turn.text
            part = {"text": text or ""}
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
            "modelVersion": "gemini-2.5-flash",
        }

    async def _models(self, request: Request) -> Any:
        call = request.path_params["call"]
        body = json.loads(await request.body() or b"{}")
        if call.endswith(":countTokens"):
            return JSONResponse({"totalTokens": 100})
        self.requests.append(body)
        answer = self._answer(body)
        if call.endswith(":streamGenerateContent"):

            async def events() -> Any:
                yield f"data: {json.dumps(answer)}\r\n\r\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return JSONResponse(answer)
