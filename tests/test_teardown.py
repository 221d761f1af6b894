"""Teardown (`tpu_devops.provisioning.teardown`) against the fake: only this rig's resources, wherever they are, and
only when a person confirmed it or the operator gave the rig a standing permission beforehand: never the
model alone, whatever it replays (`tpu_devops.host.confirmation`).

The confirmation outcomes are the SDK's own (`mcp.server.elicitation`): `NO_ELICITATION` is what the
resolver gives on a host that cannot ask; the MCP-level tests (test_provisioning_guards_mcp) drive the
same paths through a real client with and without elicitation. Tests of the deletion mechanics (zones,
firewall rule, tokens bound to a plan) run under the standing permission (`unattended`).
"""

from __future__ import annotations

import pytest
from mcp.server.elicitation import AcceptedElicitation, CancelledElicitation, DeclinedElicitation

from tests.conftest import gcp_environ
from tpu_devops.config import load_settings
from tpu_devops.errors import CloudError, ConfigError, NotFoundError, OwnershipError
from tpu_devops.host.confirmation import Confirmation, ConfirmationError, NotAsked, TokenStore
from tpu_devops.provisioning import teardown

pytestmark = pytest.mark.anyio
ZONE = "us-west4-a"
RIG = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
NO_ELICITATION = AcceptedElicitation(data=NotAsked(reason="no elicitation"))
ASKABLE = AcceptedElicitation(data=NotAsked(reason="dry run", can_ask=True))


def person(typed: str = "gemma4-e2b") -> AcceptedElicitation:
    """The answer of a person who typed ``typed`` into the host's form."""
    return AcceptedElicitation(data=Confirmation(rig=typed))


@pytest.fixture
def unattended(fake_gcp, tmp_path):
    """Settings with the operator's standing permission for this rig (TPU_DEVOPS_UNATTENDED_DELETE)."""
    return load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_DEVOPS_UNATTENDED_DELETE="gemma4-e2b"))


async def destroy(settings, confirmation=NO_ELICITATION, **kw):
    args = {
        "zone": None,
        "queued_resource_id": None,
        "dry_run": None,
        "confirm": False,
        "confirm_token": None,
    }
    return await teardown.destroy_confirmed(settings, confirmation, **(args | kw))


async def cleanup(settings, confirmation=NO_ELICITATION, **kw):
    """destroy_queued_resource(only_failed=true) in every zone."""
    args = {"zone": "all", "queued_resource_id": None, "only_failed": True, "dry_run": None, "confirm": False}
    return await teardown.destroy_confirmed(settings, confirmation, **(args | {"confirm_token": None} | kw))


async def test_another_rigs_resource_is_refused_whatever_id_is_passed(fake_gcp, gcp_settings) -> None:
    """``queued_resource_id="other-rig"`` used to delete another rig's node and request, and its dry
    run said "of ours". Ownership is this server's RESOURCE_ID label, never the id passed."""
    fake_gcp.tpu.add_foreign(ZONE, "other-rig", labels={"managed-by": "tpu-devops", "rig": "other-rig"})
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b-x", labels={"managed-by": "tpu-devops", "rig": "rig-b"})
    fake_gcp.tpu.add_foreign(ZONE, "unlabelled", labels={})
    for qr_id, owner in (("other-rig", "another rig's (rig=other-rig"), ("gemma4-e2b-x", "another rig's"), ("unlabelled", "not created by tpu-devops")):  # fmt: skip
        for kwargs in ({}, {"confirm": True}, {"dry_run": False, "confirm": True}):
            with pytest.raises(OwnershipError) as err:
                await destroy(gcp_settings, queued_resource_id=qr_id, **kwargs)
            assert owner in err.value.message and "left it alone" in err.value.message
    # Without an id it tears down this rig's resources only: none here, and nothing else is touched.
    plan = await destroy(gcp_settings)
    assert plan.steps == [] and not plan.executed and "NOTHING DELETED" in plan.render_text()
    assert {fake_gcp.tpu.state_of(ZONE, q) for q in ("other-rig", "gemma4-e2b-x", "unlabelled")} == {"ACTIVE"}


