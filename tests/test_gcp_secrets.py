"""The Secret Manager adapter through the real google-cloud-secret-manager REST client against the fake."""

from __future__ import annotations

import pytest

from tpu_devops.errors import PermissionError_
from tpu_devops.gcp.secrets import add_secret_version, secret_status

TOKEN = "hf_PlantedSecretValue0123456789abcdef"


def test_missing_then_created_then_new_version(fake_gcp, gcp_settings) -> None:
    assert secret_status(gcp_settings, "hf-token").exists is False
    name = add_secret_version(gcp_settings, "hf-token", TOKEN)
    assert name == "projects/demo-project/secrets/hf-token/versions/1"
    assert TOKEN not in name
    status = secret_status(gcp_settings, "hf-token")
    assert status.exists and status.state == "ENABLED" and status.latest_version.endswith("/versions/1")
    assert add_secret_version(gcp_settings, "hf-token", TOKEN).endswith("/versions/2")
    assert fake_gcp.secrets.secrets["hf-token"] == [TOKEN.encode(), TOKEN.encode()]


def test_status_never_reads_the_payload(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    secret_status(gcp_settings, "hf-token")
    assert not any(r["path"].endswith(":access") for r in fake_gcp.secrets.requests)


def test_secret_without_version_and_denied(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.secrets["empty"] = []
    assert secret_status(gcp_settings, "empty").latest_version is None
    fake_gcp.secrets.put("locked", TOKEN)
    fake_gcp.secrets.denied.add("locked")
    with pytest.raises(PermissionError_) as err:
        secret_status(gcp_settings, "locked")
    assert "roles/secretmanager.admin" in err.value.fix
