"""HBM budget and KV-cache arithmetic from a model's ``config.json`` (the `plan_capacity` tool).

How the numbers are built (DESIGN §3, sources inline):

- **KV bytes per token** come from the attention geometry in ``config.json``, never from a boot log's
  ``regular_attn_shape`` (that shows the first layer only). Per layer that owns a cache:
  ``kv_heads x 2 (K and V) x head_dim x dtype bytes``. Gemma 4 shares the KV cache of the last
  ``num_kv_shared_layers`` layers with earlier ones, so only the first
  ``num_hidden_layers - num_kv_shared_layers`` layers own a cache; its ``layer_types`` marks full
  attention layers, which use ``global_head_dim`` (512) instead of ``head_dim`` (256). Gemma 4 E2B:
  12 x 1 x 2 x 256 x 2 + 3 x 1 x 2 x 512 x 2 = 18,432 B/token. ``head_dim`` is never derived as
  ``hidden_size / num_attention_heads`` for a model that states it (Gemma 4: 1536 / 8 = 192 is wrong).
- **Tensor parallelism** splits KV heads across chips; with fewer KV heads than chips each chip keeps
  a full copy, so the slice-wide cost per token grows (TP=4 with one KV head costs 4x, not 1/4).
- **HBM budget**: runtime-visible HBM x chips (catalog), times ``--gpu-memory-utilization`` = the cap;
  the cap minus the weights is the KV pool; what is above the cap holds compiled XLA programs and is
  not governed by the flag (v5e E2B: 15.75 x 0.92 = 14.49 GiB cap, 8.97 weights, 5.52 KV, 1.26 outside).
- **Block rounding**: tpu-inference's Pallas backend keeps the block table per request under half of
  the 1 MiB SMEM: ``min_page_size = next_pow2(ceil(max_model_len / (1 MiB / 2 / max_num_seqs / 4)))``
  with ``max_num_seqs`` 256, i.e. 512 blocks per request, and never below 16 tokens per block
  (``PallasAttentionBackend.get_min_page_size`` in tpu-inference; boot log "Increase the page size
  from 16 to 32 to avoid SMEM OOM"). 16,384 -> 32 tokens per block, 32,768 -> 64.
- Known results: E2B v5litepod-1 0.92 16,384 -> 321,376 tokens measured (this model: 321,536, +0.05%);
  v6e-1 32,768 -> 1,151,744 (exact). E4B 57,344 B/token, Llama 3.1 8B 131,072, Qwen3 8B 147,456.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.catalog import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    GIB,
    AcceleratorType,
    machine_type_mixup,
    resolve_accelerator_type,
    safe_memory_utilization_advice,
)
from tpu_devops.config import GPU_MEMORY_UTILIZATION_RANGE, MAX_MODEL_LEN_RANGE, get_settings
from tpu_devops.errors import ConfigError, InputError
from tpu_devops.host import files
from tpu_devops.host.results import ToolResult
from tpu_devops.planning.geometry import ModelGeometry, geometry_from_config
from tpu_devops.planning.model_files import MAX_CONFIG_BYTES, check_config_file

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}
# Keep clients x context under ~78% of the pool: the seed's 64 x 8,192 run (524K > 321K pool) queued,
# while <= ~250,000 tokens on the 321K pool (77.8%) held throughput (DESIGN §3, Throughput).
SAFE_POOL_FRACTION = 0.78
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs on TPU ("Prepared request paddings ... 256")
SMEM_BYTES = 1024 * 1024  # per-core SMEM on TPU up to v6e (tpu-inference PallasAttentionBackend comment)
MIN_BLOCK_SIZE = 16
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class LayerGroup(BaseModel):
    """One group of cache-owning layers with the same attention kind."""

    kind: str = Field(description="'sliding' or 'full' attention")
    layers: int = Field(description="number of cache-owning layers of this kind")
    layer_indexes: list[int]
    head_dim: int
    kv_heads: int = Field(description="KV heads in the config")
    kv_heads_per_chip: int = Field(description="KV heads each chip stores (>= 1: replicated when TP > heads)")
    replication: float = Field(description="slice-wide copies of each KV head (1.0 = no replication)")
    bytes_per_token: int = Field(description="slice-wide bytes per token for this group")


class KvBreakdown(BaseModel):
    """KV bytes per token, slice-wide, with how they were derived."""

    bytes_per_token: int
    kv_dtype: str
    dtype_bytes: int
    total_layers: int
    cache_owning_layers: int
    kv_shared_layers: int = Field(description="layers that reuse an earlier layer's cache (cost 0)")
    groups: list[LayerGroup]
    single_head_dim_error_pct: float | None = Field(
        None, description="how wrong one head_dim for every layer would be (Gemma 4: -16.7%)"
    )
    formula: str


def kv_breakdown(
    geom: ModelGeometry, *, tensor_parallel_size: int = 1, kv_dtype: str = "bfloat16"
) -> KvBreakdown:
    """Slice-wide KV bytes per token, grouped by attention kind.

    Per group: layers x kv_heads_per_chip x TP x 2 x head_dim x dtype bytes, where
    kv_heads_per_chip = ceil(kv_heads / TP) (a head cannot be split, so TP > heads replicates it).
    """
    dtype_bytes = DTYPE_BYTES.get(kv_dtype, 2)
    groups: list[LayerGroup] = []
    terms: list[str] = []
    for kind in ("sliding", "full"):
        idx = [i for i in range(geom.cache_owning_layers) if geom.layer_kinds[i] == kind]
        if not idx:
            continue
        dim = geom.full_head_dim if kind == "full" else geom.head_dim
        heads = geom.full_kv_heads if kind == "full" else geom.kv_heads
        per_chip = math.ceil(heads / tensor_parallel_size)
        total_heads = per_chip * tensor_parallel_size
        per_token = len(idx) * total_heads * 2 * dim * dtype_bytes
        groups.append(
            LayerGroup(
                kind=kind,
                layers=len(idx),
                layer_indexes=idx,
                head_dim=dim,
                kv_heads=heads,
                kv_heads_per_chip=per_chip,
                replication=total_heads / heads,
                bytes_per_token=per_token,
            )
        )
        terms.append(f"{len(idx)} x {total_heads} x 2 x {dim} x {dtype_bytes} B")
    total = sum(g.bytes_per_token for g in groups)
    single_err = None
    if geom.full_head_dim != geom.head_dim:
        uniform = sum(
            g.layers * g.kv_heads_per_chip * tensor_parallel_size * 2 * geom.head_dim * dtype_bytes
            for g in groups
        )
        single_err = round((uniform - total) / total * 100, 1)
    return KvBreakdown(
        bytes_per_token=total,
        kv_dtype=kv_dtype,
        dtype_bytes=dtype_bytes,
        total_layers=geom.num_layers,
        cache_owning_layers=geom.cache_owning_layers,
        kv_shared_layers=geom.num_layers - geom.cache_owning_layers,
        groups=groups,
        single_head_dim_error_pct=single_err,
        formula=" + ".join(terms) + f" = {total:,} B/token",
    )


# ---------------------------------------------------------------------------------------------
# Loading configs and weights
# ---------------------------------------------------------------------------------------------


def bundled_config_path(repo_id: str) -> Path | None:
    """Path of the bundled copy of a published ``config.json`` (``data/config__OWNER__NAME.json``), or None.

    Bundled: google/gemma-4-E2B-it, google/gemma-4-E4B-it, meta-llama/Llama-3.1-8B-Instruct, Qwen/Qwen3-8B
    (field values as published on their model pages; fixtures/model-configs).
    """
    path = DATA_DIR / f"config__{repo_id.replace('/', '__')}.json"
    return path if path.is_file() else None


def _read_json(path: Path, field: str) -> Any:
    try:
        return json.loads(files.read_text(path, field=field, value=str(path), max_bytes=MAX_CONFIG_BYTES))
    except json.JSONDecodeError as exc:
        raise InputError(
            f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            field=field,
            value=str(path),
            fix="pass a valid config.json (download it again if it was truncated)",
        ) from None
    except OSError as exc:
        raise InputError(
            f"cannot read the file: {exc.strerror}", field=field, value=str(path), fix="check the path"
        ) from None


def load_model_config(model: str) -> tuple[dict[str, Any], str, Path | None]:
    """Find and parse a model's ``config.json``.

    ``model`` is a local ``config.json`` path, a directory holding one, or a Hugging Face repo id. A
    repo id uses a bundled copy of the published config when there is one (Gemma 4 E2B/E4B, Llama 3.1
    8B, Qwen3 8B), else downloads ``config.json`` with ``huggingface_hub`` (network; gated repos need
    ``HF_TOKEN`` in the server's environment).

    Returns: (parsed config, where it came from, local directory or None).

    Raises:
        InputError: missing file, malformed JSON, not a repo id, or the download failed.
    """
    text = (model or "").strip()
    if not text:
        raise InputError(
            "no model given",
            field="model",
            value=model,
            fix="pass a config.json path or a repo id such as google/gemma-4-E2B-it",
        )
    path = Path(text).expanduser()
    looks_local = text.startswith((".", "/", "~")) or text.endswith(".json") or path.exists()
    if looks_local:
        # Only where tools may read (`tpu_devops.host.files`): a path argument is caller input.
        path = files.resolve(get_settings(), text, field="model")
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise InputError(
                "no such file",
                field="model",
                value=text,
                fix="pass the path of the model's config.json (or a directory containing it), or a Hugging Face repo id",
            )
        check_config_file(path)  # a GGUF or other binary is refused by type, never read as text
        return _read_json(path, "model"), f"local file {path}", path.parent
    if not _REPO_ID.match(text):
        raise InputError(
            "neither an existing path nor a Hugging Face repo id (owner/name)",
            field="model",
            value=text,
            fix="pass e.g. google/gemma-4-E2B-it or /path/to/config.json",
        )
    bundled = bundled_config_path(text)
    if bundled:
        return _read_json(bundled, "model"), f"bundled copy of the published config.json of {text}", None
    return _fetch_hf_config(text), f"huggingface.co/{text}/config.json", None


def _fetch_hf_config(repo_id: str) -> dict[str, Any]:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        local = hf_hub_download(repo_id, "config.json")
    except GatedRepoError:
        raise InputError(
            "the repository is gated: accept its license on huggingface.co and set HF_TOKEN for this server",
            field="model",
            value=repo_id,
            fix="or download config.json yourself and pass its path",
        ) from None
    except RepositoryNotFoundError:
        raise InputError(
            "no such Hugging Face repository (or it is private)",
            field="model",
            value=repo_id,
            fix="check the spelling (e.g. google/gemma-4-E2B-it) or pass a local config.json path",
        ) from None
    except Exception as exc:  # network errors of many kinds: offline use needs a path
        raise InputError(
            f"could not download config.json from Hugging Face ({type(exc).__name__})",
            field="model",
            value=repo_id,
            fix="offline: pass the path of a local config.json instead of a repo id",
        ) from None
    return _read_json(Path(local), "model")


@lru_cache(maxsize=1)
def measured_weights() -> dict[str, dict[str, Any]]:
    """Known measured HBM of loaded weights, ``{repo_id: {"weights_gib", "source", ...}}`` (data file)."""
    data = json.loads((DATA_DIR / "measured_weights.json").read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _match_known(model: str) -> str | None:
    known = measured_weights()
    if model in known:
        return model
    lowered = Path(model).name.lower() if model else ""
    parent = Path(model).parent.name.lower()
    for repo in known:
        short = repo.split("/")[-1].lower()
        if lowered.startswith(short + ".") or lowered == short or parent == short:
            return repo
    return None


def resolve_weights(
    model: str,
    local_dir: Path | None,
    weights_gib: float | None,
    generation: str | None = None,
    *,
    config: dict[str, Any] | None = None,
    hub: bool = False,
) -> tuple[float, str]:
    """HBM taken by weights (GiB) and where the number came from.

    Order: the explicit ``weights_gib``; a measured value for a known model (per TPU generation when
    measured there, see ``data/measured_weights.json``); the checkpoint size from a
    local ``model.safetensors.index.json`` (``metadata.total_size``, an estimate: on-disk size can
    differ from HBM use, e.g. E2B 9.54 GiB on disk vs 8.97 GiB in HBM); with the model's ``config``,
    what `tpu_devops.planning.params.estimate_from_config` finds (the cached index, the Hub's metadata
    when ``hub``, else the parameter count of the config).

    Raises:
        InputError: negative / absurd ``weights_gib``, or no way to know the weights.
    """
    if weights_gib is not None:
        if not 0 < weights_gib < 100_000:
            raise InputError(
                "must be a positive number of GiB",
                field="weights_gib",
                value=weights_gib,
                fix="pass e.g. 8.97",
            )
        return float(weights_gib), "given (weights_gib)"
    repo = _match_known(model)
    if repo:
        entry = measured_weights()[repo]
        by_gen = entry.get("by_generation") or {}
        if generation in by_gen:
            return float(by_gen[generation]), f"{entry['source']} ({generation} value)"
        return float(entry["weights_gib"]), entry["source"]
    if local_dir is not None:
        index = local_dir / "model.safetensors.index.json"
        if index.is_file():
            data = _read_json(index, "model")
            total = (data.get("metadata") or {}).get("total_size") if isinstance(data, dict) else None
            if isinstance(total, int | float) and total > 0:
                return total / GIB, f"estimate: checkpoint size from {index.name} (HBM use may differ)"
    if config is not None:
        from tpu_devops.planning.params import estimate_from_config

        try:
            estimate = estimate_from_config(model, config, hub=hub)
            return estimate.gib, estimate.source
        except InputError:
            pass  # the config cannot be counted: the weights stay unknown
    raise InputError(
        "the HBM taken by the weights is unknown for this model",
        field="weights_gib",
        value=None,
        fix="pass weights_gib (GiB; a boot log's total_hbm_used_gb after loading), or put "
        "model.safetensors.index.json next to config.json for an estimate",
    )


# ---------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------


def block_size_for(max_model_len: int, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> int:
    """Tokens per KV block the TPU Pallas backend picks (tpu-inference ``get_min_page_size``)."""
    pages_per_request = SMEM_BYTES // 2 // max_num_seqs // 4
    need = -(-max_model_len // pages_per_request)
    return max(MIN_BLOCK_SIZE, 1 << (need - 1).bit_length())


class HbmBudget(BaseModel):
    """The HBM budget lines, GiB (1024^3 bytes), slice-wide."""

    chips: int = Field(description="chips this engine uses (its tensor-parallel size)")
    slice_chips: int | None = Field(None, description="chips of the accelerator type (paid for)")
    hbm_per_chip_gib: float
    hbm_source: str
    total_gib: float
    gpu_memory_utilization: float
    cap_gib: float = Field(description="total x gpu_memory_utilization: what vLLM may allocate")
    weights_gib: float | None = Field(description="HBM of the loaded weights (None: unknown)")
    weights_source: str
    kv_pool_gib: float | None = Field(description="cap - weights (None: weights unknown)")
    outside_cap_gib: float = Field(
        description="total - cap: compiled XLA programs live here, not governed by the flag"
    )


class ConcurrencyCheck(BaseModel):
    """Whether ``clients`` requests of ``context_tokens`` each fit the KV pool."""

    clients: int
    context_tokens: int
    demand_tokens: int
    safe_limit_tokens: int | None = Field(
        description=f"{SAFE_POOL_FRACTION:.0%} of the KV pool (None: weights unknown)"
    )
    fits: bool | None = Field(description="None when the pool is unknown (weights unknown)")
    verdict: str


class PlanResult(ToolResult):
    """`plan_capacity` result: KV bytes per token, HBM budget, KV tokens, concurrency."""

    model: str
    config_source: str
    accelerator_type: str
    notices: list[str]
    max_model_len: int
    tensor_parallel_size: int
    kv: KvBreakdown
    budget: HbmBudget
    block_size: int = Field(description="tokens per KV block (Pallas keeps 512 blocks per request)")
    kv_blocks: int | None = Field(description="None when the weights are unknown")
    kv_tokens: int | None = Field(
        description="KV pool in tokens, rounded down to whole blocks (None: weights unknown)"
    )
    max_concurrency: float | None = Field(description="kv_tokens / max_model_len (None: weights unknown)")
    kv_tokens_per_gib: int = Field(
        description="KV tokens one GiB of pool holds, in whole blocks (needs no weights)"
    )
    request_kv_gib: float = Field(description="KV cache one request of max_model_len needs, GiB")
    max_weights_gib: float = Field(
        description="the most the weights may take and still leave one max_model_len request in the pool, GiB"
    )
    weights_missing: str | None = Field(
        None, description="why the weight-dependent figures are missing and how to get them"
    )
    concurrency: ConcurrencyCheck | None = None
    warnings: list[str]

    def headline(self) -> str:
        """One line: tokens, bytes per token, pool size (or, weights unknown, what the weights leave)."""
        if self.kv_tokens is None:
            return (
                f"{self.model} on {self.accelerator_type}: {self.kv.bytes_per_token:,} B/token, "
                f"cap {self.budget.cap_gib:.2f} GiB; weights unknown: every GiB the weights leave under the cap "
                f"holds {self.kv_tokens_per_gib:,} KV tokens; one {self.max_model_len:,}-token request needs "
                f"{self.request_kv_gib:.2f} GiB (weights up to {self.max_weights_gib:.2f} GiB)"
            )
        fits = "" if self.kv_tokens > 0 else " - DOES NOT FIT"
        total = self.budget.slice_chips
        used = f" - uses {self.budget.chips} of {total} chips" if total and self.budget.chips < total else ""
        return (
            f"{self.model} on {self.accelerator_type}: {self.kv_tokens:,} KV tokens "
            f"({self.kv.bytes_per_token:,} B/token, {self.budget.kv_pool_gib:.2f} GiB pool, "
            f"{self.max_concurrency:.2f}x at {self.max_model_len:,}){fits}{used}"
        )

    def render_text(self) -> str:
        """The answer in a dozen lines: headline, KV per token by layer group, HBM budget, load check."""
        kv, b = self.kv, self.budget
        lines = [self.headline(), *[f"note: {n}" for n in self.notices]]
        lines.append(f"config: {self.config_source}")
        shared = f", {kv.kv_shared_layers} reuse an earlier layer's cache" if kv.kv_shared_layers else ""
        lines.append(
            f"KV per token ({kv.kv_dtype}): {kv.formula} "
            f"({kv.cache_owning_layers} of {kv.total_layers} layers own a cache{shared})"
        )
        for g in kv.groups:
            rep = (
                f", replicated {g.replication:g}x over TP={self.tensor_parallel_size}"
                if g.replication > 1
                else ""
            )
            lines.append(
                f"  {g.kind}: {g.layers} layers ({', '.join(map(str, g.layer_indexes))}), head_dim {g.head_dim}, "
                f"{g.kv_heads} KV head(s){rep} -> {g.bytes_per_token:,} B/token"
            )
        if kv.single_head_dim_error_pct is not None:
            lines.append(
                f"  (one head_dim for every layer would be {kv.single_head_dim_error_pct:+.1f}% off)"
            )
        if b.weights_gib is None or b.kv_pool_gib is None or self.kv_tokens is None:
            lines.append(
                f"HBM: {b.chips} chip(s) x {b.hbm_per_chip_gib:g} GiB = {b.total_gib:.2f} GiB; "
                f"x {b.gpu_memory_utilization:g} = cap {b.cap_gib:.2f}; weights unknown; outside the cap "
                f"{b.outside_cap_gib:.2f} (compiled programs)"
            )
            lines.append(
                f"KV pool = cap - weights: {self.kv_tokens_per_gib:,} tokens per GiB left ({self.block_size}-token "
                f"blocks); one request of {self.max_model_len:,} tokens needs {self.request_kv_gib:.2f} GiB, so weights "
                f"above {self.max_weights_gib:.2f} GiB leave no room for one"
            )
            if self.weights_missing:
                lines.append(f"weights: {self.weights_missing}")
        else:
            lines.append(
                f"HBM: {b.chips} chip(s) x {b.hbm_per_chip_gib:g} GiB = {b.total_gib:.2f} GiB; "
                f"x {b.gpu_memory_utilization:g} = cap {b.cap_gib:.2f}; weights {b.weights_gib:.2f} "
                f"({b.weights_source.split(';')[0]}); KV pool {b.kv_pool_gib:.2f}; outside the cap {b.outside_cap_gib:.2f} "
                "(compiled programs)"
            )
            lines.append(
                f"KV pool: {self.kv_blocks:,} blocks x {self.block_size} tokens = {self.kv_tokens:,} tokens; "
                f"{self.max_concurrency:.2f} requests of {self.max_model_len:,} tokens at once"
            )
            lines.append(
                f"per GiB of pool: {self.kv_tokens_per_gib:,} tokens; one {self.max_model_len:,}-token request: "
                f"{self.request_kv_gib:.4g} GiB; weights up to {self.max_weights_gib:.2f} GiB leave room for one"
            )
            lines.append(f"sources: HBM per chip {b.hbm_source}; weights {b.weights_source}")
        if self.concurrency:
            lines.append(f"load: {self.concurrency.verdict}")
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def _check_number(value: float, field: str, lo: float, hi: float, fix: str) -> None:
    if isinstance(value, bool) or not (lo <= value <= hi):
        raise InputError(f"out of range [{_fmt(lo)}, {_fmt(hi)}]", field=field, value=value, fix=fix)


def _fmt(x: float) -> str:
    """``10,485,760`` for whole numbers, ``0.05`` otherwise (no ``1.04858e+07`` in messages)."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def plan_from_geometry(
    geom: ModelGeometry,
    accel: AcceleratorType,
    *,
    weights_gib: float | None,
    weights_source: str,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int = 16384,
    tensor_parallel_size: int = 1,
    kv_dtype: str = "bfloat16",
    clients: int | None = None,
    context_tokens: int | None = None,
    config_source: str = "",
) -> PlanResult:
    """The arithmetic behind `plan_capacity`, for a known geometry (the boot diagnosis reuses it).

    ``weights_gib`` None (unknown): every figure that needs no weights is given (KV bytes per token, block
    size, the cap, KV tokens per GiB of pool, the KV one max_model_len request needs and so the most the
    weights may take); the pool, its tokens and the concurrency check are None.

    Raises:
        InputError: utilization, lengths or TP out of range.
    """
    _check_number(
        gpu_memory_utilization,
        "gpu_memory_utilization",
        *GPU_MEMORY_UTILIZATION_RANGE,
        f"use {safe_memory_utilization_advice()}",
    )
    _check_number(max_model_len, "max_model_len", *MAX_MODEL_LEN_RANGE, "use e.g. 16384")
    if isinstance(tensor_parallel_size, bool) or tensor_parallel_size < 1:
        raise InputError(
            "must be >= 1 (the number of chips the model is split over)",
            field="tensor_parallel_size",
            value=tensor_parallel_size,
            fix=f"use 1..{accel.chips} on {accel.name}",
        )
    if tensor_parallel_size > accel.chips:
        raise InputError(
            f"{accel.name} has {accel.chips} chip(s)",
            field="tensor_parallel_size",
            value=tensor_parallel_size,
            fix=f"use 1..{accel.chips}",
        )
    warnings: list[str] = []
    if geom.max_position_embeddings and max_model_len > geom.max_position_embeddings:
        warnings.append(
            f"max_model_len {max_model_len:,} exceeds the model's max_position_embeddings "
            f"{geom.max_position_embeddings:,}: vLLM refuses it unless overridden"
        )
    ceiling = accel.generation.max_gpu_memory_utilization
    if ceiling is not None and gpu_memory_utilization > ceiling:
        warnings.append(
            f"gpu_memory_utilization above {ceiling:g} on {accel.generation.name} fails ~14 min into boot "
            "(RuntimeProgramAllocationFailure: too little HBM left outside the cap for compiled programs)"
        )
    kv = kv_breakdown(geom, tensor_parallel_size=tensor_parallel_size, kv_dtype=kv_dtype)
    if tensor_parallel_size > 1 and any(g.replication > 1 for g in kv.groups):
        warnings.append(
            f"TP={tensor_parallel_size} with {geom.kv_heads} KV head(s): each chip keeps a copy, so the KV "
            "cost per token is multiplied, not divided"
        )
    per_chip = accel.generation.hbm_gib_visible
    chips = tensor_parallel_size
    if chips < accel.chips:
        # One engine over `chips` chips: the rest of the slice is billed and idle.
        warnings.append(
            f"this plan uses {chips} of the {accel.chips} chips of {accel.name}: one engine with "
            f"--tensor-parallel-size {chips} alone leaves {accel.chips - chips} chip(s) paid for and idle; the "
            f"startup script serves {accel.chips // chips} such engines, one per {chips} chip(s), behind a load "
            "balancer (plan_scale_out compares the shapes), or use a smaller accelerator type"
        )
    total = per_chip * chips
    cap = total * gpu_memory_utilization
    block = block_size_for(max_model_len)
    per_gib = int(GIB // kv.bytes_per_token // block) * block
    request_gib = math.ceil(max_model_len / block) * block * kv.bytes_per_token / GIB
    pool: float | None = None
    blocks: int | None = None
    tokens: int | None = None
    if weights_gib is not None:
        pool = cap - weights_gib
        if pool <= 0:
            warnings.append(
                f"weights ({weights_gib:.2f} GiB) do not fit under the cap ({cap:.2f} GiB): no room for a KV cache"
            )
            blocks = 0
        else:
            blocks = int(pool * GIB // kv.bytes_per_token // block)
        tokens = blocks * block
        if 0 < tokens < max_model_len:
            warnings.append(
                f"the pool ({tokens:,} tokens) is smaller than one request of max_model_len {max_model_len:,}"
            )
    check = None
    if clients is not None or context_tokens is not None:
        if clients is None or context_tokens is None:
            raise InputError(
                "clients and context_tokens go together",
                field="clients" if clients is None else "context_tokens",
                value=None,
                fix="pass both, e.g. clients=16 and context_tokens=8192",
            )
        _check_number(clients, "clients", 1, 1_000_000, "pass a positive number of concurrent requests")
        _check_number(
            context_tokens, "context_tokens", 1, 10_485_760, "pass tokens per request (prompt + output)"
        )
        demand = clients * context_tokens
        safe = int(tokens * SAFE_POOL_FRACTION) if tokens is not None else None
        fits = demand <= safe if safe is not None else None
        if safe is None:
            need = demand * kv.bytes_per_token / GIB
            room = cap - need / SAFE_POOL_FRACTION
            verdict = (
                f"{clients} x {context_tokens:,} = {demand:,} tokens need {need:.2f} GiB of KV pool "
                f"({need / SAFE_POOL_FRACTION:.2f} GiB to stay under {SAFE_POOL_FRACTION:.0%}): "
                + (
                    f"it fits if the weights take at most {room:.2f} GiB"
                    if room > 0
                    else f"more than the whole cap ({cap:.2f} GiB): it does not fit on this slice whatever the weights"
                )
            )
        else:
            verdict = f"{clients} x {context_tokens:,} = {demand:,} tokens " + (
                f"fits under {safe:,} ({SAFE_POOL_FRACTION:.0%} of the pool)"
                if fits
                else f"exceeds {safe:,} ({SAFE_POOL_FRACTION:.0%} of the pool): requests queue, TTFT and throughput suffer"
            )
        check = ConcurrencyCheck(
            clients=clients,
            context_tokens=context_tokens,
            demand_tokens=demand,
            safe_limit_tokens=safe,
            fits=fits,
            verdict=verdict,
        )
    return PlanResult(
        model=geom.model,
        config_source=config_source,
        accelerator_type=accel.name,
        notices=[accel.notice] if accel.notice else [],
        max_model_len=max_model_len,
        tensor_parallel_size=tensor_parallel_size,
        kv=kv,
        budget=HbmBudget(
            chips=chips,
            slice_chips=accel.chips,
            hbm_per_chip_gib=per_chip,
            hbm_source=accel.generation.hbm_visible_source,
            total_gib=round(total, 4),
            gpu_memory_utilization=gpu_memory_utilization,
            cap_gib=round(cap, 4),
            weights_gib=round(weights_gib, 4) if weights_gib is not None else None,
            weights_source=weights_source,
            kv_pool_gib=round(pool, 4) if pool is not None else None,
            outside_cap_gib=round(total - cap, 4),
        ),
        block_size=block,
        kv_blocks=blocks,
        kv_tokens=tokens,
        max_concurrency=round(tokens / max_model_len, 2) if tokens is not None else None,
        kv_tokens_per_gib=per_gib,
        request_kv_gib=round(request_gib, 4),
        max_weights_gib=round(cap - request_gib, 4),
        concurrency=check,
        warnings=warnings,
    )


@dataclass(frozen=True)
class Fit:
    """Whether weights of ``weights`` GiB plus one request fit: the cap and the request's KV (GiB), bytes
    per token of KV (slice-wide)."""

    fits: bool
    cap_gib: float
    request_kv_gib: float
    bytes_per_token: int


MIN_SUGGESTED_LEN = 2048  # a shorter context is not worth suggesting as the way to fit


def fit_of(
    geom: ModelGeometry, accel: AcceleratorType, weights: float, tp: int, util: float, max_model_len: int
) -> Fit:
    """`Fit` of one engine over ``tp`` chips of ``accel`` at utilisation ``util``: the weights may take at
    most the cap minus one ``max_model_len`` request's KV cache, in whole blocks (`plan_from_geometry`)."""
    plan = plan_from_geometry(
        geom, accel, weights_gib=None, weights_source="", gpu_memory_utilization=util,
        max_model_len=max_model_len, tensor_parallel_size=min(max(tp, 1), accel.chips),
    )  # fmt: skip
    return Fit(
        weights <= plan.max_weights_gib, plan.budget.cap_gib, plan.request_kv_gib, plan.kv.bytes_per_token
    )


def fitting_slices(
    geom: ModelGeometry, heads: int, weights: float, util: float, max_model_len: int, *,
    prefer: AcceleratorType, limit: int = 2,
) -> list[tuple[str, int]]:  # fmt: skip
    """The smallest one-host slices whose one engine (tensor-parallel over all the host's chips) holds
    the model, as (accelerator type, tensor-parallel size): the smallest of ``prefer``'s generation first,
    then of each other one, up to ``limit``. One engine spans one host here (the startup script runs
    an engine per host), and its chips must split the ``heads`` attention heads evenly (vLLM requires
    num_attention_heads % tensor_parallel_size == 0). The utilisation is kept at or under the generation's
    measured ceiling (catalog ``max_gpu_memory_utilization``)."""
    from tpu_devops.catalog import GENERATIONS

    out: list[tuple[str, int]] = []
    for gen in [prefer.generation, *(g for g in GENERATIONS.values() if g.name != prefer.generation.name)]:
        host = max(gen.machine_types) if gen.machine_types else 1
        for size in gen.sizes:
            accel = resolve_accelerator_type(f"{gen.api_prefix}-{size}")
            if accel.chips > host or heads % accel.chips:
                continue
            ceiling = gen.max_gpu_memory_utilization
            u = min(util, ceiling) if ceiling is not None else util
            if fit_of(geom, accel, weights, accel.chips, u, max_model_len).fits:
                out.append((accel.name, accel.chips))
                break
        if len(out) >= limit:
            break
    return out


def longest_that_fits(
    geom: ModelGeometry, accel: AcceleratorType, weights: float, tp: int, util: float
) -> int | None:
    """The longest max_model_len (a multiple of 1,024, at least `MIN_SUGGESTED_LEN`) one request of which
    fits beside the weights on ``accel``; None when not even that does."""
    first = fit_of(geom, accel, weights, tp, util, MIN_SUGGESTED_LEN)
    if not first.fits:
        return None
    length = max(
        MIN_SUGGESTED_LEN, int((first.cap_gib - weights) * GIB / first.bytes_per_token) // 1024 * 1024
    )
    length = min(length, MAX_MODEL_LEN_RANGE[1])
    while length > MIN_SUGGESTED_LEN and not fit_of(geom, accel, weights, tp, util, length).fits:
        length -= 1024
    return length


def plan_capacity(
    model: str,
    accelerator_type: str = "v5litepod-1",
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int = 16384,
    tensor_parallel_size: int = 1,
    weights_gib: float | None = None,
    clients: int | None = None,
    context_tokens: int | None = None,
    kv_cache_dtype: str = "bfloat16",
) -> PlanResult:
    """Plan what one deployment holds: KV bytes/token, HBM budget, KV tokens, concurrency.

    Args:
        model: local config.json path (or its directory) or Hugging Face repo id.
        accelerator_type: any spelling `catalog.resolve_accelerator_type` accepts (v5e-1 -> v5litepod-1).
        gpu_memory_utilization: fraction of HBM vLLM may use (config.GPU_MEMORY_UTILIZATION_RANGE, 0.1-0.99).
        max_model_len: tokens per request (config.MAX_MODEL_LEN_RANGE, 256-1,048,576).
        tensor_parallel_size: chips the model is split over (1..chips of the type).
        weights_gib: HBM of the loaded weights; default a measured value or a checkpoint estimate.
        clients, context_tokens: optional load to check against the pool.
        kv_cache_dtype: bfloat16 (default) or an fp8 variant (1 byte; on v5e it gains nothing).

    Raises:
        InputError / ConfigError: bad path, JSON, fields or ranges (field, value and fix in the message).
    """
    accel = resolve_accelerator_type(accelerator_type)
    if kv_cache_dtype in ("auto", ""):
        kv_cache_dtype = "bfloat16"
    if kv_cache_dtype not in DTYPE_BYTES:
        raise ConfigError(
            "unknown KV cache dtype", field="kv_cache_dtype", value=kv_cache_dtype, fix="use bfloat16 or fp8"
        )
    extra: list[str] = []
    if accel.generation.name == "v5e" and kv_cache_dtype.startswith("fp8"):
        # v5e has no fp8 in the MXU and stores fp8 KV in word-aligned blocks: 1.000x capacity, ~2% slower (seed).
        extra.append(f"kv_cache_dtype {kv_cache_dtype} on v5e gives no capacity gain (planned as bfloat16)")
        kv_cache_dtype = "bfloat16"
    cfg, source, local_dir = load_model_config(model)
    geom = geometry_from_config(cfg, model=model)
    weights: float | None
    missing: str | None = None
    try:
        weights, weights_source = resolve_weights(
            model, local_dir, weights_gib, accel.generation.name, config=cfg,
            hub=source.startswith("huggingface.co"),
        )  # fmt: skip
    except InputError as exc:
        if weights_gib is not None or exc.field != "weights_gib":
            raise  # a bad weights_gib given is the caller's to fix; only an unknown size is planned around
        weights, weights_source = None, "unknown"
        missing = f"{exc.message}: the pool, its tokens and the concurrency need it. Fix: {exc.fix}"
    plan = plan_from_geometry(
        geom,
        accel,
        weights_gib=weights,
        weights_source=weights_source,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        tensor_parallel_size=tensor_parallel_size,
        kv_dtype=kv_cache_dtype,
        clients=clients,
        context_tokens=context_tokens,
        config_source=source,
    )
    plan.weights_missing = missing
    if weights is not None and weights > plan.max_weights_gib:
        b = plan.budget
        fits = fitting_slices(
            geom, int((cfg.get("text_config") or cfg).get("num_attention_heads") or 1), weights,
            gpu_memory_utilization, max_model_len, prefer=accel,
        )  # fmt: skip
        shorter = longest_that_fits(geom, accel, weights, tensor_parallel_size, gpu_memory_utilization)
        where = ", or ".join(
            [f"accelerator_type={a} with tensor_parallel_size={tp}" for a, tp in fits]
            + ([f"max_model_len={shorter}"] if shorter else [])
        )
        room = (
            "leaving no room for a KV cache"
            if b.kv_pool_gib is not None and b.kv_pool_gib <= 0
            else f"leaving {max(b.kv_pool_gib or 0.0, 0.0):.2f} GiB, less than the {plan.request_kv_gib:.2f} GiB one "
            f"{max_model_len:,}-token request needs (vLLM refuses to start)"
        )
        raise InputError(
            f"the model does not fit: weights {b.weights_gib:.2f} GiB ({weights_source}) under the HBM cap "
            f"{b.cap_gib:.2f} GiB ({b.chips} chip(s) x {b.hbm_per_chip_gib:.2f} GiB x {b.gpu_memory_utilization:g}), "
            + room,
            field="weights_gib" if weights_gib is not None else "model",
            value=weights_gib if weights_gib is not None else model,
            fix=(f"it fits with {where}; " if where else "")
            + "use an accelerator type with more HBM per deployment (more chips with tensor_parallel_size, or "
            "v6e: 32 GiB/chip), or a smaller model; weights_gib is GiB of HBM after loading, not of the download",
        )
    plan.warnings[:0] = extra
    return plan


def plan_capacity_with_defaults(settings: Any, **args: Any) -> PlanResult:
    """`plan_capacity` with unset arguments (None / "") taken from `Settings` (MODEL_NAME, ACCELERATOR_TYPE,
    GPU_MEMORY_UTILIZATION, MAX_MODEL_LEN (else 16,384), TENSOR_PARALLEL_SIZE)."""
    defaults = {
        "model": settings.model_name,
        "accelerator_type": settings.accelerator_type,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "max_model_len": settings.max_model_len or 16384,
        "tensor_parallel_size": settings.tensor_parallel_size,
    }
    merged = {k: v for k, v in args.items() if v not in (None, "")}
    plan = plan_capacity(**{**defaults, **merged})
    mixup = machine_type_mixup(str(merged.get("accelerator_type") or ""), settings.accelerator_type)
    if mixup:
        plan.warnings.insert(0, mixup)
    return plan
