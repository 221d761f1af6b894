"""The discovery-document validator in front of every fake surface (`tests.fakes.gcp.discovery`).

Unit checks of the rules on documents no fake serves yet (Compute, Cloud Storage, GKE): a surface added
later is held to them with no code of its own. The product's own requests are in test_gcp_contract.py.
"""

from __future__ import annotations

import json

import pytest

from tests.fakes.gcp.discovery import validate

FIREWALL = {
    "name": "tpu-devops-gemma4-e2b-vllm",
    "description": "tpu-devops: vLLM endpoint of rig gemma4-e2b",
    "network": "global/networks/default",
    "direction": "INGRESS",
    "priority": 1000,
    "allowed": [{"IPProtocol": "tcp", "ports": ["8000"]}],
    "sourceRanges": ["203.0.113.7/32"],
    "targetTags": ["tpu-devops-gemma4-e2b"],
}
FW_PATH = "/compute/v1/projects/demo-project/global/firewalls"


def _check(method: str, path: str, query: str = "", body: object = None):
    data = b"" if body is None else json.dumps(body).encode()
    return validate(method, path, query, data, "application/json" if body is not None else "")


def test_compute_firewall_insert_get_delete_are_known_methods() -> None:
    ok = _check(
        "POST",
        FW_PATH,
        "requestId=8f6d2a0e-6c1d-4e8e-9a51-2f0c7b4d1e11&$alt=json;enum-encoding=int",
        FIREWALL,
    )
    assert ok.status == 0 and ok.method_ids == ["compute.firewalls.insert"]
    assert _check("GET", f"{FW_PATH}/tpu-devops-gemma4-e2b-vllm").method_ids == ["compute.firewalls.get"]
    assert _check("DELETE", f"{FW_PATH}/tpu-devops-gemma4-e2b-vllm", "requestId=x").method_ids == [
        "compute.firewalls.delete"
    ]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"direction": "INBOUND"}, "Invalid value at 'firewall.direction' (TYPE_ENUM), \"INBOUND\""),
        ({"priority": "high"}, "Invalid value at 'firewall.priority' (TYPE_INT32), \"high\""),
        ({"sourceRanges": "203.0.113.7/32"}, "Invalid value at 'firewall.source_ranges'"),
        (
            {"labels": {"rig": "x"}},
            "Unknown name \"labels\" at 'firewall': Cannot find field.",
        ),  # rules carry none
        (
            {"allowed": [{"IPProtocol": "tcp", "port": ["8000"]}]},
            "Unknown name \"port\" at 'firewall.allowed[0]'",
        ),
    ],
)
def test_compute_firewall_body_errors(change: dict, words: str) -> None:
    verdict = _check("POST", FW_PATH, "", FIREWALL | change)
    assert verdict.status == 400
    assert words in verdict.error_body(FW_PATH)["error"]["message"]


def test_proto3_json_rules_real_clients_rely_on_are_accepted() -> None:
    # enum as its number (enum-encoding=int), int32 as a string, proto (snake_case) field names, null
    body = FIREWALL | {
        "direction": 0,
        "priority": "1000",
        "source_ranges": ["10.0.0.0/8"],
        "description": None,
    }
    assert _check("POST", FW_PATH, "", body).status == 0
    # int64 as a JSON string or number; a bad one is refused
    sku = "/v1/services/6F81-5844-456A/skus"
    assert _check("GET", sku, "pageSize=5000&currencyCode=USD").status == 0
    assert _check("GET", sku, "pageSize=many").status == 400


def test_required_query_parameters_and_repeats() -> None:
    path = "/compute/v1/projects/p/zones/us-west4-a/instanceGroupManagers/g/resize"
    missing = _check("POST", path)
    assert (
        missing.status == 400
        and "Missing required parameter 'size'." in missing.error_body(path)["error"]["message"]
    )
    assert _check("POST", path, "size=3").status == 0
    assert _check("POST", path, "size=3&size=4").status == 400


def test_storage_and_gke_paths_are_covered() -> None:
    bucket = "/storage/v1/b/my-bucket/o"
    assert _check("GET", bucket, "prefix=vllm-cache/&alt=json").method_ids == ["storage.objects.list"]
    assert _check("GET", f"{bucket}/vllm-cache%2Fxla%2Fprogram.bin", "alt=media").method_ids == [
        "storage.objects.get"
    ]
    upload = _check("POST", "/upload/storage/v1/b/my-bucket/o", "uploadType=media&name=a%2Fb")
    assert upload.status == 0 and upload.method_ids == ["storage.objects.insert"]
    gke = "/v1/projects/p/locations/us-west4/clusters"
    assert _check("GET", gke).method_ids == ["container.projects.locations.clusters.list"]


def test_unknown_path_or_method_is_404_in_googles_shape() -> None:
    verdict = _check("GET", "/v2/projects/p/locations/z/queuedResourcez")
    err = verdict.error_body("/v2/projects/p/locations/z/queuedResourcez")["error"]
    assert verdict.status == 404 and err["status"] == "NOT_FOUND" and err["code"] == 404
    assert _check("PATCH", "/v2/projects/p/locations/z/queuedResources/q").status == 404


def test_malformed_json_is_refused() -> None:
    verdict = validate("POST", FW_PATH, "", b"{not json", "application/json")
    assert (
        verdict.status == 400
        and "Invalid JSON payload received" in verdict.error_body(FW_PATH)["error"]["message"]
    )
