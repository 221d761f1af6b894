"""Failure classification by reach (`tpu_devops.provisioning.failures`): by code and status as well as
message, several real wordings per class.

Sources of the wordings: SkyPilot's ``FailoverCloudErrorHandlerV2._gcp_handler`` (sky/backends/
cloud_vm_ray_backend.py: the code 3 / 8 / 9 examples and the QuotaFailure region / zone examples),
skypilot-org/skypilot#3840 ("the accelerator v4-128 was not found in zone us-central2-b"), marin PR #6198
(tests/data/field-reports/B13-gcp-quota-metric-rate-limit.txt), Google's API quota and Compute
rate-limit wordings; EIDs and project numbers as published or replaced.
"""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from tpu_devops.provisioning.failures import classify_failed_data, classify_failure


@pytest.mark.parametrize(
    ("message", "status", "code", "reach", "reason"),
    [
        (
            'There is no more capacity in the zone "us-west4-b"; you can try in another zone',
            None,
            None,
            "zone",
            "stockout",
        ),
        ("Insufficient reserved capacity for the request", None, None, "zone", "reserved_capacity"),
        (
            "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. Limit 4 in region us-west4",
            None,
            None,
            "region",
            "quota",
        ),
        (
            'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1" in location "europe-west4-a".',
            "INVALID_ARGUMENT",
            400,
            "model",
            "unsupported_model",
        ),
        (
            "The resource 'projects/p/global/networks/nope' was not found",
            "NOT_FOUND",
            404,
            "config",
            "network",
        ),
        (
            "Permission 'tpu.queuedResources.create' denied on resource",
            "PERMISSION_DENIED",
            403,
            "config",
            "permission",
        ),
        (
            'Accelerator type "v5e-1" is not available in zone "us-west4-a".',
            "INVALID_ARGUMENT",
            400,
            "config",
            "accelerator",
        ),
        ("Runtime version v2-alpha-tpuv9 is invalid", "INVALID_ARGUMENT", 400, "config", "runtime"),
        # Cloud TPU's error glossary: a zone that does not offer the type with these flags is about that zone
        (
            "generic::invalid_argument: Accelerator type v2-512 as preemptible (false) and reserved (false) is not "
            "available in zone us-central1-a, please contact support.",
            "INVALID_ARGUMENT",
            400,
            "model",
            "not_offered_in_zone",
        ),
        (
            "Accelerator type v5litepod-8 as spot (true) and reserved (false) is not available in zone europe-west4-b.",
            "INVALID_ARGUMENT",
            400,
            "model",
            "not_offered_in_zone",
        ),
        # without the flags the words do not say it is the zone's matter: a configuration error, as before
        (
            'Accelerator type "v5litepod-4" is not available in zone "us-east1-d".',
            "INVALID_ARGUMENT",
            400,
            "config",
            "accelerator",
        ),
        ("The service is currently unavailable.", "UNAVAILABLE", 503, "transient", "unavailable"),
        ("something odd and new", "INVALID_ARGUMENT", 400, "config", "invalid_request"),
    ],
)
def test_classify_failure_by_reach(
    message: str, status: str | None, code: int | None, reach: str, reason: str
) -> None:
    failure = classify_failure(message, status=status, http_code=code)
    assert (failure.reach, failure.reason) == (reach, reason)
    assert failure.fix


