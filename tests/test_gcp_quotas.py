"""The Cloud Quotas adapter through the real google-cloud-quotas REST client against FakeQuotas."""

from __future__ import annotations

import pytest

from tests.fakes.gcp.tpu import DEFAULT_ZONES
from tpu_devops.errors import PermissionError_
from tpu_devops.gcp.quotas import list_tpu_quota_limits

PREEMPTIBLE_ZONE = "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"


def test_reads_every_page_and_dimension(fake_gcp, gcp_settings) -> None:
    limits = list_tpu_quota_limits(gcp_settings)
    zone_rows = [q for q in limits if q.quota_id == PREEMPTIBLE_ZONE and q.dimension == "zone"]
    assert sorted(q.location for q in zone_rows) == sorted(DEFAULT_ZONES)
    assert {q.quota_id for q in limits} == set(fake_gcp.quotas.limits)  # 4 ids over 2 pages of 3
    assert any(q.dimension == "region" and q.location == "us-west4" and q.value == 8 for q in limits)
    assert any(q.dimension == "default" for q in limits)


def test_set_limit_is_reported(fake_gcp, gcp_settings) -> None:
    fake_gcp.quotas.set_limit(PREEMPTIBLE_ZONE, "us-west4-a", 0)
    row = next(
        q
        for q in list_tpu_quota_limits(gcp_settings)
        if q.quota_id == PREEMPTIBLE_ZONE and q.location == "us-west4-a"
    )
    assert row.value == 0


def test_503_retried_and_403_typed(fake_gcp, gcp_settings) -> None:
    fake_gcp.quotas.fail_next(503)
    assert list_tpu_quota_limits(gcp_settings)
    other = gcp_settings.model_copy(update={"project": "someone-else"})
    with pytest.raises(PermissionError_) as err:
        list_tpu_quota_limits(other)
    assert "cloudquotas.quotas.get" in err.value.message


def test_403_fix_names_the_quota_permission_or_the_disabled_api(fake_gcp, gcp_settings) -> None:
    other = gcp_settings.model_copy(update={"project": "someone-else"})
    with pytest.raises(PermissionError_) as denied:
        list_tpu_quota_limits(other)
    assert "cloudquotas.quotas.get" in denied.value.fix and "roles/tpu.admin" not in denied.value.fix
    fake_gcp.quotas.disabled = True
    with pytest.raises(PermissionError_) as disabled:
        list_tpu_quota_limits(gcp_settings)
    assert disabled.value.fix == "enable the API: gcloud services enable cloudquotas.googleapis.com"
