"""The TPU adapter through the real google-cloud-tpu REST client (and the v2alpha1 REST path) against FakeTpu."""

from __future__ import annotations

import pytest

from tests.fakes.gcp.tpu import DEFAULT_ZONES, FakeClock
from tpu_devops.errors import CloudError, NotFoundError, PermissionError_, QuotaError
from tpu_devops.gcp.tpu import TpuApi
from tpu_devops.provisioning.requests import create_call

ZONE = "us-west4-a"


def body(model: str = "spot", labels: dict[str, str] | None = None) -> dict:
    node = {
        "acceleratorType": "v5litepod-1",
        "runtimeVersion": "v2-alpha-tpuv5-lite",
        "labels": labels or {"managed-by": "tpu-devops", "rig": "r1"},
        "networkConfig": {"enableExternalIps": True},
    }
    out: dict = {
        "tpu": {
            "nodeSpec": [{"parent": f"projects/demo-project/locations/{ZONE}", "nodeId": "r1", "node": node}]
        }
    }
    if model == "flex-start":
        out["provisioningModel"] = "FLEX_START"
        out["runDuration"] = {"maxRunDuration": "3600s"}
    elif model == "spot":
        out["spot"] = {}
    return out


def create(api: TpuApi, request: dict, request_id: str | None = None) -> dict:
    """Create ``request`` as the product does (`create_call`: version, exact text, requestId)."""
    sent = create_call(ZONE, "r1", request, request_id)
    return api.create_queued_resource(ZONE, "r1", sent.text, version=sent.version, request_id=sent.request_id)


def test_list_zones_reads_tpu_locations(gcp_settings) -> None:
    assert TpuApi(gcp_settings).list_zones() == sorted(DEFAULT_ZONES)


