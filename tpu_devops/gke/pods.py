"""Why a vLLM pod is not ready: booting, waiting for a node, or never going to start.

The deploy job reads each pod's status (the ``PodScheduled`` condition, the container's ``waiting`` /
``terminated`` state and restart count) and the namespace's events (the scheduler's
``FailedScheduling``, the cluster autoscaler's ``TriggeredScaleUp`` / ``NotTriggerScaleUp`` /
``FailedScaleUp``, the kubelet's ``Failed`` pulls, the ReplicaSet's ``FailedCreate``) and sorts each pod
into one of four states:

- ``ready``: the Ready condition is True.
- ``booting``: the container runs and its startup probe has not passed yet (vLLM loads weights and
  compiles: ~14 min cold on v5e-1, DESIGN §3), or the container is being created.
- ``waiting``: no node yet, and one is coming (the autoscaler scaled up, the node pool is still being
  created, or a stockout that the autoscaler retries: flex-start and spot wait for capacity).
- ``stuck``: it will never start without a change. ``kind`` names the cause: ``image`` (the image
  cannot be pulled: not found, unauthorized, invalid name), ``config`` (the container cannot be
  created: a missing Secret or key), ``selector`` (no node pool offers nodes the pod's node selector
  and tolerations match), ``scheduling`` (the node pool is at its maximum size), ``quota`` (the
  autoscaler's scale-up failed on Compute Engine quota, or a Kubernetes ResourceQuota refused the pod)
  or ``crash`` (vLLM exits during boot: CrashLoopBackOff; the log tail is diagnosed by
  `tpu_devops.logs.boot`).

Event wordings (what the cluster autoscaler and kubelet write): ``pod didn't trigger scale-up: 1
node(s) didn't match Pod's node affinity/selector``, ``... max node group size reached``, ``Node scale
up in zones Z associated with this pod failed: GCE quota exceeded``, ``... GCE out of resources``,
``Failed to pull image "X": ... not found``, ``Back-off pulling image "X"``, ``Error creating: pods
"..." is forbidden: exceeded quota: ...``. Events are read as data: never executed, only matched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tpu_devops.catalog import Generation
from tpu_devops.config import Settings

STATES = ("ready", "booting", "waiting", "stuck")
# An image pull error that retrying cannot fix (containerd and docker registry wordings).
_PERMANENT_PULL = re.compile(
    r"not found|manifest unknown|unauthorized|authentication required|denied|repository does not exist"
    r"|invalid reference format|InvalidImageName|code = NotFound|403 Forbidden|401 Unauthorized",
    re.IGNORECASE,
)
_QUOTA = re.compile(r"quota exceeded|QUOTA_EXCEEDED|exceeded quota|quota .*exhausted", re.IGNORECASE)
_STOCKOUT = re.compile(r"out of resources|ZONE_RESOURCE_POOL_EXHAUSTED|stockout|no more capacity", re.I)
_SELECTOR = re.compile(
    r"didn't match Pod's node affinity/selector|didn't match node selector|untolerated taint|had taint", re.I
)
_MAX_SIZE = re.compile(r"max node group size reached|max limit reached|maximum size", re.I)
MAX_TEXT = 400  # characters of an event message or container message kept as evidence


@dataclass
class PodReport:
    """One pod (or, for ``pod="(none)"``, the ReplicaSet that could not create one): its state, and for
    ``stuck`` the cause kind, the cause in words, the fix and ``setting``, the setting or argument the fix is about."""

    pod: str
    state: str
    detail: str
    kind: str | None = None
    fix: str | None = None
    setting: str | None = None
    evidence: list[str] = field(default_factory=list)


def _short(text: str | None) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _when(event: dict[str, Any]) -> float:
    """An event's last time in Unix seconds (lastTimestamp, eventTime, creationTimestamp; 0 if none)."""
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(key)
        if value:
            try:
                return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    created = (event.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp() if created else 0.0
    except ValueError:
        return 0.0


def relevant_events(
    events: list[dict[str, Any]], deployment: str, *, since: float
) -> dict[str, list[dict[str, Any]]]:
    """The events about our Deployment, its ReplicaSets and pods (object names start with the
    Deployment's) from ``since`` (Unix s) on, newest first, by involved object name."""
    out: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        obj = event.get("involvedObject") or {}
        name = str(obj.get("name") or "")
        if obj.get("kind") not in ("Pod", "ReplicaSet", "Deployment") or not name.startswith(deployment):
            continue
        if _when(event) and _when(event) < since:
            continue
        out.setdefault(name, []).append(event)
    for items in out.values():
        items.sort(key=_when, reverse=True)
    return out


def _latest(events: list[dict[str, Any]], *reasons: str) -> dict[str, Any] | None:
    return next((e for e in events if e.get("reason") in reasons), None)


def _container(pod: dict[str, Any], name: str = "vllm") -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == name), statuses[0] if statuses else {})


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _image_fix(settings: Settings, image: str) -> str:
    return (
        f"set VLLM_IMAGE to a tag or digest that exists and that the nodes may pull (e.g. vllm/vllm-tpu:v0.30.0; "
        f"now {image}), then apply again; teardown_gke_deployment removes this one"
    )


