"""The dry run of a create (`tpu_devops.provisioning.plan`)."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.conftest import gcp_environ
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError
from tpu_devops.provisioning.plan import plan_queued_resource
from tpu_devops.provisioning.queued import create_queued_resource
from tpu_devops.provisioning.requests import PLACEHOLDER_PROJECT, redacted_request

pytestmark = pytest.mark.anyio


async def test_plan_shows_request_command_price_and_warnings(fake_gcp, tmp_path) -> None:
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_NETWORK="my-vpc"))
    plan = await plan_queued_resource(settings, zone="europe-west4-a")
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
    here = await plan_queued_resource(settings, zone="us-west4-a")
    assert here.usd_per_hour and here.max_cost_usd == pytest.approx(here.usd_per_hour * 4, rel=0.01)
    assert here.price_source.startswith("us-west4: live Billing Catalog")
    spot = await plan_queued_resource(settings, provisioning_model="spot")
    assert spot.stops_billing.startswith("WARNING: spot never stops by itself")
    assert fake_gcp.tpu.creates() == []  # a plan sends nothing


async def test_plan_refuses_bad_arguments(gcp_settings) -> None:
    with pytest.raises(ConfigError) as err:
        await plan_queued_resource(gcp_settings, zone="us-west4")
    assert err.value.field == "zone"
    with pytest.raises(ConfigError) as err:
        await plan_queued_resource(gcp_settings, max_run_duration_s=60)
    assert err.value.field == "max_run_duration_s"
    with pytest.raises(ConfigError) as err:
        await plan_queued_resource(gcp_settings, provisioning_model="reserved")
    assert err.value.field == "provisioning_model"


@pytest.mark.anyio
async def test_plan_without_a_project_shows_a_placeholder_and_says_so(tmp_path) -> None:
    settings = load_settings(tmp_path / "none.env", environ={"TPU_DEVOPS_STATE_DIR": str(tmp_path)})
    plan = await plan_queued_resource(settings, zone="us-west4-a", provisioning_model="flex-start")
    assert PLACEHOLDER_PROJECT in plan.request_url
    assert any("GOOGLE_CLOUD_PROJECT is not set" in w for w in plan.warnings)
    # the gcloud line asks gcloud's configuration instead, in a form the shell expands
    assert '--project="$(gcloud config get-value project)"' in plan.gcloud_command
    assert PLACEHOLDER_PROJECT not in plan.gcloud_command


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("flex-start", {}),
        ("spot", {"TPU_NETWORK": "my-vpc", "TPU_SUBNETWORK": "my-subnet"}),
        ("on-demand", {"VALID_UNTIL_DURATION": "3600"}),
    ],
)
async def test_the_plan_shows_the_bytes_create_sends(fake_gcp, tmp_path, model: str, extra: dict) -> None:
    fake_gcp.secrets.put("hf-token", "hf_PlantedTokenValue9876543210zyxwvu")
    fake_gcp.tpu.networks.add("my-vpc")
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path, **extra))
    plan = await plan_queued_resource(settings, provisioning_model=model)
    created = await create_queued_resource(settings, provisioning_model=model)
    (sent,) = [r for r in fake_gcp.tpu.requests if r["method"] == "POST"]
    raw = sent["body"].encode("utf-8")
    assert len(raw) == plan.request_bytes and hashlib.sha256(raw).hexdigest() == plan.request_sha256
    assert redacted_request(json.loads(raw)) == plan.request
    assert plan.request_url.split("?")[0].endswith(sent["path"])
    assert f"requestId={created.request_id}" in sent["query"]
