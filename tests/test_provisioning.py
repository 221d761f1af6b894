"""Provisioning: classification, request building, plan, create, describe/list/status, teardown, endpoint.

Cloud calls go through the real Google clients to the in-process fake (`fake_gcp`).
"""

from __future__ import annotations

import pytest

from tests.conftest import gcp_environ
from tests.fakes.gcp.tpu import FakeClock
from tpu_devops import provisioning as prov
from tpu_devops import teardown
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError, NotFoundError, OwnershipError
from tpu_devops.serving.endpoint import get_vllm_endpoint

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"
ZONE = "us-west4-a"


@pytest.mark.parametrize(
    ("message", "status", "code", "reach", "reason"),
    [
        (
            'There is no more capacity in the zone "us-west4-b"; you can try in another zone',
            None,
            None,
            "zone",
            "stockout",
        ),
        ("Insufficient reserved capacity for the request", None, None, "zone", "reserved_capacity"),
        (
            "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. Limit 4 in region us-west4",
            None,
            None,
            "region",
            "quota",
        ),
        (
            'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1" in location "europe-west4-a".',
            "INVALID_ARGUMENT",
            400,
            "model",
            "unsupported_model",
        ),
        (
            "The resource 'projects/p/global/networks/nope' was not found",
            "NOT_FOUND",
            404,
            "config",
            "network",
        ),
        (
            "Permission 'tpu.queuedResources.create' denied on resource",
            "PERMISSION_DENIED",
            403,
            "config",
            "permission",
        ),
        (
            'Accelerator type "v5e-1" is not available in zone "us-west4-a".',
            "INVALID_ARGUMENT",
            400,
            "config",
            "accelerator",
        ),
        ("Runtime version v2-alpha-tpuv9 is invalid", "INVALID_ARGUMENT", 400, "config", "runtime"),
        ("The service is currently unavailable.", "UNAVAILABLE", 503, "transient", "unavailable"),
        ("something odd and new", "INVALID_ARGUMENT", 400, "config", "invalid_request"),
    ],
)
def test_classify_failure_by_reach(
    message: str, status: str | None, code: int | None, reach: str, reason: str
) -> None:
    failure = prov.classify_failure(message, status=status, http_code=code)
    assert (failure.reach, failure.reason) == (reach, reason)
    assert failure.fix


def test_build_request_per_provisioning_model(gcp_settings) -> None:
    flex = prov.build_request(
        gcp_settings, zone=ZONE, qr_id="r1", provisioning_model="flex-start", startup_script="#!/bin/bash"
    )
    node = flex["tpu"]["nodeSpec"][0]["node"]
    assert node["schedulingConfig"] == {"provisioningModel": "FLEX_START"}
    assert flex["runDuration"] == {"maxRunDuration": "14400s"}  # MAX_RUN_DURATION default 4h
    assert node["labels"] == {"managed-by": "tpu-devops", "rig": "r1"}
    assert node["metadata"] == {"startup-script": "#!/bin/bash"}
    spot = prov.build_request(
        gcp_settings, zone=ZONE, qr_id="r1", provisioning_model="spot", startup_script=""
    )
    assert spot["spot"] == {} and "runDuration" not in spot
    assert "schedulingConfig" not in spot["tpu"]["nodeSpec"][0]["node"]
    od = prov.build_request(
        gcp_settings,
        zone=ZONE,
        qr_id="r1",
        provisioning_model="on-demand",
        startup_script="",
        valid_until_duration_s=600,
    )
    assert "spot" not in od and od["queueingPolicy"] == {"validUntilDuration": "600s"}


async def test_plan_shows_request_command_price_and_warnings(fake_gcp, tmp_path) -> None:
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_NETWORK="my-vpc"))
    plan = await prov.plan_queued_resource(settings, zone="europe-west4-a")
    assert plan.request["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"].startswith(
        "<startup script:"
    )
    assert (
        "--provisioning-model=flex-start" in plan.gcloud_command and "--network=my-vpc" in plan.gcloud_command
    )
    # No flex-start price for europe-west4 (the catalog has none, nor the fallback table): said so, and
    # never the us-west4 figure in its place.
    assert plan.usd_per_hour is None and plan.max_cost_usd is None
    assert plan.price_source.startswith("price unknown for europe-west4")
    text = " ".join(plan.warnings)
    assert "known to refuse flex-start" in text and "network set" in text and "price unknown" in text
    here = await prov.plan_queued_resource(settings, zone="us-west4-a")
    assert here.usd_per_hour and here.max_cost_usd == pytest.approx(here.usd_per_hour * 4, rel=0.01)
    assert here.price_source.startswith("us-west4: live Billing Catalog")
    spot = await prov.plan_queued_resource(settings, provisioning_model="spot")
    assert spot.stops_billing.startswith("WARNING: spot never stops by itself")
    assert fake_gcp.tpu.creates() == []  # a plan sends nothing


