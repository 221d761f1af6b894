"""Failure classification by reach (`tpu_devops.provisioning.failures`)."""

from __future__ import annotations

import pytest

from tpu_devops.provisioning.failures import classify_failure


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
