"""check_setup (setup and status views) and save_hf_token against the fake."""

from __future__ import annotations

import pytest

from tests.conftest import gcp_environ
from tests.fakes.openai_server import FakeVllm
from tpu_devops import setup_check
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError, InputError

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"
KEY = "setupCheckKey-0123456789abcdefghijklmnopq"


async def test_check_setup_names_each_failure_with_its_fix(fake_gcp, gcp_settings) -> None:
    report = await setup_check.check_setup(gcp_settings)
    checks = {c.name: c for c in report.checks}
    assert checks["credentials"].ok and checks["project"].ok and checks["tpu_api"].ok and checks["quota"].ok
    assert not checks["hf_secret"].ok and checks["hf_secret"].fix == "run save_hf_token"
    assert report.ready is False and "hf_secret" in report.headline()
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign(
        "us-west4-a", "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    )
    fake_gcp.secrets.put("vllm-api-key", KEY)
    with FakeVllm(api_key=KEY) as vllm:  # the node's endpoint: the fake hands out 127.0.0.1
        settings = gcp_settings.model_copy(update={"vllm_port": int(vllm.url.rsplit(":", 1)[1])})
        report = await setup_check.check_setup(settings)
        assert report.ready and [t["id"] for t in report.our_tpus] == ["gemma4-e2b"], report.render_text()
        endpoint = next(c for c in report.checks if c.name == "endpoint")
        assert "answers /health and /v1/models; API key from secret vllm-api-key accepted" in endpoint.detail
    # nothing listens there any more: the check says so, with the fix for that case
    report = await setup_check.check_setup(settings)
    endpoint = next(c for c in report.checks if c.name == "endpoint")
    assert (
        not endpoint.ok
        and "not listening" in endpoint.detail
        and "diagnose_vllm_boot" in (endpoint.fix or "")
    )
    assert KEY not in report.model_dump_json() + report.render_text()


async def test_check_setup_without_project(fake_gcp, tmp_path) -> None:
    env = gcp_environ(fake_gcp, tmp_path)
    env["GOOGLE_CLOUD_PROJECT"] = ""
    report = await setup_check.check_setup(load_settings(environ=env))
    assert (
        not report.ready
        and report.checks[-1].name == "project"
        and "GOOGLE_CLOUD_PROJECT" in report.checks[-1].fix
    )


async def test_quota_zero_in_configured_zone_is_a_failed_check(fake_gcp, gcp_settings) -> None:
    fake_gcp.quotas.set_limit("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", "us-west4-a", 0)
    report = await setup_check.check_setup(gcp_settings)
    quota = next(c for c in report.checks if c.name == "quota")
    assert not quota.ok and "get_zones_with_available_quota" in quota.fix


@pytest.mark.parametrize("bad", ["", "hf_short", "ghp_" + "a" * 36, TOKEN + "!", "hf_" + "é" * 30])
def test_token_shape_errors_never_echo_the_token(bad: str) -> None:
    with pytest.raises(InputError) as err:
        setup_check.check_hf_token_shape(bad)
    text = str(err.value) + repr(err.value.as_dict())
    assert err.value.field == "token"
    if bad:
        assert bad not in text


async def test_save_hf_token_stores_it_and_returns_only_the_version(fake_gcp, gcp_settings) -> None:
    saved = await setup_check.save_hf_token(gcp_settings, TOKEN)
    assert saved.version.endswith("/versions/1") and TOKEN not in saved.model_dump_json()
    assert fake_gcp.secrets.secrets["hf-token"] == [TOKEN.encode()]


async def test_system_status_collects_every_part(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.add_foreign(
        "us-west4-a", "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    )
    status = await setup_check.system_status(gcp_settings)
    assert status.reservation["state"] == "ACTIVE" and status.endpoint["status"] == "discovered"
    # a TPU of the rig without its firewall rule is a problem the dashboard names
    assert len(status.problems) == 1 and "no firewall rule" in status.problems[0], status.problems
    from tpu_devops.provisioning import access

    name = access.rule_name("gemma4-e2b")
    fake_gcp.compute.firewalls[name] = {
        "name": name, "description": access.description("gemma4-e2b"), "sourceRanges": ["203.0.113.7/32"],
        "allowed": [{"IPProtocol": "tcp", "ports": ["8000"]}], "targetTags": [name],
    }  # fmt: skip
    status = await setup_check.system_status(gcp_settings)
    assert status.problems == [] and any("firewall rule" in line for line in status.rig), status.rig


async def test_save_without_project_is_a_config_error(fake_gcp, tmp_path) -> None:
    env = gcp_environ(fake_gcp, tmp_path)
    env["GOOGLE_CLOUD_PROJECT"] = ""
    with pytest.raises(ConfigError):
        await setup_check.save_hf_token(load_settings(environ=env), TOKEN)


async def test_disabled_api_check_says_which_api_to_enable(fake_gcp, gcp_settings) -> None:
    fake_gcp.quotas.disabled = True
    report = await setup_check.check_setup(gcp_settings)
    quota = next(c for c in report.checks if c.name == "quota")
    assert not quota.ok and "gcloud services enable cloudquotas.googleapis.com" in quota.fix
