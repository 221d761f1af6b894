"""A server whose answers never end, in every way an HTTP body can fail to: the rogue end of the read caps
(`tpu_devops.host.bounded`). Loopback only.

``EndlessServer().mode`` picks how every request (any method, any path) is answered:

- ``body``: 200 ``text/plain``, chunked, 64 KiB chunks forever (``/dev/zero`` behind HTTP);
- ``json``: 200 ``application/json``, a list that never closes (``{"entries": [{...}, {...}, ...``);
- ``sse``: 200 ``text/event-stream``, valid chat-completion chunks forever (a stream that ignores
  ``max_tokens``), each with a 1 KiB delta;
- ``line``: 200 ``text/event-stream``, one line that never ends (``data: xxxxx...``);
- ``gzip``: ``Content-Encoding: gzip``, a gzip stream of zeros that never ends (64 KiB of it is ~64 MiB);
- ``bomb``: ``Content-Encoding: gzip``, a finite gzip body of 10 GiB of zeros (~10 MB on the wire);
- ``brotli``: ``Content-Encoding: br`` (an encoding no client of ours decodes);
- ``stall``: chunked, two chunks, then nothing and no end (chunked without its last chunk);
- ``drip``: one byte every `DRIP_S` seconds forever (each read succeeds, the body never ends);
- ``length``: ``Content-Length: 10**12`` announced, then zeros.

``requests`` records (method, path, authorization) of every request. Set ``status`` to answer with another
status code (the error path reads bodies too).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import zlib
from typing import Any

from tests.fakes.http_runner import ServerThread

DRIP_S = 0.2
MODES = ("body", "json", "sse", "line", "gzip", "bomb", "brotli", "stall", "drip", "length")
_ZEROS = bytes(1 << 20)


class EndlessServer:
    """``with EndlessServer("sse") as srv: srv.url``; ``srv.mode = "drip"`` switches every later answer."""

    def __init__(self, mode: str = "body", status: int = 200) -> None:
        assert mode in MODES, mode
        self.mode = mode
        self.status = status
        self.requests: list[dict[str, Any]] = []
        self.bytes_sent = 0

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await self._answer(scope, receive, send)

        self._thread = ServerThread(app)
        self.url = self._thread.url

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.requests.append(
            {
                "method": scope["method"],
                "path": scope["path"],
                "authorization": headers.get("authorization", ""),
            }
        )
        mode = self.mode
        content_type = {"json": "application/json", "sse": "text/event-stream", "line": "text/event-stream"}
        out = [(b"content-type", content_type.get(mode, "text/plain").encode())]
        if mode in ("gzip", "bomb"):
            out.append((b"content-encoding", b"gzip"))
        if mode == "brotli":
            out.append((b"content-encoding", b"br"))
        if mode == "length":
            out.append((b"content-length", str(10**12).encode()))
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        await send({"type": "http.response.start", "status": self.status, "headers": out})
        try:
            for chunk in self._body(mode):
                if gone.is_set():
                    return
                if chunk is None:  # "stall": the last chunk never comes, until the client hangs up
                    await gone.wait()
                    return
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self.bytes_sent += len(chunk)
                if mode == "drip":
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(gone.wait(), DRIP_S)
                else:
                    await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client hung up: what a cap should make it do
            return
        finally:
            watcher.cancel()

    def _body(self, mode: str) -> Any:
        if mode == "json":
            yield b'{"entries": ['
            entry = json.dumps({"insertId": "x" * 32, "textPayload": "y" * 1000}).encode() + b", "
            while True:
                yield entry * 64
        elif mode == "sse":
            n = 0
            while True:
                n += 1
                chunk = {"id": "chatcmpl-endless", "object": "chat.completion.chunk", "model": "m",
                         "choices": [{"index": 0, "delta": {"content": "z" * 1024}, "finish_reason": None}]}  # fmt: skip
                yield f"data: {json.dumps(chunk)}\n\n".encode()
        elif mode == "line":
            yield b"data: "
            while True:
                yield b"x" * 65536
        elif mode in ("gzip", "bomb"):
            co = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            sent = 0
            while mode == "gzip" or sent < 10 << 30:
                sent += len(_ZEROS)
                if piece := co.compress(_ZEROS):
                    yield piece
            yield co.flush()
        elif mode == "stall":
            yield b"a" * 1024
            yield b"b" * 1024
            while True:
                yield None
        elif mode == "drip":
            while True:
                yield b"."
        else:  # body, brotli, length
            while True:
                yield _ZEROS[: 64 << 10]

    def start(self) -> EndlessServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> EndlessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
