"""Quota scan per quota family, and known flex-start support per zone.

Quota is not capacity, and capacity is not the provisioning model (DESIGN §3): the quota scan reads
the family the provisioning model draws on (on-demand: ``TPUV5sLitepod...``; spot and flex-start: the
Preemptible family), and shows next to it what Google documents about flex-start support and what
this project has observed, so "has quota" and "will accept" are never confused.

Known flex-start support: the zones Google documents per generation are on the catalog row
(``Generation.flex_start_zones``, sources in `tpu_devops.catalog`). Observed by the seed (DESIGN §3): ``v5litepod-1`` flex-start accepted in ``us-west4-a``, refused in
``europe-west4-a`` and ``europe-west4-b``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel

from tpu_devops.config import Settings, require_project
from tpu_devops.host.results import Table, ToolResult
from tpu_devops.provisioning.cloud import call
from tpu_devops.provisioning.requests import check_provisioning_model, or_default
from tpu_devops.provisioning.store import Attempt, ZoneStore, open_store

SEED_OBSERVED: dict[tuple[str, str], dict[str, str]] = {
    ("v5litepod-1", "flex-start"): {
        "us-west4-a": "accepted",
        "europe-west4-a": "refused",
        "europe-west4-b": "refused",
    },
}


@dataclass(frozen=True)
class Support:
    """What is known about a (zone, provisioning model, accelerator) triple."""

    documented: bool
    documented_zones: tuple[str, ...]
    accepted: bool
    refused: bool
    note: str


def known_support(
    accelerator_type: str,
    provisioning_model: str,
    zone: str,
    store: ZoneStore | None = None,
    *,
    history: list[Attempt] | None = None,
) -> Support:
    """Documented flex-start zones + seed observations + this project's history for one zone.

    For spot and on-demand, every zone counts as documented (support is a flex-start question).
    The project's history comes from ``history`` (``store.history(accelerator_type,
    provisioning_model)`` already read) when given, else from ``store``; with neither, only
    documentation and seed observations count.
    """
    from tpu_devops.catalog import resolve_accelerator_type

    gen = resolve_accelerator_type(accelerator_type).generation
    if provisioning_model != "flex-start":
        return Support(True, (), False, False, f"{provisioning_model}: no per-zone model restriction known")
    docs = gen.flex_start_zones
    observed = SEED_OBSERVED.get((accelerator_type, provisioning_model), {}).get(zone)
    accepted = observed == "accepted"
    refused = observed == "refused"
    notes = []
    if zone in docs:
        notes.append(f"documented: {docs[zone]}")
    if observed:
        notes.append(f"seed observed: {observed}")
    if history is None and store is not None:
        history = store.history(accelerator_type, provisioning_model)
    if history is not None:
        for a in history:
            if a.zone != zone:
                continue
            if a.reach == "model":
                refused, accepted = True, False
            elif a.outcome in ("accepted", "active"):
                accepted, refused = True, False
        if refused and not observed == "refused":
            notes.append("refused here before (this project)")
        elif accepted and observed != "accepted":
            notes.append("accepted here before (this project)")
    return Support(zone in docs, tuple(sorted(docs)), accepted, refused, "; ".join(notes) or "no record")


class ZoneQuota(BaseModel):
    """Quota and support for one zone. Limits in chips (None: no entry for that dimension)."""

    zone: str
    zone_limit: int | None
    region_limit: int | None
    enough_for_request: bool
    flex_start_documented: bool | None = None
    known_acceptance: str
    last_attempt: str | None = None
    blocked_until: str | None = None


class QuotaScan(ToolResult):
    """Zones with quota for the family the provisioning model uses. Limits, not usage."""

    accelerator_type: str
    provisioning_model: str
    quota_family: str
    zone_quota_id: str
    region_quota_id: str
    chips_needed: int
    zones: Table[ZoneQuota]
    note: str

    def render_text(self) -> str:
        """Headline, then one line per zone (quota limits, acceptance, last attempt)."""
        lines = [
            self.headline(),
            f"{self.provisioning_model} draws on the {self.quota_family} family; {self.chips_needed} chip(s) "
            f"needed; quota ids: {self.zone_quota_id} / {self.region_quota_id}; {self.note}",
            "",
        ]

        def yes_no(value: bool | None) -> str:
            return "-" if value is None else ("yes" if value else "no")

        lines.append(
            "zone | zone limit | region limit | enough | flex-start documented | acceptance | last attempt | "
            "blocked until"
        )
        for z in self.zones:
            lines.append(
                f"{z.zone} | {z.zone_limit} | {z.region_limit} | {yes_no(z.enough_for_request)} | "
                f"{yes_no(z.flex_start_documented)} | {z.known_acceptance} | {z.last_attempt or '-'} | "
                f"{z.blocked_until or '-'}"
            )
        return "\n".join(lines)

    def headline(self) -> str:
        ok = [z for z in self.zones if z.enough_for_request]
        accept = [
            z.zone
            for z in ok
            if z.known_acceptance.startswith("accepted") or z.known_acceptance.startswith("documented")
        ]
        return (
            f"{len(ok)} zone(s) have {self.quota_family} quota for {self.accelerator_type}; "
            f"known to accept {self.provisioning_model}: {', '.join(accept) or 'none recorded'}"
        )


async def zones_with_quota(
    settings: Settings, provisioning_model: str | None = None, accelerator_type: str | None = None
) -> QuotaScan:
    """Scan Cloud Quotas for the family the provisioning model draws on, per zone, with support and history.

    Raises:
        ConfigError: no project / bad arguments. PermissionError_ / CloudError: the Cloud Quotas API failed.
    """
    from tpu_devops.catalog import resolve_accelerator_type
    from tpu_devops.gcp import quotas

    require_project(settings)
    model = check_provisioning_model(provisioning_model, settings)
    accel = resolve_accelerator_type(
        or_default(accelerator_type, settings.accelerator_type, "accelerator_type")
    )
    zone_id, region_id = accel.quota_ids_for(model)
    family = "on-demand" if model == "on-demand" else "Preemptible (spot and flex-start)"
    limits = await call(quotas.list_tpu_quota_limits, settings)
    zone_limits = {q.location: q.value for q in limits if q.quota_id == zone_id and q.dimension == "zone"}
    region_limits = {
        q.location: q.value for q in limits if q.quota_id == region_id and q.dimension == "region"
    }
    store = open_store(settings)
    history = store.history(accel.name, model)  # read once: three uses per zone below
    now = time.time()
    rows: list[ZoneQuota] = []
    for zone in sorted(zone_limits):
        zl = zone_limits.get(zone)
        rl = region_limits.get(zone.rsplit("-", 1)[0])
        enough = (
            (zl is None or zl < 0 or zl >= accel.chips)
            and (rl is None or rl < 0 or rl >= accel.chips)
            and (zl or 0) != 0
        )
        support = known_support(accel.name, model, zone, history=history)
        if support.refused:
            acceptance = f"refused ({support.note})"
        elif support.accepted:
            acceptance = f"accepted ({support.note})"
        elif support.documented and model == "flex-start":
            acceptance = f"documented ({support.note})"
        else:
            acceptance = "unknown" if model == "flex-start" else "no model restriction"
        hist = [a for a in history if a.zone == zone]
        last = None
        if hist:
            a = hist[-1]
            last = f"{a.outcome} {datetime.fromtimestamp(a.at, UTC).strftime('%Y-%m-%d %H:%M')}Z" + (
                f" ({a.reason})" if a.reason else ""
            )
        blocker = store.blocker(zone, accel.name, model, now, history=history)
        blocked = None
        if blocker is not None:
            blocked = (
                "never (model not offered)"
                if blocker.expires_at is None
                else datetime.fromtimestamp(blocker.expires_at, UTC).isoformat(timespec="minutes")
            )
        rows.append(
            ZoneQuota(
                zone=zone,
                zone_limit=zl,
                region_limit=rl,
                enough_for_request=enough,
                flex_start_documented=support.documented if model == "flex-start" else None,
                known_acceptance=acceptance,
                last_attempt=last,
                blocked_until=blocked,
            )
        )
    return QuotaScan(
        accelerator_type=accel.name,
        provisioning_model=model,
        quota_family=family,
        zone_quota_id=zone_id,
        region_quota_id=region_id,
        chips_needed=accel.chips,
        zones=rows,
        note="quota is a limit, not free capacity, and not a promise that the zone offers this provisioning model",
    )