async def test_plan_refuses_bad_arguments(gcp_settings) -> None:
    with pytest.raises(ConfigError) as err:
        await prov.plan_queued_resource(gcp_settings, zone="us-west4")
    assert err.value.field == "zone"
    with pytest.raises(ConfigError) as err:
        await prov.plan_queued_resource(gcp_settings, max_run_duration_s=60)
    assert err.value.field == "max_run_duration_s"
    with pytest.raises(ConfigError) as err:
        await prov.plan_queued_resource(gcp_settings, provisioning_model="reserved")
    assert err.value.field == "provisioning_model"


async def test_create_refuses_without_hf_secret(fake_gcp, gcp_settings) -> None:
    with pytest.raises(ConfigError) as err:
        await prov.create_queued_resource(gcp_settings)
    assert err.value.field == "HF_SECRET_ID" and "save_hf_token" in err.value.fix
    assert fake_gcp.tpu.creates() == []


async def test_create_then_status_then_existing_is_reported(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    clock = FakeClock()
    fake_gcp.tpu.clock = clock
    fake_gcp.tpu.timings["WAITING_FOR_RESOURCES"] = 60
    created = await prov.create_queued_resource(gcp_settings)
    assert created.created and created.state in ("ACCEPTED", "WAITING_FOR_RESOURCES")
    status = await prov.reservation_status(gcp_settings)
    assert status.state == "WAITING_FOR_RESOURCES" and status.endpoint_url is None
    clock.advance(60)
    status = await prov.reservation_status(gcp_settings)
    assert status.state == "ACTIVE" and status.endpoint_url == f"http://{fake_gcp.tpu.external_ip}:8000"
    assert status.expires_in_s is not None and status.ours
    again = await prov.create_queued_resource(gcp_settings)
    assert again.created is False and again.state == "ACTIVE"
    assert len(fake_gcp.tpu.creates()) == 1
    sent = fake_gcp.tpu.creates()[0]["body"]["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"]
    assert TOKEN not in sent and "hf-token" in sent


async def test_describe_and_list_all_zones(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "someone-else", labels={"team": "ml"})
    fake_gcp.tpu.add_foreign(
        "europe-west4-a", "ours-failed", labels={"managed-by": "tpu-devops", "rig": "ours-failed"}
    )
    view = await prov.describe_queued_resource(gcp_settings, ZONE, "someone-else")
    assert view.ours is False and view.state == "ACTIVE"
    with pytest.raises(NotFoundError):
        await prov.describe_queued_resource(gcp_settings, ZONE, "nope")
    listing = await prov.list_queued_resources(gcp_settings, "all")
    assert listing.zones_listed == 44 and {q.id for q in listing.queued_resources} == {
        "someone-else",
        "ours-failed",
    }
    ours = await prov.list_queued_resources(gcp_settings, "all", only_ours=True)
    assert [q.id for q in ours.queued_resources] == ["ours-failed"]


async def test_destroy_refuses_foreign_and_deletes_ours_node_first(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign(ZONE, "foreign", labels={"managed-by": "tpu-devops", "rig": "another-rig"})
    with pytest.raises(OwnershipError):
        await teardown.destroy_queued_resource(
            gcp_settings, queued_resource_id="foreign", dry_run=False, confirmed=True
        )
    await prov.create_queued_resource(gcp_settings)
    plan = await teardown.destroy_queued_resource(gcp_settings)
    assert plan.dry_run and [s.action for s in plan.steps] == ["delete_node", "delete_queued_resource"]
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"
    with pytest.raises(ConfigError) as err:
        await teardown.destroy_queued_resource(gcp_settings, dry_run=False, confirmed=False)
    assert err.value.field == "confirm"
    done = await teardown.destroy_queued_resource(gcp_settings, dry_run=False, confirmed=True)
    assert done.executed and all(s.done for s in done.steps)
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None
    assert fake_gcp.tpu.state_of(ZONE, "foreign") == "ACTIVE"


async def test_manage_cleanup_deletes_only_our_failed_requests(fake_gcp, gcp_settings) -> None:
    labels = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=labels, state="FAILED")
    fake_gcp.tpu.add_foreign("us-east5-a", "gemma4-e2b", labels=labels, state="SUSPENDED")
    fake_gcp.tpu.add_foreign("us-east5-a", "neighbour", labels={"team": "x"}, state="FAILED")
    plan = await teardown.manage_queued_resources(gcp_settings, action="cleanup")
    assert sorted(s.zone for s in plan.steps) == ["us-east5-a", ZONE] and all(
        s.action == "delete_queued_resource" for s in plan.steps
    )
    assert any("neighbour" in x for x in plan.left_alone)
    await teardown.manage_queued_resources(gcp_settings, action="cleanup", dry_run=False, confirmed=True)
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None
    assert fake_gcp.tpu.state_of("us-east5-a", "neighbour") == "FAILED"
    with pytest.raises(ConfigError):
        await teardown.manage_queued_resources(gcp_settings, action="nuke")


async def test_provisioning_request_cannot_be_deleted(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(
        ZONE, "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"}, state="PROVISIONING"
    )
    fake_gcp.tpu.timings["PROVISIONING"] = 10_000
    result = await teardown.destroy_queued_resource(gcp_settings, dry_run=False, confirmed=True)
    assert result.steps == [] and result.refused


async def test_endpoint_discovery_none_waiting_active_several(fake_gcp, gcp_settings, tmp_path) -> None:
    assert (await get_vllm_endpoint(gcp_settings)).status == "none"
    labels = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    fake_gcp.tpu.timings["WAITING_FOR_RESOURCES"] = 10_000
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=labels, state="WAITING_FOR_RESOURCES")
    waiting = await get_vllm_endpoint(gcp_settings)
    assert waiting.status == "not_ready" and waiting.url is None and "queued" in waiting.next_step
    fake_gcp.tpu.queued.clear()
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=labels)
    fake_gcp.tpu.add_foreign(ZONE, "someone", labels={"team": "x"})
    found = await get_vllm_endpoint(gcp_settings)
    assert found.status == "discovered" and found.url == f"http://{fake_gcp.tpu.external_ip}:8000"
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b-2", labels=labels)
    assert (await get_vllm_endpoint(gcp_settings)).status == "several"
    explicit = load_settings(environ=gcp_environ(fake_gcp, tmp_path, VLLM_URL="http://10.1.2.3:8000"))
    assert (await get_vllm_endpoint(explicit)).url == "http://10.1.2.3:8000"


