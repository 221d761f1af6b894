"""Classifying Google's provisioning failures by reach, after SkyPilot's TPU failover handler (DESIGN §3).

- ``zone``: no capacity / stockout / insufficient reserved capacity, a zonal quota, a request preempted
  while being created, or one that waited out its budget: try another zone; expires.
- ``region``: a regional chip quota exhausted (``Limit N in region R``): skip the region's zones; expires.
- ``model``: the provisioning model is not offered for this accelerator in this zone (``FLEX_START
  provisioning model is not supported ... in location``; Cloud TPU's glossary wording ``Accelerator type X
  as preemptible (false) and reserved (false) is not available in zone Z``: a message naming a zone and
  the provisioning flags): never retry that (zone, model, accelerator) triple, and go on to the next
  zone.
- ``config``: network / subnetwork not found, the accelerator type or runtime version unknown (``the
  accelerator X was not found``), permission denied, any other invalid request: a flag is wrong; stop
  the whole sweep ("failed in every zone" must never hide a typo).
- ``transient``: an internal error, unavailable, deadline exceeded, or a per-minute *request* rate
  limit (``Quota exceeded for quota metric 'Create requests' and limit 'Create requests per minute per
  project'``): back off and try again; it says nothing about the zone or the region's chips.

The decision uses, in order: the message for the cases whose meaning the code alone does not carry
(a rate limit and a chip quota are both RESOURCE_EXHAUSTED; a stockout is code 8 in ``failedData``),
then the error's code: a FAILED queued resource's ``failedData.error.code`` is a ``google.rpc.Code``
number (google/rpc/code.proto), a refused call has an HTTP status and a canonical status name.
Wordings with their sources are in tests/test_provisioning_failures.py (SkyPilot's
``FailoverCloudErrorHandlerV2._gcp_handler`` examples, skypilot-org/skypilot#3840, marin PR #6198).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpu_devops.errors import TpuDevopsError


@dataclass(frozen=True)
class Failure:
    """A classified provisioning failure. ``reach`` in zone / region / model / config / transient."""

    reach: str
    reason: str  # stockout, quota, rate_limit, unsupported_model, network, permission, accelerator, ...
    message: str
    fix: str


# google.rpc.Code numbers (google/rpc/code.proto) -> canonical names.
RPC_CODES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
    6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
    15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}  # fmt: skip
_TRANSIENT_STATUSES = ("INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED")
_CONFIG_STATUSES = ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND", "OUT_OF_RANGE", "UNIMPLEMENTED")

# A request-rate quota (per minute / per second), not a chip quota: Google's API quota wording
# ("Quota exceeded for quota metric 'X requests' and limit 'X requests per minute ...'"), Compute's
# "Rate Limit Exceeded" / rateLimitExceeded, ErrorInfo reason RATE_LIMIT_EXCEEDED.
_RATE_LIMIT = re.compile(
    r"per (minute|second|100 seconds)\b|rate ?limit(ed)?( exceeded)?\b|RATE_LIMIT_EXCEEDED|too many requests",
    re.I,
)
_INTERNAL = re.compile(
    r"internal error|an internal error has occurred|backend error|try again later|temporarily unavailable",
    re.I,
)
_MODEL = re.compile(r"provisioning model is not supported|is not supported for provisioning model", re.I)
# Cloud TPU's error glossary ("Invalid Accelerator Type"): "Accelerator type v2-512 as preemptible (false)
# and reserved (false) is not available in zone us-central1-a, please contact support." Its solution: the
# availability of an accelerator in a zone depends on the type and the preemptible, spot and reserved
# flags. A message that names a zone and those flags is about that (zone, provisioning model,
# accelerator), not about the request as a whole: other zones may offer it.
_ZONE_FLAGS = re.compile(r"\b(?:preemptible|spot|reserved)\s*\((?:true|false)\)", re.I)
_NOT_IN_ZONE = re.compile(
    r"accelerator(?: type)?\s+[\"']?(?P<accel>[\w-]+)[\"']?[^\n]*?\bis not (?:available|offered|supported) in "
    r"zone\s+[\"']?(?P<zone>[a-z]+-[a-z]+\d+-[a-z])\b",
    re.I,
)
_ZONE_PATTERNS = (
    (re.compile(r"no more capacity|stockout|out of capacity|insufficient capacity|ZONE_RESOURCE_POOL_EXHAUSTED", re.I), "stockout"),
    (re.compile(r"insufficient reserved capacity", re.I), "reserved_capacity"),
    (re.compile(r"validUntilDuration|could not be fulfilled before", re.I), "expired_in_queue"),
    (re.compile(r"not supported while in state PREEMPTED|was preempted", re.I), "preempted"),
    (re.compile(r"quota\b.*\b(exhausted|exceeded)\b.*\bin zone\b", re.I), "zone_quota"),
)  # fmt: skip
_REGION = re.compile(r"quota\b.*\b(exhausted|exceeded)|QUOTA_EXCEEDED|limit \d+(\.\d+)? in region", re.I)
_CONFIG_PATTERNS = (
    (re.compile(r"subnetworks?/\S+'? was not found|subnetwork\S* .*not found", re.I), "subnetwork"),
    (re.compile(r"networks?/\S+'? was not found|network\S* .*not found", re.I), "network"),
    (re.compile(r"accelerator type|the accelerator \S+ was not found|acceleratorTypes/\S+'? was not found", re.I), "accelerator"),
    (re.compile(r"runtime version", re.I), "runtime"),
)  # fmt: skip
_CONFIG_FIXES = {
    "network": "TPU_NETWORK names a VPC that does not exist in this project: fix it or leave it empty for 'default'",
    "subnetwork": "TPU_SUBNETWORK does not exist in this region: fix it or leave it empty",
    "accelerator": "check ACCELERATOR_TYPE (TPU API spelling, e.g. v5litepod-1) and that the zone offers it",
    "runtime": "check TPU_RUNTIME_VERSION (v5e: v2-alpha-tpuv5-lite)",
}


def _status_of(status: str | None, rpc_code: int | str | None) -> str | None:
    if status:
        return str(status)
    if isinstance(rpc_code, str) and not rpc_code.isdigit():
        return rpc_code
    try:
        return RPC_CODES.get(int(rpc_code)) if rpc_code is not None else None
    except (TypeError, ValueError):
        return None


def classify_failure(
    message: str,
    *,
    status: str | None = None,
    http_code: int | None = None,
    rpc_code: int | str | None = None,
    reasons: tuple[str, ...] = (),
) -> Failure:
    """Classify a refused create or a FAILED request's ``failedData.error`` by reach (module docstring).

    Args:
        message: Google's error message.
        status: canonical status (``INVALID_ARGUMENT``, ``PERMISSION_DENIED``, ...) when known.
        http_code: HTTP status of a refused call when known.
        rpc_code: ``google.rpc.Code`` number (``failedData.error.code``: 8 RESOURCE_EXHAUSTED, 13
            INTERNAL, ...) or its name.
        reasons: ``google.rpc.ErrorInfo`` reasons from the error's details (``stockout``,
            ``RATE_LIMIT_EXCEEDED``, ...).
    """
    text = message or ""
    status = _status_of(status, rpc_code)
    probe = " ".join((text, *reasons))
    if _RATE_LIMIT.search(probe) or (
        http_code == 429 and not _REGION.search(text) and not _ZONE_PATTERNS[0][0].search(text)
    ):
        return Failure(
            "transient", "rate_limit", text,
            "a per-minute API request quota, not a chip quota: wait a minute and retry (the sweep backs off)",
        )  # fmt: skip
    if _MODEL.search(text):
        return Failure(
            "model",
            "unsupported_model",
            text,
            "the provisioning model is not offered here; try another zone or model",
        )
    # Without the flags the same words are ambiguous (a misspelt or unknown type reads alike), so they
    # stay a configuration error below.
    if (where := _NOT_IN_ZONE.search(text)) and _ZONE_FLAGS.search(text):
        return Failure(
            "model",
            "not_offered_in_zone",
            text,
            f"zone {where['zone']} does not offer {where['accel']} with these provisioning flags "
            "(preemptible / spot / reserved): another zone may; the sweep moves on",
        )
    for pattern, reason in _ZONE_PATTERNS:
        if pattern.search(probe):
            return Failure("zone", reason, text, "capacity is a zone matter: try another zone or later")
    if _REGION.search(probe):
        return Failure(
            "region", "quota", text,
            "quota is exhausted in this region: try another region, delete held requests, or ask for more quota",
        )  # fmt: skip
    if status in ("PERMISSION_DENIED", "UNAUTHENTICATED") or http_code in (401, 403):
        return Failure(
            "config", "permission", text,
            "grant the caller roles/tpu.admin and enable tpu.googleapis.com; check the project id",
        )  # fmt: skip
    for pattern, reason in _CONFIG_PATTERNS:
        if pattern.search(text):
            return Failure("config", reason, text, _CONFIG_FIXES[reason])
    if status in _TRANSIENT_STATUSES or (http_code or 0) >= 500 or _INTERNAL.search(text):
        return Failure(
            "transient", "unavailable", text, "a temporary error on Google's side: try again shortly"
        )
    if status == "RESOURCE_EXHAUSTED":  # a FAILED request out of resources with no finer word: capacity
        return Failure("zone", "stockout", text, "capacity is a zone matter: try another zone or later")
    if status in _CONFIG_STATUSES or (http_code is not None and 400 <= http_code < 500):
        return Failure(
            "config",
            "invalid_request",
            text,
            "the request was refused as invalid: check the settings named in the message",
        )
    return Failure(
        "zone", "unknown", text, "unclassified failure: treated as a zone problem; check the message"
    )


def classify_failed_data(error: dict[str, Any] | None, state: str = "FAILED") -> Failure:
    """`classify_failure` for a queued resource's ``state.failedData.error`` (``code``, ``message``,
    ``details[].reason``); an empty error reads as a zone problem named after ``state``."""
    error = error or {}
    reasons = tuple(
        str(d.get("reason")) for d in error.get("details") or [] if isinstance(d, dict) and d.get("reason")
    )
    return classify_failure(
        error.get("message") or f"request ended {state}", rpc_code=error.get("code"), reasons=reasons
    )


def classify_exception(exc: TpuDevopsError) -> Failure:
    """`classify_failure` for an error raised by `tpu_devops.gcp.tpu` (uses its Google fields)."""
    return classify_failure(
        getattr(exc, "google_message", None) or exc.message,
        status=getattr(exc, "status", None),
        http_code=getattr(exc, "http_code", None),
    )
