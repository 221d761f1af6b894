"""Teardown: destroy and cleanup of our queued resources only (`tpu_devops.teardown`), against the fake."""

from __future__ import annotations

import pytest

from tpu_devops import teardown
from tpu_devops.errors import ConfigError, OwnershipError
from tpu_devops.provisioning.queued import create_queued_resource

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"
ZONE = "us-west4-a"


async def test_destroy_refuses_foreign_and_deletes_ours_node_first(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign(ZONE, "foreign", labels={"managed-by": "tpu-devops", "rig": "another-rig"})
    with pytest.raises(OwnershipError):
        await teardown.destroy_queued_resource(
            gcp_settings, queued_resource_id="foreign", dry_run=False, confirmed=True
        )
    await create_queued_resource(gcp_settings)
    plan = await teardown.destroy_queued_resource(gcp_settings)
    assert plan.dry_run and [s.action for s in plan.steps] == [
        "delete_node", "delete_queued_resource", "delete_firewall_rule",  # the rig's last TPU: its rule goes too
    ]  # fmt: skip
    assert fake_gcp.compute.firewalls  # the dry run deleted nothing
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"
    with pytest.raises(ConfigError) as err:
        await teardown.destroy_queued_resource(gcp_settings, dry_run=False, confirmed=False)
    assert err.value.field == "confirm"
    done = await teardown.destroy_queued_resource(gcp_settings, dry_run=False, confirmed=True)
    assert done.executed and all(s.done for s in done.steps)
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None
    assert fake_gcp.tpu.state_of(ZONE, "foreign") == "ACTIVE"
    assert fake_gcp.compute.firewalls == {}


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