def diagnose_pod(
    settings: Settings, pod: dict[str, Any], events: list[dict[str, Any]], *, pool_ready: bool
) -> PodReport:
    """The state of one pod from its status and its events (newest first)."""
    name = str((pod.get("metadata") or {}).get("name") or "?")
    status = pod.get("status") or {}
    if _condition(pod, "Ready").get("status") == "True":
        return PodReport(name, "ready", "ready")
    c = _container(pod)
    image = str(c.get("image") or settings.vllm_image)
    waiting = (c.get("state") or {}).get("waiting") or {}
    reason = str(waiting.get("reason") or "")
    message = _short(waiting.get("message"))
    if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
        # The kubelet's "Failed" events hold the registry's answer ('Failed to pull image "X": ... not
        # found'); later ones only say "Error: ImagePullBackOff".
        pulls = [e for e in events if e.get("reason") == "Failed" and "pull image" in str(e.get("message"))]
        said = _short(pulls[0].get("message")) if pulls else message
        if reason == "InvalidImageName" or _PERMANENT_PULL.search(said):
            return PodReport(
                name, "stuck", f"image {image} cannot be pulled ({reason}): {said}", kind="image",
                fix=_image_fix(settings, image), setting="VLLM_IMAGE", evidence=[f"{reason}: {said}"],
            )  # fmt: skip
        return PodReport(name, "booting", f"pulling image {image} again after an error ({reason}: {said})")
    if reason in ("CreateContainerConfigError", "CreateContainerError", "RunContainerError"):
        secret = "secret" in message.lower() or "key" in message.lower()
        return PodReport(
            name, "stuck", f"the container cannot be created ({reason}): {message}", kind="config",
            fix="create the Secret with both keys (plan_gke_deployment shows the kubectl command), then the pod "
            "starts by itself" if secret else "fix the pod spec the message names, then apply again",
            setting="secret" if secret else "namespace", evidence=[f"{reason}: {message}"],
        )  # fmt: skip
    if reason == "CrashLoopBackOff":
        last = (c.get("lastState") or {}).get("terminated") or {}
        how = f"exit code {last.get('exitCode', '?')}" + (f", {last['reason']}" if last.get("reason") else "")
        return PodReport(
            name, "stuck", f"vLLM exits during boot ({how}; restarted {c.get('restartCount', 0)} time(s))",
            kind="crash", fix="read the pod's log tail below; fix the flag or setting it names and apply again",
            setting="pod", evidence=[f"CrashLoopBackOff: {message}"],
        )  # fmt: skip
    terminated = (c.get("state") or {}).get("terminated") or {}
    if terminated.get("reason") == "OOMKilled":
        return PodReport(
            name, "stuck", "the container was killed for host memory (OOMKilled)", kind="crash",
            fix="the pod needs more host memory: remove any memory limit or use a larger machine type", setting="pod",
        )  # fmt: skip
    if (c.get("state") or {}).get("running") is not None:
        if c.get("started") is False or c.get("started") is None:
            return PodReport(name, "booting", "vLLM is booting (the startup probe allows 30 min)")
        return PodReport(name, "booting", "vLLM started but /health does not answer yet (readiness probe)")
    if reason in ("ContainerCreating", "PodInitializing"):
        return PodReport(name, "booting", f"the container is being created ({reason})")
    if status.get("phase") == "Failed":
        return PodReport(
            name, "stuck", f"the pod failed ({status.get('reason', '')}: {_short(status.get('message'))})",
            kind="config", fix="see the reason; the Deployment replaces failed pods", setting="pod",
        )  # fmt: skip
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False" or status.get("phase") == "Pending":
        return _unscheduled(settings, name, scheduled, events, pool_ready=pool_ready)
    return PodReport(name, "booting", f"phase {status.get('phase', '?')}")


