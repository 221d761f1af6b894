"""Cloud Billing Catalog adapter: the public SKUs of Compute Engine that price TPUs.

Uses ``google.cloud.billing_v1.CloudCatalogClient`` over the REST transport
(``GET /v1/services/{service}/skus`` with ``currencyCode``, ``pageSize``, ``pageToken``; the pager
follows ``nextPageToken``). Compute Engine is service ``6F81-5844-456A``; v5e / v6e TPUs are billed
there per chip-hour. SKU shape (Cloud Billing Catalog API how-to, ``catalog-api``): ``name``, ``skuId``,
``description``, ``category {serviceDisplayName, resourceFamily, resourceGroup, usageType}``,
``serviceRegions [...]``, ``pricingInfo [{effectiveTime, summary, pricingExpression {usageUnit,
usageUnitDescription, baseUnit, tieredRates [{startUsageAmount, unitPrice {currencyCode, units,
nanos}}]}}]``. Only this module imports ``google.cloud.billing``, and only inside functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_devops.config import Settings
from tpu_devops.errors import CloudError, ConfigError, PermissionError_
from tpu_devops.gcp.common import client_options, credentials, retry_policy, run_blocking

COMPUTE_ENGINE_SERVICE = "services/6F81-5844-456A"
PAGE_SIZE = 5000


@dataclass(frozen=True)
class SkuPrice:
    """One SKU reduced to what pricing needs. ``unit_price_usd`` is USD per ``usage_unit`` at the first
    tier (``startUsageAmount`` 0); ``effective_time`` ISO 8601 or None."""

    sku_id: str
    description: str
    usage_type: str
    resource_group: str
    service_regions: tuple[str, ...]
    usage_unit: str
    unit_price_usd: float
    effective_time: str | None


def _to_price(sku: object) -> SkuPrice | None:
    info = list(getattr(sku, "pricing_info", []) or [])
    if not info:
        return None
    latest = info[-1]
    expr = latest.pricing_expression
    rates = sorted(expr.tiered_rates, key=lambda r: r.start_usage_amount)
    if not rates:
        return None
    money = rates[0].unit_price
    if money.currency_code and money.currency_code != "USD":
        return None
    effective = getattr(latest, "effective_time", None)
    return SkuPrice(
        sku_id=sku.sku_id,
        description=sku.description,
        usage_type=sku.category.usage_type,
        resource_group=sku.category.resource_group,
        service_regions=tuple(sku.service_regions),
        usage_unit=expr.usage_unit,
        unit_price_usd=float(money.units) + float(money.nanos) / 1e9,
        effective_time=effective.isoformat() if effective else None,
    )


def _list_tpu_skus_blocking(settings: Settings, deadline_s: float) -> list[SkuPrice]:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from google.cloud import billing_v1

    try:
        client = billing_v1.CloudCatalogClient(
            transport="rest",
            credentials=credentials(settings),
            client_options=client_options(settings, "cloudbilling"),
        )
        request = billing_v1.ListSkusRequest(
            parent=COMPUTE_ENGINE_SERVICE, currency_code="USD", page_size=PAGE_SIZE
        )
        pager = client.list_skus(request=request, retry=retry_policy(deadline_s), timeout=deadline_s)
        out: list[SkuPrice] = []
        for sku in pager:
            if "tpu" not in sku.description.lower():
                continue
            price = _to_price(sku)
            if price is not None:
                out.append(price)
        return out
    except auth_exc.DefaultCredentialsError as exc:
        raise ConfigError(
            f"no Application Default Credentials: {exc}",
            field="ADC",
            value="",
            fix="run gcloud auth application-default login",
        ) from None
    except (gexc.PermissionDenied, gexc.Forbidden) as exc:
        raise PermissionError_(
            f"Cloud Billing Catalog refused the call: {exc.message}",
            field="cloudbilling.googleapis.com",
            value=COMPUTE_ENGINE_SERVICE,
            fix="enable the Cloud Billing API in the project (gcloud services enable cloudbilling.googleapis.com)",
        ) from None
    except gexc.GoogleAPICallError as exc:
        raise CloudError(
            f"Cloud Billing Catalog call failed: {exc}",
            field="cloudbilling.googleapis.com",
            value=COMPUTE_ENGINE_SERVICE,
            fix="retry later; prices fall back to the dated table meanwhile",
        ) from None
    except (gexc.RetryError, OSError) as exc:
        raise CloudError(
            f"Cloud Billing Catalog unreachable: {exc}",
            field="cloudbilling.googleapis.com",
            value=COMPUTE_ENGINE_SERVICE,
            fix="check network access to cloudbilling.googleapis.com",
        ) from None


async def list_tpu_skus(settings: Settings, deadline_s: float = 20.0) -> list[SkuPrice]:
    """Every Compute Engine SKU whose description mentions TPU, priced in USD (all pages).

    Args:
        deadline_s: total time budget in seconds, retries included (429/5xx/timeouts only).
    Raises:
        ConfigError: no ADC. PermissionError_: API disabled / denied. CloudError: other failures or
        unreachable within the deadline.
    """
    return await run_blocking(_list_tpu_skus_blocking, settings, deadline_s)