def test_list_zones_reads_every_page(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.locations_page_size = 10
    assert TpuApi(gcp_settings).list_zones() == sorted(DEFAULT_ZONES)
    pages = [r for r in fake_gcp.tpu.requests if r["path"].endswith("/locations")]
    assert len(pages) == 5 and "pageToken=40" in pages[-1]["query"]


def test_spot_create_goes_to_v2_and_walks_to_active(fake_gcp, gcp_settings) -> None:
    clock = FakeClock()
    fake_gcp.tpu.clock = clock
    fake_gcp.tpu.timings = {"ACCEPTED": 10, "WAITING_FOR_RESOURCES": 10, "PROVISIONING": 10}
    api = TpuApi(gcp_settings)
    op = create(api, body("spot"))
    assert op["name"].startswith(f"projects/demo-project/locations/{ZONE}/operations/")
    received = fake_gcp.tpu.creates()[-1]
    assert received["path"].startswith("/v2/") and "spot" in received["body"]
    seen = []
    for _ in range(4):
        seen.append(api.get_queued_resource(ZONE, "r1")["state"]["state"])
        clock.advance(10)
    assert seen == ["ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]
    node = api.get_node(ZONE, "r1")
    assert node["networkEndpoints"][0]["accessConfig"]["externalIp"] == fake_gcp.tpu.external_ip
    assert node["labels"] == {"managed-by": "tpu-devops", "rig": "r1"}


def test_a_node_gets_an_external_ip_only_when_asked(fake_gcp, gcp_settings) -> None:
    """As the API: enableExternalIps false or left out (its default) gives an internal address only."""
    fake_gcp.tpu.timings = {"ACCEPTED": 0, "WAITING_FOR_RESOURCES": 0, "PROVISIONING": 0}
    api = TpuApi(gcp_settings)
    for external in (False, None):
        request = body("spot")
        if external is None:
            del request["tpu"]["nodeSpec"][0]["node"]["networkConfig"]
        else:
            request["tpu"]["nodeSpec"][0]["node"]["networkConfig"]["enableExternalIps"] = external
        create(api, request)
        endpoint = api.get_node(ZONE, "r1")["networkEndpoints"][0]
        assert endpoint["ipAddress"].startswith("10.") and "accessConfig" not in endpoint
        fake_gcp.tpu.queued.clear()
        fake_gcp.tpu.nodes.clear()


def test_flex_start_create_goes_as_v2alpha1_rest_json_and_suspends_at_max_run(fake_gcp, gcp_settings) -> None:
    clock = FakeClock()
    fake_gcp.tpu.clock = clock
    api = TpuApi(gcp_settings)
    create(api, body("flex-start"))
    received = fake_gcp.tpu.creates()[-1]
    assert received["path"] == f"/v2alpha1/projects/demo-project/locations/{ZONE}/queuedResources"
    sent = received["body"]
    assert sent["provisioningModel"] == "FLEX_START" and sent["runDuration"] == {"maxRunDuration": "3600s"}
    assert "schedulingConfig" not in sent["tpu"]["nodeSpec"][0]["node"]
    assert api.get_queued_resource(ZONE, "r1")["state"]["state"] == "ACTIVE"
    clock.advance(3600)
    assert api.get_queued_resource(ZONE, "r1")["state"]["state"] == "SUSPENDED"
    with pytest.raises(NotFoundError):
        api.get_node(ZONE, "r1")


def test_errors_are_typed_with_google_status_and_message(fake_gcp, gcp_settings) -> None:
    api = TpuApi(gcp_settings)
    with pytest.raises(NotFoundError) as nf:
        api.get_queued_resource(ZONE, "missing")
    assert nf.value.status == "NOT_FOUND" and "http://" not in nf.value.google_message
    fake_gcp.tpu.script(ZONE, "permission_denied")
    with pytest.raises(PermissionError_) as pd:
        create(api, body("spot"))
    assert pd.value.http_code == 403 and "tpu.queuedResources.create" in pd.value.google_message
    fake_gcp.tpu.script(ZONE, "unsupported")
    with pytest.raises(CloudError) as us:
        create(api, body("flex-start"))
    assert us.value.status == "INVALID_ARGUMENT"
    assert us.value.google_message.startswith("FLEX_START provisioning model is not supported")


def test_429_and_503_are_retried_once_then_succeed(fake_gcp, gcp_settings) -> None:
    api = TpuApi(gcp_settings)
    fake_gcp.tpu.fail_next(429)
    fake_gcp.tpu.fail_next(503)
    assert api.list_queued_resources(ZONE) == []
    statuses = [r["path"] for r in fake_gcp.tpu.requests]
    assert len(statuses) == 3  # two failures, then the answer
    fake_gcp.tpu.fail_next(503)
    create(api, body("flex-start"))  # the v2alpha1 path retries too
    assert fake_gcp.tpu.state_of(ZONE, "r1") == "ACTIVE"


def test_a_rate_limited_create_is_raised_at_once_with_googles_words(fake_gcp, gcp_settings) -> None:
    """A 429 on create is the per-minute create quota (field report B13): retrying it within the call would
    spend the same quota again, so it is raised at once for the caller to back off; reads still retry it."""
    from tpu_devops.provisioning.failures import classify_exception

    api = TpuApi(gcp_settings)
    fake_gcp.tpu.fail_next(429, only="create_queued")
    before = len(fake_gcp.tpu.requests)
    with pytest.raises(QuotaError) as err:
        create(api, body("flex-start"))
    assert len(fake_gcp.tpu.requests) - before == 1
    assert err.value.http_code == 429 and err.value.status == "RESOURCE_EXHAUSTED"
    assert "'Create requests per minute per project'" in err.value.google_message
    assert (classify_exception(err.value).reach, classify_exception(err.value).reason) == (
        "transient",
        "rate_limit",
    )
    assert fake_gcp.tpu.state_of(ZONE, "r1") is None
    fake_gcp.tpu.fail_next(429, only="list_queued")
    assert api.list_queued_resources(ZONE) == []  # a read waits the rate limit out


def test_4xx_is_never_retried(fake_gcp, gcp_settings) -> None:
    api = TpuApi(gcp_settings)
    fake_gcp.tpu.script(ZONE, "invalid_accelerator")
    before = len(fake_gcp.tpu.requests)
    with pytest.raises(CloudError):
        create(api, body("spot"))
    assert len(fake_gcp.tpu.requests) - before == 1


def test_quota_429_becomes_quota_error() -> None:
    from google.api_core import exceptions as gexc

    from tpu_devops.gcp.common import api_error

    err = api_error(gexc.TooManyRequests("Quota 'X' exhausted. Limit 4 in region us-west4"), action="create")
    assert isinstance(err, QuotaError)


def test_delete_node_then_request(fake_gcp, gcp_settings) -> None:
    api = TpuApi(gcp_settings)
    create(api, body("spot"))
    assert api.get_queued_resource(ZONE, "r1")["state"]["state"] == "ACTIVE"
    api.delete_node(ZONE, "r1")
    assert api.get_queued_resource(ZONE, "r1")["state"]["state"] == "SUSPENDED"
    api.delete_queued_resource(ZONE, "r1")
    with pytest.raises(NotFoundError):
        api.get_queued_resource(ZONE, "r1")
    deletes = [r for r in fake_gcp.tpu.requests if r["method"] == "DELETE"]
    assert [d["path"].split("/")[-2] for d in deletes] == ["nodes", "queuedResources"]


def test_waiting_request_fails_when_valid_until_expires(fake_gcp, gcp_settings) -> None:
    clock = FakeClock()
    fake_gcp.tpu.clock = clock
    fake_gcp.tpu.script(ZONE, "wait")
    request = body("spot") | {"queueingPolicy": {"validUntilDuration": "600s"}}
    api = TpuApi(gcp_settings)
    create(api, request)
    assert api.get_queued_resource(ZONE, "r1")["state"]["state"] == "WAITING_FOR_RESOURCES"
    clock.advance(600)
    qr = api.get_queued_resource(ZONE, "r1")
    assert (
        qr["state"]["state"] == "FAILED"
        and "validUntilDuration" in qr["state"]["failedData"]["error"]["message"]
    )


def test_stockout_is_reported_in_failed_data(fake_gcp, gcp_settings) -> None:
    fake_gcp.tpu.script(ZONE, "stockout")
    api = TpuApi(gcp_settings)
    create(api, body("flex-start"))
    qr = api.get_queued_resource(ZONE, "r1")
    assert qr["state"]["state"] == "FAILED"
    assert qr["state"]["failedData"]["error"]["message"].startswith("There is no more capacity in the zone")


def test_a_lost_create_response_is_retried_with_the_same_request_id_and_creates_once(
    fake_gcp, gcp_settings
) -> None:
    api = TpuApi(gcp_settings)
    fake_gcp.tpu.lose_next_responses(1)  # the create is carried out, its answer lost: api_core retries
    op = create(api, body("flex-start"))
    posts = [r for r in fake_gcp.tpu.requests if r["method"] == "POST"]
    ids = {dict(kv.split("=", 1) for kv in r["query"].split("&"))["requestId"] for r in posts}
    assert len(posts) == 2 and len(ids) == 1  # the retry re-sent the same requestId
    assert len(fake_gcp.tpu.queued) == 1 and op["name"].endswith("/operation-1")  # the original operation


def test_request_id_makes_a_repeated_create_return_the_first_operation(fake_gcp, gcp_settings) -> None:
    api = TpuApi(gcp_settings)
    first = create(api, body("spot"), request_id="6f1c0f3e-3b5e-4a4e-9d1e-1a2b3c4d5e6f")
    again = create(api, body("spot"), request_id="6f1c0f3e-3b5e-4a4e-9d1e-1a2b3c4d5e6f")
    assert again == first and len(fake_gcp.tpu.queued) == 1
    with pytest.raises(CloudError) as other:  # the same id, another requestId: someone else's create
        create(api, body("spot"))
    assert other.value.status == "ALREADY_EXISTS"


def test_delete_sends_a_request_id(fake_gcp, gcp_settings) -> None:
    api = TpuApi(gcp_settings)
    create(api, body("spot"))
    api.delete_queued_resource(ZONE, "r1", force=True)
    delete = [r for r in fake_gcp.tpu.requests if r["method"] == "DELETE"][-1]
    assert "requestId=" in delete["query"] and "force=true" in delete["query"]
