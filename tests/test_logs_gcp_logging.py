"""The real google-cloud-logging client (HTTP transport) against FakeLogging: paging and errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import FIXTURES
from tests.fakes.gcp import FakeGcp
from tpu_devops.config import Settings, load_settings
from tpu_devops.errors import InputError, PermissionError_
from tpu_devops.gcp.logging import list_entries_page, logging_client

EXPORT = FIXTURES / "logs" / "v5e1-util095-export.json"
SINCE = 'timestamp>="2026-08-07T00:00:00Z"'


@pytest.fixture(scope="module")
def gcp() -> Iterator[FakeGcp]:
    with FakeGcp() as fake:
        fake.logging.load_export(EXPORT)
        yield fake


@pytest.fixture
def settings(gcp: FakeGcp) -> Settings:
    return load_settings(
        environ={
            "GOOGLE_CLOUD_PROJECT": "my-project",
            "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
            "TPU_DEVOPS_ENV_FILE": "/nonexistent",
        }
    )


def test_client_uses_the_http_transport_and_local_endpoint(settings: Settings, gcp: FakeGcp) -> None:
    client = logging_client(settings)
    assert client._use_grpc is False
    assert client._connection.API_BASE_URL == gcp.url


def test_pages_follow_next_page_token_without_gaps(settings: Settings, gcp: FakeGcp) -> None:
    flt = f"{SINCE} AND severity>=ERROR"
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = list_entries_page(settings, filter_=flt, order="asc", page_size=40, page_token=token)
        seen += [e["insertId"] for e in page["entries"]]
        pages += 1
        token = page["nextPageToken"]
        if not token:
            break
    assert pages == 5 and len(seen) == 165 == len(set(seen))
    body = gcp.logging.requests[-1]
    assert body["resourceNames"] == ["projects/my-project"]
    assert body["orderBy"] == "timestamp asc" and body["pageSize"] == 40 and body["filter"] == flt


def test_newest_first_by_default(settings: Settings) -> None:
    page = list_entries_page(settings, filter_=SINCE, page_size=3)
    stamps = [e["timestamp"] for e in page["entries"]]
    assert stamps == sorted(stamps, reverse=True)


def test_errors_are_classified(settings: Settings, gcp: FakeGcp) -> None:
    with pytest.raises(InputError) as err:
        list_entries_page(settings, filter_="severity>=", page_size=5)
    assert err.value.field == "filter"
    gcp.logging.fail_next = (403, "PERMISSION_DENIED", "Permission 'logging.logEntries.list' denied")
    with pytest.raises(PermissionError_) as perm:
        list_entries_page(settings, filter_=SINCE, page_size=5)
    assert "logging.viewer" in str(perm.value)
    with pytest.raises(InputError):
        list_entries_page(settings, filter_=SINCE, page_size=5000)
    with pytest.raises(InputError):
        list_entries_page(settings, filter_=SINCE, order="sideways")


def test_429_is_retried_then_succeeds(settings: Settings, gcp: FakeGcp) -> None:
    gcp.logging.fail_next = (429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Read requests'")
    page = list_entries_page(settings, filter_=SINCE, page_size=2)
    assert len(page["entries"]) == 2


def test_a_bad_page_token_names_the_page_token(settings: Settings) -> None:
    with pytest.raises(InputError) as err:
        list_entries_page(settings, filter_=SINCE, page_size=5, page_token="garbage")
    assert err.value.field == "page_token" and "next_page_token" in (err.value.fix or "")