# failedData.error of a FAILED queued resource: a google.rpc code number and Google's message.
FAILED_DATA = [
    # capacity in the zone
    (
        8,
        'There is no more capacity in the zone "europe-west4-a"; you can try in another zone where Cloud TPU '
        "Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1bc8f9d790be9142]",
        "zone",
        "stockout",
    ),
    (
        8,
        'There is no more capacity in the zone "us-central1-b"; you can try in another zone where Cloud TPU '
        "Nodes are offered (see https://cloud.google.com/tpu/docs/regions)",
        "zone",
        "stockout",
    ),
    (
        9,
        "Insufficient reserved capacity. Contact customer support to increase your reservation. "
        "[EID: 0x2f8bc266e74261a]",
        "zone",
        "reserved_capacity",
    ),
    (8, "The zone does not have enough resources available to fulfill the request.", "zone", "stockout"),
    (
        3,
        "Cloud TPU received a bad request. update is not supported while in state PREEMPTED "
        "[EID: 0x73013519f5b7feb2]",
        "zone",
        "preempted",
    ),
    (4, "The request could not be fulfilled before validUntilDuration expired.", "zone", "expired_in_queue"),
    # chip quota: region or zone as the message says
    (
        8,
        "Quota 'TPUV2sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted. Limit 32 in region europe-west4",
        "region",
        "quota",
    ),
    (
        8,
        "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. Limit 4 in region us-west4",
        "region",
        "quota",
    ),
    (
        8,
        "Quota 'TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted. Limit 32 in zone europe-west4-a",
        "zone",
        "zone_quota",
    ),
    # configuration: stop the sweep
    (
        3,
        "Cloud TPU received a bad request. the accelerator v4-128 was not found in zone us-central2-b "
        "[EID: 0x945ef875d10e8e13]",
        "config",
        "accelerator",
    ),
    (
        3,
        "Cloud TPU received a bad request. the accelerator v5litepod-3 was not found in zone us-west4-a",
        "config",
        "accelerator",
    ),
    (5, "The resource 'projects/p/global/networks/my-vpc' was not found", "config", "network"),
    # the glossary wording on a FAILED request: that (zone, provisioning model, accelerator) only
    (
        3,
        "Accelerator type v5litepod-16 as preemptible (true) and reserved (false) is not available in zone "
        "asia-east1-c, please contact support.",
        "model",
        "not_offered_in_zone",
    ),
    (
        7,
        "Permission 'tpu.nodes.create' denied on 'projects/p/locations/us-west4-a/nodes/x'",
        "config",
        "permission",
    ),
    (3, "Invalid value for field 'resource.bootDiskConfig': bad disk", "config", "invalid_request"),
    # transient: internal errors and request-rate limits
    (13, "Internal error. Please try again later.", "transient", "unavailable"),
    (13, "An internal error has occurred (3391250717416853124)", "transient", "unavailable"),
    (14, "The service is currently unavailable.", "transient", "unavailable"),
    (2, "Cloud TPU encountered an internal error; try again later", "transient", "unavailable"),
    (
        8,
        "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute per project' of "
        "service 'tpu.googleapis.com' for consumer 'project_number:000000000000'.",
        "transient",
        "rate_limit",
    ),
    # unknown: a zone problem, never the whole sweep
    (2, "something nobody has seen before", "zone", "unknown"),
]


@pytest.mark.parametrize(("code", "message", "reach", "reason"), FAILED_DATA)
def test_failed_queued_resources_are_classified_by_code_and_message(
    code: int, message: str, reach: str, reason: str
) -> None:
    failure = classify_failed_data({"code": code, "message": message})
    assert (failure.reach, failure.reason) == (reach, reason), message
    assert failure.message == message and failure.fix


def test_the_field_report_rate_limit_is_transient_not_a_regional_quota() -> None:
    expected, message = (x.strip() for x in (FIXTURES / "field-reports" / "B13-gcp-quota-metric-rate-limit.txt")
                         .read_text().split("|", 1))  # fmt: skip
    assert expected == "transient"
    for failure in (
        classify_failure(message, status="RESOURCE_EXHAUSTED", http_code=429),  # a refused create
        classify_failed_data({"code": 8, "message": message}),  # a FAILED request
    ):
        assert (failure.reach, failure.reason) == ("transient", "rate_limit")
        assert "per-minute" in failure.fix


@pytest.mark.parametrize(
    ("message", "status", "http"),
    [
        ("Rate Limit Exceeded", "PERMISSION_DENIED", 403),  # Compute's rateLimitExceeded comes as 403
        ("Too many requests: rate limit exceeded, retry later.", "RESOURCE_EXHAUSTED", 429),
        ("Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED", 429),
    ],
)
def test_request_rate_limits_on_refused_calls_are_transient(message: str, status: str, http: int) -> None:
    assert classify_failure(message, status=status, http_code=http).reason == "rate_limit"


def test_error_info_reasons_and_code_names_are_read() -> None:
    by_reason = classify_failed_data(
        {"code": 8, "message": "Resources are not available.", "details": [{"reason": "RATE_LIMIT_EXCEEDED"}]}
    )
    assert by_reason.reason == "rate_limit"
    assert classify_failed_data({"code": "INTERNAL", "message": "boom"}).reach == "transient"
    assert classify_failed_data({}).reach == "zone"  # no error at all: a zone problem, named after the state
