"""One shared async HTTP client and one shared `openai.AsyncOpenAI` client per endpoint.

Connection reuse matters for benchmarks (a new TCP connection per request would be measured as TTFT)
and timeouts matter for MCP (a hung endpoint must not hang a tool call). Both clients are created
lazily, so importing this module does not import ``openai``.

Each client talks to its one endpoint only (`tpu_devops.serving.egress`): redirects are not followed,
a request to another origin is refused, connections go only to checked addresses (never a metadata
server or a link-local address), and proxy variables from the environment are ignored (a proxy would
dial on our behalf, past that check). The API key is never a client default: each request that may
carry it gets it from the resolved `Endpoint` (`tpu_devops.serving.resolve`). Every response is read
under the caps of `tpu_devops.host.bounded` (size, one stream line, time, decompression).

A client belongs to the event loop it was made on: its pooled connections are that loop's transports,
and using them from another loop fails with "Event loop is closed" (a script that calls `asyncio.run`
twice, tests that each run their own loop against a server on a reused port). So each client is reused
only on its own loop, and a new loop gets new clients.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use: tools/list must not pay for an HTTP stack
    import httpx
    from openai import AsyncOpenAI

# Connect fails fast (a booting node refuses connections); reads allow a long generation.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0
# Short GETs (/health, /v1/models, /version, /metrics) and health-check chats: a server that accepts the
# connection but never answers must fail the call in seconds, not hold it for READ_TIMEOUT_S.
PROBE_TIMEOUT_S = 10.0
PROBE_CHAT_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 256

# base URL -> (the event loop it was made on, client); (base URL, key) -> (loop, its httpx client, client)
_http: dict[str, tuple[asyncio.AbstractEventLoop | None, httpx.AsyncClient]] = {}
_openai: dict[tuple[str, str], tuple[asyncio.AbstractEventLoop | None, httpx.AsyncClient, Any]] = {}


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # made outside a loop (a synchronous caller): it binds to the first loop using it
        return None


def normalize_base_url(url: str) -> str:
    """``http://host:8000`` (no trailing slash, no ``/v1``)."""
    url = url.strip().rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def timeouts(read_s: float = READ_TIMEOUT_S) -> httpx.Timeout:
    """Timeouts used by every client: connect 5 s, read/write/pool as given (seconds)."""
    import httpx

    return httpx.Timeout(read_s, connect=CONNECT_TIMEOUT_S)


def probe_timeout(read_s: float | None = None) -> httpx.Timeout:
    """Per-request timeout for short GETs: connect 5 s, read ``read_s`` (default `PROBE_TIMEOUT_S`,
    10 s, read when called)."""
    return timeouts(PROBE_TIMEOUT_S if read_s is None else read_s)


def http_client(base_url: str) -> httpx.AsyncClient:
    """The shared `httpx.AsyncClient` for this endpoint (base URL without ``/v1``) on the running loop."""
    key, loop = normalize_base_url(base_url), _running_loop()
    entry = _http.get(key)
    if entry is not None and entry[0] is loop and not entry[1].is_closed:
        return entry[1]
    # none yet, closed, or made on another loop (whose connections are unusable here): a new one
    import httpx

    from tpu_devops.host.bounded import bounded_async_transport
    from tpu_devops.serving.egress import pinned_transport

    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
    client = httpx.AsyncClient(
        base_url=key,
        timeout=timeouts(),
        limits=limits,
        transport=bounded_async_transport(pinned_transport(httpx.URL(key), limits)),
        follow_redirects=False,
        trust_env=False,
    )
    _http[key] = (loop, client)
    return client


def openai_client(base_url: str, api_key: str = "") -> AsyncOpenAI:
    """The shared `AsyncOpenAI` for this endpoint on the running loop; it reuses `http_client`'s
    connection pool (a new pool means a new client).

    ``api_key``: the rig's key only when the endpoint is the rig's (`resolve.Endpoint.api_key`), else "".
    vLLM ignores the key unless started with one; ``EMPTY`` is the conventional placeholder.
    Retries are off: the caller classifies failures (a retry would hide a booting node).
    """
    from openai import AsyncOpenAI

    key, loop = (normalize_base_url(base_url), api_key), _running_loop()
    http = http_client(base_url)
    entry = _openai.get(key)
    if entry is not None and entry[0] is loop and entry[1] is http:
        return entry[2]
    # openai 3.x accepts the httpx 0.x client and timeout (it checks for them and converts them) while its
    # annotations name only httpx2's classes.
    client = AsyncOpenAI(
        base_url=f"{key[0]}/v1",
        api_key=api_key or "EMPTY",
        http_client=http,  # type: ignore[arg-type]
        max_retries=0,
        timeout=timeouts(),  # type: ignore[arg-type]
    )
    _openai[key] = (loop, http, client)
    return client


async def close_all() -> None:
    """Close every shared client of the running loop (server shutdown, tests) and forget them all: a
    client of another loop cannot be closed from this one, and is never reused."""
    loop = _running_loop()
    for owner, client in list(_http.values()):
        if owner is loop or owner is None:
            await client.aclose()
    _http.clear()
    _openai.clear()
