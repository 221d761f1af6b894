"""Attention geometry of a decoder read from its ``config.json`` (DESIGN §3, "KV per token"): layers,
which of them own a KV cache, full vs sliding attention per layer, head dims and KV heads. Read by the
KV-cache arithmetic (`tpu_devops.planning.sizing`) and the parameter count (`tpu_devops.planning.params`).

``head_dim`` is never derived as ``hidden_size / num_attention_heads`` for a model that states it
(Gemma 4: 1536 / 8 = 192 is wrong; it is 256); Gemma 4 configs must state ``head_dim`` and
``layer_types``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_devops.errors import InputError


@dataclass(frozen=True)
class ModelGeometry:
    """Attention geometry of a decoder, read from ``config.json``.

    ``layer_kinds[i]`` is ``"full"`` or ``"sliding"`` for every layer; ``cache_owning_layers`` is how
    many of the first layers own a KV cache (the rest reuse it); head dims in elements.
    """

    model: str
    model_type: str
    num_layers: int
    cache_owning_layers: int
    layer_kinds: tuple[str, ...]
    head_dim: int
    full_head_dim: int
    kv_heads: int
    full_kv_heads: int
    dtype: str
    max_position_embeddings: int | None
    is_gemma4: bool
    head_dim_source: str


def _need(cfg: dict[str, Any], key: str, source: str) -> Any:
    value = cfg.get(key)
    if value is None:
        raise InputError(
            f"config.json has no {key!r}, which the KV-cache size depends on",
            field=f"model ({source})",
            value=key,
            fix="pass a decoder config.json with num_hidden_layers, num_attention_heads, num_key_value_heads "
            "(and head_dim when it is not hidden_size / num_attention_heads)",
        )
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError(
            f"config.json field {key!r} must be a positive integer",
            field=f"model ({source})",
            value=value,
            fix="check the config.json: this field is a count",
        )
    return value


def _optional_count(cfg: dict[str, Any], key: str, source: str, default: int | None, minimum: int = 1) -> Any:
    """An optional integer field: ``default`` when absent or null, else an int >= ``minimum``.

    Raises:
        InputError: present but not an integer >= ``minimum`` (e.g. a string or a list).
    """
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InputError(
            f"config.json field {key!r} must be an integer >= {minimum}",
            field=f"model ({source})",
            value=value,
            fix=f"check {key} in the config.json (the published config has a whole number), or remove it",
        )
    return value


def geometry_from_config(cfg: dict[str, Any], *, model: str = "model") -> ModelGeometry:
    """Read the attention geometry from a parsed ``config.json`` (multimodal configs: ``text_config``).

    Raises:
        InputError: a field needed for the KV size is missing or not a positive integer.
    """
    if not isinstance(cfg, dict):
        raise InputError(
            "config.json is not a JSON object", field="model", value=model, fix="pass a model config.json"
        )
    text = text_ if isinstance(text_ := cfg.get("text_config"), dict) else cfg
    model_type = str(text.get("model_type") or cfg.get("model_type") or "")
    is_gemma4 = model_type.startswith("gemma4") or str(cfg.get("model_type", "")).startswith("gemma4")
    layers = _need(text, "num_hidden_layers", model)
    heads = _need(text, "num_attention_heads", model)
    kv_heads = text.get("num_key_value_heads")
    kv_heads = heads if kv_heads is None else _need(text, "num_key_value_heads", model)
    if text.get("head_dim") is not None:
        head_dim = _need(text, "head_dim", model)
        head_dim_source = "config head_dim"
    elif is_gemma4:
        raise InputError(
            "a Gemma 4 config must state head_dim (hidden_size / heads gives the wrong value)",
            field=f"model ({model})",
            value="head_dim",
            fix="use the model's published config.json, which has head_dim and global_head_dim",
        )
    else:
        hidden = _need(text, "hidden_size", model)
        head_dim = hidden // heads
        head_dim_source = f"hidden_size / num_attention_heads = {hidden} / {heads}"
    full_head_dim = _optional_count(text, "global_head_dim", model, head_dim)
    full_kv_heads = _optional_count(text, "num_global_key_value_heads", model, kv_heads)
    shared = _optional_count(text, "num_kv_shared_layers", model, 0, minimum=0)
    max_positions = _optional_count(text, "max_position_embeddings", model, None)
    if not 0 <= shared < layers:
        raise InputError(
            "num_kv_shared_layers must be between 0 and num_hidden_layers - 1",
            field=f"model ({model})",
            value=shared,
            fix="check the config.json",
        )
    types = text.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        kinds = tuple("full" if str(t).startswith("full") else "sliding" for t in types)
    elif is_gemma4:
        raise InputError(
            "a Gemma 4 config must list layer_types (sliding vs full attention per layer)",
            field=f"model ({model})",
            value="layer_types",
            fix="use the model's published config.json",
        )
    else:
        kinds = ("full",) * layers
    dtype = str(text.get("torch_dtype") or cfg.get("torch_dtype") or "bfloat16")
    return ModelGeometry(
        model=model,
        model_type=model_type,
        num_layers=layers,
        cache_owning_layers=layers - shared,
        layer_kinds=kinds,
        head_dim=head_dim,
        full_head_dim=full_head_dim,
        kv_heads=kv_heads,
        full_kv_heads=full_kv_heads,
        dtype=dtype,
        max_position_embeddings=max_positions,
        is_gemma4=is_gemma4,
        head_dim_source=head_dim_source,
    )
