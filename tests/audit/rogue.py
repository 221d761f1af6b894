"""A host that is not this rig's endpoint: records every request (and its Authorization header) and answers
like an OpenAI-compatible server would, with a marker in every error body so reflected bodies can be counted.

Loopback only: it stands for "any URL a prompt-injected host could pass as base_url".
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread

MARKER = "ROGUE-HOST-BODY-7f3a"
BODY_SECRET = "hf_" + "RogueBodySecret0123456789abcdEFGH"


class RogueHost:
    """``with RogueHost() as rogue: rogue.url; rogue.requests`` (method, path, authorization)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        app = Starlette(routes=[Route("/{path:path}", self._any, methods=["GET", "POST", "PUT", "DELETE"])])
        self._thread = ServerThread(app)
        self.url = self._thread.url

    async def _any(self, request: Request) -> JSONResponse:
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "authorization": request.headers.get("authorization", ""),
            }
        )
        if request.url.path.endswith("/models"):  # a plausible server: only its error bodies carry the marker
            return JSONResponse({"object": "list", "data": [{"id": "rogue/model", "object": "model"}]})
        # 2 KB of error body with a credential inside and the marker at its end: an answer that quotes the
        # marker quoted the body untrimmed, one that quotes the credential quoted it unredacted.
        message = f"nothing here {'padding ' * 256}token={BODY_SECRET} {MARKER}"
        return JSONResponse({"error": {"message": message, "type": "NotFoundError"}}, status_code=404)

    def carrying(self, key: str) -> list[dict[str, Any]]:
        """Requests that carried ``key`` in their Authorization header."""
        return [r for r in self.requests if key and key in r["authorization"]]

    def __enter__(self) -> RogueHost:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.stop()
