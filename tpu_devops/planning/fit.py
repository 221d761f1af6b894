"""Fit before money: can the configured slice hold the model's weights plus the KV cache of one request?

vLLM refuses to start when the KV cache left under the memory cap cannot hold one request of
``max_model_len`` tokens ("To serve at least one request with the models's max seq len (N), (X GiB KV
cache is needed, which is larger than the available KV cache memory (Y GiB)": vLLM v1
``kv_cache_utils.check_enough_kv_cache_memory``), and on a TPU that refusal comes only after the image
pull and the weight download, minutes into a billed boot. So plan, create, ``find_tpu``, reconfigure
(`fit_gate`), lint and check_setup (`settings_fit`) check first: the weights must be at most the cap
minus one request's KV cache in whole blocks (`sizing.fit_of`; the cap is HBM x
``--gpu-memory-utilization`` over the engine's chips). Without ``--max-model-len`` vLLM serves the
model's whole context (``max_position_embeddings``), so that is the request then.

The weights: measured, else estimated without them (`sizing.resolve_weights`,
`tpu_devops.planning.params`: the cached safetensors index, else the parameter count of the config).
The config comes from this machine only (`local_config`: a path, the bundled copy, the Hugging Face
cache): where it is not here, the fit is "not checked" and nothing is refused (the gates never reach the
network; plan_capacity downloads the config).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.catalog import DEFAULT_GPU_MEMORY_UTILIZATION, resolve_accelerator_type
from tpu_devops.errors import ConfigError, InputError
from tpu_devops.planning import sizing
from tpu_devops.planning.geometry import geometry_from_config
from tpu_devops.planning.params import TYPE_DEFAULTS, cached_file


def local_config(model: str) -> tuple[dict[str, Any], str, Path | None] | None:
    """The model's config.json without the network: a local path, the bundled copy, or the Hugging Face
    cache (HF_HOME). Returns (config, where it came from, its directory or None); None when none is here.

    Raises:
        InputError: a local or cached file exists but is not a readable config (a GGUF, malformed JSON).
    """
    text = (model or "").strip()
    if not text:
        return None
    local = text.startswith((".", "/", "~")) or text.endswith(".json") or Path(text).expanduser().exists()
    if local or sizing.bundled_config_path(text):
        return sizing.load_model_config(text)
    cached = cached_file(text, "config.json")
    if cached is None:
        return None
    try:
        cfg = json.loads(cached.read_text(encoding="utf-8")[: sizing.MAX_CONFIG_BYTES])
    except (OSError, ValueError) as exc:
        raise InputError(
            f"the cached config.json is unreadable ({type(exc).__name__})", field="MODEL_NAME", value=str(cached),
            fix="delete it from the Hugging Face cache so that it is downloaded again",
        ) from None  # fmt: skip
    return cfg, f"Hugging Face cache ({cached})", None


class FitVerdict(BaseModel):
    """Whether one engine over ``tensor_parallel_size`` chips of ``accelerator_type`` holds the model. GiB.

    ``fits``: None when unknown (``unknown_because`` says why); ``need_gib`` = weights + one request's KV
    cache; ``fitting``: one-host slices that do hold it; ``max_model_len_that_fits``: the longest context
    that fits on this slice (None when not even a short one)."""

    model: str
    accelerator_type: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int | None
    max_model_len_source: str = ""
    fits: bool | None
    weights_gib: float | None = None
    weights_source: str | None = None
    cap_gib: float | None = None
    request_kv_gib: float | None = None
    need_gib: float | None = None
    kv_bytes_per_token: int | None = None
    fitting: list[str] = Field(default_factory=list)
    max_model_len_that_fits: int | None = None
    config_source: str | None = None
    unknown_because: str | None = None

    def message(self) -> str:
        """One sentence: fits, does not (with the figures), or why it was not checked."""
        if self.fits is None:
            return f"fit of {self.model} on {self.accelerator_type} not checked: {self.unknown_because}"
        figures = (
            f"weights {self.weights_gib:.2f} GiB ({self.weights_source}) + one {self.max_model_len:,}-token "
            f"request's KV cache {self.request_kv_gib:.2f} GiB = {self.need_gib:.2f} GiB against the cap "
            f"{self.cap_gib:.2f} GiB ({self.tensor_parallel_size} chip(s) of {self.accelerator_type} x "
            f"--gpu-memory-utilization {self.gpu_memory_utilization:g})"
        )
        if self.fits:
            return f"{self.model} fits {self.accelerator_type}: {figures}"
        return (
            f"{self.model} does not fit {self.accelerator_type}: {figures}; vLLM would refuse to start after the "
            "image pull and the weight download, minutes into a billed boot"
        )

    def fix(self) -> str:
        """Where it fits: a slice, or a shorter MAX_MODEL_LEN on this one."""
        ways = [f"ACCELERATOR_TYPE={s}" for s in self.fitting]
        if self.max_model_len_that_fits:
            ways.append(f"MAX_MODEL_LEN={self.max_model_len_that_fits} on {self.accelerator_type}")
        if not ways:
            return "use a smaller or quantized model: no one-host slice holds it"
        return "use " + ", or ".join(ways)


def check_fit(
    model: str,
    accelerator_type: str,
    *,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    found: tuple[dict[str, Any], str, Path | None] | None = None,
) -> FitVerdict:
    """Does ``model`` fit one engine over ``tensor_parallel_size`` chips of ``accelerator_type``?

    ``found``: (config, source, directory) when the caller has the config, else `local_config`;
    ``max_model_len`` None: the model's ``max_position_embeddings`` (what vLLM serves then).

    Raises:
        InputError: the config is unreadable or lacks a field the check needs. ConfigError: unknown
            accelerator type.
    """
    accel = resolve_accelerator_type(accelerator_type)
    base: dict[str, Any] = {
        "model": model, "accelerator_type": accel.name, "tensor_parallel_size": tensor_parallel_size,
        "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": max_model_len,
    }  # fmt: skip
    found = found or local_config(model)
    if found is None:
        return FitVerdict(
            **base, fits=None,
            unknown_because="its config.json is not on this machine (not bundled, not in the Hugging Face cache; "
            "plan_capacity downloads it)",
        )  # fmt: skip
    cfg, source, local_dir = found
    geom = geometry_from_config(cfg, model=model)
    length, length_source = max_model_len, "MAX_MODEL_LEN"
    if length is None:
        defaults = TYPE_DEFAULTS.get(geom.model_type, {})
        length = geom.max_position_embeddings or defaults.get("max_position_embeddings") or 16384
        length_source = (
            "the model's max_position_embeddings (no MAX_MODEL_LEN: vLLM serves the whole context)"
        )
    weights, weights_source = sizing.resolve_weights(
        model, local_dir, None, accel.generation.name, config=cfg
    )
    fit = sizing.fit_of(geom, accel, weights, tensor_parallel_size, gpu_memory_utilization, length)
    out = FitVerdict(
        **{**base, "max_model_len": length}, max_model_len_source=length_source, fits=fit.fits,
        weights_gib=round(weights, 4), weights_source=weights_source, cap_gib=round(fit.cap_gib, 4),
        request_kv_gib=round(fit.request_kv_gib, 4), need_gib=round(weights + fit.request_kv_gib, 4),
        kv_bytes_per_token=fit.bytes_per_token, config_source=source,
    )  # fmt: skip
    if not fit.fits:
        text = text_ if isinstance(text_ := cfg.get("text_config"), dict) else cfg
        heads = int(text.get("num_attention_heads") or 1)
        slices = sizing.fitting_slices(geom, heads, weights, gpu_memory_utilization, length, prefer=accel)
        out.fitting = [f"{a} (TENSOR_PARALLEL_SIZE={tp})" for a, tp in slices]
        out.max_model_len_that_fits = sizing.longest_that_fits(
            geom, accel, weights, tensor_parallel_size, gpu_memory_utilization
        )
    return out


def settings_fit(settings: Any, **overrides: Any) -> FitVerdict:
    """`check_fit` for the configured deployment (MODEL_NAME, ACCELERATOR_TYPE, TENSOR_PARALLEL_SIZE,
    GPU_MEMORY_UTILIZATION, MAX_MODEL_LEN; ``overrides`` of the same names in lower case win), from local
    sources only. A config that cannot be read or counted gives an unknown verdict saying why."""
    args = {
        "model": settings.model_name, "accelerator_type": settings.accelerator_type,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "gpu_memory_utilization": settings.gpu_memory_utilization, "max_model_len": settings.max_model_len,
    } | {k: v for k, v in overrides.items() if v is not None}  # fmt: skip
    model, accel = args.pop("model"), args.pop("accelerator_type")
    try:
        return check_fit(model, accel, **args)
    except (InputError, ConfigError) as exc:
        return FitVerdict(
            model=model, accelerator_type=accel, tensor_parallel_size=args["tensor_parallel_size"],
            gpu_memory_utilization=args["gpu_memory_utilization"], max_model_len=args["max_model_len"],
            fits=None, unknown_because=exc.message,
        )  # fmt: skip


def fit_gate(settings: Any) -> list[str]:
    """What plan, create, ``find_tpu`` and reconfigure say about the fit of ``settings``: nothing when it
    fits, a note when it was not checked, a refusal when it cannot fit.

    Raises:
        ConfigError: the model cannot fit (field ``MODEL_NAME``; the message has the figures, the fix names
            a slice that fits or a MAX_MODEL_LEN that does).
    """
    verdict = settings_fit(settings)
    if verdict.fits is False:
        raise ConfigError(verdict.message(), field="MODEL_NAME", value=settings.model_name, fix=verdict.fix())
    if verdict.fits is None:
        return [verdict.message()]
    return []
