"""Endpoint access: the rig's firewall rule and API key, through the real
google-cloud-compute / secret-manager clients against the fakes (Compute's own error payloads)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import gcp_environ
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError, NotFoundError, OwnershipError, PermissionError_
from tpu_devops.gcp.compute import ComputeApi
from tpu_devops.provisioning import access
from tpu_devops.provisioning.plan import plan_queued_resource
from tpu_devops.provisioning.queued import create_queued_resource
from tpu_devops.provisioning.requests import build_request

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"


def settings_for(fake_gcp, tmp_path, **extra: str):
    return load_settings(environ=gcp_environ(fake_gcp, tmp_path, **extra))


def test_rule_name_and_tag_fit_rfc1035_and_stay_distinct_for_long_rigs() -> None:
    assert access.rule_name("gemma4-e2b") == "tpu-devops-gemma4-e2b" == access.network_tag("gemma4-e2b")
    a, b = access.rule_name("a" * 60 + "x"), access.rule_name("a" * 60 + "y")
    assert len(a) <= 63 and len(b) <= 63 and a != b and a[-1].isalnum()


async def test_plan_detects_your_ip_and_shows_the_exact_rule(fake_gcp, tmp_path) -> None:
    fake_gcp.public_ip.address = "198.51.100.23"
    plan = await plan_queued_resource(settings_for(fake_gcp, tmp_path))
    acc = plan.endpoint_access
    assert acc.source_ranges == ["198.51.100.23/32"] and "detected" in acc.ranges_from
    assert acc.firewall_request == {
        "name": "tpu-devops-gemma4-e2b",
        "description": access.description("gemma4-e2b"),
        "network": "projects/demo-project/global/networks/default",
        "direction": "INGRESS",
        "priority": 1000,
        "allowed": [{"IPProtocol": "tcp", "ports": ["8000"]}],
        "sourceRanges": ["198.51.100.23/32"],
        "targetTags": ["tpu-devops-gemma4-e2b"],
    }
    node = plan.request["tpu"]["nodeSpec"][0]["node"]
    assert node["tags"] == ["tpu-devops-gemma4-e2b"] and node["networkConfig"]["enableExternalIps"] is True
    assert "--tags=tpu-devops-gemma4-e2b" in plan.gcloud_command
    assert (
        "198.51.100.23/32" in plan.render_text() and "firewall rule tpu-devops-gemma4-e2b" in plan.headline()
    )
    assert fake_gcp.compute.firewalls == {}  # a plan creates nothing


@pytest.mark.parametrize("ranges", [["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1"], ["8.0.0.0/7"]])
async def test_ranges_open_to_the_internet_need_the_explicit_argument(fake_gcp, tmp_path, ranges) -> None:
    s = settings_for(fake_gcp, tmp_path)
    with pytest.raises(ConfigError) as err:
        await plan_queued_resource(s, allowed_source_ranges=ranges)
    assert err.value.field == "allowed_source_ranges" and "open_to_internet" in (err.value.fix or "")
    plan = await plan_queued_resource(s, allowed_source_ranges=ranges, open_to_internet=True)
    assert any(w.startswith("WARNING: tcp:8000 OPEN TO THE INTERNET") for w in plan.warnings)
    assert "OPEN TO THE INTERNET" in plan.headline()
    # the setting is no way around it either
    with pytest.raises(ConfigError) as err:
        await plan_queued_resource(settings_for(fake_gcp, tmp_path, ALLOWED_SOURCE_RANGES=",".join(ranges)))
    assert err.value.field == "ALLOWED_SOURCE_RANGES"


@pytest.mark.parametrize("bad", [["not-an-ip"], ["2001:db8::/32"], ["10.0.0.0/33"], []])
async def test_malformed_ranges_name_the_field(fake_gcp, tmp_path, bad) -> None:
    with pytest.raises(ConfigError) as err:
        await plan_queued_resource(settings_for(fake_gcp, tmp_path), allowed_source_ranges=bad)
    assert err.value.field == "allowed_source_ranges"


async def test_private_ranges_need_no_flag_and_the_setting_is_used(fake_gcp, tmp_path) -> None:
    plan = await plan_queued_resource(
        settings_for(fake_gcp, tmp_path, ALLOWED_SOURCE_RANGES="10.0.0.0/8 192.0.2.1")
    )
    assert plan.endpoint_access.source_ranges == ["10.0.0.0/8", "192.0.2.1/32"]
    assert fake_gcp.public_ip.calls == 0  # nothing detected when ranges are given


async def test_no_external_ip_means_internal_only_and_no_rule_by_default(fake_gcp, tmp_path) -> None:
    s = settings_for(fake_gcp, tmp_path, TPU_EXTERNAL_IP="0")
    plan = await plan_queued_resource(s)
    node = plan.request["tpu"]["nodeSpec"][0]["node"]
    assert node["networkConfig"]["enableExternalIps"] is False and "--internal-ips" in plan.gcloud_command
    assert plan.endpoint_access.firewall_rule is None and "IAP tunnel" in " ".join(plan.endpoint_access.notes)
    assert fake_gcp.public_ip.calls == 0


async def test_an_undetectable_ip_is_a_plan_warning_and_a_create_error(fake_gcp, tmp_path) -> None:
    s = settings_for(fake_gcp, tmp_path, PUBLIC_IP_LOOKUP_URL="http://127.0.0.1:9/ip")
    plan = await plan_queued_resource(s)
    assert plan.endpoint_access.firewall_rule is None
    assert any("could not detect your public IPv4" in w for w in plan.endpoint_access.warnings)
    fake_gcp.secrets.put("hf-token", TOKEN)
    with pytest.raises(ConfigError) as err:
        await create_queued_resource(s)
    assert err.value.field == "allowed_source_ranges"
    assert fake_gcp.tpu.creates() == [] and fake_gcp.compute.firewalls == {}


async def test_create_makes_the_key_and_the_rule_then_updates_the_rule(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    s = settings_for(fake_gcp, tmp_path)
    created = await create_queued_resource(s)
    acc = created.endpoint_access
    assert acc is not None and acc.action == "created"
    rule = fake_gcp.compute.firewalls["tpu-devops-gemma4-e2b"]
    assert rule["sourceRanges"] == ["203.0.113.7/32"] and rule["targetTags"] == ["tpu-devops-gemma4-e2b"]
    assert rule["allowed"] == [{"IPProtocol": "tcp", "ports": ["8000"]}] and rule["direction"] == "INGRESS"
    key = fake_gcp.secrets.secrets["vllm-api-key"][-1].decode()
    assert len(key) >= 43 and key not in created.model_dump_json() + created.render_text()
    body = fake_gcp.tpu.creates()[0]["body"]
    assert body["tpu"]["nodeSpec"][0]["node"]["tags"] == ["tpu-devops-gemma4-e2b"]
    assert key not in json.dumps(body)  # never in the request or the node's metadata
    # the caller moved to another network: the next access update patches the same rule
    fake_gcp.public_ip.address = "198.51.100.9"
    again = await access.ensure_access(s, await access.plan_access(s))
    assert again.action == "updated" and rule["sourceRanges"] == ["198.51.100.9/32"]
    assert (await access.ensure_access(s, await access.plan_access(s))).action == "unchanged"
    assert fake_gcp.secrets.secrets["vllm-api-key"][-1].decode() == key  # the key is kept, not rotated


async def test_a_foreign_rule_with_our_name_is_never_touched(fake_gcp, tmp_path) -> None:
    s = settings_for(fake_gcp, tmp_path)
    body = {**access.firewall_body(s, ["0.0.0.0/0"]), "description": "someone else's"}
    ComputeApi(s).insert_firewall(body)
    with pytest.raises(OwnershipError):
        await access.ensure_access(s, await access.plan_access(s))
    with pytest.raises(OwnershipError):
        await access.delete_rig_rule(s)
    assert fake_gcp.compute.firewalls["tpu-devops-gemma4-e2b"]["description"] == "someone else's"


async def test_missing_network_names_the_setting(fake_gcp, tmp_path) -> None:
    s = settings_for(fake_gcp, tmp_path, TPU_NETWORK="no-such-vpc")
    with pytest.raises(ConfigError) as err:
        await access.ensure_access(s, await access.plan_access(s))
    assert err.value.field == "TPU_NETWORK" and "no-such-vpc" in err.value.message


def test_compute_adapter_gets_googles_errors_typed(fake_gcp, tmp_path) -> None:
    s = settings_for(fake_gcp, tmp_path)
    api = ComputeApi(s)
    body = access.firewall_body(s, ["203.0.113.7/32"])
    api.insert_firewall(body)
    with pytest.raises(Exception) as dup:
        api.insert_firewall(body)
    assert getattr(dup.value, "status", None) == "ALREADY_EXISTS" or "already exists" in str(dup.value)
    with pytest.raises(NotFoundError):
        api.get_firewall("tpu-devops-nothing")
    assert [r["name"] for r in api.list_firewalls("tpu-devops-")] == ["tpu-devops-gemma4-e2b"]
    fake_gcp.compute.denied.add("delete")
    with pytest.raises(PermissionError_) as denied:
        api.delete_firewall("tpu-devops-gemma4-e2b")
    assert "compute.firewalls.delete" in denied.value.message and "roles/compute.securityAdmin" in (
        denied.value.fix or ""
    )
    fake_gcp.compute.denied.clear()
    api.delete_firewall("tpu-devops-gemma4-e2b")
    with pytest.raises(NotFoundError):
        api.delete_firewall("tpu-devops-gemma4-e2b")
    # every write carried a requestId (a retried write is not applied twice)
    writes = [r for r in fake_gcp.compute.requests if r["method"] in ("POST", "DELETE", "PATCH")]
    assert writes and all(r["query"].get("requestId") for r in writes)


def test_a_write_repeated_with_its_request_id_is_applied_once(fake_gcp, tmp_path) -> None:
    import httpx

    s = settings_for(fake_gcp, tmp_path)
    body = access.firewall_body(s, ["203.0.113.7/32"])
    url = f"{fake_gcp.url}/compute/v1/projects/demo-project/global/firewalls?requestId=abc"
    first = httpx.post(url, json=body).json()
    second = httpx.post(url, json=body).json()  # the "lost response" retry
    assert first["name"] == second["name"] and len(fake_gcp.compute.firewalls) == 1


def test_build_request_keeps_the_access_shape_in_one_place(fake_gcp, tmp_path) -> None:
    s = settings_for(fake_gcp, tmp_path, RESOURCE_ID="other-rig", TPU_EXTERNAL_IP="0")
    node = build_request(
        s, zone="us-west4-a", qr_id="other-rig", provisioning_model="spot", startup_script="#"
    )["tpu"]["nodeSpec"][0]["node"]
    assert node["tags"] == ["tpu-devops-other-rig"] and node["networkConfig"] == {"enableExternalIps": False}


async def test_a_refused_create_or_a_fruitless_sweep_leaves_no_rule_behind(fake_gcp, tmp_path) -> None:
    from tpu_devops.errors import CloudError
    from tpu_devops.host.jobs import JOBS
    from tpu_devops.provisioning.sweep import SweepOptions, start_sweep

    fake_gcp.secrets.put("hf-token", TOKEN)
    s = settings_for(fake_gcp, tmp_path)
    fake_gcp.tpu.script("us-west4-a", "permission_denied")
    with pytest.raises(CloudError):
        await create_queued_resource(s, zone="us-west4-a")
    assert fake_gcp.compute.firewalls == {}  # made for a TPU that was refused, then removed
    fake_gcp.tpu.script("us-west4-b", "unsupported")
    opts = SweepOptions(
        provisioning_model="flex-start", zones=["us-west4-b"], zone_budget_s=5, poll_interval_s=0.05,
        max_zones=1, max_run_duration_s=None, valid_until_duration_s=None,
    )  # fmt: skip
    started = await start_sweep(s, opts)
    assert started.endpoint_access is not None and started.endpoint_access.action == "created"
    import anyio

    for _ in range(400):
        if JOBS.get(started.job_id).state != "running":
            break
        await anyio.sleep(0.05)
    job = JOBS.get(started.job_id)  # a sweep without a TPU is a failed job (its result says why)
    assert job.state == "failed" and job.result["outcome"] == "no_capacity", job.snapshot()
    assert fake_gcp.compute.firewalls == {}  # the sweep found nothing: its rule went too


@pytest.mark.parametrize(
    "variable,value",
    [
        ("GOOGLE_CLOUD_REGION", "us-east5"),  # the configured zone is then outside it
        ("LIMIT_MM_PER_PROMPT", "{image:4}"),
        ("MAX_MODEL_LEN", "16k"),
        ("GPU_MEMORY_UTILIZATION", "high"),
        ("MAX_NUM_BATCHED_TOKENS", "4k"),
        ("TENSOR_PARALLEL_SIZE", "one"),
    ],
)
async def test_a_bad_setting_refuses_create_and_find_tpu_before_anything_is_made(
    fake_gcp, tmp_path, variable, value
) -> None:
    """The server starts with an invalid tpu.env (to show the error); create and the sweep must refuse with it
    before making the API key, the firewall rule or the bucket, not after (a half-done change)."""
    from tpu_devops.config import load_settings_or_errors
    from tpu_devops.provisioning.sweep import SweepOptions, start_sweep

    fake_gcp.secrets.put("hf-token", TOKEN)
    s = load_settings_or_errors(environ=gcp_environ(fake_gcp, tmp_path, **{variable: value}))
    assert s.config_errors
    opts = SweepOptions(
        provisioning_model="flex-start", zones=None, zone_budget_s=5, poll_interval_s=0.05, max_zones=1,
        max_run_duration_s=None, valid_until_duration_s=None,
    )  # fmt: skip
    for attempt in (lambda: create_queued_resource(s, zone="us-central1-a"), lambda: start_sweep(s, opts)):
        with pytest.raises(ConfigError) as err:
            await attempt()
        assert err.value.field in {variable, "GOOGLE_CLOUD_ZONE"} and "restart the server" in (
            err.value.fix or ""
        )
    assert fake_gcp.compute.firewalls == {} and "vllm-api-key" not in fake_gcp.secrets.secrets
    assert fake_gcp.tpu.creates() == [] and not fake_gcp.storage.buckets


async def test_a_cancelled_sweep_deletes_the_rule_it_made(fake_gcp, tmp_path) -> None:
    import anyio

    from tpu_devops.host.jobs import JOBS
    from tpu_devops.provisioning.sweep import SweepOptions, start_sweep

    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.timings = {"ACCEPTED": 0, "WAITING_FOR_RESOURCES": 3600, "PROVISIONING": 0}
    s = settings_for(fake_gcp, tmp_path)
    opts = SweepOptions(
        provisioning_model="flex-start", zones=["us-west4-a"], zone_budget_s=600, poll_interval_s=0.05,
        max_zones=1, max_run_duration_s=None, valid_until_duration_s=None,
    )  # fmt: skip
    started = await start_sweep(s, opts)
    assert started.endpoint_access is not None and started.endpoint_access.action == "created"
    for _ in range(400):  # the request is waiting for capacity
        if fake_gcp.tpu.creates():
            break
        await anyio.sleep(0.05)
    await JOBS.cancel(started.job_id)
    for _ in range(400):
        if JOBS.get(started.job_id).state != "running":
            break
        await anyio.sleep(0.05)
    assert JOBS.get(started.job_id).state == "cancelled"
    assert fake_gcp.compute.firewalls == {}  # no TPU carries its tag any more


async def test_the_plan_says_which_service_it_asked_for_your_ip_and_how_not_to(fake_gcp, tmp_path) -> None:
    fake_gcp.public_ip.address = "198.51.100.23"
    own = f"{fake_gcp.url}/public-ip"
    plan = await plan_queued_resource(settings_for(fake_gcp, tmp_path, PUBLIC_IP_LOOKUP_URL=own))
    said = next(n for n in plan.endpoint_access.notes if n.startswith("to find your public IPv4"))
    assert f"asked {own} (PUBLIC_IP_LOOKUP_URL)" in said and "set ALLOWED_SOURCE_RANGES" in said
    assert said in plan.render_text() and "by asking 127.0.0.1" in plan.headline()
    calls = fake_gcp.public_ip.calls
    for quiet in ({"ALLOWED_SOURCE_RANGES": "203.0.113.9/32"}, {"TPU_EXTERNAL_IP": "0"}):
        plan = await plan_queued_resource(settings_for(fake_gcp, tmp_path, **quiet))
        assert not any("to find your public IPv4" in n for n in plan.endpoint_access.notes)
    plan = await plan_queued_resource(settings_for(fake_gcp, tmp_path), allowed_source_ranges=["203.0.113.9"])
    assert not any("to find your public IPv4" in n for n in plan.endpoint_access.notes)
    assert fake_gcp.public_ip.calls == calls  # none of those asked anyone


def test_the_default_lookup_is_named_a_third_party_service(tmp_path) -> None:
    s = load_settings(environ={"TPU_DEVOPS_ENV_FILE": "none"})
    assert access.lookup_disclosure(s) == (
        "to find your public IPv4 this asked https://api.ipify.org (a third-party service); to make no such "
        "request set ALLOWED_SOURCE_RANGES in tpu.env or pass allowed_source_ranges (e.g. 203.0.113.7/32)"
    )
