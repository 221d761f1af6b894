"""Async calls to the TPU adapter (`tpu_devops.gcp.tpu`), each in a worker thread from one bounded pool.

Listing many zones at once is bounded by `MAX_CONCURRENT_CALLS`, so 44 zones finish in about one
call's latency without opening a thread per zone.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import anyio

from tpu_devops.config import Settings
from tpu_devops.errors import NotFoundError

# Listing many zones at once: bounded so 44 zones finish in about one call's latency.
MAX_CONCURRENT_CALLS = 48


_LIMITERS: weakref.WeakKeyDictionary[Any, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _limiter() -> anyio.CapacityLimiter:
    """One limiter per event loop (a limiter must not be shared across loops)."""
    import asyncio

    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(MAX_CONCURRENT_CALLS)
    return limiter


async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking adapter call in a worker thread from our own bounded pool."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_limiter())


def api(settings: Settings) -> Any:
    """The TPU adapter for these settings."""
    from tpu_devops.gcp.tpu import TpuApi

    return TpuApi(settings)


async def get_queued(settings: Settings, zone: str, qr_id: str) -> dict[str, Any] | None:
    """The queued resource JSON, or None when it does not exist."""
    try:
        return await call(api(settings).get_queued_resource, zone, qr_id)
    except NotFoundError:
        return None


async def node_external_ip(
    settings: Settings, zone: str, node_id: str
) -> tuple[str | None, dict[str, Any] | None]:
    """(external IP of the node's first endpoint, node JSON); (None, None) when the node is gone."""
    try:
        node = await call(api(settings).get_node, zone, node_id)
    except NotFoundError:
        return None, None
    for ep in node.get("networkEndpoints", []) or []:
        ip = (ep.get("accessConfig") or {}).get("externalIp")
        if ip:
            return ip, node
    return None, node
