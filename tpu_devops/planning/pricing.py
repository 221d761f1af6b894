"""TPU prices: live from the Cloud Billing Catalog, a dated fallback table, $/hour and $/M tokens.

Live prices come from Compute Engine's public SKUs (service ``6F81-5844-456A``, `gcp.billing`), per
chip-hour, matched by an *anchored* description pattern and the region in ``serviceRegions``:

- on-demand: ``^TPU v5e running in <city>$`` (usageType ``OnDemand``);
- spot: ``^Preemptible TPU v5e running in <city>$`` (usageType ``Preemptible``: Google prices spot
  TPUs as "Preemptible", DESIGN §3);
- flex-start: ``^(DWS )?Flex[- ]?Start TPU v5e running in <city>$`` (Dynamic Workload Scheduler).

Anchoring keeps out the look-alikes: ``Commitment v1: TPU v5e in ... for 1 Year``, ``Reserved TPU v5e
...``, ``DWS Calendar Mode TPU v5e ...``, other generations (``v5p``) and other regions; rows priced $0
are skipped. The SKU list is cached per process (`clear_cache` resets it).

When the catalog cannot be read, the fallback table answers instead, and every answer says which
source was used. The table is each catalog row's ``fallback_prices`` (today the seed's measured us-west4
v5e prices, DESIGN §3, sources in `tpu_devops.catalog`); it is a fallback, never the primary answer (a
hard-coded 0.12 for v5e was once off by 10x).

Formulas: $/hour = chips x $/chip-hour; $/month (24/7) = $/hour x 730; $/M output tokens =
$/hour / (tok/s x 3600) x 1e6 (seed: $0.5779/h at 1,496.5 tok/s -> $0.107).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import Field

from tpu_devops.catalog import (
    GENERATIONS,
    PROVISIONING_MODELS,
    provisioning_model_name,
    resolve_accelerator_type,
)
from tpu_devops.config import Settings
from tpu_devops.errors import CloudError, ConfigError, InputError, TpuDevopsError
from tpu_devops.host.results import ToolResult

if TYPE_CHECKING:  # at run time the billing adapter is imported only when a live price is asked
    from tpu_devops.gcp.billing import SkuPrice

log = logging.getLogger(__name__)

HOURS_PER_MONTH = 730.0  # Google's billing month (365 x 24 / 12)
WEEKEND_HOURS = 64.0  # Friday 17:00 to Monday 09:00
COLD_START_MIN = 857 / 60  # seed: cold start 857 s (80% XLA compile)
WARM_START_MIN = 497 / 60  # seed: warm start 497 s with the compile cache mounted
FAILED_FETCH_RETRY_S = 300.0
# The whole live lookup (ADC discovery, token refresh, every SKU page) must answer within this budget,
# else the fallback table answers: a hung network must never hold a tool call (MCP clients give up ~60 s).
LIVE_LOOKUP_BUDGET_S = 15.0
MAX_TOKENS_PER_S = 10_000_000.0  # far above any single slice; larger is a unit mistake
MAX_USD_PER_CHIP_HOUR = 1_000.0  # TPU list prices are a few dollars per chip-hour
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")

FALLBACK_DATE = "2026-08"
FALLBACK_SOURCE = "seed build log (xbill9/gemma4-dev, us-west4), DESIGN §3"


def fallback_prices() -> dict[tuple[str, str, str], float]:
    """The fallback table from the catalog rows: (generation, region, provisioning model) -> USD per
    chip-hour."""
    return {
        (gen.name, region, pm): price
        for gen in GENERATIONS.values()
        for region, by_model in gen.fallback_prices.items()
        for pm, price in by_model.items()
    }


# Region -> the city name Google's SKU descriptions use. Regions not listed match any city text.
REGION_CITY = {
    "us-west4": "Las Vegas",
    "us-central1": "Iowa",
    "us-east1": "South Carolina",
    "us-east5": "Columbus",
    "us-south1": "Dallas",
    "europe-west4": "Netherlands",
    "asia-northeast1": "Tokyo",
    "asia-southeast1": "Singapore",
}


def description_pattern(generation: str, provisioning_model: str, region: str) -> re.Pattern[str]:
    """The anchored SKU description regex for one (generation, provisioning model, region)."""
    gen = re.escape(generation)
    city = re.escape(REGION_CITY[region]) if region in REGION_CITY else r"[A-Za-z .()-]+"
    prefix = {
        "on-demand": "",
        "spot": r"Preemptible ",
        "flex-start": r"(?:DWS )?Flex[- ]?Start ",
    }[provisioning_model]
    return re.compile(rf"^{prefix}TPU {gen} running in {city}$", re.IGNORECASE)


@dataclass
class _Cache:
    skus: list[SkuPrice] | None = None
    fetched_at: float = 0.0
    error: str | None = None
    failed_at: float = 0.0


_cache: dict[str, _Cache] = {}
_locks: dict[int, asyncio.Lock] = {}  # one per event loop (tests run several loops)


def clear_cache() -> None:
    """Forget cached SKUs and failures (tests; a long-lived server after a price change)."""
    _cache.clear()


class PriceQuote(ToolResult):
    """A per-chip-hour price and where it came from. ``source``: ``live`` (Billing Catalog),
    ``fallback`` (dated table) or ``given`` (the caller's number). USD."""

    accelerator_type: str
    # the catalog's name for accelerator_type's chip (v5litepod-1 -> v5e): the text spells it out, the
    # structured form has the accelerator type
    generation: str = Field(exclude=True)
    chips: int
    region: str
    provisioning_model: str
    usd_per_chip_hour: float
    usd_per_hour: float
    source: str
    sku_id: str | None = None
    sku_description: str | None = None
    effective_time: str | None = None
    fallback_date: str | None = None
    fallback_source: str | None = None
    notes: list[str] = []

    def label(self) -> str:
        """e.g. ``live Billing Catalog (SKU A1B2-..., 'Preemptible TPU v5e running in Las Vegas')``."""
        if self.source == "live":
            return f"live Billing Catalog (SKU {self.sku_id}, {self.sku_description!r})"
        if self.source == "fallback":
            return f"fallback table dated {self.fallback_date} ({self.fallback_source})"
        return "price given by the caller"


async def _skus(settings: Settings) -> list[SkuPrice]:
    from tpu_devops.gcp import billing

    key = settings.gcp_endpoint or "google"
    lock = _locks.setdefault(id(asyncio.get_running_loop()), asyncio.Lock())
    async with lock:
        entry = _cache.setdefault(key, _Cache())
        if entry.skus is not None:
            return entry.skus
        if entry.error and time.time() - entry.failed_at < FAILED_FETCH_RETRY_S:
            ago = time.time() - entry.failed_at
            raise CloudError(
                f"{entry.error} ({ago:.0f} s ago; retried after {FAILED_FETCH_RETRY_S:.0f} s)",
                field="Cloud Billing Catalog",
                value=None,
                fix="retry in a few minutes",
            )
        try:
            with anyio.fail_after(LIVE_LOOKUP_BUDGET_S):
                entry.skus = await billing.list_tpu_skus(settings, deadline_s=LIVE_LOOKUP_BUDGET_S)
            entry.fetched_at = time.time()
            entry.error = None
            return entry.skus
        except TimeoutError:
            message = f"no answer within {LIVE_LOOKUP_BUDGET_S:.0f} s (network or credentials lookup hung)"
            error: TpuDevopsError = CloudError(
                message, field="Cloud Billing Catalog", fix="check network access"
            )
        except TpuDevopsError as exc:
            error = exc
        except Exception as exc:  # never let a price lookup fail the tool: the table answers instead
            log.warning("Billing Catalog lookup failed unexpectedly", exc_info=True)
            error = CloudError(f"lookup failed ({type(exc).__name__}: {exc})", field="Cloud Billing Catalog")
        entry.error = error.message
        entry.failed_at = time.time()
        raise error


def validate_region(region: str) -> tuple[str, list[str]]:
    """``us-west4`` unchanged; a zone such as ``us-west4-a`` becomes its region with a note.

    Raises:
        InputError: not a region name.
    """
    text = region.strip().lower()
    zone = _ZONE.match(text)
    if zone:
        return zone.group(1), [f"{region!r} is a zone; priced for its region {zone.group(1)!r}"]
    if not _REGION.match(text):
        raise InputError(
            "not a Google Cloud region name",
            field="region",
            value=region,
            fix="pass a region such as us-west4 or us-central1 (prices are per region)",
        )
    return text, []


def validate_provisioning_model(provisioning_model: str) -> str:
    """Canonical ``on-demand`` / ``spot`` / ``flex-start`` (accepts preemptible, flexstart, ...).

    Raises:
        InputError: anything else.
    """
    return _validate(provisioning_model)


def _validate(provisioning_model: str) -> str:
    pm = provisioning_model_name(provisioning_model)
    if pm is None:
        raise InputError(
            "unknown provisioning model",
            field="provisioning_model",
            value=provisioning_model,
            fix=f"use one of {', '.join(PROVISIONING_MODELS)}",
        )
    return pm


async def get_price(
    settings: Settings,
    *,
    accelerator_type: str | None = None,
    region: str | None = None,
    provisioning_model: str | None = None,
    usd_per_chip_hour: float | None = None,
) -> PriceQuote:
    """The price of one slice per hour: live, else fallback (the quote says which).

    Args:
        accelerator_type: e.g. ``v5litepod-1`` (default: ACCELERATOR_TYPE).
        region: e.g. ``us-west4`` (default: GOOGLE_CLOUD_REGION).
        provisioning_model: ``on-demand``, ``spot`` or ``flex-start`` (default: PROVISIONING_MODEL).
        usd_per_chip_hour: use this price instead of looking one up (source ``given``).
    Raises:
        InputError: unknown accelerator type / provisioning model, a region that is not a region name
            (a zone is translated to its region with a note), or a price outside 0..1,000 USD.
        ConfigError: the catalog is unreachable and the fallback table has no row for the combination
            (fix: pass usd_per_chip_hour).
    """
    accel = resolve_accelerator_type(
        accelerator_type or settings.accelerator_type, field_name="accelerator_type"
    )
    gen = accel.generation.name
    region, region_notes = validate_region(region or settings.region)
    pm = _validate(provisioning_model or settings.provisioning_model)
    base: dict[str, Any] = dict(
        accelerator_type=accel.name, generation=gen, chips=accel.chips, region=region, provisioning_model=pm
    )
    notes = ([accel.notice] if accel.notice else []) + region_notes
    if usd_per_chip_hour is not None:
        if not 0 <= usd_per_chip_hour <= MAX_USD_PER_CHIP_HOUR:
            raise InputError(
                f"a price per chip-hour must be between 0 and {MAX_USD_PER_CHIP_HOUR:,.0f} USD",
                field="usd_per_chip_hour",
                value=usd_per_chip_hour,
                fix="pass USD per chip-hour, e.g. 0.5779",
            )
        return PriceQuote(
            **base,
            usd_per_chip_hour=usd_per_chip_hour,
            usd_per_hour=usd_per_chip_hour * accel.chips,
            source="given",
            notes=notes,
        )
    try:
        skus = await _skus(settings)
        match = match_sku(skus, gen, pm, region)
        if match is not None:
            sku, extra = match
            return PriceQuote(
                **base,
                usd_per_chip_hour=sku.unit_price_usd,
                usd_per_hour=sku.unit_price_usd * accel.chips,
                source="live",
                sku_id=sku.sku_id,
                sku_description=sku.description,
                effective_time=sku.effective_time,
                notes=notes + extra,
            )
        reason = (
            f"no Billing Catalog SKU matches {description_pattern(gen, pm, region).pattern!r} in {region}"
        )
    except TpuDevopsError as exc:
        reason = f"Billing Catalog unavailable: {exc.message}"
    log.info("pricing fallback: %s", reason)
    price = accel.generation.fallback_prices.get(region, {}).get(pm)
    if price is None:
        known = ", ".join(f"{g} {p} in {r}" for g, r, p in fallback_prices())
        raise ConfigError(
            f"no price for {accel.name} {pm} in {region}: {reason}; the fallback table only has {known}",
            field="usd_per_chip_hour",
            value=None,
            fix="pass usd_per_chip_hour (from https://cloud.google.com/tpu/pricing), or make the Billing "
            "Catalog reachable (ADC: gcloud auth application-default login; API cloudbilling.googleapis.com)",
        )
    return PriceQuote(
        **base,
        usd_per_chip_hour=price,
        usd_per_hour=price * accel.chips,
        source="fallback",
        fallback_date=FALLBACK_DATE,
        fallback_source=FALLBACK_SOURCE,
        notes=[*notes, reason],
    )


def match_sku(
    skus: list[SkuPrice], generation: str, provisioning_model: str, region: str
) -> tuple[SkuPrice, list[str]] | None:
    """The SKU for (generation, provisioning model, region): anchored description, region listed,
    hourly unit, price > 0. Returns (sku, notes) or None. Several priced matches: the highest price is
    taken (conservative) and noted."""
    pattern = description_pattern(generation, provisioning_model, region)
    notes: list[str] = []
    found: list[SkuPrice] = []
    for s in skus:
        if not pattern.match(s.description.strip()) or region not in s.service_regions:
            continue
        if s.usage_unit != "h":
            continue
        if provisioning_model == "spot" and s.usage_type not in ("Preemptible", ""):
            continue
        if s.unit_price_usd <= 0:
            notes.append(f"skipped $0 SKU {s.sku_id} ({s.description!r})")
            continue
        found.append(s)
    if not found:
        return None
    found.sort(key=lambda s: s.unit_price_usd, reverse=True)
    if len({s.unit_price_usd for s in found}) > 1:
        notes.append(f"{len(found)} SKUs matched with different prices; took the highest ({found[0].sku_id})")
    return found[0], notes


def usd_per_million_tokens(usd_per_hour: float, tokens_per_s: float) -> float:
    """$/M output tokens = $/hour / (tok/s x 3600) x 1e6.

    Raises:
        InputError: tokens_per_s <= 0 or above 10,000,000 (a unit mistake).
    """
    if not 0 < tokens_per_s <= MAX_TOKENS_PER_S:
        raise InputError(
            f"throughput must be positive and at most {MAX_TOKENS_PER_S:,.0f} tokens/s",
            field="tokens_per_s",
            value=tokens_per_s,
            fix="pass measured output tokens per second, e.g. 1496.5",
        )
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6


class CostEstimate(ToolResult):
    """`estimate_deployment_cost` output. USD; hours; tokens per second.

    ``preemption_cost_usd``: one lost node = a cold start (857 s, seed) paid again at this rate;
    ``forgotten_weekend_usd``: a slice left running Friday 17:00 to Monday 09:00 (64 h) — for flex-start
    capped at ``max_run_duration`` because it stops itself.
    """

    price: PriceQuote
    # price.usd_per_hour: the structured form states it there once
    usd_per_hour: float = Field(exclude=True)
    usd_per_month_24x7: float
    duration_hours: float | None = None
    usd_for_duration: float | None = None
    tokens_per_s: float | None = None
    usd_per_million_output_tokens: float | None = None
    cold_start_minutes: float
    preemption_cost_usd: float
    forgotten_weekend_hours: float
    forgotten_weekend_usd: float
    notes: list[str] = []

    def headline(self) -> str:
        line = f"{self.price.accelerator_type} {self.price.provisioning_model} in {self.price.region}: ${self.usd_per_hour:.4f}/h"
        if self.usd_per_million_output_tokens is not None:
            line += f", ${self.usd_per_million_output_tokens:.3f}/M output tokens at {self.tokens_per_s:,.1f} tok/s"
        return f"{line} [{self.price.label()}]"

    def render_text(self) -> str:
        """Headline, the price source, the cost lines, then notes."""
        p = self.price
        lines = [self.headline()]
        lines.append(
            f"price: ${p.usd_per_chip_hour:.4f} per chip-hour x {p.chips} chip(s) = ${p.usd_per_hour:.4f}/h"
            + (f", effective {p.effective_time}" if p.effective_time else "")
            + f" ({p.accelerator_type}, {p.generation}, {p.provisioning_model} in {p.region}; {p.source}"
            + (f" SKU {p.sku_id}: {p.sku_description}" if p.sku_id else "")
            + ")"
        )
        lines.append(f"24/7 month: ${self.usd_per_month_24x7:,.2f}")
        if self.usd_for_duration is not None:
            lines.append(f"{self.duration_hours:g} h: ${self.usd_for_duration:,.2f}")
        if self.usd_per_million_output_tokens is not None:
            lines.append(
                f"per million output tokens at {self.tokens_per_s:,.1f} tok/s: ${self.usd_per_million_output_tokens:.4f}"
            )
        lines.append(
            f"one preemption (cold start {self.cold_start_minutes:g} min): ${self.preemption_cost_usd:,.2f}"
        )
        lines.append(
            f"a forgotten weekend ({self.forgotten_weekend_hours:g} h): ${self.forgotten_weekend_usd:,.2f}"
        )
        lines.extend(f"note: {n}" for n in [*p.notes, *self.notes])
        return "\n".join(lines)


async def estimate_cost(
    settings: Settings,
    *,
    accelerator_type: str | None = None,
    region: str | None = None,
    provisioning_model: str | None = None,
    tokens_per_s: float | None = None,
    duration_hours: float | None = None,
    usd_per_chip_hour: float | None = None,
    cold_start_minutes: float = COLD_START_MIN,
) -> CostEstimate:
    """Hourly, monthly, per-duration, per-million-token, per-preemption and forgotten-weekend costs.

    Args:
        tokens_per_s: aggregate output tokens/s (from run_benchmark).
        duration_hours: a run length to price (0 < h <= 8760).
        cold_start_minutes: minutes a replacement node needs to serve again (default 14.3, seed cold
            start; 8.3 with a warm compile cache).
    Raises:
        InputError: non-positive throughput or duration, or a bad provisioning model / accelerator.
        ConfigError: no live price and no fallback row (pass usd_per_chip_hour).
    """
    if duration_hours is not None and not 0 < duration_hours <= 8760:
        raise InputError(
            "out of range (0, 8760]: more than 0 hours, at most a year",
            field="duration_hours",
            value=duration_hours,
            fix="use a positive number of hours up to 8760, e.g. 3 (omit it for the hourly price only)",
        )
    if not 0 <= cold_start_minutes <= 240:
        raise InputError(
            "out of range",
            field="cold_start_minutes",
            value=cold_start_minutes,
            fix="use 0..240 minutes (seed: 14.3 cold, 8.3 warm)",
        )
    quote = await get_price(
        settings,
        accelerator_type=accelerator_type,
        region=region,
        provisioning_model=provisioning_model,
        usd_per_chip_hour=usd_per_chip_hour,
    )
    per_hour = quote.usd_per_hour
    per_m = usd_per_million_tokens(per_hour, tokens_per_s) if tokens_per_s is not None else None
    notes: list[str] = []
    weekend = WEEKEND_HOURS
    if quote.provisioning_model == "flex-start":
        cap = settings.max_run_duration_s / 3600
        weekend = min(WEEKEND_HOURS, cap)
        notes.append(
            f"flex-start stops itself at MAX_RUN_DURATION ({cap:g} h): a forgotten weekend costs at most that"
        )
    else:
        notes.append(
            f"{quote.provisioning_model} bills until deleted: a forgotten weekend is {WEEKEND_HOURS:g} h of charges"
        )
    if quote.provisioning_model == "spot":
        notes.append(
            "spot nodes can be preempted at any time; each preemption costs a cold start before serving again"
        )
    return CostEstimate(
        price=quote,
        usd_per_hour=round(per_hour, 6),
        usd_per_month_24x7=round(per_hour * HOURS_PER_MONTH, 2),
        duration_hours=duration_hours,
        usd_for_duration=round(per_hour * duration_hours, 4) if duration_hours is not None else None,
        tokens_per_s=tokens_per_s,
        usd_per_million_output_tokens=round(per_m, 6) if per_m is not None else None,
        cold_start_minutes=round(cold_start_minutes, 2),
        preemption_cost_usd=round(per_hour * cold_start_minutes / 60, 4),
        forgotten_weekend_hours=weekend,
        forgotten_weekend_usd=round(per_hour * weekend, 2),
        notes=notes,
    )
