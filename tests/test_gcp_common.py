"""What the Google adapters share: typed errors with fixes, and missing credentials reported as such."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc

from tpu_devops.errors import CloudError, NotFoundError, PermissionError_, QuotaError
from tpu_devops.gcp import common


@pytest.mark.parametrize(
    ("exc", "kind", "status"),
    [
        (gexc.NotFound("GET http://x/v2/p: Resource 'q' was not found"), NotFoundError, "NOT_FOUND"),
        (gexc.Forbidden("Permission 'tpu.nodes.get' denied"), PermissionError_, "PERMISSION_DENIED"),
        (
            gexc.TooManyRequests("Quota 'X' exhausted. Limit 4 in region us-west4"),
            QuotaError,
            "RESOURCE_EXHAUSTED",
        ),
        (gexc.ServiceUnavailable("The service is currently unavailable."), CloudError, "UNAVAILABLE"),
        (gexc.BadRequest("Accelerator type is invalid"), CloudError, "INVALID_ARGUMENT"),
    ],
)
def test_api_error_types_every_error_and_gives_a_fix(exc: Exception, kind: type, status: str) -> None:
    err = common.api_error(exc, action="do it")
    assert type(err) is kind and err.status == status and err.fix
    assert err.message.startswith("do it: ") and "http://" not in err.message


def test_retries_that_ran_out_are_typed_by_the_last_error() -> None:
    from tpu_devops.provisioning.failures import classify_exception

    last = gexc.ServiceUnavailable("POST http://127.0.0.1:1/v2/x: The service is currently unavailable.")
    err = common.api_error(gexc.RetryError("Timeout of 45.0s exceeded", cause=last), action="create")
    assert (err.http_code, err.status) == (503, "UNAVAILABLE") and "http://" not in err.message
    assert classify_exception(err).reach == "transient"


def test_disabled_api_fix_names_the_service_to_enable() -> None:
    exc = gexc.Forbidden(
        "Cloud TPU API has not been used in project 123 before or it is disabled. Enable it by visiting "
        "https://console.developers.google.com/apis/api/tpu.googleapis.com/overview?project=123 then retry."
    )
    assert (
        common.api_error(exc, action="list").fix
        == "enable the API: gcloud services enable tpu.googleapis.com"
    )


def test_missing_credentials_are_a_typed_error_naming_the_fix(monkeypatch, tmp_path, gcp_settings) -> None:
    from tpu_devops.gcp.quotas import list_tpu_quota_limits

    # google.auth.default() fails at once (no network) when GOOGLE_APPLICATION_CREDENTIALS names no file.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(PermissionError_) as err:
        common.adc_project()
    assert err.value.field == "credentials" and "application-default login" in err.value.fix
    public = gcp_settings.model_copy(update={"gcp_endpoint": ""})
    with pytest.raises(PermissionError_) as err:  # raised while building the client, before any request
        list_tpu_quota_limits(public)
    assert err.value.field == "credentials"
