"""Queued resources: create, status, describe, list, and endpoint discovery (`tpu_devops.provisioning.queued`).

Cloud calls go through the real Google clients to the in-process fake (`fake_gcp`)."""

from __future__ import annotations

import pytest

from tests.conftest import gcp_environ
from tests.fakes.gcp.tpu import FakeClock
from tpu_devops.config import load_settings
from tpu_devops.errors import CloudError, ConfigError, NotFoundError
from tpu_devops.provisioning.queued import (
    ListingError,
    SecondTpuError,
    create_queued_resource,
    describe_queued_resource,
    list_queued_resources,
)
from tpu_devops.provisioning.rig import reservation_status
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


@pytest.mark.parametrize(("waiting_s", "active"), [(0, True), (60, False), (3600, False)])
async def test_the_next_step_after_create_follows_the_state(
    fake_gcp, gcp_settings, waiting_s, active
) -> None:
    # A create answered ACTIVE at once must not be told to "poll until ACTIVE".
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.clock = FakeClock()
    fake_gcp.tpu.timings["WAITING_FOR_RESOURCES"] = waiting_s
    created = await create_queued_resource(gcp_settings)
    assert (created.state == "ACTIVE") is active
    assert ("until ACTIVE" in created.next_step) is not active and "get_vllm_endpoint" in created.next_step


async def test_describe_without_a_zone_follows_the_rigs_tpu_to_another_zone(fake_gcp, gcp_settings) -> None:
    """find_tpu may land the rig's TPU outside GOOGLE_CLOUD_ZONE: describe with no zone finds it there, as
    status does; an explicit zone stays literal, and another rig's resource elsewhere is never taken."""
    rig = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    fake_gcp.tpu.add_foreign(
        "europe-west4-b", "gemma4-e2b-x", labels={"managed-by": "tpu-devops", "rig": "other"}
    )
    with pytest.raises(NotFoundError) as none:
        await describe_queued_resource(gcp_settings)
    assert "any zone" in none.value.message
    fake_gcp.tpu.add_foreign("us-east5-a", "gemma4-e2b", labels=rig, state="FAILED")
    fake_gcp.tpu.add_foreign("europe-west4-a", "gemma4-e2b", labels=rig)
    found = await describe_queued_resource(gcp_settings)
    assert (found.zone, found.state, found.ours) == ("europe-west4-a", "ACTIVE", True)
    named = await describe_queued_resource(gcp_settings, queued_resource_id="gemma4-e2b")
    assert named.zone == "europe-west4-a"
    with pytest.raises(NotFoundError):
        await describe_queued_resource(gcp_settings, ZONE)  # the zone given is the zone looked in
    with pytest.raises(NotFoundError):
        await describe_queued_resource(gcp_settings, queued_resource_id="gemma4-e2b-x")  # not this rig's


async def test_describe_and_list_all_zones_say_ours_only_by_this_rigs_label(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "someone-else", labels={"team": "ml"})
    # Named like this rig, labelled for another: not ours. Named anything, labelled for this rig: ours.
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "other-rig"})
    fake_gcp.tpu.add_foreign(
        "europe-west4-a",
        "any-name-2",
        labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"},
        state="FAILED",
    )
    view = await describe_queued_resource(gcp_settings, ZONE, "someone-else")
    assert view.ours is False and view.state == "ACTIVE" and view.owner == "not created by tpu-devops"
    other = await describe_queued_resource(gcp_settings, ZONE)  # the default id, RESOURCE_ID
    assert other.ours is False and "another rig's (rig=other-rig" in other.owner
    mine = await describe_queued_resource(gcp_settings, "europe-west4-a", "any-name-2")
    assert mine.ours and mine.owner.startswith("ours") and "creator unknown" in mine.owner
    with pytest.raises(NotFoundError):
        await describe_queued_resource(gcp_settings, ZONE, "nope")
    listing = await list_queued_resources(gcp_settings, "all")
    assert listing.zones_listed == 44 and {q.id for q in listing.queued_resources} == {
        "someone-else",
        "gemma4-e2b",
        "any-name-2",
    }
    text = listing.render_text()
    assert "(1 of this rig)" in text and "another rig's (rig=other-rig" in text
    ours = await list_queued_resources(gcp_settings, "all", only_ours=True)
    assert [q.id for q in ours.queued_resources] == ["any-name-2"]


