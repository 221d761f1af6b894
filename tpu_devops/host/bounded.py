"""Every HTTP response this server reads is bounded: its size, one line of an event stream, the time it
takes to arrive and what its compression expands to. One reader (`BodyReader`) holds the rules, and one
adapter per HTTP stack puts it under every client:

- httpx (the serving clients, the ``openai`` client on top of them, the public-IP lookup):
  `BoundedAsyncTransport` wraps the transport, so a body is bounded whoever reads it (``.aread()``,
  ``.aiter_lines()``, the openai SSE decoder);
- requests (google-auth ``AuthorizedSession`` under every Google client on its REST transport, Cloud
  Logging's JSON connection, the Billing Catalog, token refreshes): `BoundedAdapter`, mounted on the
  session;
- urllib3 (the ``kubernetes`` client): `bound_pool_manager`.

A server a ``base_url`` names may be anything (an endless ``/dev/zero`` behind HTTP, a compression bomb, a
line that never ends, one byte a second forever), and a Google or Kubernetes endpoint may be a proxy in
between. Without a cap the reader buffers whatever arrives: one such body grew this server past 3.5 GB.
So a response stops at the first cap it passes, with a `ReadLimitError` that names the cap, the URL
(origin and path, never the query) and the fix:

- `MAX_BODY_BYTES` for a whole body (a vLLM JSON answer, ``/metrics``, a Cloud Logging page holds far
  less), `MAX_STREAM_BYTES` for an event stream (``text/event-stream``) and `MAX_LINE_BYTES` for one
  line of it (an SSE event of one chunk is well under 1 KiB);
- time: a body must arrive within its request's read timeout (which httpx and urllib3 apply only between
  two reads, so a drip resets it forever), an event stream within `MAX_STREAM_S`, and either within
  what is left of the tool call's budget (`tpu_devops.host.deadline`);
- compression: ``gzip`` and ``deflate`` are decoded here, in pieces of at most `PIECE_BYTES`, and the
  decoded size counts against the cap (a 10 KB gzip of zeros is 10 MB); any other encoding is refused:
  serving clients ask for ``identity``, Google clients for ``gzip, deflate``.

Nothing of the body is kept past the cap: pieces are counted as they arrive and the read stops at once.
This module imports httpx, requests and urllib3 lazily, only in the adapter it builds.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from tpu_devops.errors import TpuDevopsError
from tpu_devops.host import deadline

MIB = 1 << 20
# A vLLM /metrics page is ~100-300 KiB, a chat answer of 32K tokens ~0.2 MiB, a tokenize answer of 128K
# tokens ~1 MiB, a full Cloud Logging page of 1,000 entries a few MiB: 16 MiB is ten times the largest.
MAX_BODY_BYTES = 16 * MIB
# Google and Kubernetes list pages (Cloud Logging entries.list with pageSize 1000, SKU pages, pod lists).
MAX_API_BODY_BYTES = 32 * MIB
# An event stream of 32K output tokens is ~8 MiB of SSE framing (one ~250-byte event per token).
MAX_STREAM_BYTES = 32 * MIB
MAX_LINE_BYTES = 1 * MIB
# A stream of 32,768 tokens at 10 tok/s takes under an hour; a body arrives within its read timeout.
MAX_STREAM_S = 3600.0
DEFAULT_BODY_S = 120.0  # a body whose request set no read timeout
PIECE_BYTES = 64 << 10  # what one decode step may produce
SERVING_ACCEPT_ENCODING = "identity"  # vLLM never compresses; a compressed event stream only delays chunks
API_ACCEPT_ENCODING = "gzip, deflate"  # what `BodyReader` decodes; Google compresses list pages well
_DECODABLE = ("gzip", "x-gzip", "deflate", "identity", "")

_FIX = (
    "no server this one talks to needs to send that much or that slowly: check that the URL is the server "
    "itself (vLLM, Google, the cluster), not a proxy, a file server or another service on that port"
)


class ReadLimitError(TpuDevopsError):
    """A response passed one of the read caps (module docstring). ``cap`` names it (``MAX_BODY_BYTES``,
    ``MAX_STREAM_BYTES``, ``MAX_LINE_BYTES``, ``read timeout``, ``MAX_STREAM_S``, ``tool-call budget``,
    ``Content-Encoding``); ``where`` is the URL read (origin and path)."""

    kind = "read_limit"

    def __init__(self, message: str, *, cap: str, where: str, fix: str = _FIX) -> None:
        super().__init__(message, field=cap, value=where, fix=fix)
        self.cap = cap
        self.where = where


@dataclass(frozen=True)
class Caps:
    """The caps of one kind of response: whole body bytes, event-stream bytes, one line of a stream."""

    body_bytes: int = MAX_BODY_BYTES
    stream_bytes: int = MAX_STREAM_BYTES
    line_bytes: int = MAX_LINE_BYTES
    stream_s: float = MAX_STREAM_S
    body_name: str = "MAX_BODY_BYTES"


SERVING = Caps()
API = Caps(body_bytes=MAX_API_BODY_BYTES, body_name="MAX_API_BODY_BYTES")


def _size(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n / 1024:g} KiB"


class BodyReader:
    """Counts, decodes and times one response body (no I/O: the adapters feed it what they read).

    Args:
        where: the URL read, for the error (origin and path).
        encoding: the response's ``Content-Encoding`` (``gzip``, ``deflate``, a list, or "").
        event_stream: ``Content-Type`` is ``text/event-stream``: stream caps and the line cap apply.
        read_timeout_s: the request's read timeout: the whole body must arrive within it (a stream has
            `Caps.stream_s`); None means `DEFAULT_BODY_S`.
        declared: the ``Content-Length`` header, refused at once when it is over the cap.

    Raises:
        ReadLimitError: an encoding this reader cannot decode, or a declared length over the cap.
    """

    def __init__(
        self,
        where: str,
        caps: Caps = SERVING,
        *,
        encoding: str = "",
        event_stream: bool = False,
        read_timeout_s: float | None = None,
        declared: str | None = None,
    ) -> None:
        self.where = where
        self.caps = caps
        self.event_stream = event_stream
        self.limit = caps.stream_bytes if event_stream else caps.body_bytes
        self.limit_name = "MAX_STREAM_BYTES" if event_stream else caps.body_name
        if event_stream:
            self.seconds, self.time_name = caps.stream_s, "MAX_STREAM_S"
        else:
            self.seconds = read_timeout_s if read_timeout_s else DEFAULT_BODY_S
            self.time_name = "read timeout"
        self.started = time.monotonic()
        self.total = 0
        self.line = 0
        codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
        unknown = [c for c in codings if c not in _DECODABLE]
        if unknown:
            raise ReadLimitError(
                f"stopped reading {where}: its body is encoded as {', '.join(unknown)!s}, which this server "
                f"does not decode (it decodes {API_ACCEPT_ENCODING} within the size cap and asked for no other)",
                cap="Content-Encoding",
                where=where,
            )
        # Decoded last-applied first (RFC 9110 §8.4: codings are listed in the order they were applied).
        self._decoders = [_Inflater(c) for c in reversed(codings) if c not in ("identity", "")]
        if declared and not self._decoders:
            try:
                length = int(declared)
            except ValueError:
                length = 0
            if length > self.limit:
                raise self._too_big(f"it announced {length:,} bytes (Content-Length)")

    @property
    def decodes(self) -> bool:
        """True when this reader decompresses (the adapters then drop Content-Encoding / -Length)."""
        return bool(self._decoders)

    def time_left(self) -> float | None:
        """Seconds this body may still take: its own cap or the tool call's budget, whichever ends first."""
        own = self.started + self.seconds - time.monotonic()
        budget = deadline.remaining()
        return own if budget is None else min(own, budget)

    def check_time(self) -> None:
        """Raise `ReadLimitError` when the body's time is up."""
        left = self.time_left()
        if left is not None and left <= 0:
            raise self.too_slow()

    def too_slow(self) -> ReadLimitError:
        """The error for a body still arriving when its time was up."""
        took = time.monotonic() - self.started
        budget = deadline.remaining()
        own = self.started + self.seconds - time.monotonic()
        if budget is not None and budget <= own:
            cap, why = "tool-call budget", f"the tool call's {deadline.TOOL_BUDGET_S:.0f} s budget ran out"
        else:
            cap = self.time_name
            why = f"{self.seconds:g} s is the cap ({self.time_name}) on reading one {'stream' if self.event_stream else 'response'}"
        return ReadLimitError(
            f"stopped reading {self.where}: it was still sending after {took:.1f} s ({self.total:,} bytes so far); "
            f"{why} (a server that sends a byte now and then would otherwise hold the call forever)",
            cap=cap,
            where=self.where,
        )

    def _too_big(self, what: str = "") -> ReadLimitError:
        what = what or f"it sent more than {_size(self.limit)}"
        return ReadLimitError(
            f"stopped reading {self.where}: {what}; {_size(self.limit)} is the cap on one "
            f"{'event stream' if self.event_stream else 'HTTP response'} this server reads ({self.limit_name})",
            cap=self.limit_name,
            where=self.where,
        )

    def feed(self, raw: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``raw`` (each at most `PIECE_BYTES` when decoding), counted and checked.

        Raises:
            ReadLimitError: a cap was passed (size, line, time) or the compressed data is corrupt.
        """
        self.check_time()
        pieces: Iterator[bytes] = iter((raw,))
        for inflater in self._decoders:
            pieces = inflater.feed(pieces, self.where)
        for piece in pieces:
            yield self._count(piece)

    def finish(self) -> Iterator[bytes]:
        """What the decoders still hold at the end of the body (counted like `feed`)."""
        pieces: Iterator[bytes] = iter(())
        for inflater in self._decoders:
            pieces = inflater.finish(pieces, self.where)
        for piece in pieces:
            yield self._count(piece)

    def _count(self, piece: bytes) -> bytes:
        self.total += len(piece)
        if self.total > self.limit:
            raise self._too_big()
        if self.event_stream and piece:
            cut = max(piece.rfind(b"\n"), piece.rfind(b"\r"))
            self.line = self.line + len(piece) if cut < 0 else len(piece) - cut - 1
            if self.line > self.caps.line_bytes:
                raise ReadLimitError(
                    f"stopped reading {self.where}: one line of its event stream passed {_size(self.caps.line_bytes)} "
                    f"without an end (MAX_LINE_BYTES; an SSE event of one chunk is under 1 KiB)",
                    cap="MAX_LINE_BYTES",
                    where=self.where,
                )
        return piece


class _Inflater:
    """zlib for one ``gzip`` / ``deflate`` coding, producing at most `PIECE_BYTES` per step."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._new()

    def _new(self) -> None:
        # gzip: a gzip header (wbits 16+); deflate: zlib-wrapped as RFC 9110 says, raw as some servers send.
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in self.coding else zlib.MAX_WBITS)
        self._out = 0

    def feed(self, pieces: Iterator[bytes], where: str) -> Iterator[bytes]:
        for data in pieces:
            yield from self._inflate(data, where)

    def finish(self, pieces: Iterator[bytes], where: str) -> Iterator[bytes]:
        yield from self.feed(pieces, where)
        try:
            tail = self._d.flush(PIECE_BYTES)
        except zlib.error as exc:
            raise self._corrupt(where, exc) from None
        if tail:
            yield tail

    def _inflate(self, data: bytes, where: str) -> Iterator[bytes]:
        while data:
            try:
                out = self._d.decompress(data, PIECE_BYTES)
            except zlib.error as exc:
                if self.coding == "deflate" and self._out == 0 and not getattr(self, "_raw", False):
                    self._d, self._raw = zlib.decompressobj(-zlib.MAX_WBITS), True  # raw deflate, no header
                    continue
                raise self._corrupt(where, exc) from None
            data = self._d.unconsumed_tail
            if out:
                self._out += len(out)
                yield out
            if self._d.eof:  # concatenated gzip members (RFC 1952 §2.2) go on with a fresh decoder
                data = self._d.unused_data + data
                if not data:
                    return
                self._new()

    def _corrupt(self, where: str, exc: Exception) -> ReadLimitError:
        return ReadLimitError(
            f"stopped reading {where}: its {self.coding} body does not decode ({exc})",
            cap="Content-Encoding",
            where=where,
        )