async def test_teardown_follows_the_tpu_to_any_zone_and_any_id(fake_gcp, unattended) -> None:
    """find_tpu put the TPU in us-central1-a while the config says us-west4-a; a second TPU
    made under another id carries the rig label too."""
    fake_gcp.tpu.add_foreign("us-central1-a", "gemma4-e2b", labels=RIG)
    fake_gcp.tpu.add_foreign("asia-east1-b", "gemma4-e2b-2", labels=RIG | {"created-by": "0123456789ab"})
    fake_gcp.tpu.add_foreign(ZONE, "neighbour", labels={"team": "x"})
    plan = await destroy(unattended)
    assert plan.dry_run and not plan.executed
    assert sorted((s.action, s.target, s.zone) for s in plan.steps) == [
        ("delete_node", "gemma4-e2b", "us-central1-a"), ("delete_node", "gemma4-e2b-2", "asia-east1-b"),
        ("delete_queued_resource", "gemma4-e2b", "us-central1-a"), ("delete_queued_resource", "gemma4-e2b-2", "asia-east1-b"),
    ]  # fmt: skip
    text = plan.render_text()
    assert text.startswith("NOTHING DELETED (dry run): would delete 2 queued resource(s) of rig 'gemma4-e2b'")
    assert "created by someone else (created-by=0123456789ab" in text  # warned before acting
    assert plan.confirm_token and plan.confirm_token in plan.next_call and plan.next_call in text
    assert plan.next_call == f'destroy_queued_resource(confirm=true, confirm_token="{plan.confirm_token}")'
    done = await destroy(unattended, confirm=True, confirm_token=plan.confirm_token)
    assert done.executed and all(s.done for s in done.steps) and "DELETED 2" in done.render_text()
    assert fake_gcp.tpu.state_of("us-central1-a", "gemma4-e2b") is None
    assert fake_gcp.tpu.state_of("asia-east1-b", "gemma4-e2b-2") is None
    assert fake_gcp.tpu.state_of(ZONE, "neighbour") == "ACTIVE"
    # A zone given explicitly narrows it; an id that the rig does not hold is not found anywhere.
    with pytest.raises(NotFoundError) as err:
        await destroy(unattended, queued_resource_id="gemma4-e2b")
    assert "any of 44 zone(s)" in err.value.message


async def test_without_a_person_or_standing_permission_nothing_deletes_whatever_is_replayed(
    fake_gcp, gcp_settings, unattended
) -> None:
    """A scripted model on an auto-approving host: the dry run gives it no token and no deleting call, every
    refusal says how the person deletes (the gcloud commands, a host that asks, the opt-in) and hands out
    no token, and a token issued while the operator allowed it stops counting once that is withdrawn."""
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    dry = await destroy(gcp_settings)
    assert dry.dry_run and dry.confirm_token is None and dry.next_call is None
    assert dry.how_to_delete == [
        "gcloud compute tpus queued-resources delete gemma4-e2b --zone=us-west4-a --project=demo-project --force"
    ]
    text = dry.render_text()
    assert "cannot ask you" in text and dry.how_to_delete[0] in text
    assert "TPU_DEVOPS_UNATTENDED_DELETE=gemma4-e2b" in text
    issued_while_allowed = (await destroy(unattended)).confirm_token
    attempts = [{"confirm": True}, {"dry_run": False}, {"dry_run": False, "confirm": True},
                {"confirm": True, "confirm_token": issued_while_allowed},
                {"confirm_token": issued_while_allowed}, {"confirm": True, "confirm_token": "0" * 16}]  # fmt: skip
    for outcome in (NO_ELICITATION, CancelledElicitation()):
        for kwargs in attempts:
            with pytest.raises(ConfirmationError) as err:
                await destroy(gcp_settings, outcome, **kwargs)
            text = str(err.value)
            assert text.startswith("confirm: nothing was deleted: this host c"), text
            assert "never the model alone" in text and "TPU_DEVOPS_UNATTENDED_DELETE is not set" in text
            assert (
                "It would delete: delete_node gemma4-e2b (us-west4-a); delete_queued_resource gemma4-e2b (us-west4-a)"
                in text
            )
            assert dry.how_to_delete[0] in text and "TPU_DEVOPS_UNATTENDED_DELETE=gemma4-e2b" in text
            assert "confirm_token=" not in text  # a refusal hands out nothing to replay
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"
    # The same token still works where the operator allows unattended deletions (proof the attempts above
    # were refused for the missing permission, not for a bad token).
    done = await destroy(unattended, confirm=True, confirm_token=issued_while_allowed)
    assert done.executed and "standing permission TPU_DEVOPS_UNATTENDED_DELETE" in done.message