async def test_status_finds_ours_in_another_zone_unless_a_zone_is_named(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(
        "us-east5-a", "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    )
    found = await reservation_status(gcp_settings)
    assert found.exists and found.zone == "us-east5-a" and found.state == "ACTIVE"
    named = await reservation_status(gcp_settings, zone=ZONE)
    assert not named.exists and named.zone == ZONE


@pytest.mark.parametrize(
    "foreign_labels",
    [{"managed-by": "tpu-devops", "rig": "someone-else"}, {}, {"rig": "gemma4-e2b"}],
    ids=["another-rig", "unlabelled", "no-managed-by"],
)
@pytest.mark.parametrize(
    ("our_zone", "our_id"), [("us-central1-a", "gemma4-e2b-2"), ("us-east5-a", "gemma4-e2b")]
)
async def test_status_shows_our_tpu_not_a_foreign_one_under_the_configured_id(
    fake_gcp, gcp_settings, foreign_labels, our_zone, our_id
) -> None:
    # Another rig's (or anyone's) queued resource sits in the configured zone under the configured id,
    # while this rig's TPU is elsewhere: status without a zone is about ours, not theirs.
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=foreign_labels)
    fake_gcp.tpu.add_foreign(our_zone, our_id, labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"})
    found = await reservation_status(gcp_settings)
    assert (found.zone, found.queued_resource_id, found.ours) == (our_zone, our_id, True)
    # Naming the zone still shows what is there, marked as not ours.
    named = await reservation_status(gcp_settings, zone=ZONE)
    assert named.exists and named.ours is False and named.zone == ZONE


async def test_status_of_a_foreign_resource_alone_says_it_is_not_ours(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "someone-else"})
    found = await reservation_status(gcp_settings)
    assert found.exists and found.ours is False and found.rig_queued_resources == []


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


async def test_an_internal_only_node_gets_its_internal_address_and_the_tunnel(
    fake_gcp, gcp_settings, tmp_path
) -> None:
    """A node made without external IPs has none (as the API): the answer says how to reach it instead."""
    labels = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=labels, external_ips=False)
    internal_only = load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_EXTERNAL_IP="0"))
    found = await get_vllm_endpoint(internal_only)
    internal = fake_gcp.tpu.nodes[(ZONE, "gemma4-e2b")]["networkEndpoints"][0]["ipAddress"]
    assert found.status == "no_ip" and found.url is None
    assert "TPU_EXTERNAL_IP=0" in found.next_step and f"VLLM_URL=http://{internal}:8000" in found.next_step
    assert "--tunnel-through-iap" in found.next_step and "VLLM_URL=http://127.0.0.1:8000" in found.next_step
    # external IPs expected but none given (an organisation policy): the cause is named differently
    other = await get_vllm_endpoint(gcp_settings)
    assert other.status == "no_ip" and "TPU_EXTERNAL_IP=0" not in other.next_step


# ---- one TPU per rig, whatever the id, failing closed: a second TPU would bill twice -------------

RIG = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}


def _labels(fake_gcp, zone: str, qr_id: str) -> dict[str, str]:
    return fake_gcp.tpu.queued[(zone, qr_id)].body["tpu"]["nodeSpec"][0]["node"]["labels"]


