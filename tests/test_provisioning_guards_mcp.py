"""Regression scenarios from the newcomer trial, through the real MCP client and server.py over stdio
against the fake Google Cloud: one TPU per rig (sweep lease, cross-zone checks, loud status), argument
validation before jobs start, price per region, and cleanup that says what it left running."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.test_provisioning_mcp import TOKEN, call, server, wait_job

pytestmark = pytest.mark.anyio
RIG_LABELS = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}


def _live_of_rig(fake_gcp: Any) -> list[tuple[str, str]]:
    out = []
    for (zone, qr_id), rec in list(fake_gcp.tpu.queued.items()):
        state = fake_gcp.tpu.state_of(zone, qr_id)
        labels = rec.body["tpu"]["nodeSpec"][0]["node"].get("labels", {})
        if labels.get("rig") == "gemma4-e2b" and state not in ("FAILED", "SUSPENDED"):
            out.append((zone, state))
    return sorted(out)


async def test_back_to_back_find_tpu_leaves_one_tpu_and_second_tpus_are_loud(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    fake_gcp.tpu.script("us-central1-a", "wait")
    args = {"poll_interval_s": 0.05, "zone_budget_s": 0.5}
    async with server(fake_gcp, tmp_path) as client:
        first = await call(client, "find_tpu", args)
        second = await client.call_tool("find_tpu", args)
        assert second.is_error, second.content[0].text
        text = second.content[0].text
        assert first["job_id"] in text and "already running" in text
        job = await wait_job(client, first["job_id"])
        assert job["state"] == "succeeded" and job["result"]["found"], job
        assert len(_live_of_rig(fake_gcp)) == 1
        # The lease is released when the sweep ends: the next find_tpu starts and finds the existing TPU.
        again = await call(client, "find_tpu", args)
        done = await wait_job(client, again["job_id"])
        assert "never holds two" in done["result"]["stopped_because"]
        assert len(_live_of_rig(fake_gcp)) == 1

        # create in another zone while the rig has one: refused, naming the zone and the way out.
        refused = await client.call_tool("create_tpu_queued_resource", {"zone": "us-east1-b"})
        assert refused.is_error
        msg = refused.content[0].text
        assert job["result"]["zone"] in msg and "allow_second" in msg and "bill twice" in msg
        assert len(_live_of_rig(fake_gcp)) == 1
        forced = await call(
            client,
            "create_tpu_queued_resource",
            {"zone": "us-east1-b", "allow_second": True, "provisioning_model": "spot"},
        )
        assert forced["created"] and any(w.startswith("SECOND TPU") for w in forced["warnings"])
        assert len(_live_of_rig(fake_gcp)) == 2

        status = await call(client, "describe_queued_resource")
        assert status["several"] is True and len(status["rig_queued_resources"]) == 2
        assert "us-east1-b" in " ".join(status["rig_queued_resources"])
        dashboard = await call(client, "check_setup", {"view": "status"})
        assert dashboard["problems"] and "each one bills" in dashboard["problems"][0]
        setup = await call(client, "check_setup")
        assert not {c["name"]: c for c in setup["checks"]}["our_tpus"]["ok"]

        # cleanup deletes only FAILED/SUSPENDED: it must say the two live ones are still billing.
        cleanup = await client.call_tool(
            "destroy_queued_resource", {"only_failed": True, "dry_run": False, "confirm": True}
        )
        assert not cleanup.is_error
        out = cleanup.structured_content
        assert len(out["still_running"]) == 2
        assert "still running and billing" in out["message"] and "destroy_queued_resource()" in out["message"]
        assert "STILL RUNNING AND BILLING" in cleanup.content[0].text
    assert len(_live_of_rig(fake_gcp)) == 2  # cleanup deleted nothing live


async def test_a_second_server_sharing_the_state_dir_refuses_a_parallel_sweep(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    args = {"zones": ["us-west4-a", "us-west4-b"], "poll_interval_s": 0.05, "zone_budget_s": 600}
    async with server(fake_gcp, tmp_path) as one, server(fake_gcp, tmp_path) as two:
        started = await call(one, "find_tpu", args)
        with anyio.fail_after(30):
            while fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None:
                await anyio.sleep(0.05)
        refused = await two.call_tool("find_tpu", args)
        assert refused.is_error
        text = refused.content[0].text
        assert started["job_id"] in text and "server pid" in text
        await call(one, "cancel_job", {"job_id": started["job_id"]})
        # The cancelled sweep deleted the request it was waiting on (nothing left queued for nobody) and
        # gave its lease back: the other server may sweep now.
        assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None
        retry = await call(two, "find_tpu", {**args, "zone_budget_s": 0.3})
        job = await wait_job(two, retry["job_id"])
        assert job["result"]["found"] and job["result"]["zone"] == "us-west4-b", job
    assert [c["zone"] for c in fake_gcp.tpu.creates()] == ["us-west4-a", "us-west4-a", "us-west4-b"]
    assert _live_of_rig(fake_gcp) == [("us-west4-b", "ACTIVE")]


async def test_arguments_are_checked_before_anything_starts(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    bad: list[tuple[str, dict[str, Any], str]] = [
        ("find_tpu", {"zones": ["uswest4a"]}, "zones"),
        ("find_tpu", {"zones": []}, "zones"),
        ("find_tpu", {"zones": ["us-west4-a", "us-west9-z"]}, "us-west9-z"),
        ("find_tpu", {"provisioning_model": ""}, "provisioning_model"),
        ("find_tpu", {"valid_until_duration_s": -1}, "valid_until_duration_s"),
        ("find_tpu", {"provisioning_model": "spot", "max_run_duration_s": 3600}, "max_run_duration_s"),
        ("list_queued_resources", {"zone": ""}, "zone"),
        ("describe_queued_resource", {"queued_resource_id": ""}, "queued_resource_id"),
        ("describe_queued_resource", {"zone": ""}, "zone"),
        ("get_vllm_endpoint", {"zone": ""}, "zone"),
        ("plan_queued_resource", {"valid_until_duration_s": -1}, "valid_until_duration_s"),
        ("create_tpu_queued_resource", {"valid_until_duration_s": -1}, "valid_until_duration_s"),
        ("plan_queued_resource", {"provisioning_model": "spot", "max_run_duration_s": 3600}, "max_run_duration_s"),
        ("create_tpu_queued_resource", {"provisioning_model": "on-demand", "max_run_duration_s": 3600}, "max_run_duration_s"),
        ("destroy_queued_resource", {"zone": ""}, "zone"),
        ("get_zones_with_available_quota", {"accelerator_type": ""}, "accelerator_type"),
        ("get_zones_with_available_quota", {"provisioning_model": ""}, "provisioning_model"),
        ("destroy_queued_resource", {"only_failed": True, "zone": ""}, "zone"),
    ]  # fmt: skip
    async with server(fake_gcp, tmp_path) as client:
        for name, args, field in bad:
            result = await client.call_tool(name, args)
            assert result.is_error, (name, args, result.content[0].text)
            assert field in result.content[0].text, (name, args, result.content[0].text)
        jobs = await call(client, "get_job")
        assert jobs.get("jobs", []) == [], jobs
        plan = await call(client, "plan_queued_resource", {"valid_until_duration_s": 3600})
        assert plan["request"]["queueingPolicy"]["validUntilDuration"] == "3600s"
    assert fake_gcp.tpu.creates() == []


async def test_existing_flex_start_reported_as_flex_start_and_prices_per_region(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    async with server(fake_gcp, tmp_path) as client:
        plan = await call(client, "plan_queued_resource", {"zone": "europe-west4-a"})
        assert plan.get("usd_per_hour") is None and plan["price_source"].startswith(
            "price unknown for europe-west4"
        )
        assert (
            "price unknown"
            in (await client.call_tool("plan_queued_resource", {"zone": "europe-west4-a"})).content[0].text
        )
        created = await call(
            client, "create_tpu_queued_resource", {"wait_timeout_s": 3600, "poll_interval_s": 0.05}
        )
        assert created["job_id"] == created["wait_job_id"]
        assert f"poll get_job {created['job_id']}" in created["next_step"]
        await wait_job(client, created["job_id"])
        spot = await call(client, "create_tpu_queued_resource", {"provisioning_model": "spot"})
        assert spot["created"] is False and spot["provisioning_model"] == "flex-start"
        assert (
            spot["stops_billing"].startswith("stops by itself") and "bills until" not in spot["stops_billing"]
        )
        assert "you asked for spot" in spot["next_step"]
        endpoint = await call(client, "get_vllm_endpoint", {"zone": "all"})
        assert endpoint["status"] == "discovered"
    fake_gcp.tpu.queued.clear()
    fake_gcp.tpu.add_foreign("asia-east1-a", "gemma4-e2b", labels=RIG_LABELS)
    async with server(fake_gcp, tmp_path) as client:
        status = await call(client, "describe_queued_resource")
        assert status["zone"] == "asia-east1-a" and status.get("usd_per_hour") is None
        assert status["price_source"].startswith("price unknown for asia-east1")


def _adc(tmp_path: Any, who: str) -> str:
    """An ADC file (gcloud's authorized_user shape) naming ``who``: google-auth reads the principal from it."""
    import json

    path = tmp_path / f"adc-{who.split('@')[0]}.json"
    info = {
        "type": "authorized_user",
        "client_id": "c",
        "client_secret": "s",
        "refresh_token": "r",
        "account": who,
    }
    path.write_text(json.dumps(info))
    return str(path)


async def test_ownership_is_this_servers_rig_never_the_id_passed(fake_gcp, tmp_path) -> None:
    """Through the real client: another rig's TPU is refused whatever id or flags are
    passed (and its dry run never says "ours"); a create under another id is still this rig's, so the
    guard refuses it and status / teardown see it."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign(
        "us-west4-a", "other-rig", labels={"managed-by": "tpu-devops", "rig": "other-rig"}
    )
    async with server(fake_gcp, tmp_path, TPU_DEVOPS_UNATTENDED_DELETE="gemma4-e2b") as client:
        for args in (
            {},
            {"dry_run": False, "confirm": True},
            {"confirm": True, "confirm_token": "aaaaaaaaaaaaaaaa"},
        ):
            refused = await client.call_tool(
                "destroy_queued_resource", {"queued_resource_id": "other-rig", **args}
            )
            text = refused.content[0].text
            assert refused.is_error and "another rig's (rig=other-rig" in text and "of ours" not in text, text
        listing = await call(client, "list_queued_resources", {"zone": "us-west4-a"})
        assert [q["owner"] for q in listing["queued_resources"]] == [
            "another rig's (rig=other-rig; this server is rig gemma4-e2b)"
        ]
        await call(client, "create_tpu_queued_resource", {"provisioning_model": "spot"})
        second = await client.call_tool(
            "create_tpu_queued_resource", {"queued_resource_id": "gemma4-e2b-2", "zone": "us-east1-b"}
        )
        assert second.is_error and "bill twice" in second.content[0].text
        forced = await call(
            client,
            "create_tpu_queued_resource",
            {
                "queued_resource_id": "gemma4-e2b-2",
                "zone": "us-east1-b",
                "allow_second": True,
                "provisioning_model": "spot",
            },
        )
        assert forced["created"]
        status = await call(client, "describe_queued_resource")
        assert status["several"] and any("gemma4-e2b-2" in r for r in status["rig_queued_resources"])
        plan = await call(client, "destroy_queued_resource", {})
        assert sorted(s["target"] for s in plan["steps"] if s["action"] == "delete_queued_resource") == [
            "gemma4-e2b",
            "gemma4-e2b-2",
        ]
        assert any("other-rig" in x for x in plan["left_alone"])
        done = await call(
            client,
            "destroy_queued_resource",
            {"confirm": True, "confirm_token": plan["confirm_token"]},
        )
        assert done["executed"]
    assert _live_of_rig(fake_gcp) == [] and fake_gcp.tpu.state_of("us-west4-a", "other-rig") == "ACTIVE"


async def test_two_installations_of_one_rig_warn_about_each_others_resources(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    alice = {"GOOGLE_APPLICATION_CREDENTIALS": _adc(tmp_path, "alice@example.com")}
    bob = {"GOOGLE_APPLICATION_CREDENTIALS": _adc(tmp_path, "bob@example.com")}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with server(fake_gcp, tmp_path / "a", **alice) as a, server(fake_gcp, tmp_path / "b", **bob) as b:
        await call(a, "create_tpu_queued_resource", {"provisioning_model": "spot"})
        status = await b.call_tool("describe_queued_resource", {})
        assert "WARNING: CREATED BY SOMEONE ELSE" in status.content[0].text
        assert status.structured_content["ours"] is True  # same RESOURCE_ID: the same rig
        again = await call(b, "create_tpu_queued_resource", {"provisioning_model": "spot"})
        assert again["created"] is False and "created by someone else" in again["owner"]
        dry = await b.call_tool("destroy_queued_resource", {})
        assert "created by someone else (created-by=" in dry.content[0].text
        own = await call(a, "destroy_queued_resource", {})
        assert not own.get("warnings")  # alice's own TPU: no warning for her
