"""Kubernetes events as log entries (`tpu_devops.logs.kube_events`, read through `logs.sources`): the
three shapes (GKE's Cloud Logging export of the events log, `kubectl get events -o json`, bare events in
JSON lines), both Event APIs (core/v1 and events.k8s.io/v1), and the reason and object in the text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpu_devops.errors import InputError
from tpu_devops.logs.kube_events import entry_from_event, event_text, is_event, is_event_list
from tpu_devops.logs.sources import FileSource

DATA = Path(__file__).parent / "data"

CORE = {
    "apiVersion": "v1",
    "kind": "Event",
    "metadata": {
        "name": "vllm-x.17f",
        "namespace": "default",
        "uid": "u-1",
        "creationTimestamp": "2026-09-10T08:00:00Z",
    },
    "involvedObject": {"kind": "Pod", "namespace": "default", "name": "vllm-x"},
    "reason": "FailedScheduling",
    "message": "0/3 nodes are available: 1 Insufficient google.com/tpu.",
    "type": "Warning",
    "count": 14,
    "firstTimestamp": "2026-09-10T08:00:00Z",
    "lastTimestamp": "2026-09-10T08:06:40Z",
}
NEW_API = {
    "apiVersion": "events.k8s.io/v1",
    "kind": "Event",
    "metadata": {"name": "vllm-x.18a", "namespace": "default", "uid": "u-2"},
    "eventTime": "2026-09-12T07:30:12.000000Z",
    "reason": "FailedScaleUp",
    "regarding": {"kind": "Pod", "namespace": "default", "name": "vllm-x"},
    "note": "Node scale up in zones us-west4-a associated with this pod failed: GCE quota exceeded.",
    "type": "Warning",
    "series": {"count": 3, "lastObservedTime": "2026-09-12T07:40:12.000000Z"},
}


def test_an_event_reads_as_type_reason_object_and_message() -> None:
    assert event_text(CORE) == (
        "Warning FailedScheduling Pod default/vllm-x: 0/3 nodes are available: 1 Insufficient google.com/tpu. (x14)"
    )
    assert event_text(NEW_API).startswith(
        "Warning FailedScaleUp Pod default/vllm-x: Node scale up"
    ) and event_text(NEW_API).endswith("(x3)")
    core, new = entry_from_event(CORE), entry_from_event(NEW_API)
    assert core["timestamp"] == "2026-09-10T08:06:40Z" and core["severity"] == "WARNING"  # lastTimestamp
    assert new["timestamp"] == "2026-09-12T07:30:12.000000Z" and new["insertId"] == "u-2"  # eventTime
    assert core["resource"] == {
        "type": "k8s_pod",
        "labels": {"namespace_name": "default", "pod_name": "vllm-x"},
    }
    normal = entry_from_event({**CORE, "type": "Normal", "reason": "Scheduled", "count": 1})
    assert normal["severity"] == "INFO" and "(x" not in normal["jsonPayload"]["message"]


def test_what_is_and_is_not_an_event() -> None:
    assert is_event(CORE) and is_event(NEW_API)
    assert is_event({"reason": "Killing", "involvedObject": {"kind": "Pod"}})  # kind left out
    assert not is_event({"textPayload": "x", "reason": "a field called reason"})
    assert not is_event("Event") and not is_event(None)
    assert is_event_list({"kind": "List", "items": [CORE, NEW_API]})
    assert not is_event_list({"kind": "List", "items": [{"kind": "Pod"}]})


def _records(path: Path) -> list:
    return [r for page in FileSource(str(path)).pages() for r in page]


def test_kubectl_lists_json_lines_and_exports_are_read(tmp_path: Path) -> None:
    kubectl = _records(DATA / "field-variants" / "V36-gke-insufficient-tpu-kubectl-events.json")
    assert [r.severity for r in kubectl] == ["INFO", "WARNING"]
    assert kubectl[1].message.startswith("Warning FailedScheduling Pod default/vllm-gemma4-e2b-")
    assert kubectl[1].timestamp == "2026-09-10T08:06:40Z" and kubectl[1].log == "events"
    new_api = _records(DATA / "field-variants" / "V38-gke-scale-up-gce-quota-events.json")
    assert "GCE quota exceeded" in new_api[1].message and new_api[1].timestamp.startswith(
        "2026-09-12T07:30:12"
    )
    lines = _records(DATA / "field-variants" / "V39-gke-hpa-metric-missing-events.jsonl")
    assert lines[1].message.startswith(
        "Warning FailedGetPodsMetric HorizontalPodAutoscaler default/vllm-gemma4-e2b:"
    )
    export = _records(DATA / "field-reports" / "C02-gke-selector-mismatch-events.json")
    assert export[0].message.startswith("Normal NotTriggerScaleUp Pod default/vllm-gemma4-e2b-")
    assert export[0].labels["cluster_name"] == "tpu-cluster" and export[0].severity == "INFO"
    # an array of bare events, as `kubectl get events -o json | jq .items` writes it
    bare = tmp_path / "items.json"
    bare.write_text(json.dumps([CORE, NEW_API]))
    assert [r.message.split(" ", 2)[1] for r in _records(bare)] == ["FailedScheduling", "FailedScaleUp"]


def test_event_text_is_redacted_like_any_log_text(tmp_path: Path) -> None:
    token = "hf_PlantedTokenValue9876543210zyxwvu"
    leaky = {**CORE, "message": f"Error: failed to pull with HF_TOKEN={token}"}
    path = tmp_path / "events.json"
    path.write_text(json.dumps({"kind": "List", "items": [leaky]}))
    (record,) = _records(path)
    assert token not in record.message and "Warning FailedScheduling" in record.message


def test_a_list_of_other_objects_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "x"}}]}))
    with pytest.raises(InputError, match="not a Cloud Logging LogEntry"):
        _records(path)
