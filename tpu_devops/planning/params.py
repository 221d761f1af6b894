"""How many parameters a model has, and so how much HBM its weights take, without its weights.

When a model's weights are not downloaded, their size comes from what is here (`estimate_from_config`),
in order: the checkpoint's ``model.safetensors.index.json`` in the Hugging Face cache
(``metadata.total_size``, bytes); the Hub's safetensors metadata (its parameter count; asked only where the
network is in use anyway, never under ``HF_HUB_OFFLINE``); else the parameter count from the architecture
fields of ``config.json`` (`count_parameters`) times the bytes per parameter the checkpoint is served in
(`served_bytes_per_parameter`). A measured value, when there is one, comes first
(`tpu_devops.planning.sizing.resolve_weights`).

The parameter count of a decoder (per layer; ``d`` the head dim of that layer's attention kind,
``h`` hidden_size, ``q``/``kv`` attention / KV heads, ``i`` intermediate_size):

    attention  h x q x d (q_proj) + 2 x h x kv x d (k_proj, v_proj) + q x d x h (o_proj)
    MLP        3 x h x i (gate, up, down: the gated MLPs of Llama, Gemma, Qwen, Mistral)
    MoE layer  experts x 3 x h x i_moe + 3 x h x i_shared (shared experts) + h x experts (router)
    norms      2 x h per layer + h
    embedding  vocab x h, twice unless tie_word_embeddings
    Gemma 4    + vocab_per_layer x h_per_layer x layers (per-layer inputs) + 2 x h x h_per_layer x layers
    vision     layers_v x (4 x h_v x h_v + 2 x h_v x i_v) + h_v x h (ViT / SigLIP encoder and projector)

Biases, rotary tables and small projections are left out (well under 1%). Checked against the published
counts: Llama 3.1 8B 8.03 B, Qwen3 8B 8.19 B, Gemma 3 27B 27.4 B, Llama 3.1 70B 70.6 B
(tests/test_fit.py). Fields a published config leaves out take the defaults of the model type's
transformers configuration class (`TYPE_DEFAULTS`: Gemma 3's config.json has no vocab_size, and
Gemma3TextConfig's default is 262,208), which is what loading the config gives.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_devops.catalog import GIB
from tpu_devops.errors import InputError
from tpu_devops.planning.geometry import geometry_from_config

# Defaults of the transformers configuration classes, for fields a published config.json leaves out
# (source: transformers ``models/<type>/configuration_<type>.py``; Gemma3TextConfig: vocab_size 262_208,
# max_position_embeddings 131_072, tie_word_embeddings True).
TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "tie_word_embeddings": True},
    "gemma3": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "tie_word_embeddings": True},
    "gemma2": {"tie_word_embeddings": True},
    "gemma": {"tie_word_embeddings": True},
    "llama": {"tie_word_embeddings": False},
    "mistral": {"tie_word_embeddings": False},
    "qwen2": {"tie_word_embeddings": False},
    "qwen3": {"tie_word_embeddings": False},
    "qwen3_moe": {"tie_word_embeddings": False},
}
_SERVED_BYTES = {"float32": 2.0, "float16": 2.0, "bfloat16": 2.0}  # vLLM serves fp32 checkpoints in 16 bits


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a model by part (``parts``: embedding, layers, vision, ...), their sum ``total``, the
    formula in words, and ``notes`` on what was assumed or left out."""

    total: int
    parts: dict[str, int]
    formula: str
    notes: tuple[str, ...] = ()


def _int(cfg: dict[str, Any], key: str, default: Any = None) -> Any:
    value = cfg.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(
            f"config.json field {key!r} must be a whole number",
            field="model",
            value=value,
            fix="use the model's published config.json",
        )
    return value


