"""Credential failures end within the call's budget with their real cause and fix: real google-auth
credentials (a service-account key file) against a loopback fake token endpoint, never a Google host."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.fakes.http_runner import ServerThread
from tests.fakes.token_endpoint import TokenEndpoint, blackhole, service_account_file
from tpu_devops import setup_check
from tpu_devops.config import load_settings
from tpu_devops.errors import CloudError, DeadlineError, PermissionError_
from tpu_devops.gcp import common
from tpu_devops.host import deadline

pytestmark = pytest.mark.anyio
# Far above what a bounded call takes on a loaded machine, far below google-auth's own 120 s wait: a bound
# that tells "ended at the budget" from "waited for google-auth's timeout", not a speed target.
GENEROUS_S = 60.0


@pytest.fixture
def settings(tmp_path):
    return load_settings(
        environ={
            "GOOGLE_CLOUD_PROJECT": "demo-project",
            "TPU_DEVOPS_STATE_DIR": str(tmp_path),
            "TPU_DEVOPS_ENV_FILE": str(tmp_path / "no-tpu.env"),
        }
    )


@pytest.fixture
def adc_at(tmp_path, monkeypatch) -> Iterator:
    """Point ADC at an authorized_user file whose token endpoint is the URL given."""

    def point(token_uri: str) -> None:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account_file(tmp_path, token_uri)))
        common._adc.cache_clear()

    yield point
    common._adc.cache_clear()


def _no_python_form(text: str) -> None:
    assert "{'error'" not in text and "('" not in text and "HTTPConnectionPool(" not in text, text


def test_good_credentials_get_a_token_and_say_what_they_are(settings, adc_at) -> None:
    fake = TokenEndpoint("ok")
    with ServerThread(fake.app) as srv:
        adc_at(f"{srv.url}/token")
        assert common.verify_credentials(settings) == (
            "service_account credentials for tpu-devops-test@demo-project.iam.gserviceaccount.com"
        )
    assert fake.requests[0]["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"


async def test_a_revoked_key_is_not_credentials_ok(settings, adc_at) -> None:
    fake = TokenEndpoint("revoked")
    with ServerThread(fake.app) as srv:
        adc_at(f"{srv.url}/token")
        report = await setup_check.check_setup(settings)
    checks = {c.name: c for c in report.checks}
    cred = checks["credentials"]
    assert not cred.ok and not report.ready
    assert "refused the credentials" in cred.detail and "invalid_grant: Invalid JWT Signature" in cred.detail
    assert "gcloud auth application-default login" in (cred.fix or "") and "keys create" in (cred.fix or "")
    _no_python_form(cred.detail)
    # nothing else asks Google with credentials that failed (no real host, no second wait)
    assert not checks["google_apis"].ok and "not checked" in checks["google_apis"].detail
    assert "tpu_api" not in checks and len(fake.requests) == 1


def test_a_revoked_key_on_a_real_call_is_typed_with_its_fix(settings, adc_at) -> None:
    """What a create (or any Google call) sees: the AuthorizedSession's refresh refused, under
    google_errors, is a PermissionError_ naming invalid_grant, never a raw tuple or a generic fix."""
    from google.auth.transport.requests import AuthorizedSession

    fake = TokenEndpoint("revoked")
    api = TokenEndpoint("ok")
    with ServerThread(fake.app) as tok, ServerThread(api.app) as other:
        adc_at(f"{tok.url}/token")
        session = common.bounded_session(AuthorizedSession(common.endpoint_credentials("")))
        with (
            pytest.raises(PermissionError_) as caught,
            common.google_errors("create the queued resource", "tpu"),
        ):
            session.post(f"{other.url}/token", data={})
    err = caught.value
    assert err.field == "credentials" and err.status == "UNAUTHENTICATED"
    assert err.message.startswith(
        "create the queued resource: Google's token endpoint refused the credentials"
    )
    assert "revoked" in (err.fix or "") and "check the values named" not in (err.fix or "")
    _no_python_form(str(err))
    assert api.requests == []  # the API never saw a request without a token


@pytest.mark.parametrize("budget_s", [4.0, 25.0])
def test_an_unanswering_token_endpoint_ends_within_the_budget(settings, adc_at, budget_s) -> None:
    with blackhole() as url:
        adc_at(url)
        started = time.monotonic()
        with deadline.budget(budget_s), pytest.raises(CloudError) as caught:
            common.verify_credentials(settings)
        took = time.monotonic() - started
    err = caught.value
    assert err.field == "credentials" and err.status == "DEADLINE_EXCEEDED"
    assert "token endpoint did not answer" in str(err) and "HTTPS_PROXY" in (err.fix or "")
    assert "narrow the request" not in (err.fix or "")
    _no_python_form(str(err))
    assert took < GENEROUS_S


async def test_check_setup_with_an_unanswering_token_endpoint_says_so(settings, adc_at) -> None:
    with blackhole() as url:
        adc_at(url)
        started = time.monotonic()
        async with deadline.tool_call("check_setup"):
            report = await setup_check.check_setup(settings)
        took = time.monotonic() - started
    cred = {c.name: c for c in report.checks}["credentials"]
    assert not cred.ok and "did not answer" in cred.detail and "network" in (cred.fix or "")
    assert took < GENEROUS_S


def test_an_unreachable_token_endpoint_is_named_at_once(settings, adc_at) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    adc_at(f"http://127.0.0.1:{port}/token")
    with pytest.raises(CloudError) as caught:
        common.verify_credentials(settings)
    err = caught.value
    assert (
        "could not be reached" in str(err) and f"127.0.0.1:{port}" in str(err) and err.status == "UNAVAILABLE"
    )
    assert "Connection refused" in str(err) or "refused" in str(err).lower()
    _no_python_form(str(err))


def test_a_failing_token_endpoint_is_retried_then_named(settings, adc_at) -> None:
    fake = TokenEndpoint("unavailable")
    with ServerThread(fake.app) as srv:
        adc_at(f"{srv.url}/token")
        with pytest.raises(CloudError) as caught:
            common.verify_credentials(settings)
    assert "token endpoint failed" in str(caught.value) and "try again shortly" in (caught.value.fix or "")
    assert len(fake.requests) >= 2  # google-auth's own retries of a 503
    _no_python_form(str(caught.value))


def test_no_token_request_once_the_budget_is_spent(settings, adc_at) -> None:
    fake = TokenEndpoint("ok")
    with ServerThread(fake.app) as srv:
        adc_at(f"{srv.url}/token")
        with deadline.budget(0.2), pytest.raises(DeadlineError):
            common.verify_credentials(settings)
    assert fake.requests == []