def _unscheduled(
    settings: Settings,
    name: str,
    scheduled: dict[str, Any],
    events: list[dict[str, Any]],
    *,
    pool_ready: bool,
) -> PodReport:
    auto = _latest(events, "TriggeredScaleUp", "NotTriggerScaleUp", "FailedScaleUp")
    sched = _latest(events, "FailedScheduling")
    said = _short((auto or {}).get("message"))
    if auto and auto.get("reason") == "FailedScaleUp":
        if _QUOTA.search(said):
            return PodReport(
                name, "stuck", f"the node pool cannot grow: {said}", kind="quota", setting="replicas",
                fix="GKE TPU nodes draw Compute Engine quota (compute.googleapis.com, not the TPU API quota): "
                "plan_gke_deployment names the metric and its free room; request more, or lower replicas",
                evidence=[f"FailedScaleUp: {said}"],
            )  # fmt: skip
        if _STOCKOUT.search(said):
            return PodReport(
                name, "waiting", f"no TPU capacity in the zone right now; the autoscaler retries ({said})"
            )
    if auto and auto.get("reason") == "NotTriggerScaleUp":
        if _MAX_SIZE.search(said):
            return PodReport(
                name, "stuck", f"the node pool is at its maximum size: {said}", kind="scheduling",
                setting="max_replicas", fix="raise max_replicas (the node pool's maximum) or free a node",
                evidence=[f"NotTriggerScaleUp: {said}"],
            )  # fmt: skip
        if _SELECTOR.search(said) and "backoff" not in said:
            gen, row = settings.accelerator_type, _gen(settings)
            return PodReport(
                name, "stuck", f"no node pool can ever run this pod: {said}", kind="selector", setting="ACCELERATOR_TYPE",
                fix="the pods select cloud.google.com/gke-tpu-accelerator="
                f"{row.gke_accelerator or '?'} topology {row.gke_topologies.get(1, '?')}: create the node pool "
                f"(create_node_pool=true) or make its machine type match ACCELERATOR_TYPE ({gen})",
                evidence=[f"NotTriggerScaleUp: {said}"],
            )  # fmt: skip
    if auto and auto.get("reason") == "TriggeredScaleUp":
        return PodReport(name, "waiting", f"a node is being added ({said})")
    if not pool_ready:
        return PodReport(name, "waiting", "the node pool is still being created")
    why = _short((sched or {}).get("message") or scheduled.get("message") or "not scheduled yet")
    return PodReport(name, "waiting", f"not scheduled yet: {why}")


def _gen(settings: Settings) -> Generation:
    from tpu_devops.catalog import resolve_accelerator_type

    return resolve_accelerator_type(settings.accelerator_type).generation


def diagnose_replica_sets(events: dict[str, list[dict[str, Any]]], pods: set[str]) -> list[PodReport]:
    """ReplicaSets that could not create pods (``FailedCreate``), e.g. refused by a ResourceQuota."""
    out = []
    for name, items in events.items():
        if name in pods:
            continue
        failed = _latest(
            [e for e in items if (e.get("involvedObject") or {}).get("kind") == "ReplicaSet"], "FailedCreate"
        )
        if not failed:
            continue
        said = _short(failed.get("message"))
        quota = bool(_QUOTA.search(said))
        out.append(
            PodReport(
                "(none)",
                "stuck",
                f"ReplicaSet {name} cannot create pods: {said}",
                kind="quota" if quota else "config",
                setting="namespace",
                fix="raise the namespace's ResourceQuota (kubectl describe resourcequota) or deploy to another "
                "namespace"
                if quota
                else "fix what the message names (admission, policy), then apply again",
                evidence=[f"FailedCreate: {said}"],
            )  # fmt: skip
        )
    return out