def count_parameters(cfg: dict[str, Any], *, model: str = "model") -> ParameterCount:
    """The parameter count from ``config.json``'s architecture fields (module docstring for the formula).

    Raises:
        InputError: a field the count needs is missing (hidden_size, intermediate_size, vocab_size
            without a known default) or malformed.
    """
    geom = geometry_from_config(cfg, model=model)
    text = text_ if isinstance(text_ := cfg.get("text_config"), dict) else cfg
    defaults = TYPE_DEFAULTS.get(geom.model_type, {}) | TYPE_DEFAULTS.get(str(cfg.get("model_type")), {})
    notes: list[str] = []

    def need(key: str) -> int:
        value = _int(text, key, defaults.get(key))
        if value is None:
            raise InputError(
                f"config.json has no {key!r}, which the parameter count needs",
                field="model",
                value=model,
                fix="pass a config.json with hidden_size, intermediate_size and vocab_size, or weights_gib",
            )
        if key not in text:
            notes.append(f"{key} {value:,} is the {geom.model_type} default (not in config.json)")
        return int(value)

    h, vocab = need("hidden_size"), need("vocab_size")
    heads = _int(text, "num_attention_heads")
    attention = 0
    for i in range(geom.num_layers):
        full = geom.layer_kinds[i] == "full"
        d = geom.full_head_dim if full else geom.head_dim
        kv = geom.full_kv_heads if full else geom.kv_heads
        attention += 2 * h * heads * d + 2 * h * kv * d
    mlp, moe_layers = _mlp_parameters(text, h, geom.num_layers, need, notes)
    norms = 2 * h * geom.num_layers + h
    tie = text.get(
        "tie_word_embeddings", cfg.get("tie_word_embeddings", defaults.get("tie_word_embeddings", True))
    )
    embedding = vocab * h * (1 if tie else 2)
    parts = {"embedding": embedding, "attention": attention, "mlp": mlp, "norms": norms}
    per_layer_vocab, per_layer_h = (
        _int(text, "vocab_size_per_layer_input"),
        _int(text, "hidden_size_per_layer_input"),
    )
    if per_layer_vocab and per_layer_h:  # Gemma 4: an embedding per layer, projected into the residual stream
        parts["per_layer_inputs"] = (
            per_layer_vocab * per_layer_h * geom.num_layers + 2 * h * per_layer_h * geom.num_layers
        )
    for name in ("vision_config", "audio_config"):
        sub = cfg.get(name)
        if isinstance(sub, dict):
            counted = _encoder_parameters(sub, h)
            if counted is None:
                notes.append(f"{name} lists no sizes: its encoder is not counted")
            else:
                parts[name.split("_")[0]] = counted
    total = sum(parts.values())
    formula = (
        f"{geom.num_layers} layers x (attention h*q*d + 2*h*kv*d + q*d*h, MLP 3*h*i{' or MoE' if moe_layers else ''})"
        f" + embedding {vocab:,} x {h:,}{' (tied)' if tie else ' x 2 (untied lm_head)'}"
        + ("".join(f" + {k}" for k in parts if k not in ("embedding", "attention", "mlp", "norms")))
        + f" = {total / 1e9:.2f} B parameters"
    )
    return ParameterCount(total, parts, formula, tuple(notes))


def _mlp_parameters(
    text: dict[str, Any], h: int, layers: int, need: Any, notes: list[str]
) -> tuple[int, int]:
    """(MLP parameters over all layers, how many of them are mixture-of-experts layers)."""
    experts = _int(text, "num_experts") or _int(text, "num_local_experts") or _int(text, "n_routed_experts")
    if not experts:
        return layers * 3 * h * need("intermediate_size"), 0
    moe_i = _int(text, "moe_intermediate_size") or need("intermediate_size")
    dense_i = _int(text, "intermediate_size") or moe_i
    shared = _int(text, "n_shared_experts") or 0
    shared_i = _int(text, "shared_expert_intermediate_size") or (moe_i * shared)
    first_dense = _int(text, "first_k_dense_replace") or 0
    step = _int(text, "decoder_sparse_step") or 1
    dense_only = set(text.get("mlp_only_layers") or [])
    moe = [i for i in range(layers) if i >= first_dense and i not in dense_only and (i + 1) % step == 0]
    total = (layers - len(moe)) * 3 * h * dense_i
    total += len(moe) * (experts * 3 * h * moe_i + 3 * h * shared_i + h * experts)
    notes.append(f"{len(moe)} mixture-of-experts layer(s) of {experts} experts: every expert is in HBM")
    return total, len(moe)


