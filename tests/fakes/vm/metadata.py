"""The GCE metadata server of one simulated VM (served inside its namespace as
``http://metadata.google.internal``, port 80).

Paths the startup script uses, ``Metadata-Flavor: Google`` required (403 without, as the real one):
the service-account token, ``project/project-id`` (404 when ``project`` is None: a server that cannot
say), instance attributes (one key, or the directory with ``?recursive=true``) with
``wait_for_change`` / ``last_etag`` / ``timeout_sec`` and an ``ETag`` header
(cloud.google.com/compute/docs/metadata/querying-metadata#waitforchange), and guest attribute PUTs
(``instance/guest-attributes/<namespace>/<key>``). Attributes can come from a callable (the fake TPU
node's metadata) and guest attributes can go to one (the fake TPU's ``getGuestAttributes``), so the
server side and the VM share one world.

Scripting: ``refuse_writes[key] = status`` answers that status to writes of ``key`` (a failed write);
``writes`` records every PUT (time, key, bytes, status).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread

ACCESS_TOKEN = "ya29.vm-access-token-PLANTED"


class FakeMetadata:
    """The metadata server of one VM. ``attributes`` (or ``attributes_source()``) are the instance
    attributes; ``guest`` holds ``"namespace/key" -> value`` (also passed to ``guest_sink``)."""

    def __init__(
        self,
        *,
        project: str | None = "demo-project",
        attributes_source: Callable[[], dict[str, str]] | None = None,
        guest_sink: Callable[[str, str], None] | None = None,
    ) -> None:
        self.project = project
        self.attributes: dict[str, str] = {}
        self.attributes_source = attributes_source
        self.guest_sink = guest_sink
        self.guest: dict[str, str] = {}
        self.waits: list[dict[str, str]] = []  # every wait_for_change request's query
        self.refuse_writes: dict[str, int] = {}
        self.writes: list[tuple[float, str, int, int]] = []
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.app = Starlette(
            routes=[
                Route("/", self.root),
                Route("/computeMetadata/v1/{path:path}", self.handle, methods=["GET", "PUT"]),
            ]
        )
        self._thread: ServerThread | None = None
        self._stopping = False

    def current(self) -> dict[str, str]:
        return dict(self.attributes_source() if self.attributes_source else self.attributes)

    @staticmethod
    def etag(value: Any) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]

    async def root(self, request: Request) -> Response:
        """``GET /``: what google-auth's ``ping`` (and `tpu_devops.gcp.metadata`) asks to tell a metadata
        server from anything else listening there; the real one answers with ``Metadata-Flavor: Google``."""
        self.requests.append((request.method, "/"))
        return PlainTextResponse("computeMetadata/\n", headers={"Metadata-Flavor": "Google"})

    async def handle(self, request: Request) -> Response:
        path = request.path_params["path"]
        self.requests.append((request.method, path))
        if request.headers.get("metadata-flavor") != "Google":
            return PlainTextResponse("Missing Metadata-Flavor:Google header.", status_code=403)
        if request.method == "PUT":
            if not path.startswith("instance/guest-attributes/"):
                return PlainTextResponse("not found", status_code=404)
            key = path.removeprefix("instance/guest-attributes/")
            body = await request.body()
            status = self.refuse_writes.get(key, 200)
            self.writes.append((time.time(), key, len(body), status))
            if status != 200:
                return PlainTextResponse("refused", status_code=status)
            value = body.decode("utf-8", "replace")
            self.guest[key] = value
            if self.guest_sink:
                self.guest_sink(key, value)
            return PlainTextResponse("")
        if path == "instance/service-accounts/default/token":
            return JSONResponse({"access_token": ACCESS_TOKEN, "expires_in": 3599, "token_type": "Bearer"})
        if path == "project/project-id":
            if self.project is None:
                return PlainTextResponse("not found", status_code=404)
            return PlainTextResponse(self.project)
        if path.startswith("instance/attributes/"):
            return await self._attributes(request, path.removeprefix("instance/attributes/"))
        return PlainTextResponse("not found", status_code=404)

    async def _attributes(self, request: Request, key: str) -> Response:
        def value() -> Any:
            attrs = self.current()
            return attrs if key in ("", "/") else attrs.get(key)

        q = request.query_params
        now = value()
        if q.get("wait_for_change") == "true":
            self.waits.append(dict(q))
            last = q.get("last_etag")
            deadline = time.monotonic() + float(q.get("timeout_sec") or 3600)
            # As documented: a last_etag that differs from the current contents returns at once.
            while last == self.etag(now) and time.monotonic() < deadline and not self._stopping:
                await asyncio.sleep(0.02)
                if await request.is_disconnected():  # the watcher was stopped: end the hanging GET
                    return PlainTextResponse("", status_code=503)
                now = value()
        if now is None:
            return PlainTextResponse("not found", status_code=404)
        body = json.dumps(now) if key in ("", "/") or q.get("recursive") == "true" else str(now)
        return Response(body, headers={"ETag": self.etag(now)}, media_type="application/text")

    @property
    def url(self) -> str:
        assert self._thread is not None
        return self._thread.url

    def start(self, sock: socket.socket | None = None) -> FakeMetadata:
        """Serve on ``sock`` (the VM's 127.0.0.1:80 inside its namespace) or a free host loopback port."""
        self._thread = ServerThread(self.app, sock=sock).start()
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._thread:
            self._thread.stop()
