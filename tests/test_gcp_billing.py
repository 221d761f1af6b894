"""gcp.billing: the real CloudCatalogClient (REST transport) against the fake catalog: paging, the
unit-price arithmetic (units + nanos), TPU-only filtering and error mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.gcp import FakeGcp
from tpu_devops.config import load_settings
from tpu_devops.errors import CloudError, PermissionError_
from tpu_devops.gcp import billing

pytestmark = pytest.mark.anyio


async def test_lists_every_tpu_sku_across_pages(tmp_path: Path) -> None:
    with FakeGcp() as gcp:
        gcp.billing.page_size = 3
        s = load_settings(tmp_path / "none.env", environ={"TPU_DEVOPS_GCP_ENDPOINT": gcp.url})
        skus = await billing.list_tpu_skus(s)
    assert all("TPU" in sku.description for sku in skus)
    assert len(skus) == sum("TPU" in row["description"] for row in gcp.billing.skus)
    spot = next(sku for sku in skus if sku.description == "Preemptible TPU v5e running in Las Vegas")
    assert spot.unit_price_usd == pytest.approx(0.5779)
    assert spot.usage_type == "Preemptible" and spot.usage_unit == "h"
    assert spot.service_regions == ("us-west4",)
    assert spot.effective_time and spot.effective_time.startswith("2026-08-01")


async def test_permission_denied_and_server_errors_are_typed(tmp_path: Path) -> None:
    with FakeGcp() as gcp:
        s = load_settings(tmp_path / "none.env", environ={"TPU_DEVOPS_GCP_ENDPOINT": gcp.url})
        gcp.billing.fail_status = 403
        with pytest.raises(PermissionError_) as err:
            await billing.list_tpu_skus(s)
        assert "cloudbilling" in (err.value.fix or "")
        gcp.billing.fail_status = 503
        with pytest.raises(CloudError):
            await billing.list_tpu_skus(s, deadline_s=1.0)


async def test_unreachable_endpoint_is_a_typed_error_not_retried(tmp_path: Path) -> None:
    # regression: connect failures were retried for the whole deadline before the price fell back
    from tests.fakes.openai_server import closed_port_url

    s = load_settings(tmp_path / "none.env", environ={"TPU_DEVOPS_GCP_ENDPOINT": closed_port_url()})
    with pytest.raises(CloudError) as err:
        await billing.list_tpu_skus(s, deadline_s=600.0)  # a retry loop would make this test hang
    assert "unreachable" in err.value.message and err.value.fix


def test_connect_failures_are_not_retried() -> None:
    import requests

    retry = billing._retry(10.0)
    assert not retry._predicate(requests.ConnectionError("Name or service not known"))
    assert retry._predicate(requests.ReadTimeout("slow page"))
