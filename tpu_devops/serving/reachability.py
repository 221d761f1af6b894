"""Whether this machine reaches the rig's endpoint with its API key (check_setup).

``GET /health`` (open on vLLM), then ``GET /v1/models`` with the key; on a timeout it compares your
public IPv4 with the rig's firewall rule (`tpu_devops.provisioning.access`).
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel

from tpu_devops.config import Settings
from tpu_devops.errors import TpuDevopsError
from tpu_devops.serving.client import http_client, probe_timeout
from tpu_devops.serving.errors import ServingError, classify
from tpu_devops.serving.resolve import for_endpoint, resolve_endpoint


class Reachability(BaseModel):
    """Whether this machine reaches the rig's endpoint: ``ok``, what was seen, and the fix."""

    ok: bool
    detail: str
    fix: str | None = None


async def endpoint_reachability(settings: Settings) -> Reachability:
    """Probe the rig's endpoint from here (check_setup): ``GET /health`` (open on vLLM), then
    ``GET /v1/models`` with the key (is the key accepted?). No endpoint yet is not a failure. On a
    timeout the rig's firewall rule is read and compared with your public IPv4. Never raises."""
    try:
        ep = await resolve_endpoint(settings)
    except ServingError as exc:
        if exc.failure == "no_endpoint":
            return Reachability(ok=True, detail=f"no endpoint to probe yet ({exc.message})")
        return Reachability(ok=False, detail=exc.message, fix=exc.fix)
    except TpuDevopsError as exc:
        return Reachability(ok=False, detail=exc.message, fix=exc.fix)
    client = http_client(ep.url)
    try:
        (await client.get("/health", timeout=probe_timeout(5.0))).raise_for_status()
        models = await client.get("/v1/models", headers=ep.auth_headers(), timeout=probe_timeout(5.0))
        models.raise_for_status()
    except Exception as exc:
        err = for_endpoint(classify(exc, ep.url), ep)
        detail = f"{ep.url} ({ep.source}): {err.message}"
        if err.failure == "timeout" and ep.source == "discovery":
            detail += "; " + await _firewall_vs_you(settings)
        return Reachability(ok=False, detail=detail, fix=err.fix)
    key = f"API key from {ep.key_source} accepted" if ep.api_key else "no API key needed"
    return Reachability(ok=True, detail=f"{ep.url} ({ep.source}) answers /health and /v1/models; {key}")


async def _firewall_vs_you(settings: Settings) -> str:
    """``firewall rule ... from X; your public IPv4 Y is (not) admitted`` (best effort)."""
    from tpu_devops.provisioning.access import detect_public_ip, firewall_state

    state = await firewall_state(settings)
    line = state.line()
    try:
        you = ipaddress.ip_address(await detect_public_ip(settings))
    except TpuDevopsError:
        return line
    admitted = any(you in ipaddress.ip_network(r) for r in state.source_ranges)
    return f"{line}; your public IPv4 {you} is {'admitted' if admitted else 'NOT admitted'}"