async def test_a_person_confirms_by_typing_the_rig_name_a_host_answering_alone_does_not(
    fake_gcp, gcp_settings
) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    dry = await destroy(gcp_settings, ASKABLE)
    assert dry.confirm_token is None and dry.next_call == "destroy_queued_resource(confirm=true)"
    assert "your MCP host asks you" in dry.render_text()
    # what an auto-accepting host or hook sends: the form's defaults, or something other than the name
    for typed in ("", "   ", "yes", "true", "accept", "gemma4", "gemma4-e2b-x", "other-rig"):
        with pytest.raises(ConfirmationError) as err:
            await destroy(gcp_settings, person(typed), confirm=True)
        text = str(err.value)
        assert "nothing was deleted" in text and "type gemma4-e2b when your host asks" in text
        assert ("without the rig's name" in text) if not typed.strip() else (repr(typed.strip()) in text)
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"
    done = await destroy(gcp_settings, person(" GEMMA4-E2B "), dry_run=False)
    assert done.executed and "with the rig's name typed" in done.message
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None


async def test_tokens_are_single_use_unguessable_short_lived_and_bound_to_the_plan(
    fake_gcp, unattended
) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    dry = await destroy(unattended)
    token = dry.confirm_token
    assert token and len(token) == 16 and token != (await destroy(unattended)).confirm_token
    # made up / mistyped
    for fake in ("0" * 16, token[:-1] + ("a" if token[-1] != "a" else "b"), "yes", "true"):
        with pytest.raises(ConfirmationError) as err:
            await destroy(unattended, confirm=True, confirm_token=fake)
        assert "no dry run issued this confirmation token" in str(err.value)
    # the plan changed since the dry run (a second resource of the rig appeared): refused
    fake_gcp.tpu.add_foreign("us-east1-b", "gemma4-e2b-2", labels=RIG)
    with pytest.raises(ConfirmationError) as err:
        await destroy(unattended, confirm=True, confirm_token=token)
    assert "issued for a different deletion (delete_node gemma4-e2b (us-west4-a)" in str(err.value)
    assert "gemma4-e2b-2 (us-east1-b)" in str(err.value)  # the new plan, in the refusal
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"
    # a token for a cleanup's plan (only the failed ones) does not confirm the teardown of everything
    cleaned = await cleanup(unattended)
    with pytest.raises(ConfirmationError):
        await destroy(unattended, confirm=True, confirm_token=cleaned.confirm_token)
    # expired
    plan = await teardown.plan_destroy(unattended, zone=None, queued_resource_id=None)
    stale = (
        TokenStore(unattended.state_dir).issue(plan.deletion.digest, plan.deletion.summary(), ttl_s=-1).token
    )
    with pytest.raises(ConfirmationError) as err:
        await destroy(unattended, confirm=True, confirm_token=stale)
    assert "expired" in str(err.value)
    # valid once; the same token again is refused and nothing more happens
    good = (await destroy(unattended)).confirm_token
    assert (await destroy(unattended, confirm=True, confirm_token=good)).executed
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    with pytest.raises(ConfirmationError) as err:
        await destroy(unattended, confirm=True, confirm_token=good)
    assert "already used" in str(err.value) or "different deletion" in str(err.value)
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"


