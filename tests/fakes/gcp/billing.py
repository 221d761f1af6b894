"""Fake Cloud Billing Catalog: ``GET /v1/services/{service}/skus`` with paging.

The SKU JSON follows the REST shape of the Cloud Billing Catalog API (``skus[].{name, skuId,
description, category{serviceDisplayName, resourceFamily, resourceGroup, usageType}, serviceRegions,
pricingInfo[].pricingExpression.tieredRates[].unitPrice{currencyCode, units (int64 as a string),
nanos}}``, ``nextPageToken``). Compute Engine is service ``6F81-5844-456A``.

Rows: v5e / v6e TPU chip-hour SKUs for on-demand (``TPU v5e running in Las Vegas``), spot
(``Preemptible TPU v5e running in ...``, usageType ``Preemptible``) and flex-start (``DWS Flex Start
TPU v5e running in ...``), at the seed's us-west4 prices (on-demand $1.20, flex-start $0.60, spot
$0.5779), plus decoys a careless matcher would take: commitments (``Commitment v1: ...``,
usageType ``Commit1Yr``), reserved, calendar mode, a $0 row, other regions, v5p, and non-TPU rows.
The non-seed prices are invented for the fake; only their distinctness matters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

COMPUTE = "6F81-5844-456A"

_CITY = {
    "us-west4": "Las Vegas",
    "us-central1": "Iowa",
    "europe-west4": "Netherlands",
    "us-east5": "Columbus",
}


def sku(
    sku_id: str,
    description: str,
    region: str,
    price: float,
    usage_type: str = "OnDemand",
    group: str = "TPU",
    unit: str = "h",
) -> dict[str, Any]:
    """One SKU in the REST JSON shape (price in USD per ``unit``)."""
    units = int(price)
    nanos = round((price - units) * 1e9)
    return {
        "name": f"services/{COMPUTE}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": group,
            "usageType": usage_type,
        },
        "serviceRegions": [region],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                    "usageUnitDescription": "hour" if unit == "h" else unit,
                    "baseUnit": "s" if unit == "h" else unit,
                    "baseUnitDescription": "second" if unit == "h" else unit,
                    "baseUnitConversionFactor": 3600 if unit == "h" else 1,
                },
                "aggregationInfo": {
                    "aggregationLevel": "ACCOUNT",
                    "aggregationInterval": "MONTHLY",
                    "aggregationCount": 1,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-08-01T00:00:00Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
    }


def default_skus() -> list[dict[str, Any]]:
    """The catalog rows described in the module docstring."""
    lv, ia, nl, co = (_CITY[r] for r in ("us-west4", "us-central1", "europe-west4", "us-east5"))
    return [
        sku("A1B2-0001-N2", f"N2 Instance Core running in {lv}", "us-west4", 0.031611, group="N2Standard"),
        sku(
            "A1B2-0002-CM",
            f"Commitment v1: TPU v5e in {lv} for 1 Year",
            "us-west4",
            0.84,
            usage_type="Commit1Yr",
        ),
        sku("A1B2-0003-RS", f"Reserved TPU v5e running in {lv}", "us-west4", 1.08),
        sku("A1B2-0004-CA", f"DWS Calendar Mode TPU v5e running in {lv}", "us-west4", 0.72),
        sku("A1B2-0005-Z0", f"TPU v5e running in {lv}", "us-west4", 0.0),
        sku("A1B2-0006-OD", f"TPU v5e running in {lv}", "us-west4", 1.20),
        sku(
            "A1B2-0007-SP",
            f"Preemptible TPU v5e running in {lv}",
            "us-west4",
            0.5779,
            usage_type="Preemptible",
        ),
        sku("A1B2-0008-FS", f"DWS Flex Start TPU v5e running in {lv}", "us-west4", 0.60),
        sku("A1B2-0009-IA", f"TPU v5e running in {ia}", "us-central1", 1.10),
        sku(
            "A1B2-0010-IS",
            f"Preemptible TPU v5e running in {ia}",
            "us-central1",
            0.44,
            usage_type="Preemptible",
        ),
        sku("A1B2-0011-NL", f"TPU v5e running in {nl}", "europe-west4", 1.32),
        sku("A1B2-0012-5P", f"TPU v5p running in {lv}", "us-west4", 4.20),
        sku("A1B2-0013-6D", f"TPU v6e running in {co}", "us-east5", 2.70),
        sku(
            "A1B2-0014-6S",
            f"Preemptible TPU v6e running in {co}",
            "us-east5",
            0.945,
            usage_type="Preemptible",
        ),
        sku("A1B2-0015-6F", f"DWS Flex Start TPU v6e running in {co}", "us-east5", 1.35),
        sku(
            "A1B2-0016-6C",
            f"Commitment v1: TPU v6e in {co} for 3 Year",
            "us-east5",
            1.22,
            usage_type="Commit3Yr",
        ),
        sku(
            "A1B2-0017-PD",
            f"Storage PD Capacity in {lv}",
            "us-west4",
            0.044,
            group="PDStandard",
            unit="GiBy.mo",
        ),
    ]


@dataclass
class FakeBilling:
    """State of the fake catalog. ``page_size`` caps every page (forces paging); ``fail_status`` makes
    every call answer that HTTP status with Google's error body; ``calls`` counts list calls."""

    skus: list[dict[str, Any]] = field(default_factory=default_skus)
    page_size: int = 4
    fail_status: int | None = None
    calls: int = 0

    def routes(self) -> list[Route]:
        return [Route("/v1/services/{service}/skus", self._list_skus, methods=["GET"])]

    async def _list_skus(self, request: Request) -> JSONResponse:
        self.calls += 1
        if self.fail_status:
            status = {403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(
                self.fail_status, "UNKNOWN"
            )
            message = (
                "Cloud Billing API has not been used in project 123456789 before or it is disabled."
                if self.fail_status == 403
                else "The service is currently unavailable."
            )
            return JSONResponse(
                {"error": {"code": self.fail_status, "message": message, "status": status}},
                status_code=self.fail_status,
            )
        service = request.path_params["service"]
        if service != COMPUTE:
            return JSONResponse({"skus": []})
        try:
            size = int(request.query_params.get("pageSize") or self.page_size)
            start = int(request.query_params.get("pageToken") or 0)
        except ValueError:
            return JSONResponse(
                {"error": {"code": 400, "message": "Invalid page token.", "status": "INVALID_ARGUMENT"}},
                status_code=400,
            )
        size = min(size, self.page_size)
        page = self.skus[start : start + size]
        body: dict[str, Any] = {"skus": page}
        if start + size < len(self.skus):
            body["nextPageToken"] = str(start + size)
        return JSONResponse(body)
