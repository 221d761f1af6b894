"""Known failure signatures: what a matching log line means, how sure we are, and the fix.

Two rule sets are consulted:

1. The vLLM boot-diagnosis rules of `tpu_devops.logs.boot` (``BOOT_SIGNATURES`` / ``match_line``),
   owned by the planning issue. When that module is importable its rules are used as they are and
   the boot rules below (``_FALLBACK_BOOT``) are skipped, so the two never disagree.
2. The operational rules here (``SIGNATURES``): preemption / maintenance events, HBM out-of-memory,
   Hugging Face 401/403/404, quota and capacity errors, and wrapper lines that only report a failure
   raised elsewhere ("See root cause above").

``weight`` orders root causes: a root cause (weight >= 50) outranks a symptom; a wrapper has a
negative weight so it is never reported first. Sources of the strings are cited per rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class Signature:
    """One rule. ``pattern`` is searched (not matched) in a message body."""

    id: str
    category: str  # boot | hbm_oom | preemption | maintenance | hf_auth | quota | capacity | wrapper
    title: str
    pattern: re.Pattern[str]
    weight: int
    cause: str
    fix: str
    source: str


def _sig(
    id_: str, category: str, title: str, pattern: str, weight: int, cause: str, fix: str, source: str
) -> Signature:
    return Signature(id_, category, title, re.compile(pattern, re.I), weight, cause, fix, source)


SIGNATURES: tuple[Signature, ...] = (
    _sig(
        "tpu-preempted",
        "preemption",
        "TPU VM preempted",
        r"compute\.instances\.preempted|Instance was preempted|\b(?:node|VM|instance|TPU|worker)\b[^.\n]{0,40}\bpreempted\b|\bstate:? PREEMPTED\b",
        85,
        "spot / preemptible capacity was reclaimed by Google Cloud",
        "recreate the queued resource (flex-start or on-demand if interruptions are not acceptable)",
        "cloud.google.com/tpu/docs/preemptible (preemption notice, audit system_event)",
    ),
    _sig(
        "tpu-maintenance",
        "maintenance",
        "Host maintenance event",
        r"maintenance event|onHostMaintenance|TERMINATE_ON_HOST_MAINTENANCE|compute\.instances\.(?:hostError|terminateOnHostMaintenance)|host maintenance",
        80,
        "the TPU host went through maintenance and the VM was stopped or restarted",
        "restart the container or recreate the node; schedule around maintenance windows",
        "cloud.google.com/tpu/docs/maintenance-events",
    ),
    _sig(
        "quota-exhausted",
        "quota",
        "Quota exhausted",
        r"Quota .*exhausted|Quota exceeded|QUOTA_EXCEEDED|RESOURCE_EXHAUSTED: Quota|Insufficient quota",
        85,
        "the project's TPU quota in this region is used up",
        "free quota (delete FAILED/SUSPENDED queued resources) or request more in Cloud Quotas",
        "DESIGN §3 provisioning errors",
    ),
    _sig(
        "capacity-stockout",
        "capacity",
        "No TPU capacity in the zone",
        r"There is no more capacity in the zone|\bstockout\b|ZONE_RESOURCE_POOL_EXHAUSTED|Insufficient reserved capacity",
        85,
        "the zone has no free capacity for this accelerator type right now",
        "try another zone (find_tpu) or wait; flex-start requests wait in WAITING_FOR_RESOURCES",
        "DESIGN §3 provisioning errors (SkyPilot failover classes)",
    ),
    _sig(
        "provisioning-model-unsupported",
        "capacity",
        "Provisioning model not offered here",
        r"provisioning model is not supported for accelerator type",
        85,
        "this (zone, provisioning model, accelerator) triple is not offered",
        "use a zone that lists the provisioning model for this accelerator",
        "DESIGN §3 (FLEX_START ... not supported ... in location)",
    ),
)

# Boot rules used only while tpu_devops.logs.boot is not available (see the module docstring).
_FALLBACK_BOOT: tuple[Signature, ...] = (
    _sig(
        "hbm-program-oom",
        "hbm_oom",
        "TPU HBM exhausted while loading a compiled XLA program",
        r"RuntimeProgramAllocationFailure|Error loading program '[^']+': Attempting to reserve",
        100,
        "the KV cache took HBM that compiled XLA programs need (gpu-memory-utilization too high for this chip)",
        "lower --gpu-memory-utilization (0.92 on v5e) or --max-model-len, then restart",
        "fixtures/vllm-logs/v5e1-e2b-util095-program-oom.log; openxla.org/xla/errors/error_0101",
    ),
    _sig(
        "hbm-oom",
        "hbm_oom",
        "TPU HBM out of memory",
        r"RESOURCE_EXHAUSTED:.*(?:out of memory|Ran out of memory in memory space hbm|pjrt\.OOM)|Ran out of memory in memory space hbm",
        90,
        "a TPU allocation did not fit in HBM",
        "reduce --gpu-memory-utilization, --max-model-len or --max-num-seqs; or use a chip with more HBM",
        "XLA error E0101 (openxla.org/xla/errors/error_0101)",
    ),
    _sig(
        "hf-401",
        "hf_auth",
        "Hugging Face rejected the token (401)",
        r"401 Client Error|Unauthorized for url: https://huggingface\.co|Invalid (?:user )?token|Invalid credentials in Authorization header",
        95,
        "the HF token is missing, wrong or revoked",
        "check the Secret Manager secret HF_SECRET_ID holds a valid read token; the VM fetches it at boot",
        "huggingface_hub.errors (HfHubHTTPError 401)",
    ),
    _sig(
        "hf-403-gated",
        "hf_auth",
        "Hugging Face refused access to a gated model (403)",
        r"GatedRepoError|403 Client Error|Access to model .* is restricted|You are trying to access a gated repo",
        95,
        "the token's account has not accepted the model's licence (gated repo)",
        "accept the Gemma licence on huggingface.co with the token's account, then restart the container",
        "huggingface_hub.errors.GatedRepoError",
    ),
    _sig(
        "hf-404",
        "hf_auth",
        "Hugging Face model or file not found (404)",
        r"RepositoryNotFoundError|404 Client Error|Repository Not Found for url|EntryNotFoundError",
        90,
        "the model id is misspelt, private, or the file does not exist at that revision",
        "check MODEL_NAME (e.g. google/gemma-4-E2B-it) and the revision",
        "huggingface_hub.errors.RepositoryNotFoundError",
    ),
    _sig(
        "engine-core-wrapper",
        "wrapper",
        "Engine start-up failed (wrapper; the cause is logged earlier)",
        r"Engine core initialization failed\. See root cause above|EngineCore failed to start",
        -60,
        "reports a failure raised earlier in the engine process",
        "read the first exception above it",
        "vllm/v1/engine/utils.py wait_for_engine_startup",
    ),
    _sig(
        "weight-load-missing-param",
        "boot",
        "Weights do not load into the model (quantized or mismatched checkpoint)",
        r"There is no module or parameter named '[^']+' in \w+",
        95,
        "the checkpoint's parameter names do not match the model class (e.g. qwix int8 abstract path on this stack)",
        "serve the bf16 weights (drop the quantization option)",
        "fixtures/vllm-logs/v5e1-e2b-qwix-int8-abstract-fail.log",
    ),
    _sig(
        "batched-tokens-too-small",
        "boot",
        "max-num-batched-tokens below one multimodal item",
        r"max_num_batched_tokens.*(?:smaller|less) than|chunked mm input disabled",
        80,
        "with --disable-chunked-mm-input one multimodal item (2,496 tokens for Gemma 4) must fit in a batch",
        "raise --max-num-batched-tokens to 2496 or more (it is rounded up to a power of two)",
        "DESIGN §3 vLLM on TPU traps",
    ),
)


class SignatureHit(BaseModel):
    """A matched signature with the entries that show it."""

    id: str
    category: str
    title: str
    weight: int
    cause: str
    fix: str
    source: str
    templates: list[str] = []
    insert_ids: list[str] = []
    count: int = 0


def _boot_module() -> Any | None:
    try:
        from tpu_devops.logs import boot  # owned by the planning issue; optional at runtime
    except ImportError:
        return None
    return boot if hasattr(boot, "match_line") else None


# Weights for boot rules by their severity; errors rank by their position in BOOT_SIGNATURES
# (listed most specific first), wrappers that only report a failure raised elsewhere rank last.
_BOOT_WRAPPERS = frozenset({"engine-core-failed"})
_BOOT_WEIGHT = {"warning": 30, "info": 0, "noise": -30}


def _from_boot(boot: Any, rule: Any) -> Signature:
    """Adapt a `tpu_devops.logs.boot.Signature` (id, severity, pattern, title, cause, fix, source)."""
    severity = getattr(rule, "severity", "error")
    if rule.id in _BOOT_WRAPPERS:
        weight, category = -60, "wrapper"
    elif severity == "error":
        order = [r.id for r in boot.BOOT_SIGNATURES]
        weight, category = 100 - (order.index(rule.id) if rule.id in order else 20), "boot"
    else:
        weight, category = _BOOT_WEIGHT.get(severity, 0), severity
    return Signature(rule.id, category, rule.title, rule.pattern, weight, rule.cause, rule.fix, rule.source)


def match(text: str) -> Signature | None:
    """The highest-weight signature found in ``text`` (a message body), or None."""
    best: Signature | None = None
    boot = _boot_module()
    rules = SIGNATURES if boot is not None else SIGNATURES + _FALLBACK_BOOT
    for sig in rules:
        if sig.pattern.search(text) and (best is None or sig.weight > best.weight):
            best = sig
    if boot is not None:
        try:
            found = [_from_boot(boot, rule) for rule in boot.match_line(text)]
        except Exception:  # a rule bug there must not break a summary here
            found = []
        for sig in found:
            if best is None or sig.weight > best.weight:
                best = sig
    return best
