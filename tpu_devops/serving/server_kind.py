"""Which OpenAI-compatible server answers, and the context it gives a request, read from ``/v1/models``.

Signals (each from the server's own source):

- vLLM: model cards carry ``max_model_len`` and ``owned_by: "vllm"`` (vLLM's ``ModelCard`` in its
  OpenAI protocol module; the same field ``/tokenize`` answers with);
- llama.cpp's ``llama-server``: ``owned_by: "llamacpp"`` and a ``meta`` object whose ``n_ctx`` is the
  context of one slot, i.e. what one request may use (ggml-org/llama.cpp
  ``tools/server/server-context.cpp``, the ``/v1/models`` model info; README "GET /v1/models").

Anything else is "unknown": its context comes from ``MAX_MODEL_LEN`` when configured, else it is not
known, and the tools say so instead of assuming vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VLLM = "vllm"
LLAMA_CPP = "llama.cpp"
UNKNOWN = "unknown"
LABELS = {
    VLLM: "vLLM",
    LLAMA_CPP: "llama.cpp (llama-server)",
    UNKNOWN: "an OpenAI-compatible server of unknown kind",
}


@dataclass(frozen=True)
class ServerInfo:
    """What the endpoint is: ``kind`` (vllm / llama.cpp / unknown), the context one request may use
    (tokens, prompt + output) and where that number came from."""

    kind: str
    context_tokens: int | None
    context_source: str

    @property
    def label(self) -> str:
        """``vLLM``, ``llama.cpp (llama-server)`` or a plain "unknown kind" phrase."""
        return LABELS[self.kind]

    @property
    def is_vllm(self) -> bool:
        return self.kind == VLLM


def server_kind(cards: list[dict[str, Any]]) -> str:
    """``vllm``, ``llama.cpp`` or ``unknown`` from the ``/v1/models`` cards (module docstring)."""
    for card in cards:
        owner = str(card.get("owned_by") or "").lower()
        if owner == "vllm" or "max_model_len" in card:
            return VLLM
        if owner == "llamacpp" or isinstance(card.get("meta"), dict):
            return LLAMA_CPP
    return UNKNOWN


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 else None


def identify(cards: list[dict[str, Any]], model: str | None, configured_max_len: int | None) -> ServerInfo:
    """`ServerInfo` for ``model`` (or the first card): vLLM ``max_model_len``, llama.cpp
    ``meta.n_ctx``, else ``configured_max_len`` (MAX_MODEL_LEN), else unknown."""
    kind = server_kind(cards)
    card = next((c for c in cards if c.get("id") == model), cards[0] if cards else {})
    if (n := _positive_int(card.get("max_model_len"))) is not None:
        return ServerInfo(kind, n, "max_model_len in /v1/models")
    meta = card.get("meta")
    if isinstance(meta, dict) and (n := _positive_int(meta.get("n_ctx"))) is not None:
        return ServerInfo(kind, n, "meta.n_ctx in /v1/models (llama.cpp context per slot)")
    if configured_max_len:
        return ServerInfo(kind, configured_max_len, "MAX_MODEL_LEN (the server does not report its context)")
    return ServerInfo(kind, None, "unknown (the server does not report it and MAX_MODEL_LEN is not set)")