async def test_tokens_survive_a_server_restart_sharing_the_state_dir(fake_gcp, tmp_path) -> None:
    """``gemini -p`` starts a server per prompt: the dry run and the deletion run in two processes."""
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    opt_in = {"TPU_DEVOPS_UNATTENDED_DELETE": "gemma4-e2b"}
    first = load_settings(environ=gcp_environ(fake_gcp, tmp_path, **opt_in))
    token = (await destroy(first)).confirm_token
    second = load_settings(environ=gcp_environ(fake_gcp, tmp_path, **opt_in))
    assert (await destroy(second, confirm=True, confirm_token=token)).executed
    other_dir = load_settings(environ=gcp_environ(fake_gcp, tmp_path / "elsewhere", **opt_in))
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    token = (await destroy(first)).confirm_token
    with pytest.raises(ConfirmationError):  # another state directory never saw it
        await destroy(other_dir, confirm=True, confirm_token=token)


async def test_elicitation_answers_under_the_standing_permission(fake_gcp, unattended) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    token = (await destroy(unattended)).confirm_token
    # declined: nothing deleted, and the token given with it is spent (no replay)
    with pytest.raises(ConfirmationError) as err:
        await destroy(unattended, DeclinedElicitation(), confirm=True, confirm_token=token)
    assert "you declined" in str(err.value)
    with pytest.raises(ConfirmationError):
        await destroy(unattended, confirm=True, confirm_token=token)
    # cancelled (the host could not ask) without a token: the dry run that gives one, no token in the fix
    with pytest.raises(ConfirmationError) as err:
        await destroy(unattended, CancelledElicitation(), dry_run=False)
    assert "could not ask you (its confirmation request was cancelled" in str(err.value)
    assert "destroy_queued_resource(dry_run=true)" in str(err.value) and 'confirm_token="' not in str(
        err.value
    )
    assert fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "ACTIVE"
    # cancelled, or accepted without the name, with a valid token: the standing permission decides
    fresh = (await destroy(unattended)).confirm_token
    done = await destroy(unattended, CancelledElicitation(), confirm=True, confirm_token=fresh)
    assert done.executed and "standing permission" in done.message
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    fresh = (await destroy(unattended)).confirm_token
    done = await destroy(unattended, person(""), confirm=True, confirm_token=fresh)
    assert done.executed and "standing permission" in done.message
    # a person's answer needs no token
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    done = await destroy(unattended, person(), dry_run=False)
    assert done.executed and "confirmed by you" in done.message


async def test_explicit_dry_run_wins_and_says_so(fake_gcp, unattended) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    token = (await destroy(unattended)).confirm_token
    result = await destroy(unattended, dry_run=True, confirm=True, confirm_token=token)
    assert not result.executed and "dry_run=true wins" in result.message
    assert (await destroy(unattended, confirm=True, confirm_token=token)).executed  # not spent by the dry run


async def test_cleanup_deletes_only_our_failed_requests(fake_gcp, unattended) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG, state="FAILED")
    fake_gcp.tpu.add_foreign("us-east5-a", "any-id", labels=RIG, state="SUSPENDED")
    fake_gcp.tpu.add_foreign("us-east5-a", "neighbour", labels={"team": "x"}, state="FAILED")
    fake_gcp.tpu.add_foreign(
        "us-east5-a", "other", labels={"managed-by": "tpu-devops", "rig": "r2"}, state="FAILED"
    )
    plan = await cleanup(unattended)
    assert sorted(s.zone for s in plan.steps) == ["us-east5-a", ZONE] and all(
        s.action == "delete_queued_resource" for s in plan.steps
    )
    assert any("neighbour" in x for x in plan.left_alone) and any(
        "another rig's (rig=r2" in x for x in plan.left_alone
    )
    done = await cleanup(unattended, confirm=True, confirm_token=plan.confirm_token)
    assert done.executed
    assert (
        fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None
        and fake_gcp.tpu.state_of("us-east5-a", "any-id") is None
    )
    assert fake_gcp.tpu.state_of("us-east5-a", "neighbour") == "FAILED"
    assert fake_gcp.tpu.state_of("us-east5-a", "other") == "FAILED"
    with pytest.raises(ConfigError) as refused:  # a cleanup is by state: it takes no id
        await cleanup(unattended, queued_resource_id="gemma4-e2b")
    assert refused.value.field == "queued_resource_id"


