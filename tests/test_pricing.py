"""Pricing: live Billing Catalog matching (anchored descriptions, region, decoys, $0 rows, paging),
the dated fallback, and the cost formulas against the seed figures (DESIGN §3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gcp import FakeGcp
from tests.fakes.gcp.billing import FakeBilling, sku
from tpu_devops.config import Settings, load_settings
from tpu_devops.errors import ConfigError, InputError
from tpu_devops.planning import pricing

pytestmark = pytest.mark.anyio


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    pricing.clear_cache()
    with FakeGcp() as fake:
        yield fake
    pricing.clear_cache()


def settings_for(gcp: FakeGcp, tmp_path: Path, **env: str) -> Settings:
    base = {"TPU_DEVOPS_GCP_ENDPOINT": gcp.url, "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
    return load_settings(tmp_path / "none.env", environ={**base, **env})


@pytest.mark.parametrize(
    ("model", "price", "description"),
    [
        ("on-demand", 1.20, "TPU v5e running in Las Vegas"),
        ("spot", 0.5779, "Preemptible TPU v5e running in Las Vegas"),
        ("flex-start", 0.60, "DWS Flex Start TPU v5e running in Las Vegas"),
    ],
)
async def test_live_prices_match_the_anchored_sku_in_the_region(
    gcp: FakeGcp, tmp_path: Path, model: str, price: float, description: str
) -> None:
    quote = await pricing.get_price(settings_for(gcp, tmp_path), provisioning_model=model)
    assert quote.source == "live"
    assert quote.usd_per_chip_hour == pytest.approx(price)
    assert quote.sku_description == description
    assert quote.region == "us-west4"
    assert "live Billing Catalog" in quote.label()


async def test_decoys_are_never_taken_and_zero_rows_are_noted(gcp: FakeGcp, tmp_path: Path) -> None:
    quote = await pricing.get_price(settings_for(gcp, tmp_path), provisioning_model="on-demand")
    # Commitment 0.84, reserved 1.08, calendar mode 0.72, v5p 4.20, Iowa 1.10, Netherlands 1.32: none taken.
    assert quote.usd_per_chip_hour == pytest.approx(1.20)
    assert any("$0 SKU" in n for n in quote.notes)


async def test_all_pages_are_read(gcp: FakeGcp, tmp_path: Path) -> None:
    gcp.billing.page_size = 2
    await pricing.get_price(settings_for(gcp, tmp_path), provisioning_model="spot")
    assert gcp.billing.calls == -(-len(gcp.billing.skus) // 2)  # ceil: every page fetched once


async def test_skus_are_cached_per_process(gcp: FakeGcp, tmp_path: Path) -> None:
    s = settings_for(gcp, tmp_path)
    await pricing.get_price(s, provisioning_model="spot")
    calls = gcp.billing.calls
    await pricing.get_price(s, provisioning_model="on-demand")
    assert gcp.billing.calls == calls


async def test_other_regions_and_generations(gcp: FakeGcp, tmp_path: Path) -> None:
    s = settings_for(gcp, tmp_path)
    iowa = await pricing.get_price(s, region="us-central1", provisioning_model="spot")
    assert iowa.usd_per_chip_hour == pytest.approx(0.44)
    v6e = await pricing.get_price(
        s, accelerator_type="v6e-4", region="us-east5", provisioning_model="on-demand"
    )
    assert v6e.usd_per_chip_hour == pytest.approx(2.70)
    assert v6e.chips == 4
    assert v6e.usd_per_hour == pytest.approx(10.80)


async def test_fallback_when_the_catalog_refuses(gcp: FakeGcp, tmp_path: Path) -> None:
    gcp.billing.fail_status = 403
    quote = await pricing.get_price(settings_for(gcp, tmp_path), provisioning_model="spot")
    assert quote.source == "fallback"
    assert quote.usd_per_chip_hour == pytest.approx(0.5779)
    assert quote.fallback_date == pricing.FALLBACK_DATE
    assert "Billing Catalog unavailable" in quote.notes[-1]
    assert "fallback table dated" in quote.label()


async def test_fallback_when_no_sku_matches(tmp_path: Path) -> None:
    pricing.clear_cache()
    with FakeGcp(
        billing=FakeBilling(skus=[sku("X-1", "N2 Instance Core running in Las Vegas", "us-west4", 0.03)])
    ) as gcp:
        quote = await pricing.get_price(settings_for(gcp, tmp_path), provisioning_model="on-demand")
    assert quote.source == "fallback"
    assert quote.usd_per_chip_hour == pytest.approx(1.20)
    assert "no Billing Catalog SKU matches" in quote.notes[-1]


async def test_no_live_price_and_no_fallback_row_says_what_to_pass(gcp: FakeGcp, tmp_path: Path) -> None:
    gcp.billing.fail_status = 403
    with pytest.raises(ConfigError) as err:
        await pricing.get_price(
            settings_for(gcp, tmp_path), region="asia-northeast1", provisioning_model="spot"
        )
    assert err.value.field == "usd_per_chip_hour"
    assert "usd_per_chip_hour" in (err.value.fix or "")


def test_seed_cost_per_million_tokens() -> None:
    # DESIGN §3: $0.5779/h at 1,496.5 tok/s on spot -> $0.107 per million output tokens.
    assert pricing.usd_per_million_tokens(0.5779, 1496.5) == pytest.approx(0.107, abs=5e-4)
    with pytest.raises(InputError) as err:
        pricing.usd_per_million_tokens(0.5779, 0)
    assert err.value.field == "tokens_per_s"


async def test_estimate_cost_lines(gcp: FakeGcp, tmp_path: Path) -> None:
    est = await pricing.estimate_cost(
        settings_for(gcp, tmp_path), provisioning_model="spot", tokens_per_s=1496.5, duration_hours=3
    )
    assert est.price.source == "live"
    assert est.usd_per_hour == pytest.approx(0.5779)
    assert est.usd_per_month_24x7 == pytest.approx(0.5779 * 730, abs=0.01)
    assert est.usd_for_duration == pytest.approx(0.5779 * 3, abs=1e-4)
    assert est.usd_per_million_output_tokens == pytest.approx(0.107, abs=5e-4)
    assert est.preemption_cost_usd == pytest.approx(0.5779 * 857 / 3600, abs=1e-4)
    assert est.forgotten_weekend_hours == 64
    assert est.forgotten_weekend_usd == pytest.approx(0.5779 * 64, abs=0.01)
    assert "$0.107/M" in est.headline()


async def test_flex_start_weekend_is_capped_by_max_run_duration(gcp: FakeGcp, tmp_path: Path) -> None:
    est = await pricing.estimate_cost(
        settings_for(gcp, tmp_path, MAX_RUN_DURATION="4h"), provisioning_model="flex-start"
    )
    assert est.forgotten_weekend_hours == 4
    assert est.forgotten_weekend_usd == pytest.approx(0.60 * 4)


async def test_given_price_and_bad_inputs(gcp: FakeGcp, tmp_path: Path) -> None:
    s = settings_for(gcp, tmp_path)
    given = await pricing.get_price(s, usd_per_chip_hour=0.5, accelerator_type="v5e-4")
    assert given.source == "given"
    assert given.usd_per_hour == pytest.approx(2.0)
    assert given.accelerator_type == "v5litepod-4"
    with pytest.raises(InputError) as err:
        await pricing.get_price(s, provisioning_model="reserved")
    assert err.value.field == "provisioning_model"
    with pytest.raises(InputError) as err:
        await pricing.estimate_cost(s, duration_hours=0)
    # was "use hours between 0 and 8760" for 0 itself (newcomer trial)
    assert "between 0 and" not in err.value.fix and "positive" in err.value.fix
    with pytest.raises(InputError):
        await pricing.get_price(s, usd_per_chip_hour=-1)


def test_description_patterns_are_anchored() -> None:
    on_demand = pricing.description_pattern("v5e", "on-demand", "us-west4")
    assert on_demand.match("TPU v5e running in Las Vegas")
    for decoy in (
        "Preemptible TPU v5e running in Las Vegas",
        "Reserved TPU v5e running in Las Vegas",
        "Commitment v1: TPU v5e in Las Vegas for 1 Year",
        "TPU v5e running in Las Vegas (calendar mode)",
        "TPU v5p running in Las Vegas",
        "TPU v5e running in Iowa",
    ):
        assert not on_demand.match(decoy), decoy
    assert pricing.description_pattern("v5e", "flex-start", "us-west4").match(
        "Flex-start TPU v5e running in Las Vegas"
    )


# ---- regressions found by driving the tools as a new user (tester-fixer pass) ------------------------


async def test_unreachable_catalog_falls_back_with_one_clean_reason(tmp_path: Path) -> None:
    from tests.fakes.openai_server import closed_port_url

    pricing.clear_cache()
    s = load_settings(
        tmp_path / "none.env",
        environ={"TPU_DEVOPS_GCP_ENDPOINT": closed_port_url(), "TPU_DEVOPS_STATE_DIR": str(tmp_path)},
    )
    try:
        first = await pricing.get_price(s, provisioning_model="spot")
        again = await pricing.get_price(s, provisioning_model="on-demand")  # the cached failure
    finally:
        pricing.clear_cache()
    assert first.source == again.source == "fallback"
    assert "Billing Catalog unavailable: Cloud Billing Catalog unreachable" in first.notes[-1]
    # the reason is the message only: no "field = value:" prefixes and no stacked "Fix:" sentences
    assert "Fix:" not in first.notes[-1] and "Fix:" not in again.notes[-1]
    assert "(cached failure)" not in again.notes[-1]


async def test_region_spelling_and_absurd_numbers(gcp: FakeGcp, tmp_path: Path) -> None:
    s = settings_for(gcp, tmp_path)
    zone = await pricing.get_price(s, region="us-west4-a", provisioning_model="spot")
    assert zone.region == "us-west4" and zone.source == "live"
    assert any("is a zone" in n for n in zone.notes)
    for bad in ("mars", "US West 4", "us_west4"):
        with pytest.raises(InputError) as err:
            await pricing.get_price(s, region=bad)
        assert err.value.field == "region" and err.value.value == bad
    with pytest.raises(InputError) as err:
        await pricing.estimate_cost(s, tokens_per_s=1e300)
    assert err.value.field == "tokens_per_s"
    with pytest.raises(InputError) as err:
        await pricing.get_price(s, usd_per_chip_hour=1e12)
    assert err.value.field == "usd_per_chip_hour"


async def test_cost_text_is_short_lines(gcp: FakeGcp, tmp_path: Path) -> None:
    est = await pricing.estimate_cost(
        settings_for(gcp, tmp_path), provisioning_model="spot", tokens_per_s=1496.5
    )
    text = est.render_text()
    assert "per million output tokens at 1,496.5 tok/s: $0.1073" in text
    assert "a forgotten weekend (64 h): $36.99" in text
    assert "usd_per_month_24x7" not in text
