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

import functools
from dataclasses import dataclass
from typing import Any

from tpu_devops.config import Settings
from tpu_devops.errors import CloudError, ConfigError, PermissionError_
from tpu_devops.gcp.common import bounded_session, client_options, credentials, is_retryable

COMPUTE_ENGINE_SERVICE = "services/6F81-5844-456A"
ADC_DISCOVERY_BUDGET_S = 4.0  # on GCE the metadata server answers in milliseconds
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


def _to_price(sku: Any) -> SkuPrice | None:  # a billing_v1.Sku (proto-plus message)
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
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from google.cloud import billing_v1

    try:
        client = billing_v1.CloudCatalogClient(
            transport="rest",
            credentials=credentials(settings),
            client_options=client_options(settings, "cloudbilling"),
        )
        bounded_session(getattr(client._transport, "_session", None))
        request = billing_v1.ListSkusRequest(
            parent=COMPUTE_ENGINE_SERVICE, currency_code="USD", page_size=PAGE_SIZE
        )
        pager = client.list_skus(request=request, retry=_retry(deadline_s), timeout=deadline_s)
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
    except auth_exc.GoogleAuthError as exc:  # token refresh failed: offline, or revoked credentials
        raise CloudError(
            f"could not get an access token ({type(exc).__name__}): {_first_line(exc)}",
            field="ADC",
            value="",
            fix="check network access to oauth2.googleapis.com, or run gcloud auth application-default login",
        ) from None
    except (gexc.RetryError, requests.RequestException, OSError) as exc:
        raise CloudError(
            f"Cloud Billing Catalog unreachable ({type(exc).__name__}): {_first_line(exc)}",
            field="cloudbilling.googleapis.com",
            value=COMPUTE_ENGINE_SERVICE,
            fix="check network access to cloudbilling.googleapis.com",
        ) from None


def _first_line(exc: BaseException, limit: int = 200) -> str:
    return (str(exc).splitlines() or [""])[0][:limit]


def _retry(deadline_s: float):  # noqa: ANN202 - google.api_core.retry.Retry, imported lazily
    """Retry 429 / 5xx / read timeouts within ``deadline_s``, but not DNS or connect failures: offline,
    retrying only delays the fallback price (pricing answers from its dated table at once)."""
    import requests
    from google.api_core.retry import Retry

    from tpu_devops.gcp.common import RETRY_INITIAL_S, RETRY_MAXIMUM_S

    def predicate(exc: BaseException) -> bool:
        if isinstance(exc, requests.ConnectionError):  # includes ConnectTimeout and name resolution
            return False
        return is_retryable(exc)

    return Retry(
        predicate=predicate,
        initial=RETRY_INITIAL_S,
        maximum=RETRY_MAXIMUM_S,
        multiplier=2.0,
        timeout=deadline_s,
    )


async def list_tpu_skus(settings: Settings, deadline_s: float = 20.0) -> list[SkuPrice]:
    """Every Compute Engine SKU whose description mentions TPU, priced in USD (all pages).

    Args:
        deadline_s: time budget in seconds for the listing, retries included (429/5xx/read timeouts
            only; DNS and connect failures are not retried). Callers bound the whole call (credentials
            included) with `anyio.fail_after`: the worker thread is abandoned on cancellation, so a
            hung network cannot hold the tool call.
    Raises:
        ConfigError: no ADC. PermissionError_: API disabled / denied. CloudError: token refresh failed,
        unreachable, or other API failures.
    """
    import anyio

    if not settings.gcp_endpoint:
        # Finding ADC off Google Cloud ends with a probe of the GCE metadata server (3 tries x 3 s in
        # google-auth): where the network drops those packets, that alone took 12 s. On GCE it answers
        # in milliseconds, so a short budget only cuts the wait where no credentials will be found.
        try:
            with anyio.fail_after(ADC_DISCOVERY_BUDGET_S):
                await anyio.to_thread.run_sync(
                    functools.partial(_discover_credentials, settings), abandon_on_cancel=True
                )
        except TimeoutError:
            raise ConfigError(
                f"no Application Default Credentials found within {ADC_DISCOVERY_BUDGET_S:g} s "
                "(the GCE metadata server did not answer: not on Google Cloud?)",
                field="ADC",
                value="",
                fix="run gcloud auth application-default login, or set GOOGLE_APPLICATION_CREDENTIALS",
            ) from None
    return await anyio.to_thread.run_sync(
        functools.partial(_list_tpu_skus_blocking, settings, deadline_s), abandon_on_cancel=True
    )


def _discover_credentials(settings: Settings) -> None:
    """Run ADC discovery once (the result is cached by `common.credentials`).

    Raises:
        ConfigError: no ADC.
    """
    from google.auth import exceptions as auth_exc

    try:
        credentials(settings)
    except auth_exc.DefaultCredentialsError as exc:
        raise ConfigError(
            f"no Application Default Credentials: {exc}",
            field="ADC",
            value="",
            fix="run gcloud auth application-default login",
        ) from None
