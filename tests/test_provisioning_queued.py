"""Queued resources: create, status, describe, list, and endpoint discovery (`tpu_devops.provisioning.queued`).

Cloud calls go through the real Google clients to the in-process fake (`fake_gcp`)."""

from __future__ import annotations

import pytest

from tests.conftest import gcp_environ
from tests.fakes.gcp.tpu import FakeClock
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError, NotFoundError
from tpu_devops.provisioning.queued import (
    create_queued_resource,
    describe_queued_resource,
    list_queued_resources,
    reservation_status,
)
from tpu_devops.serving.endpoint import get_vllm_endpoint

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"
ZONE = "us-west4-a"


async def test_create_refuses_without_hf_secret(fake_gcp, gcp_settings) -> None:
    with pytest.raises(ConfigError) as err:
        await create_queued_resource(gcp_settings)
    assert err.value.field == "HF_SECRET_ID" and "save_hf_token" in err.value.fix
    assert fake_gcp.tpu.creates() == []


async def test_create_then_status_then_existing_is_reported(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    clock = FakeClock()
    fake_gcp.tpu.clock = clock
    fake_gcp.tpu.timings["WAITING_FOR_RESOURCES"] = 60
    created = await create_queued_resource(gcp_settings)
    assert created.created and created.state in ("ACCEPTED", "WAITING_FOR_RESOURCES")
    status = await reservation_status(gcp_settings)
    assert status.state == "WAITING_FOR_RESOURCES" and status.endpoint_url is None
    clock.advance(60)
    status = await reservation_status(gcp_settings)
    assert status.state == "ACTIVE" and status.endpoint_url == f"http://{fake_gcp.tpu.external_ip}:8000"
    assert status.expires_in_s is not None and status.ours
    again = await create_queued_resource(gcp_settings)
    assert again.created is False and again.state == "ACTIVE"
    assert len(fake_gcp.tpu.creates()) == 1
    sent = fake_gcp.tpu.creates()[0]["body"]["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"]
    assert TOKEN not in sent and "hf-token" in sent


async def test_describe_and_list_all_zones(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "someone-else", labels={"team": "ml"})
    fake_gcp.tpu.add_foreign(
        "europe-west4-a", "ours-failed", labels={"managed-by": "tpu-devops", "rig": "ours-failed"}
    )
    view = await describe_queued_resource(gcp_settings, ZONE, "someone-else")
    assert view.ours is False and view.state == "ACTIVE"
    with pytest.raises(NotFoundError):
        await describe_queued_resource(gcp_settings, ZONE, "nope")
    listing = await list_queued_resources(gcp_settings, "all")
    assert listing.zones_listed == 44 and {q.id for q in listing.queued_resources} == {
        "someone-else",
        "ours-failed",
    }
    ours = await list_queued_resources(gcp_settings, "all", only_ours=True)
    assert [q.id for q in ours.queued_resources] == ["ours-failed"]


async def test_status_finds_ours_in_another_zone_unless_a_zone_is_named(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(
        "us-east5-a", "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    )
    found = await reservation_status(gcp_settings)
    assert found.exists and found.zone == "us-east5-a" and found.state == "ACTIVE"
    named = await reservation_status(gcp_settings, zone=ZONE)
    assert not named.exists and named.zone == ZONE


async def test_listing_one_zone_keeps_the_typed_error_and_names_the_zone(fake_gcp, gcp_settings) -> None:
    with pytest.raises(NotFoundError) as err:
        await list_queued_resources(gcp_settings, "us-west9-z")  # a zone the project does not offer
    assert err.value.field == "zone" and err.value.value == "us-west9-z" and err.value.fix


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