async def test_status_finds_ours_in_another_zone_unless_a_zone_is_named(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(
        "us-east5-a", "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    )
    found = await prov.reservation_status(gcp_settings)
    assert found.exists and found.zone == "us-east5-a" and found.state == "ACTIVE"
    named = await prov.reservation_status(gcp_settings, zone=ZONE)
    assert not named.exists and named.zone == ZONE


@pytest.mark.anyio
async def test_plan_without_a_project_shows_a_placeholder_and_says_so(tmp_path) -> None:
    from tpu_devops.config import load_settings
    from tpu_devops.provisioning import PLACEHOLDER_PROJECT, plan_queued_resource

    settings = load_settings(tmp_path / "none.env", environ={"TPU_DEVOPS_STATE_DIR": str(tmp_path)})
    plan = await plan_queued_resource(settings, zone="us-west4-a", provisioning_model="flex-start")
    assert PLACEHOLDER_PROJECT in plan.request_url
    assert any("GOOGLE_CLOUD_PROJECT is not set" in w for w in plan.warnings)
    assert f"--project={PLACEHOLDER_PROJECT}" in plan.gcloud_command


async def test_listing_one_zone_keeps_the_typed_error_and_names_the_zone(fake_gcp, gcp_settings) -> None:
    with pytest.raises(NotFoundError) as err:
        await prov.list_queued_resources(gcp_settings, "us-west9-z")  # a zone the project does not offer
    assert err.value.field == "zone" and err.value.value == "us-west9-z" and err.value.fix
