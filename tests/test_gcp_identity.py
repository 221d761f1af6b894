"""The ADC principal behind the created-by label (`tpu_devops.gcp.identity`), read by google-auth itself
from real ADC files (no network)."""

from __future__ import annotations

import json
import re

import pytest

from tpu_devops.gcp.identity import adc_principal, created_by_label


@pytest.fixture(autouse=True)
def _fresh():
    adc_principal.cache_clear()
    yield
    adc_principal.cache_clear()


def _user_file(tmp_path, name: str, account: str | None) -> str:
    info = {
        "type": "authorized_user",
        "client_id": "c.apps.googleusercontent.com",
        "client_secret": "s",
        "refresh_token": "r",
    }
    if account is not None:
        info["account"] = account
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(info))
    return str(path)


def test_user_credentials_name_their_account(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _user_file(tmp_path, "alice", "Alice@Example.com"))
    assert adc_principal() == "alice@example.com"


def test_without_a_principal_the_local_user_and_host_stand_in(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _user_file(tmp_path, "anon", None))
    assert adc_principal().startswith("local:")
    adc_principal.cache_clear()
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    assert adc_principal().startswith("local:")  # no ADC at all: never raises


def test_label_is_label_value_safe_and_tells_principals_apart() -> None:
    labels = {
        created_by_label(p) for p in ("alice@example.com", "bob@example.com", "svc@p.iam.gserviceaccount.com")
    }
    assert len(labels) == 3
    # GCP label values: lowercase letters, digits, '_' and '-', at most 63 characters.
    assert all(re.fullmatch(r"[a-z0-9_-]{1,63}", label) for label in labels)
    assert created_by_label("alice@example.com") == created_by_label("alice@example.com")
