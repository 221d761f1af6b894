"""One look at the rollout of our vLLM pods: their states (`tpu_devops.gke.pods`) and, for a pod that
will never start, the error that ends the deploy job with its cause and fix.

A crash-looping pod's previous log tail is read (bounded, `tpu_devops.gke.kube`) and diagnosed by the
same boot diagnosis as the VM's container log (`tpu_devops.logs.boot`), so the error names vLLM's own
root cause (e.g. ``RuntimeProgramAllocationFailure`` at ``--gpu-memory-utilization 0.95``). Blocking:
run `observe` through `tpu_devops.gcp.common.run_blocking`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_devops.config import Settings
from tpu_devops.errors import ConfigError, QuotaError, TpuDevopsError
from tpu_devops.gke import pods as pod_states


@dataclass
class Rollout:
    """What one look found: every pod's report (plus ReplicaSets that cannot create pods)."""

    reports: list[pod_states.PodReport]

    @property
    def ready(self) -> int:
        return sum(r.state == "ready" for r in self.reports)

    @property
    def stuck(self) -> pod_states.PodReport | None:
        return next((r for r in self.reports if r.state == "stuck"), None)

    def summary(self) -> str:
        """``pod: state (detail)`` for every pod that is not ready, one clause each."""
        return "; ".join(f"{r.pod} {r.state}: {r.detail}" for r in self.reports if r.state != "ready")

    def progress(self) -> list[dict[str, str]]:
        return [{"pod": r.pod, "state": r.state, "detail": r.detail[:300]} for r in self.reports]


def observe(
    kube: Any,
    settings: Settings,
    namespace: str,
    selector: str,
    deployment: str,
    *,
    since: float,
    pool_ready: bool,
) -> Rollout:
    """Read the pods and the namespace's events (from ``since``, Unix s) and judge each pod."""
    objects = kube.pod_objects(namespace, selector)
    events = pod_states.relevant_events(kube.events(namespace), deployment, since=since)
    reports = []
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name") or "")
        report = pod_states.diagnose_pod(settings, obj, events.get(name, []), pool_ready=pool_ready)
        if report.kind == "crash":
            _add_log_diagnosis(kube, namespace, report)
        reports.append(report)
    names = {str((o.get("metadata") or {}).get("name") or "") for o in objects}
    reports += pod_states.diagnose_replica_sets(events, names)
    return Rollout(reports)


def _add_log_diagnosis(kube: Any, namespace: str, report: pod_states.PodReport) -> None:
    from tpu_devops.logs.boot import diagnose_boot_text

    try:
        text = kube.pod_log(namespace, report.pod, "vllm", previous=True)
    except TpuDevopsError as exc:
        report.evidence.append(f"log unreadable: {exc.message}")
        return
    root = diagnose_boot_text(text, source=f"pod {report.pod}, previous container log").root_cause
    if root:
        report.detail += f"; root cause: {root.title}: {root.cause}"
        report.fix = root.fix
    elif text.strip():
        report.evidence.append("last log line: " + text.strip().splitlines()[-1][:300])


def stuck_error(report: pod_states.PodReport) -> TpuDevopsError:
    """The error that ends the deploy job for a pod that will never start."""
    message = f"pod {report.pod} will never start: {report.detail}"
    cls = QuotaError if report.kind == "quota" else ConfigError if report.kind != "crash" else TpuDevopsError
    return cls(message, field=report.setting, value=report.kind, fix=report.fix)
