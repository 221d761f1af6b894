"""The value types every layer shares, one rule each: zone, region, resource id, node id, provisioning
model, durations.

`tpu_devops.config` (``tpu.env``), the tool arguments (`tpu_devops.tools.args`) and the domain
(`tpu_devops.provisioning.requests`, `tpu_devops.logs.sources`) all call these, so a zone means the same
everywhere and a fix to a rule covers every place that reads one. Each check returns the normalised value
or raises `tpu_devops.errors.ConfigError` naming the field it was given (a setting's variable or a tool's
argument), the value and the fix.

Forms (sources):
- zone ``<region>-<letter>`` and region ``<continent>-<area><digit>`` (Compute Engine regions and zones
  reference: ``us-west4-a`` is zone a of region ``us-west4``);
- TPU node / queued resource id: a lowercase letter, then lowercase letters, digits and hyphens, not ending
  in a hyphen, at most 61 characters (what the TPU API accepts for ``nodeId`` / ``queuedResourceId``:
  RFC 1035 labels; 63 minus the ``-<n>`` suffix some tools append);
- provisioning models ``flex-start``, ``spot``, ``on-demand`` and their other spellings (the API's
  ``FLEX_START`` / ``STANDARD``, gcloud's older ``preemptible`` for spot);
- durations ``30m`` / ``4h`` / ``2d`` or plain seconds.
"""

from __future__ import annotations

import re

from tpu_devops.errors import ConfigError

ZONE_RE = re.compile(r"^([a-z]+-[a-z]+\d+)-([a-z])$")
REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+$")
RESOURCE_ID_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,59}[a-z0-9])?$")
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}

PROVISIONING_MODELS = ("flex-start", "spot", "on-demand")
_PROVISIONING_SPELLINGS = {
    **{m: m for m in PROVISIONING_MODELS},
    "flexstart": "flex-start",
    "preemptible": "spot",
    "ondemand": "on-demand",
    "standard": "on-demand",
}


def check_zone(value: str, field: str = "zone") -> str:
    """A zone name (``us-west4-a``), stripped.

    Raises:
        ConfigError: not of the form region-letter (names ``field``).
    """
    zone = (value or "").strip()
    if not ZONE_RE.match(zone):
        raise ConfigError(
            "not a zone (region-letter)", field=field, value=value, fix="use a zone such as us-west4-a"
        )
    return zone


def region_of(zone: str) -> str:
    """The region of a well-formed zone (``us-west4-a`` -> ``us-west4``)."""
    return zone.rsplit("-", 1)[0]


def check_region(value: str, field: str = "region") -> str:
    """A region name (``us-west4``), stripped.

    Raises:
        ConfigError: not a region (names ``field``).
    """
    region = (value or "").strip()
    if not REGION_RE.match(region):
        raise ConfigError("not a region", field=field, value=value, fix="use a region such as us-west4")
    return region


def check_resource_id(value: str, field: str = "queued_resource_id") -> str:
    """A TPU queued resource / node id (``gemma4-e2b``), stripped.

    Raises:
        ConfigError: not a valid id (names ``field``).
    """
    rid = (value or "").strip()
    if not RESOURCE_ID_RE.match(rid):
        raise ConfigError(
            "not a valid TPU resource id",
            field=field,
            value=value,
            fix="use lowercase letters, digits and hyphens, starting with a letter (max 61), e.g. gemma4-e2b",
        )
    return rid


def check_node_id(value: str, field: str = "node") -> str:
    """A TPU node or queued resource id as a log filter names it (the resource id form, or a node id
    ``<id>-<suffix>`` up to 62 characters). Raises `ConfigError` naming ``field``."""
    if not re.match(r"^[a-z][-a-z0-9]{0,61}$", value or ""):
        raise ConfigError(
            "not a TPU node or queued resource id",
            field=field,
            value=value,
            fix="e.g. gemma4-e2b (see RESOURCE_ID)",
        )
    return value


def provisioning_model_name(text: str) -> str | None:
    """This server's name (one of `PROVISIONING_MODELS`) for a provisioning model spelling, ignoring case,
    surrounding spaces and ``_`` vs ``-`` (``FLEX_START``, ``flexstart``, ``preemptible``, ``standard``);
    None when it names none of them."""
    return _PROVISIONING_SPELLINGS.get(text.strip().lower().replace("_", "-"))


def check_provisioning_model(value: str, field: str = "provisioning_model") -> str:
    """`provisioning_model_name` of ``value``.

    Raises:
        ConfigError: it names no provisioning model (names ``field``).
    """
    name = provisioning_model_name(value or "")
    if name is None:
        raise ConfigError(
            "unknown provisioning model",
            field=field,
            value=value,
            fix=f"use one of {', '.join(PROVISIONING_MODELS)}",
        )
    return name


def parse_duration(value: str, *, field: str, minimum_s: int = 0, maximum_s: int | None = None) -> int:
    """``30m``, ``4h``, ``2d`` or plain seconds, in seconds.

    Raises:
        ConfigError: not a duration, or outside [minimum_s, maximum_s] (names ``field``).
    """
    text = str(value).strip().lower()
    if text.isdigit():
        seconds = int(text)
    else:
        m = _DURATION.match(text)
        if not m:
            raise ConfigError(
                "not a duration", field=field, value=value, fix="write it as 30m, 4h or 2d (s, m, h, d units)"
            )
        seconds = int(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds < minimum_s or (maximum_s is not None and seconds > maximum_s):
        hi = "" if maximum_s is None else f" and at most {maximum_s // 3600}h"
        raise ConfigError(
            f"duration {seconds}s is out of range",
            field=field,
            value=value,
            fix=f"use at least {minimum_s // 60}m{hi}",
        )
    return seconds
