"""Known failure signatures: what a matching log line means, how sure we are, and the fix.

Two rule sets are consulted:

1. The vLLM boot-diagnosis rules of `tpu_devops.logs.boot` (``BOOT_SIGNATURES`` / ``match_line``),
   owned by the planning issue, used as they are (HBM OOM, Hugging Face 401/403/404, weight loading,
   the engine-core wrapper ...), so the two never disagree.
2. The operational rules here (``SIGNATURES``): preemption / maintenance events, quota and capacity
   errors, and a provisioning model the zone does not offer.

``weight`` orders root causes: a root cause (weight >= 50) outranks a symptom; a wrapper has a
negative weight so it is never reported first. Sources of the strings are cited per rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel

from tpu_devops.logs import boot


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


# Weights for boot rules by their severity; errors rank by their position in BOOT_SIGNATURES
# (listed most specific first), wrappers that only report a failure raised elsewhere rank last.
_BOOT_WRAPPERS = frozenset({"engine-core-failed"})
_BOOT_WEIGHT = {"warning": 30, "info": 0, "noise": -30}


def _from_boot(rule: boot.Signature, position: int) -> Signature:
    """Adapt a `tpu_devops.logs.boot.Signature` (its ``position`` in ``BOOT_SIGNATURES``)."""
    if rule.id in _BOOT_WRAPPERS:
        weight, category = -60, "wrapper"
    elif rule.severity == "error":
        weight, category = 100 - position, "boot"
    else:
        weight, category = _BOOT_WEIGHT.get(rule.severity, 0), rule.severity
    return Signature(rule.id, category, rule.title, rule.pattern, weight, rule.cause, rule.fix, rule.source)


_BOOT = {rule.id: _from_boot(rule, i) for i, rule in enumerate(boot.BOOT_SIGNATURES)}


def match(text: str) -> Signature | None:
    """The highest-weight signature found in ``text`` (a message body), or None."""
    best: Signature | None = None
    for sig in SIGNATURES:
        if sig.pattern.search(text) and (best is None or sig.weight > best.weight):
            best = sig
    try:
        found = [_BOOT[rule.id] for rule in boot.match_line(text)]
    except Exception:  # a rule bug there must not break a summary here
        found = []
    for sig in found:
        if best is None or sig.weight > best.weight:
            best = sig
    return best