async def test_a_provisioning_request_is_deleted_as_soon_as_it_can_be(
    fake_gcp, unattended, monkeypatch
) -> None:
    """The API refuses to delete a PROVISIONING request; left alone it comes up ACTIVE and bills. The
    confirmed teardown hands it to a job that deletes it (node first) once it leaves PROVISIONING, and
    the rig's firewall rule after it."""
    import anyio

    from tpu_devops.host.jobs import JOBS

    monkeypatch.setattr(teardown, "PROVISIONING_POLL_S", 0.05)
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG, state="PROVISIONING")
    fake_gcp.tpu.timings["PROVISIONING"] = 10_000
    plan = await destroy(unattended)
    assert [s.action for s in plan.steps] == ["delete_node", "delete_queued_resource"] and not plan.executed
    done = await destroy(unattended, confirm=True, confirm_token=plan.confirm_token)
    assert done.executed and done.followed_by and "PROVISIONING" in done.followed_by, done.render_text()
    job = JOBS.get(done.follow_up_job_id)
    assert job.state == "running" and fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") == "PROVISIONING"
    fake_gcp.tpu.timings["PROVISIONING"] = 0  # it comes up now
    with anyio.fail_after(30):
        while job.state == "running":
            await anyio.sleep(0.05)
    assert job.state == "succeeded", job.snapshot()
    assert (
        fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None and (ZONE, "gemma4-e2b") not in fake_gcp.tpu.nodes
    )


async def test_a_zone_that_cannot_be_listed_is_named_loudly(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(ZONE, "gemma4-e2b", labels=RIG)
    fake_gcp.tpu.fail_zone("us-east1-b", 403)
    plan = await destroy(gcp_settings)
    assert "us-east1-b" in plan.unlisted_zones and "1 zone(s) COULD NOT BE LISTED" in plan.render_text()
    assert len(plan.steps) == 2
    with pytest.raises(CloudError) as err:  # the one zone asked for cannot be listed: an error, not "nothing"
        await destroy(gcp_settings, zone="us-east1-b")
    assert err.value.field == "zone" and "tpu.queuedResources.list" in err.value.message


async def test_the_rigs_firewall_rule_goes_with_its_last_tpu(fake_gcp, unattended) -> None:
    """The rule endpoint access created with the TPU is a step of the same plan: shown in the
    dry run, bound by its token, deleted with the last TPU, and kept while another TPU of the rig lives."""
    from tpu_devops.provisioning.queued import create_queued_resource

    fake_gcp.secrets.put("hf-token", "hf_PlantedTokenValue9876543210zyxwvu")
    await create_queued_resource(unattended)
    assert fake_gcp.compute.firewalls
    two = await create_queued_resource(
        unattended, zone="us-east1-b", queued_resource_id="second", allow_second=True
    )
    assert two.created
    one_of_two = await destroy(unattended, queued_resource_id="second")
    assert [s.action for s in one_of_two.steps] == [
        "delete_node",
        "delete_queued_resource",
    ]  # rule still needed
    # the token of that narrower plan cannot confirm the wider call (both TPUs and the rule)
    with pytest.raises(ConfirmationError):
        await destroy(unattended, confirm=True, confirm_token=one_of_two.confirm_token)
    one = await destroy(unattended, queued_resource_id="second")
    assert (
        await destroy(unattended, queued_resource_id="second", confirm=True, confirm_token=one.confirm_token)
    ).executed
    plan = await destroy(unattended)
    assert [s.action for s in plan.steps] == ["delete_node", "delete_queued_resource", "delete_firewall_rule"]
    assert (
        "delete_firewall_rule" in plan.render_text() and fake_gcp.compute.firewalls
    )  # a dry run deletes nothing
    done = await destroy(unattended, confirm=True, confirm_token=plan.confirm_token)
    assert done.executed and all(s.done for s in done.steps)
    assert fake_gcp.compute.firewalls == {} and fake_gcp.tpu.state_of(ZONE, "gemma4-e2b") is None