def where_of(url: Any) -> str:
    """``scheme://host[:port]/path`` of a URL (httpx.URL or str), never its query or user info."""
    from urllib.parse import urlsplit

    parts = urlsplit(str(url))
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _event_stream(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "text/event-stream"


# ---- httpx ------------------------------------------------------------------------------------------------


def bounded_async_transport(
    inner: Any, caps: Caps = SERVING, accept_encoding: str = SERVING_ACCEPT_ENCODING
) -> Any:
    """An ``httpx.AsyncBaseTransport`` that sends through ``inner`` and bounds every response body it
    returns (`BodyReader`); ``accept_encoding`` replaces the request's ``Accept-Encoding``."""
    import httpx

    class BoundedAsyncTransport(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            request.headers["Accept-Encoding"] = accept_encoding
            response = await inner.handle_async_request(request)
            timeouts = request.extensions.get("timeout") or {}
            try:
                reader = BodyReader(
                    where_of(request.url),
                    caps,
                    encoding=response.headers.get("content-encoding", ""),
                    event_stream=_event_stream(response.headers.get("content-type")),
                    read_timeout_s=timeouts.get("read"),
                    declared=response.headers.get("content-length"),
                )
            except BaseException:
                await response.aclose()
                raise
            headers = response.headers
            if reader.decodes:
                headers = httpx.Headers(
                    [
                        (k, v)
                        for k, v in headers.raw
                        if k.lower() not in (b"content-encoding", b"content-length")
                    ]
                )
            return httpx.Response(
                status_code=response.status_code,
                headers=headers,
                stream=_AsyncBody(response.stream, reader),
                extensions=response.extensions,
                request=request,
            )

        async def aclose(self) -> None:
            await inner.aclose()

    class _AsyncBody(httpx.AsyncByteStream):
        def __init__(self, stream: Any, reader: BodyReader) -> None:
            self._stream, self._reader = stream, reader

        async def __aiter__(self) -> AsyncIterator[bytes]:
            import anyio

            chunks = self._stream.__aiter__()
            while True:
                left = self._reader.time_left()
                if left is not None and left <= 0:
                    raise self._reader.too_slow()
                try:
                    with anyio.fail_after(left):
                        raw = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise self._reader.too_slow() from None
                for piece in self._reader.feed(raw):
                    yield piece
            for piece in self._reader.finish():
                yield piece

        async def aclose(self) -> None:
            await self._stream.aclose()

    return BoundedAsyncTransport()


# ---- requests ---------------------------------------------------------------------------------------------


def _read_timeout(timeout: Any) -> float | None:
    """The read part of a requests / urllib3 timeout (float, (connect, read) or urllib3 ``Timeout``)."""
    if isinstance(timeout, tuple):
        timeout = timeout[-1]
    read = getattr(timeout, "read_timeout", timeout)
    return float(read) if isinstance(read, int | float) else None


def _urllib3_chunks(raw: Any, reader: BodyReader, read_timeout: float | None) -> Iterator[bytes]:
    """Raw (still encoded) chunks of a urllib3 response, each read with a socket timeout cut to what is
    left of the body's time, so a drip cannot outlast it by more than one read.

    Raises:
        ReadLimitError: the body's time ran out. requests.ReadTimeout / requests.ConnectionError: the
        server went silent for a whole read timeout, or the connection broke.
    """
    import requests
    from urllib3.exceptions import ProtocolError, ReadTimeoutError

    sock = getattr(getattr(raw, "_connection", None), "sock", None)
    while True:
        left = reader.time_left()
        if left is not None and left <= 0:
            raise reader.too_slow()
        cut = left is not None and (read_timeout is None or left < read_timeout)
        if sock is not None and left is not None:
            try:
                sock.settimeout(max(0.01, left if cut else read_timeout or left))
            except OSError:
                sock = None
        try:  # read1: what one receive brings (read(n) would wait for n bytes of a drip)
            data = raw.read1(PIECE_BYTES, decode_content=False)
        except ReadTimeoutError as exc:
            if cut:
                raise reader.too_slow() from None
            raise requests.ReadTimeout(exc) from None
        except (ProtocolError, OSError) as exc:
            raise requests.ConnectionError(exc) from None
        if not data:
            return
        yield data


def bounded_adapter(caps: Caps = API, **adapter_kwargs: Any) -> Any:
    """A ``requests.adapters.HTTPAdapter`` (``adapter_kwargs``: pool sizes, retries) that bounds every
    response body (`BodyReader`): read in full under the caps, or, for ``stream=True``, handed out through a
    bounded reader. Asks for ``gzip, deflate`` only (what `BodyReader` decodes)."""
    from requests.adapters import HTTPAdapter

    class BoundedAdapter(HTTPAdapter):
        def send(
            self,
            request: Any,
            stream: bool = False,
            timeout: Any = None,
            verify: Any = True,
            cert: Any = None,
            proxies: dict[str, str] | None = None,
        ) -> Any:
            request.headers["Accept-Encoding"] = API_ACCEPT_ENCODING
            response = super().send(
                request, stream=True, timeout=timeout, verify=verify, cert=cert, proxies=proxies
            )
            read_timeout = _read_timeout(timeout)
            try:
                reader = BodyReader(
                    where_of(request.url),
                    caps,
                    encoding=response.headers.get("Content-Encoding", ""),
                    event_stream=_event_stream(response.headers.get("Content-Type")),
                    read_timeout_s=read_timeout,
                    declared=response.headers.get("Content-Length"),
                )
                if reader.decodes:
                    response.headers.pop("Content-Encoding", None)
                    response.headers.pop("Content-Length", None)
                raw = response.raw
                if stream:
                    response.raw = _BoundedRaw(raw, reader, read_timeout)
                    return response
                body = bytearray()
                for chunk in _urllib3_chunks(raw, reader, read_timeout):
                    for piece in reader.feed(chunk):
                        body += piece
                for piece in reader.finish():
                    body += piece
                response._content = bytes(body)
                del body
                raw.release_conn()
            except BaseException:
                response.close()
                raise
            return response

    return BoundedAdapter(**adapter_kwargs)


class _BoundedRaw:
    """A urllib3 response seen through `BodyReader` (for ``stream=True``): ``stream``/``read`` give decoded,
    bounded bytes; everything else is the real response's."""

    def __init__(self, raw: Any, reader: BodyReader, read_timeout: float | None) -> None:
        self._raw, self._reader, self._read_timeout = raw, reader, read_timeout
        self._pieces: Iterator[bytes] | None = None
        self._buffer = b""

    def _all(self) -> Iterator[bytes]:
        for chunk in _urllib3_chunks(self._raw, self._reader, self._read_timeout):
            yield from self._reader.feed(chunk)
        yield from self._reader.finish()

    def stream(self, amt: int = PIECE_BYTES, decode_content: bool | None = None) -> Iterator[bytes]:
        while data := self.read(amt):
            yield data

    def read(self, amt: int | None = None, decode_content: bool | None = None, **_: Any) -> bytes:
        if self._pieces is None:
            self._pieces = self._all()
        while amt is None or len(self._buffer) < amt:
            piece = next(self._pieces, None)
            if piece is None:
                break
            self._buffer += piece
        cut = len(self._buffer) if amt is None else amt
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


# ---- urllib3 (kubernetes) ---------------------------------------------------------------------------------


def bound_pool_manager(rest_client: Any, caps: Caps = API) -> None:
    """Put the caps under a ``kubernetes`` ``RESTClientObject``: its ``pool_manager`` (a urllib3
    ``PoolManager``) is wrapped so every response is read in full under the caps before the client sees
    it. Idempotent."""
    inner = rest_client.pool_manager
    if isinstance(inner, _BoundedPoolManager):
        return
    rest_client.pool_manager = _BoundedPoolManager(inner, caps)


class _BoundedPoolManager:
    def __init__(self, inner: Any, caps: Caps) -> None:
        self._inner, self._caps = inner, caps

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        from urllib3.response import HTTPResponse

        kwargs["preload_content"] = False
        headers = dict(kwargs.get("headers") or {})
        headers["Accept-Encoding"] = API_ACCEPT_ENCODING
        kwargs["headers"] = headers
        response = self._inner.request(method, url, *args, **kwargs)
        read_timeout = _read_timeout(kwargs.get("timeout"))
        try:
            reader = BodyReader(
                where_of(url),
                self._caps,
                encoding=response.headers.get("Content-Encoding", ""),
                event_stream=_event_stream(response.headers.get("Content-Type")),
                read_timeout_s=read_timeout,
                declared=response.headers.get("Content-Length"),
            )
            body = bytearray()
            for chunk in _urllib3_chunks(response, reader, read_timeout):
                for piece in reader.feed(chunk):
                    body += piece
            for piece in reader.finish():
                body += piece
        finally:
            response.release_conn()
        kept = {
            k: v
            for k, v in response.headers.items()
            if k.lower() not in ("content-encoding", "content-length")
        }
        import io

        return HTTPResponse(
            body=io.BytesIO(bytes(body)), headers=kept, status=response.status, reason=response.reason,
            preload_content=True,
        )  # fmt: skip

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
