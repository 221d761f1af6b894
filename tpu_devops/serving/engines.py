"""Per-engine and total status of a multi-engine host (`get_serving_status(view='engines')`).

Each engine is reached through the load balancer on the rig's one open port: ``/engines/<i>/health``
and ``/engines/<i>/metrics`` (routes of `tpu_devops.planning.multiengine.haproxy_config`). A host that runs
one engine has no balancer: vLLM itself listens on that port (`multiengine.engine_ports`), so its one
engine is asked at the root path (``/health``, ``/metrics``), never at ``/engines/0``. Per engine: health
and its latency, running / waiting requests, KV-cache usage, generated tokens (and tok/s since the
previous call, from `serving.metrics.summarise`); then the totals. One engine down is data, not an
error: the answer says which and the balancer's health check keeps traffic off it.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, Field

from tpu_devops.config import Settings
from tpu_devops.errors import InputError
from tpu_devops.host.results import ToolResult
from tpu_devops.serving.client import http_client, probe_timeout
from tpu_devops.serving.errors import ServingError, classify
from tpu_devops.serving.resolve import Endpoint, attributed, for_endpoint, resolve_endpoint


class EngineStatus(BaseModel):
    """One engine. Times in ms; tokens; fractions 0..1."""

    engine: int
    path: str
    healthy: bool
    health_ms: float | None = None
    error: str | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None
    generation_tokens_total: float | None = None
    generation_tokens_per_s: float | None = None


class EngineStatusResult(ToolResult):
    """`get_serving_status(view='engines')`: every engine of the host and the totals."""

    endpoint: str
    engines: list[EngineStatus]
    # The totals are the summary's words and the sum of ``engines``: only the text states them again.
    healthy: int = Field(exclude=True)
    requests_running: float = Field(exclude=True)
    requests_waiting: float = Field(exclude=True)
    generation_tokens_total: float = Field(exclude=True)
    generation_tokens_per_s: float | None = Field(exclude=True)

    def headline(self) -> str:
        rate = (
            f", {self.generation_tokens_per_s:,.1f} generated tok/s"
            if self.generation_tokens_per_s is not None
            else ""
        )
        return (
            f"{self.healthy}/{len(self.engines)} engines healthy at {self.endpoint}: {self.requests_running:.0f} running, "
            f"{self.requests_waiting:.0f} waiting{rate}"
        )

    def render_text(self) -> str:
        """Headline, then one line per engine."""
        lines = [self.headline()]
        for e in self.engines:
            if not e.healthy:
                lines.append(f"engine {e.engine} ({e.path or '/'}): DOWN: {e.error}")
                continue
            kv = "?" if e.kv_cache_usage is None else f"{e.kv_cache_usage:.0%}"
            rate = "" if e.generation_tokens_per_s is None else f", {e.generation_tokens_per_s:,.1f} tok/s"
            lines.append(
                f"engine {e.engine} ({e.path or '/'}): healthy in {e.health_ms:.0f} ms, {e.requests_running or 0:.0f} running / "
                f"{e.requests_waiting or 0:.0f} waiting, KV {kv}, {e.generation_tokens_total or 0:,.0f} tokens generated{rate}"
            )
        lines.append(
            f"totals at {self.endpoint}: {self.healthy} of {len(self.engines)} engines healthy, "
            f"{self.requests_running or 0:.0f} running, {self.requests_waiting or 0:.0f} waiting, "
            f"{self.generation_tokens_total or 0:,.0f} tokens generated"
        )
        return "\n".join(lines)


async def _engine(ep: Endpoint, i: int, path: str) -> EngineStatus:
    from tpu_devops.serving.metrics import fetch_samples, summarise

    url = ep.url
    started = time.perf_counter()
    try:
        response = await http_client(url).get(f"{path}/health", timeout=probe_timeout())
        response.raise_for_status()
    except Exception as exc:
        err = for_endpoint(classify(exc, f"{url}{path}"), ep)
        return EngineStatus(engine=i, path=path, healthy=False, error=str(err))
    health_ms = round((time.perf_counter() - started) * 1000, 1)
    try:
        m = summarise(f"{url}{path}", await fetch_samples(f"{url}{path}"))
    except ServingError as err:
        return EngineStatus(
            engine=i, path=path, healthy=True, health_ms=health_ms, error=f"metrics: {for_endpoint(err, ep)}"
        )
    return EngineStatus(
        engine=i,
        path=path,
        healthy=True,
        health_ms=health_ms,
        requests_running=m.requests_running,
        requests_waiting=m.requests_waiting,
        kv_cache_usage=m.kv_cache_usage,
        generation_tokens_total=m.generation_tokens_total,
        generation_tokens_per_s=m.generation_tokens_per_s,
    )


async def get_engine_status(
    settings: Settings, base_url: str | None = None, engines: int | None = None
) -> EngineStatusResult:
    """Health and metrics of every engine behind the rig's balancer, and the totals.

    Args:
        engines: how many engines the host runs; default chips per host / TENSOR_PARALLEL_SIZE. One
            engine is asked at the root path (no balancer in front of it), several at ``/engines/<i>``.

    Raises:
        InputError: ``engines`` out of range. ServingError: no endpoint to ask.
    """
    from tpu_devops.planning.multiengine import engines_per_host

    n = engines_per_host(settings) if engines is None else engines
    if isinstance(n, bool) or not 1 <= n <= 64:
        raise InputError(
            "out of range", field="engines", value=n, fix="use 1..64 (one engine per chip of the host)"
        )
    ep = await resolve_endpoint(settings, base_url)
    paths = [""] if n == 1 else [f"/engines/{i}" for i in range(n)]
    with attributed(ep):
        found = await asyncio.gather(*(_engine(ep, i, path) for i, path in enumerate(paths)))
    rates = [e.generation_tokens_per_s for e in found if e.generation_tokens_per_s is not None]
    return EngineStatusResult(
        endpoint=ep.url,
        engines=list(found),
        healthy=sum(e.healthy for e in found),
        requests_running=sum(e.requests_running or 0 for e in found),
        requests_waiting=sum(e.requests_waiting or 0 for e in found),
        generation_tokens_total=sum(e.generation_tokens_total or 0 for e in found),
        generation_tokens_per_s=round(sum(rates), 3) if rates else None,
    )