def _encoder_parameters(sub: dict[str, Any], text_hidden: int) -> int | None:
    """A ViT-style encoder (SigLIP, Gemma's vision tower) and its projector; None without its sizes."""
    try:
        h, i, n = _int(sub, "hidden_size"), _int(sub, "intermediate_size"), _int(sub, "num_hidden_layers")
    except InputError:
        return None
    if not (h and i and n):
        return None
    return n * (4 * h * h + 2 * h * i) + h * text_hidden


def served_bytes_per_parameter(cfg: dict[str, Any]) -> tuple[float, str]:
    """(bytes per parameter in HBM, why): a quantization config's bits (8 -> 1, 4 -> 0.5; fp8 -> 1), else
    2 for a 16- or 32-bit checkpoint (vLLM's ``--dtype auto`` serves float32 checkpoints in 16 bits)."""
    quant = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config")
    if isinstance(quant, dict):
        bits = quant.get("bits") or quant.get("w_bit") or quant.get("weight_bits")
        method = str(quant.get("quant_method") or "")
        if isinstance(bits, int) and bits > 0:
            return bits / 8, f"{method or 'quantized'} {bits}-bit weights"
        if "fp8" in method:
            return 1.0, "fp8 weights"
    text = text_ if isinstance(text_ := cfg.get("text_config"), dict) else cfg
    dtype = str(text.get("torch_dtype") or cfg.get("torch_dtype") or text.get("dtype") or "bfloat16")
    return _SERVED_BYTES.get(dtype, 2.0), f"{dtype} checkpoint, 2 bytes per parameter"


def cached_file(repo_id: str, filename: str) -> Path | None:
    """``filename`` of ``repo_id`` in this machine's Hugging Face cache (HF_HOME / HF_HUB_CACHE), else None.
    Never touches the network (``huggingface_hub.try_to_load_from_cache``)."""
    if "/" not in repo_id or repo_id.startswith((".", "/", "~")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, filename)
    except Exception:  # a malformed id or an unreadable cache: not cached
        return None
    return Path(found) if isinstance(found, str) else None


@dataclass(frozen=True)
class WeightsEstimate:
    """HBM the loaded weights take, GiB (1024^3 B), and where the number came from."""

    gib: float
    source: str
    parameters: int | None = None
    notes: tuple[str, ...] = ()


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_parameters(repo_id: str) -> int | None:
    """The parameter count the Hub states for ``repo_id`` (its safetensors metadata), or None."""
    try:
        from huggingface_hub import HfApi

        info = HfApi().model_info(repo_id, expand=["safetensors"], timeout=10)
    except Exception:  # offline, gated, not found: the config's count is used instead
        return None
    total = getattr(getattr(info, "safetensors", None), "total", None)
    return int(total) if isinstance(total, int) and total > 0 else None


def cached_index_gib(repo_id: str) -> tuple[float, str] | None:
    """(GiB, source) from ``model.safetensors.index.json`` of ``repo_id`` in the Hugging Face cache, else None."""
    index = cached_file(repo_id, "model.safetensors.index.json")
    if index is None:
        return None
    try:
        total = (json.loads(index.read_text(encoding="utf-8")).get("metadata") or {}).get("total_size")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
        return total / GIB, f"estimate: checkpoint size from the cached {index.name} (HBM use may differ)"
    return None


def estimate_from_config(model: str, cfg: dict[str, Any], *, hub: bool = False) -> WeightsEstimate:
    """The weights' HBM from what is here (module docstring): the cached safetensors index, the Hub's
    metadata (``hub``, not offline), else the parameter count of ``cfg``.

    Raises:
        InputError: ``cfg`` lacks a field the parameter count needs (and nothing else knows the size).
    """
    cached = cached_index_gib(model)
    if cached is not None:
        return WeightsEstimate(*cached)
    per_param, why = served_bytes_per_parameter(cfg)
    if hub and not _offline():
        params = _hub_parameters(model)
        if params:
            return WeightsEstimate(
                params * per_param / GIB,
                f"estimate: {params / 1e9:.2f} B parameters (Hugging Face Hub safetensors metadata) x "
                f"{per_param:g} B ({why})",
                params,
            )
    count = count_parameters(cfg, model=model)
    return WeightsEstimate(
        count.total * per_param / GIB,
        f"estimate: {count.total / 1e9:.2f} B parameters from config.json x {per_param:g} B ({why}); the "
        f"weights are not downloaded here [{count.formula}]",
        count.total,
        count.notes,
    )