async def test_every_create_carries_the_rig_label_whatever_its_id(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    await create_queued_resource(gcp_settings)
    for zone, qr_id in ((ZONE, "gemma4-e2b-2"), ("us-east1-b", "gemma4-e2b-2"), ("us-east1-b", "other-rig")):
        with pytest.raises(SecondTpuError) as err:
            await create_queued_resource(gcp_settings, zone=zone, queued_resource_id=qr_id)
        assert "gemma4-e2b in us-west4-a" in err.value.message and "allow_second" in err.value.fix
    assert len(fake_gcp.tpu.creates()) == 1
    second = await create_queued_resource(
        gcp_settings, zone="us-east1-b", queued_resource_id="other-rig", allow_second=True
    )
    assert second.created and any(w.startswith("SECOND TPU") for w in second.warnings)
    labels = _labels(fake_gcp, "us-east1-b", "other-rig")
    assert labels["rig"] == "gemma4-e2b" and labels["managed-by"] == "tpu-devops"
    assert labels["tool"] == "create_tpu_queued_resource" and len(labels["created-by"]) == 12
    status = await reservation_status(gcp_settings)  # status, the guard and discovery see both
    assert status.several and {r.split(":")[0] for r in status.rig_queued_resources} == {
        "gemma4-e2b in us-west4-a",
        "other-rig in us-east1-b",
    }
    assert (await get_vllm_endpoint(gcp_settings)).status == "several"


@pytest.mark.parametrize("status", [503, 500, 403])
async def test_a_zone_that_cannot_be_listed_blocks_the_create(
    fake_gcp, gcp_settings, monkeypatch, status
) -> None:
    from tpu_devops.gcp import common

    monkeypatch.setattr(common, "RETRY_DEADLINE_S", 1.0)  # a persistent 503 gives up in 1 s, not 45
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign("asia-east1-b", "gemma4-e2b", labels=RIG)  # in the zone that will not answer
    fake_gcp.tpu.fail_zone("asia-east1-b", status)
    with pytest.raises(ListingError) as err:
        await create_queued_resource(gcp_settings)
    assert err.value.field == "zone" and err.value.value == ["asia-east1-b"]
    assert "nothing was created" in err.value.message
    assert fake_gcp.tpu.creates() == []
    fake_gcp.tpu.fail_zone("asia-east1-b", None)
    with pytest.raises(SecondTpuError):  # once it answers, the TPU there is seen
        await create_queued_resource(gcp_settings)


async def test_the_zone_list_itself_failing_blocks_the_create(fake_gcp, gcp_settings, monkeypatch) -> None:
    from tpu_devops.gcp import common

    monkeypatch.setattr(common, "RETRY_DEADLINE_S", 1.0)
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.fail_next(503, times=1000)
    with pytest.raises(CloudError):
        await create_queued_resource(gcp_settings)
    fake_gcp.tpu._failures.clear()
    assert fake_gcp.tpu.creates() == []


async def test_a_create_that_loses_the_race_deletes_itself(fake_gcp, gcp_settings) -> None:
    """Another server created a request of the rig in another zone while ours was being sent (its
    createTime is earlier): ours is the newer one and withdraws at once."""
    fake_gcp.secrets.put("hf-token", TOKEN)

    def concurrent(rec) -> None:
        if rec.qr_id == "gemma4-e2b":
            fake_gcp.tpu.add_foreign("us-east5-a", "gemma4-e2b", labels=RIG, created_at=rec.created_at - 0.5)

    fake_gcp.tpu.on_create(concurrent)
    result = await create_queued_resource(gcp_settings)
    assert result.withdrawn and not result.created and "gemma4-e2b in us-east5-a" in result.lost_race_to
    assert "DELETED AGAIN" in result.headline()
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None
    assert fake_gcp.tpu.state_of("us-east5-a", "gemma4-e2b") == "ACTIVE"


async def test_the_older_create_keeps_its_request(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.on_create(
        lambda rec: (
            fake_gcp.tpu.add_foreign("us-east5-a", "x", labels=RIG, created_at=rec.created_at + 0.5)
            if rec.qr_id == "gemma4-e2b"
            else None
        )
    )
    result = await create_queued_resource(gcp_settings)
    assert result.created and not result.withdrawn
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"


async def test_equal_create_times_are_ordered_by_zone_then_id(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.on_create(
        lambda rec: (
            fake_gcp.tpu.add_foreign("asia-east1-a", "gemma4-e2b", labels=RIG, created_at=rec.created_at)
            if rec.zone == ZONE
            else None
        )
    )
    result = await create_queued_resource(gcp_settings)  # same createTime, "asia-east1-a" < "us-west4-a"
    assert result.withdrawn and "asia-east1-a" in result.lost_race_to


async def test_a_zone_failing_on_the_recheck_withdraws_the_create(
    fake_gcp, gcp_settings, monkeypatch
) -> None:
    from tpu_devops.gcp import common

    monkeypatch.setattr(common, "RETRY_DEADLINE_S", 1.0)
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.on_create(lambda rec: fake_gcp.tpu.fail_zone("us-east1-c", 503))
    with pytest.raises(ListingError) as err:
        await create_queued_resource(gcp_settings)
    assert "just created in us-west4-a was deleted again" in err.value.message
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None


async def test_a_create_whose_answer_is_lost_is_ours(fake_gcp, gcp_settings, monkeypatch) -> None:
    """Committed, answer lost (503), the retry answered 409 "already exists". Once, the
    requestId makes the retry return the original operation; when every answer is lost, the request that
    now exists with this server's labels is recognised as the one this call made."""
    from tpu_devops.gcp import common

    monkeypatch.setattr(common, "RETRY_DEADLINE_S", 1.0)
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.lose_next_responses(1, only="create_queued")
    once = await create_queued_resource(gcp_settings, zone="us-east1-b", provisioning_model="spot")
    assert once.created and once.state != "UNKNOWN" and len(fake_gcp.tpu.queued) == 1
    fake_gcp.tpu.queued.clear()
    fake_gcp.tpu.lose_next_responses(10_000, only="create_queued")
    lost = await create_queued_resource(gcp_settings, zone="us-east1-b", provisioning_model="spot")
    fake_gcp.tpu.lose_next_responses(0)
    fake_gcp.tpu._lose = 0
    assert lost.created and any("answer to the create was lost" in w for w in lost.warnings)
    assert "already exists" not in lost.headline() and len(fake_gcp.tpu.queued) == 1
