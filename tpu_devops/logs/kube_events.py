"""Kubernetes events as log entries: the scheduler, cluster autoscaler, kubelet and HPA speak in events.

A Pending TPU pod or an HPA that cannot read its metric leaves no container log at all; the reason is
in an Event (``reason`` + ``message`` about an ``involvedObject``). This module turns events into the
LogEntry shape the rest of `tpu_devops.logs` reads, with the reason and the object in the message, so
the rule table (`logs.rules`: ``FailedScheduling``, ``NotTriggerScaleUp``, ``FailedScaleUp``,
``FailedGetPodsMetric``, ``Failed`` image pulls, probe ``Killing``) reads them like any other line:

``Warning FailedScheduling Pod default/vllm-7d9f8c6b5-x2k4q: 0/3 nodes are available: ...``

Inputs understood (core/v1 ``Event`` and events.k8s.io/v1 ``Event``, field names from the Kubernetes
API reference):

- GKE's Cloud Logging export of events (log ``events``): a LogEntry whose ``jsonPayload`` is the Event;
- ``kubectl get events -o json``: ``{"kind": "List" | "EventList", "items": [Event, ...]}``;
- a JSON array or JSON lines of bare Event objects.

The entry's time is the event's ``lastTimestamp`` (core/v1), else ``eventTime`` / ``series.
lastObservedTime`` (events.k8s.io/v1), else ``firstTimestamp``, else ``metadata.creationTimestamp``;
its severity WARNING for ``type: Warning``, INFO otherwise; ``count`` (or ``series.count``) above 1 is
shown as ``(x N)``.
"""

from __future__ import annotations

from typing import Any

EVENT_LOG = "events"  # GKE writes cluster events to projects/P/logs/events
MAX_EVENT_MESSAGE = 2000


def is_event(obj: Any) -> bool:
    """True for a core/v1 or events.k8s.io/v1 Event object (a payload or a bare object)."""
    if not isinstance(obj, dict):
        return False
    if obj.get("kind") == "Event":
        return True
    return "reason" in obj and ("involvedObject" in obj or ("regarding" in obj and "note" in obj))


def is_event_list(obj: Any) -> bool:
    """True for ``kubectl get events -o json`` output (a List / EventList of events)."""
    return (
        isinstance(obj, dict)
        and obj.get("kind") in ("List", "EventList")
        and isinstance(obj.get("items"), list)
        and all(is_event(i) for i in obj["items"][:5])
    )


def _obj(ev: dict[str, Any]) -> dict[str, Any]:
    target = ev.get("involvedObject") or ev.get("regarding") or {}
    return target if isinstance(target, dict) else {}


def _count(ev: dict[str, Any]) -> int:
    series = series_ if isinstance(series_ := ev.get("series"), dict) else {}
    for value in (ev.get("count"), series.get("count")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 1


def event_text(ev: dict[str, Any]) -> str:
    """``<type> <reason> <Kind> <namespace>/<name>: <message>[ (x N)]`` for one event."""
    target = _obj(ev)
    kind = str(target.get("kind") or "object")
    name = str(target.get("name") or "?")
    ns = target.get("namespace")
    who = f"{kind} {ns}/{name}" if ns else f"{kind} {name}"
    message = str(ev.get("message") or ev.get("note") or "").strip()[:MAX_EVENT_MESSAGE]
    count = _count(ev)
    head = " ".join(str(x) for x in (ev.get("type") or "Normal", ev.get("reason") or "Event") if x)
    return f"{head} {who}: {message}" + (f" (x{count})" if count > 1 else "")


def _time(ev: dict[str, Any]) -> str:
    series = series_ if isinstance(series_ := ev.get("series"), dict) else {}
    meta = meta_ if isinstance(meta_ := ev.get("metadata"), dict) else {}
    for value in (
        ev.get("lastTimestamp"),
        ev.get("eventTime"),
        series.get("lastObservedTime"),
        ev.get("deprecatedLastTimestamp"),
        ev.get("firstTimestamp"),
        meta.get("creationTimestamp"),
    ):
        if isinstance(value, str) and value:
            return value
    return ""


def severity_of(ev: dict[str, Any]) -> str:
    """WARNING for ``type: Warning`` events, INFO for the others (``Normal``)."""
    return "WARNING" if str(ev.get("type") or "").lower() == "warning" else "INFO"


def entry_from_event(ev: dict[str, Any]) -> dict[str, Any]:
    """A LogEntry dict (as Cloud Logging would export it) for a bare Event object."""
    target = _obj(ev)
    meta = meta_ if isinstance(meta_ := ev.get("metadata"), dict) else {}
    kind = str(target.get("kind") or "object").lower()
    labels = {"namespace_name": str(target.get("namespace") or "")}
    if target.get("name"):
        labels[f"{kind}_name"] = str(target["name"])
    return {
        "insertId": str(meta.get("uid") or meta.get("name") or ""),
        "timestamp": _time(ev),
        "severity": severity_of(ev),
        "logName": EVENT_LOG,
        "resource": {"type": f"k8s_{kind}", "labels": {k: v for k, v in labels.items() if v}},
        "jsonPayload": {"message": event_text(ev)},
    }
