"""`tpu_devops.gcp.metadata` and `tpu_devops.gcp.adc`: the metadata server is asked only where there is a
reason to think this is a Google Cloud VM, once, with a short timeout; without credentials google-auth is
not reached. Real sockets on loopback: a fake metadata server, a port that never answers, one that drops
the connection attempt, one that answers as something else."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.dead_ports import dropping_port, silent_port
from tests.fakes.vm.metadata import FakeMetadata
from tpu_devops.gcp import adc, metadata


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch, tmp_path):
    """A probe of its own per test, no credentials files, no metadata variables, no NO_GCE_CHECK."""
    monkeypatch.setattr(metadata, "_probe", metadata._Probe())
    for var in (*metadata.HINT_VARIABLES, *metadata.RUNTIME_VARIABLES, "NO_GCE_CHECK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))


def point_at(monkeypatch, address: str) -> None:
    monkeypatch.setenv("GCE_METADATA_HOST", address)
    monkeypatch.setenv("GCE_METADATA_IP", address)


def test_no_reason_to_think_this_is_a_vm_means_no_probe(tmp_path: Path) -> None:
    none = tmp_path / "product_name"
    assert metadata.gce_hint({}, none) is None
    none.write_text("Standard PC (Q35 + ICH9, 2009)\n")
    assert metadata.gce_hint({}, none) is None
    none.write_text("Google Compute Engine\n")
    assert metadata.gce_hint({}, none) == "the DMI product name is 'Google Compute Engine'"
    assert metadata.gce_hint({"NO_GCE_CHECK": "true"}, none) is None  # google-auth's off switch wins
    missing = tmp_path / "missing"
    for var in ("GCE_METADATA_HOST", "GCE_METADATA_ROOT", "GCE_METADATA_IP", "K_SERVICE", "CLOUD_RUN_JOB"):
        assert metadata.gce_hint({var: "x"}, missing) == f"{var} is set"
    assert metadata.gce_hint({"GCE_METADATA_HOST": "  "}, missing) is None


def test_without_a_hint_nothing_is_sent_and_the_answer_is_immediate() -> None:
    state = metadata.metadata_server(wait=True)
    assert state.answered is False and "no metadata server was asked" in state.detail
    assert metadata._probe.thread is None


def test_a_metadata_server_that_answers_is_found(monkeypatch) -> None:
    fake = FakeMetadata(project="vm-project-7").start()
    try:
        point_at(monkeypatch, fake.url.removeprefix("http://"))
        state = metadata.metadata_server(wait=True)
        assert (
            state.answered is True
            and "answered" in state.detail
            and "GCE_METADATA_HOST is set" in state.detail
        )
        assert fake.requests == [("GET", "/")]
        assert metadata.metadata_server(wait=True).answered is True
        assert fake.requests == [("GET", "/")]  # asked once per process
    finally:
        fake.stop()


def test_something_else_on_the_port_is_not_a_metadata_server(monkeypatch) -> None:
    from tests.fakes.openai_server import FakeVllm

    other = FakeVllm().start()
    try:
        point_at(monkeypatch, other.url.removeprefix("http://"))
        state = metadata.metadata_server(wait=True)
        assert state.answered is False and "not as a Google metadata server" in state.detail
    finally:
        other.stop()


def test_a_port_that_never_answers_is_given_up_on_after_the_short_timeout(monkeypatch) -> None:
    with silent_port() as (address, accepted):
        point_at(monkeypatch, address)
        pending = metadata.metadata_server(wait=False)  # get_help's view: not known yet, no wait
        assert pending.answered is None and "has not answered yet" in pending.detail
        start = time.monotonic()
        state = metadata.metadata_server(wait=True)
        waited = time.monotonic() - start
        assert state.answered is False and address in state.detail
        # bounded by the probe's own timeout (generous margin for a loaded machine; google-auth took >= 3 s)
        assert waited <= metadata.PROBE_TIMEOUT_S + 2.0
        metadata._probe.done.wait(5)
        assert metadata.metadata_server(wait=True).answered is False
        assert len(accepted) == 1  # one probe, not google-auth's three tries


def test_a_port_that_drops_the_connection_attempt_is_given_up_on(monkeypatch) -> None:
    with dropping_port() as (address, _):
        point_at(monkeypatch, address)
        state = metadata.metadata_server(wait=True)
        assert state.answered is False
        assert metadata._probe.done.wait(5)
        assert "did not answer" in metadata.metadata_server(wait=False).detail


def test_a_missing_answer_is_asked_again_after_a_while(monkeypatch) -> None:
    with silent_port() as (address, accepted):
        point_at(monkeypatch, address)
        metadata.metadata_server(wait=True)
        assert metadata._probe.done.wait(5)
        metadata.metadata_server(wait=True)
        assert len(accepted) == 1
        monkeypatch.setattr(metadata, "RETRY_AFTER_S", 0.0)
        metadata.metadata_server(wait=True)
        assert metadata._probe.done.wait(5)
        deadline = time.monotonic() + 5
        while len(accepted) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(accepted) == 2


def test_no_credentials_fail_at_once_with_where_it_looked(monkeypatch, tmp_path: Path) -> None:
    from google.auth.exceptions import DefaultCredentialsError

    with silent_port() as (address, accepted):
        point_at(monkeypatch, address)
        with pytest.raises(DefaultCredentialsError) as err:
            adc.default_credentials()
        text = str(err.value)
        assert text.startswith(adc.LOOKED)
        assert str(tmp_path / "gcloud" / "application_default_credentials.json") in text
        assert f"{address}" in text and "did not answer" in text
        with pytest.raises(DefaultCredentialsError):
            adc.default_credentials()  # the missing answer is kept: no second probe, no wait
        assert len(accepted) == 1


def test_on_a_vm_google_auth_gets_the_credentials_and_project(monkeypatch) -> None:
    fake = FakeMetadata(project="vm-project-7").start()
    try:
        point_at(monkeypatch, fake.url.removeprefix("http://"))
        credentials, project = adc.default_credentials()
        assert project == "vm-project-7"
        assert type(credentials).__module__.startswith("google.auth.compute_engine")
    finally:
        fake.stop()


def test_a_credentials_file_is_read_without_asking_any_metadata_server(monkeypatch, tmp_path: Path) -> None:
    import json

    path = tmp_path / "user.json"
    path.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "c",
                "client_secret": "s",
                "refresh_token": "r",
                "quota_project_id": "quota-project-1",
            }  # fmt: skip
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    with silent_port() as (address, accepted):
        point_at(monkeypatch, address)
        credentials, _ = adc.default_credentials()
        assert credentials.quota_project_id == "quota-project-1"
        assert accepted == [] and metadata._probe.thread is None
