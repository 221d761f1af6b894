"""Classifying Google's provisioning failures by reach, after SkyPilot's TPU failover handler (DESIGN §3).

- ``zone``: no capacity / stockout / insufficient reserved capacity, or a request that waited out
  its budget: try another zone; expires.
- ``region``: quota exhausted in a region: skip the region's zones; expires.
- ``model``: the provisioning model is not offered for this accelerator in this zone: never retry
  that (zone, model, accelerator) triple.
- ``config``: network / subnetwork not found, permission denied, invalid accelerator or runtime,
  any other 4xx: a flag is wrong; stop the whole sweep ("failed in every zone" must never hide a typo).
- ``transient``: 429 / 5xx left after retries: try the zone later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpu_devops.errors import TpuDevopsError


@dataclass(frozen=True)
class Failure:
    """A classified provisioning failure. ``reach`` in zone / region / model / config / transient."""

    reach: str
    reason: str  # stockout, quota, unsupported_model, network, permission, accelerator, runtime, ...
    message: str
    fix: str


_ZONE_PATTERNS = (
    (re.compile(r"no more capacity|stockout|out of capacity|insufficient capacity", re.I), "stockout"),
    (re.compile(r"insufficient reserved capacity", re.I), "reserved_capacity"),
    (re.compile(r"validUntilDuration|could not be fulfilled before", re.I), "expired_in_queue"),
)


_REGION_PATTERN = re.compile(r"quota\b.*\b(exhausted|exceeded)|QUOTA_EXCEEDED|limit \d+ in region", re.I)


_MODEL_PATTERN = re.compile(
    r"provisioning model is not supported|is not supported for provisioning model", re.I
)


_CONFIG_PATTERNS = (
    (re.compile(r"subnetworks?/\S+'? was not found|subnetwork\S* .*not found", re.I), "subnetwork"),
    (re.compile(r"networks?/\S+'? was not found|network\S* .*not found", re.I), "network"),
    (re.compile(r"accelerator type", re.I), "accelerator"),
    (re.compile(r"runtime version", re.I), "runtime"),
)


def classify_failure(message: str, *, status: str | None = None, http_code: int | None = None) -> Failure:
    """Classify a create error or a FAILED request's ``failedData.error.message`` by reach.

    Args:
        message: Google's error message.
        status: canonical status (``INVALID_ARGUMENT``, ``PERMISSION_DENIED``, ...) when known.
        http_code: HTTP status when known (``failedData.error.code`` is a gRPC code, not HTTP).
    """
    text = message or ""
    if _MODEL_PATTERN.search(text):
        return Failure(
            "model",
            "unsupported_model",
            text,
            "the provisioning model is not offered here; try another zone or model",
        )
    for pattern, reason in _ZONE_PATTERNS:
        if pattern.search(text):
            return Failure("zone", reason, text, "capacity is a zone matter: try another zone or later")
    if _REGION_PATTERN.search(text):
        return Failure(
            "region",
            "quota",
            text,
            "quota is exhausted in this region: try another region, delete held requests, or ask for more quota",
        )
    if status in ("PERMISSION_DENIED", "UNAUTHENTICATED") or http_code in (401, 403):
        return Failure(
            "config",
            "permission",
            text,
            "grant the caller roles/tpu.admin and enable tpu.googleapis.com; check the project id",
        )
    for pattern, reason in _CONFIG_PATTERNS:
        if pattern.search(text):
            fixes = {
                "network": "TPU_NETWORK names a VPC that does not exist in this project: fix it or leave it empty for 'default'",
                "subnetwork": "TPU_SUBNETWORK does not exist in this region: fix it or leave it empty",
                "accelerator": "check ACCELERATOR_TYPE (TPU API spelling, e.g. v5litepod-1) and that the zone offers it",
                "runtime": "check TPU_RUNTIME_VERSION (v5e: v2-alpha-tpuv5-lite)",
            }
            return Failure("config", reason, text, fixes[reason])
    if (
        status in ("UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED")
        or (http_code or 0) >= 500
        or http_code == 429
    ):
        return Failure(
            "transient", "unavailable", text, "the API was unavailable after retries: try again shortly"
        )
    if status in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND") or (
        http_code is not None and 400 <= http_code < 500
    ):
        return Failure(
            "config",
            "invalid_request",
            text,
            "the request was refused as invalid: check the settings named in the message",
        )
    return Failure(
        "zone", "unknown", text, "unclassified failure: treated as a zone problem; check the message"
    )


def classify_exception(exc: TpuDevopsError) -> Failure:
    """`classify_failure` for an error raised by `tpu_devops.gcp.tpu` (uses its Google fields)."""
    return classify_failure(
        getattr(exc, "google_message", None) or exc.message,
        status=getattr(exc, "status", None),
        http_code=getattr(exc, "http_code", None),
    )
