"""`get_serving_status(view='model')`: what the endpoint serves and how it was started.

Sources, each named in the answer:
- ``GET /v1/models``: served model ids and ``max_model_len`` (a vLLM extension of the model card);
- ``GET /version``: ``{"version": "..."}`` (vLLM's API server);
- ``GET /metrics``: ``vllm:cache_config_info`` labels (``block_size``, ``num_gpu_blocks``,
  ``gpu_memory_utilization``, ``cache_dtype``, ...) are the flags the engine really runs with; the
  KV pool in tokens is ``num_gpu_blocks x block_size``;
- the serving flags the startup script renders from ``tpu.env`` (`tpu_devops.planning.startup.vllm_serve_flags`,
  imported lazily): what this rig asked for, not read back from the server, and labelled so.
"""

from __future__ import annotations

import logging
from typing import Any

from tpu_devops.config import Settings
from tpu_devops.errors import TpuDevopsError
from tpu_devops.host.results import ToolResult
from tpu_devops.serving.client import http_client, probe_timeout
from tpu_devops.serving.errors import ServingError, classify
from tpu_devops.serving.metrics import fetch_samples, kv_pool_tokens
from tpu_devops.serving.models import served_models
from tpu_devops.serving.resolve import attributed, resolve_endpoint
from tpu_devops.serving.server_kind import LLAMA_CPP, identify

log = logging.getLogger(__name__)


class ModelDetails(ToolResult):
    """`get_serving_status(view='model')` output. Lengths and pools in tokens."""

    endpoint: str
    endpoint_source: str
    served_models: list[str]
    model: str | None
    max_model_len: int | None
    vllm_version: str | None
    engine_cache_config: dict[str, str] | None
    kv_pool_tokens: int | None
    configured_flags: list[str] | None
    configured_flags_source: str | None
    server: str = "vLLM"
    server_version: str | None = None
    context_source: str | None = None
    notices: list[str] = []

    def headline(self) -> str:
        version = self.vllm_version or self.server_version
        pool = f", KV pool {self.kv_pool_tokens} tokens" if self.kv_pool_tokens is not None else ""
        return (
            f"{self.model or '?'} on {self.server}{f' {version}' if version else ''}: context "
            f"{self.max_model_len if self.max_model_len is not None else 'unknown'} tokens{pool}"
        )

    def render_text(self) -> str:
        """Headline, served models, engine cache config, the configured flags as one command line."""
        lines = [
            self.headline(),
            f"endpoint: {self.endpoint} ({self.endpoint_source}), server {self.server or '?'}, model {self.model}, "
            f"max_model_len {_or_unknown(self.max_model_len)}, KV pool {_or_unknown(self.kv_pool_tokens)} tokens",
        ]
        if self.context_source:
            lines.append(f"context from: {self.context_source}")
        lines.append(f"served: {', '.join(self.served_models) or 'nothing'}")
        if self.engine_cache_config:
            lines.append("engine: " + ", ".join(f"{k}={v}" for k, v in self.engine_cache_config.items()))
        if self.configured_flags:
            lines.append(f"configured flags ({self.configured_flags_source}):")
            lines.append("  " + " ".join(self.configured_flags))
        lines.extend(f"note: {n}" for n in self.notices)
        return "\n".join(lines)


def _or_unknown(value: int | None) -> str:
    """A figure for the text form: ``unknown`` where the server did not expose it (never ``None``)."""
    return "unknown" if value is None else str(value)


async def get_details(settings: Settings, base_url: str | None = None) -> ModelDetails:
    """Collect the details (module docstring). ``/version`` and ``/metrics`` are optional (noted when
    missing); ``/v1/models`` is required.

    Raises:
        ServingError: no endpoint, or ``/v1/models`` failed (classified, with the fix).
    """
    ep = await resolve_endpoint(settings, base_url)
    with attributed(ep):
        cards = await served_models(ep.url, api_key=ep.api_key)
    notices: list[str] = []
    served = [str(c.get("id")) for c in cards]
    card = next((c for c in cards if c.get("id") == settings.model_name), cards[0] if cards else None)
    if card and card.get("id") != settings.model_name:
        notices.append(f"MODEL_NAME {settings.model_name!r} is not served; showing {card.get('id')!r}")
    info = identify(cards, str(card.get("id")) if card else None, settings.max_model_len)
    version = server_version = None
    try:
        response = await http_client(ep.url).get("/version", timeout=probe_timeout())
        response.raise_for_status()
        version = str(response.json().get("version"))
    except Exception as exc:
        if info.kind == LLAMA_CPP:  # llama-server has no /version; /props carries build_info
            server_version = await _llama_build(ep.url)
        else:
            notices.append(
                f"/version unavailable ({classify(exc, ep.url).message}): the server is "
                f"{info.label}" + ("" if info.is_vllm else ", so no vLLM version")
            )
    cache_config: dict[str, str] | None = None
    pool = None
    try:
        samples = await fetch_samples(ep.url)
        rows = samples.get("vllm:cache_config_info", [])
        cache_config = dict(rows[0][0]) if rows else None
        pool = kv_pool_tokens(samples)
    except (ServingError, TpuDevopsError) as exc:
        notices.append(f"/metrics unavailable: {exc.message}")
    # The rig's startup script renders vLLM flags: shown only when the endpoint is vLLM.
    flags, flags_source = _configured_flags(settings, notices) if info.is_vllm else (None, None)
    return ModelDetails(
        endpoint=ep.url,
        endpoint_source=ep.source,
        served_models=served,
        model=str(card.get("id")) if card else None,
        max_model_len=info.context_tokens,
        vllm_version=version if info.kind != LLAMA_CPP else None,
        server=info.label,
        server_version=server_version,
        context_source=info.context_source,
        engine_cache_config=cache_config,
        kv_pool_tokens=pool,
        configured_flags=flags,
        configured_flags_source=flags_source,
        notices=notices,
    )


async def _llama_build(url: str) -> str | None:
    """llama-server's ``build_info`` from ``GET /props`` (ggml-org/llama.cpp tools/server/README.md)."""
    try:
        response = await http_client(url).get("/props", timeout=probe_timeout())
        response.raise_for_status()
        build = response.json().get("build_info")
    except Exception:  # /props is optional; the answer already names the server
        return None
    return str(build) if build else None


def _configured_flags(settings: Settings, notices: list[str]) -> tuple[list[str] | None, str | None]:
    try:
        from tpu_devops.planning import startup
    except ImportError:
        notices.append("serving flags: the startup-script module is not available in this build")
        return None, None
    try:
        flags: Any = startup.vllm_serve_flags(settings)
    except TpuDevopsError as exc:
        notices.append(f"serving flags could not be rendered from tpu.env: {exc}")
        return None, None
    except Exception as exc:  # a foreign module's signature may differ; never fail the tool over it
        log.warning("vllm_serve_flags failed: %s", exc)
        notices.append("serving flags could not be rendered (see the server's stderr)")
        return None, None
    if isinstance(flags, str):
        flags = flags.split()
    return [
        str(f) for f in flags
    ], "rendered from tpu.env by the startup script (what was asked for, not read from the server)"
