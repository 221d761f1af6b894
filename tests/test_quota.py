"""Known flex-start support and the quota scan (`tpu_devops.provisioning.quota`)."""

from __future__ import annotations

import pytest

from tpu_devops.provisioning.quota import known_support, zones_with_quota
from tpu_devops.provisioning.store import ZoneStore

pytestmark = pytest.mark.anyio
ACC = "v5litepod-1"


def test_known_support_combines_docs_seed_and_history(tmp_path) -> None:
    assert known_support(ACC, "flex-start", "us-central1-a").documented
    assert known_support(ACC, "flex-start", "us-west4-a").accepted
    assert known_support(ACC, "flex-start", "europe-west4-b").refused
    store = ZoneStore(tmp_path)
    store.record(
        zone="asia-east1-a",
        accelerator_type=ACC,
        provisioning_model="flex-start",
        outcome="refused",
        reach="model",
    )
    assert known_support(ACC, "flex-start", "asia-east1-a", store).refused
    assert not known_support(ACC, "spot", "europe-west4-b").refused


async def test_quota_scan_reads_the_family_of_the_provisioning_model(fake_gcp, gcp_settings) -> None:
    fake_gcp.quotas.set_limit("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", "us-west4-a", 0)
    spot = await zones_with_quota(gcp_settings, "spot")
    assert spot.zone_quota_id == "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"
    row = next(z for z in spot.zones if z.zone == "us-west4-a")
    assert row.zone_limit == 0 and not row.enough_for_request
    od = await zones_with_quota(gcp_settings, "on-demand")
    assert od.zone_quota_id == "TPUV5sLitepodPerProjectPerZoneForTPUAPI"
    assert next(z for z in od.zones if z.zone == "us-west4-a").enough_for_request
    flex = await zones_with_quota(gcp_settings, "flex-start")
    accept = {z.zone: z.known_acceptance for z in flex.zones}
    assert accept["us-central1-a"].startswith("documented") and accept["europe-west4-a"].startswith("refused")
    assert len(flex.zones) == 44
