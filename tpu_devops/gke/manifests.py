"""The GKE deployment as data: a TPU v5e node pool request and the Kubernetes manifests (past one host).

Everything is rendered from `Settings` and `startup.vllm_serve_flags` (the one flag builder), so the
GKE pods serve exactly what the startup script would on a TPU VM, at tensor-parallel size 1 (one chip
per pod). Each choice and its source:

- **Node pool** (container v1 ``NodePool``, discovery document rev. 20261027): machine type
  ``ct5lp-hightpu-1t`` (one v5e chip; catalog), no ``placementPolicy.tpuTopology`` (single-host
  slices take none; the node label then reads topology ``1x1``). Spot: ``config.spot``; flex-start:
  ``config.flexStart`` with ``config.maxRunDuration`` and autoscaling from zero, because flex-start VMs
  come from the cluster autoscaler when pods wait (GKE "About flex-start", cloud.google.com/
  kubernetes-engine/docs/concepts/dws: single-host TPU slices, up to 7 days, v5e in us-west4-a, GKE >=
  1.33.0-gke.1712000). A flex-start pool turns auto-repair off and scales with location policy
  ``ANY`` and total node limits (xpk ``src/xpk/core/capacity.py`` at 367c838: ``--flex-start
  --enable-autoscaling --location-policy=ANY --reservation-affinity=none --no-enable-autorepair``; the
  hardware-verified recipe xbill9/gemma4-dev ``gke-vllm-v6e1-2b/gke/gke-up.sh`` passes the same): a
  repair recreates the node, and a recreated flex-start node queues for capacity again with a new
  maxRunDuration clock. A spot pool scales with ``ANY`` too ("ANY policy picks zones that have the
  highest capacity available", container v1 ``NodePoolAutoscaling.locationPolicy``) and keeps
  auto-repair. Auto-upgrade stays on: GKE refuses to turn it off in a release channel. Field names
  are checked against the container v1 discovery document by the fake GKE surface. ``resourceLabels``
  carry ``managed-by=tpu-devops`` and ``rig=<id>`` like the queued resources: ownership is decided by
  them. The nodes draw Compute Engine quota (`tpu_devops.gke.quota`), not the TPU API quota.
- **Deployment**: the pinned image (VLLM_IMAGE), ``google.com/tpu: 1`` as request and limit (GKE's
  TPU extended resource), node selectors ``cloud.google.com/gke-tpu-accelerator`` and
  ``cloud.google.com/gke-tpu-topology`` from the generation's catalog row (v5e: ``tpu-v5-lite-podslice``,
  ``1x1``), a toleration of the
  ``google.com/tpu`` taint, HF_TOKEN and VLLM_API_KEY (vLLM reads its API key from that variable) from
  a Kubernetes Secret, /dev/shm as a memory volume (the VM's ``--shm-size 16G``). Probes on /health
  (never behind the API key): a startup probe allowing 30 minutes, since a cold boot took 857 s on
  v5e-1 (80% XLA compile, DESIGN §3) plus the image pull on a new node; then readiness every 5 s and
  liveness every 15 s. Probe timeouts as tpu-inference's GKE example
  (``examples/offload/gke/benchmarks/single-host/deploy-cpu-offload.yaml`` at b8692ff: startup and
  liveness 5 s, readiness 2 s) instead of Kubernetes' 1 s default: under load a /health slower than
  1 s would fail liveness and restart the pod, which costs a cold boot. Rolling updates replace one pod at a time without surge: a surge pod would wait
  for a TPU node that is not there.
- **Service**: ClusterIP, or LoadBalancer restricted to ``loadBalancerSourceRanges`` (the endpoint is
  not opened to the internet, as the VM's firewall rule is scoped to the caller).
- **Autoscaling**: a HorizontalPodAutoscaler (autoscaling/v2) on the per-pod queue
  ``vllm:num_requests_waiting`` (GKE's best practice for throughput within a latency budget: queue
  size; cloud.google.com/kubernetes-engine/docs/best-practices/machine-learning/inference/autoscaling),
  exported by a ``PodMonitoring`` (Google Cloud Managed Service for Prometheus) and read through the
  Custom Metrics Stackdriver Adapter under the name ``prometheus.googleapis.com|vllm:num_requests_waiting|gauge``
  (the naming of Google's ``ai-ml/vllm-tpu/vllm-hpa.yaml``). Scale-down waits 15 minutes: bringing a
  replica back costs a cold boot.

Offline validation: every built-in manifest is checked with kubernetes-validate (strict) against the
Kubernetes OpenAPI schemas of 1.33 (the oldest GKE with flex-start TPUs) and the newest bundled; the
PodMonitoring is a custom resource, which only the cluster's server-side dry run can check.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.catalog import GENERATIONS, resolve_accelerator_type
from tpu_devops.config import Settings
from tpu_devops.errors import InputError
from tpu_devops.gke.quota import ComputeQuotaCheck
from tpu_devops.host.results import ToolResult

MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tpu-devops"
RIG_KEY = "tpu-devops/rig"
NAME_KEY = "app.kubernetes.io/name"
APP_NAME = "vllm"
TPU_RESOURCE = "google.com/tpu"
HPA_METRIC = "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"
# Probe timeouts, s (tpu-inference examples/offload/gke/benchmarks/single-host/deploy-cpu-offload.yaml)
PROBE_TIMEOUT_S = {"startup": 5, "readiness": 2, "liveness": 5}
STARTUP_BUDGET_S = 1800  # cold boot 857 s on v5e-1 (DESIGN §3) + image pull on a fresh node, with margin
SCALE_DOWN_WINDOW_S = 900  # a replica brought back costs a cold boot (~14 min)
SCHEMA_MIN_VERSION = "1.33.0"  # GKE 1.33.0-gke.1712000 is the first with flex-start TPUs
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")  # us-west4-a
_LOCATION = re.compile(r"^[a-z]+-[a-z]+\d+(-[a-z])?$")  # a zone or a region (us-west4)


def names(settings: Settings) -> dict[str, str]:
    """Object names for this rig: ``vllm-<rig>`` (Deployment, Service, HPA, PodMonitoring), the node pool
    ``tpu-devops-<rig>`` (at most 40 characters, the GKE limit) and the Secret ``vllm-<rig>-secrets``."""
    rig = settings.resource_id
    base = f"vllm-{rig}"[:52].rstrip("-")
    return {
        "deployment": base,
        "service": base,
        "hpa": base,
        "podmonitoring": base,
        "secret": f"{base}-secrets"[:63].rstrip("-"),
        "node_pool": f"tpu-devops-{rig}"[:40].rstrip("-"),
    }


def labels(settings: Settings) -> dict[str, str]:
    """The labels every object we create carries; teardown selects by them and nothing else."""
    return {NAME_KEY: APP_NAME, MANAGED_BY_KEY: MANAGED_BY, RIG_KEY: settings.resource_id}


def selector(settings: Settings) -> str:
    """``key=value,...`` label selector of our objects."""
    return ",".join(f"{k}={v}" for k, v in labels(settings).items())


def _check(settings: Settings, replicas: int, max_replicas: int, namespace: str, service_type: str) -> None:
    if isinstance(replicas, bool) or not 1 <= replicas <= 256:
        raise InputError(
            "out of range", field="replicas", value=replicas, fix="use 1..256 replicas (one chip each)"
        )
    if isinstance(max_replicas, bool) or not replicas <= max_replicas <= 256:
        raise InputError(
            f"must be between replicas ({replicas}) and 256",
            field="max_replicas",
            value=max_replicas,
            fix=f"use {replicas}..256 (the autoscaler's ceiling)",
        )
    if not _K8S_NAME.match(namespace or "") or len(namespace) > 63:
        raise InputError(
            "not a Kubernetes namespace name", field="namespace", value=namespace, fix="use e.g. default"
        )
    if not _K8S_NAME.match(settings.resource_id) or len(settings.resource_id) > 40:
        raise InputError(
            "the rig id must be a DNS label (lowercase letters, digits, '-') of at most 40 characters for GKE",
            field="RESOURCE_ID",
            value=settings.resource_id,
            fix="set RESOURCE_ID to e.g. gemma-rig",
        )
    if service_type not in ("ClusterIP", "LoadBalancer"):
        raise InputError(
            "unknown service type",
            field="service_type",
            value=service_type,
            fix="use ClusterIP or LoadBalancer",
        )
    accel = resolve_accelerator_type(settings.accelerator_type)
    if accel.generation.gke_accelerator is None or 1 not in accel.generation.gke_topologies:
        raise InputError(
            f"no GKE single-host node label known for {accel.generation.name}",
            field="ACCELERATOR_TYPE",
            value=settings.accelerator_type,
            fix="use "
            + " or ".join(
                g.name if g.api_prefix == g.name else f"{g.name} ({g.api_prefix}-N)"
                for g in GENERATIONS.values()
                if g.gke_accelerator
            ),
        )


def load_balancer_ranges(
    settings: Settings, service_type: str, source_ranges: list[str] | None, open_to_internet: bool
) -> tuple[list[str], list[str]]:
    """The LoadBalancer's ``loadBalancerSourceRanges``, normalised and judged by the VM firewall's rule
    (`tpu_devops.config.source_ranges_setting`, `tpu_devops.config.exposure`), and its warnings. A
    ClusterIP Service takes no ranges (none are needed: it is reachable only in the cluster).

    Raises:
        ConfigError: a LoadBalancer without ranges, a malformed range (``0.0.0.0/00``), or ranges that
            together open more than a /16 without ``open_to_internet`` (field ``source_ranges``).
    """
    from tpu_devops.config import exposure, source_ranges_setting

    if service_type != "LoadBalancer":
        return [], (
            ["source_ranges ignored: a ClusterIP Service is reachable only inside the cluster"]
            if source_ranges
            else []
        )
    if not source_ranges:
        raise InputError(
            "a LoadBalancer would open the endpoint to the internet",
            field="source_ranges",
            value=source_ranges,
            fix="pass the CIDRs allowed to reach it, e.g. ['203.0.113.7/32'] (your address)",
        )
    ranges = list(source_ranges_setting(",".join(source_ranges), field="source_ranges"))
    what = f"the LoadBalancer on tcp:{settings.vllm_port}"
    return ranges, exposure(ranges, open_to_internet=open_to_internet, field="source_ranges", what=what)


def check_location(settings: Settings, location: str | None) -> str:
    """The cluster's location for the ``location`` argument (default: GOOGLE_CLOUD_ZONE): a zone (zonal
    cluster) or a region (regional cluster), as GKE names them; it goes into the request's path.

    Raises:
        InputError: ``location`` is neither a zone nor a region.
    """
    where = location if location is not None else settings.zone
    if not _LOCATION.match(where or ""):
        raise InputError(
            "not a GKE location (a zone such as us-west4-a or a region such as us-west4)",
            field="location",
            value=location,
            fix="pass the cluster's location as gcloud container clusters list shows it, or omit it for "
            f"GOOGLE_CLOUD_ZONE ({settings.zone})",
        )
    return where


def node_zone(settings: Settings, location: str) -> str:
    """The zone of the TPU nodes in a cluster at ``location`` (`check_location`): a zonal cluster's own
    zone; in a regional cluster GOOGLE_CLOUD_ZONE, which must be in that region (a node pool's
    ``locations`` are zones of the cluster's region: container v1 ``NodePool.locations``, GKE
    "Regional clusters").

    Raises:
        InputError: a region that GOOGLE_CLOUD_ZONE is not in.
    """
    if _ZONE.match(location):
        return location
    if settings.zone.rsplit("-", 1)[0] != location:
        raise InputError(
            f"the TPU nodes go to GOOGLE_CLOUD_ZONE {settings.zone}, which is not in the cluster's region {location}",
            field="location",
            value=location,
            fix=f"pass the zone of {location} the nodes should use as location, or set GOOGLE_CLOUD_ZONE to a zone "
            f"of {location} that offers {settings.accelerator_type} (get_zones_with_available_quota)",
        )
    return settings.zone


def node_pool_body(
    settings: Settings, *, replicas: int, max_replicas: int, zone: str | None = None
) -> dict[str, Any]:
    """The container v1 ``NodePool`` (REST JSON) for one-chip nodes of the configured generation, in
    ``zone`` (default GOOGLE_CLOUD_ZONE; `node_zone` gives the one that fits the cluster)."""
    gen = resolve_accelerator_type(settings.accelerator_type).generation
    config: dict[str, Any] = {
        "machineType": gen.machine_types[1],
        "oauthScopes": [CLOUD_PLATFORM_SCOPE],
        "resourceLabels": dict(settings.rig_labels),
        "labels": {RIG_KEY: settings.resource_id},
    }
    model = settings.provisioning_model
    autoscaling: dict[str, Any] = {"enabled": True, "minNodeCount": replicas, "maxNodeCount": max_replicas}
    management = {"autoRepair": True, "autoUpgrade": True}
    initial = replicas
    if model == "spot":
        config["spot"] = True
        autoscaling = {"enabled": True, "totalMinNodeCount": replicas, "totalMaxNodeCount": max_replicas,
                       "locationPolicy": "ANY"}  # fmt: skip
    elif model == "flex-start":
        config["flexStart"] = True
        config["maxRunDuration"] = f"{settings.max_run_duration_s}s"
        config["reservationAffinity"] = {"consumeReservationType": "NO_RESERVATION"}
        # the autoscaler brings flex-start nodes up when pods wait: none at first (module docstring)
        initial = 0
        autoscaling = {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": max_replicas,
                       "locationPolicy": "ANY"}  # fmt: skip
        management = {"autoRepair": False, "autoUpgrade": True}
    return {
        "name": names(settings)["node_pool"],
        "initialNodeCount": initial,
        "locations": [zone or settings.zone],
        "config": config,
        "autoscaling": autoscaling,
        "management": management,
    }


def _serve_args(settings: Settings) -> list[str]:
    from tpu_devops.planning.startup import vllm_serve_flags

    # One chip per pod: the flag builder's settings, at tensor-parallel size 1.
    return vllm_serve_flags(settings.model_copy(update={"tensor_parallel_size": 1}))


def deployment(settings: Settings, *, replicas: int, namespace: str) -> dict[str, Any]:
    """The vLLM Deployment: one pod per one-chip node."""
    n = names(settings)
    lab = labels(settings)
    gen = resolve_accelerator_type(settings.accelerator_type).generation
    secret = n["secret"]
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": n["deployment"], "namespace": namespace, "labels": dict(lab)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(lab)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(lab)},
                "spec": {
                    "nodeSelector": {
                        "cloud.google.com/gke-tpu-accelerator": gen.gke_accelerator,
                        "cloud.google.com/gke-tpu-topology": gen.gke_topologies[1],
                    },
                    "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 60,
                    "containers": [
                        {
                            "name": "vllm",
                            "image": settings.vllm_image,
                            "command": ["vllm", "serve", settings.model_name],
                            "args": _serve_args(settings),
                            "ports": [{"name": "http", "containerPort": settings.vllm_port}],
                            "env": [
                                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "hf_token"}}},
                                {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "api_key"}}},
                            ],
                            "resources": {"requests": {TPU_RESOURCE: "1"}, "limits": {TPU_RESOURCE: "1"}},
                            "startupProbe": {**probe, "periodSeconds": 10, "timeoutSeconds": PROBE_TIMEOUT_S["startup"],
                                             "failureThreshold": math.ceil(STARTUP_BUDGET_S / 10)},
                            "readinessProbe": {**probe, "periodSeconds": 5, "timeoutSeconds": PROBE_TIMEOUT_S["readiness"],
                                               "failureThreshold": 3},
                            "livenessProbe": {**probe, "periodSeconds": 15, "timeoutSeconds": PROBE_TIMEOUT_S["liveness"],
                                              "failureThreshold": 4},
                            "volumeMounts": [
                                {"name": "dshm", "mountPath": "/dev/shm"},
                                {"name": "compile-cache", "mountPath": "/root/.cache/vllm"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                        {"name": "compile-cache", "emptyDir": {}},
                    ],
                },
            },
        },
    }  # fmt: skip


def service(
    settings: Settings, *, namespace: str, service_type: str, source_ranges: list[str] | None
) -> dict[str, Any]:
    """The Service in front of the pods (ClusterIP, or LoadBalancer limited to ``source_ranges``)."""
    spec: dict[str, Any] = {
        "type": service_type,
        "selector": dict(labels(settings)),
        "ports": [{"name": "http", "port": settings.vllm_port, "targetPort": "http", "protocol": "TCP"}],
    }
    if service_type == "LoadBalancer":
        spec["loadBalancerSourceRanges"] = list(source_ranges or [])
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names(settings)["service"], "namespace": namespace, "labels": labels(settings)},
        "spec": spec,
    }


def hpa(
    settings: Settings, *, namespace: str, replicas: int, max_replicas: int, queue_target: int
) -> dict[str, Any]:
    """The HorizontalPodAutoscaler on the per-pod vLLM queue."""
    n = names(settings)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": n["hpa"], "namespace": namespace, "labels": labels(settings)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": n["deployment"]},
            "minReplicas": replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": HPA_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(queue_target)},
                    },
                }
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S}},
        },
    }


def pod_monitoring(settings: Settings, *, namespace: str) -> dict[str, Any]:
    """The PodMonitoring (Managed Service for Prometheus) that exports vLLM's /metrics every 15 s."""
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": {
            "name": names(settings)["podmonitoring"],
            "namespace": namespace,
            "labels": labels(settings),
        },
        "spec": {
            "selector": {"matchLabels": dict(labels(settings))},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def validate_offline(manifest: dict[str, Any]) -> list[str]:
    """Check one manifest against the Kubernetes OpenAPI schemas (kubernetes-validate, strict) of the oldest
    GKE version with flex-start TPUs and of the newest bundled. Returns the versions it was checked
    against ([] for a custom resource, which has no schema there).

    Raises:
        InputError: the manifest does not validate (field = kind/name, message = the schema error).
    """
    import kubernetes_validate

    versions = [SCHEMA_MIN_VERSION, kubernetes_validate.latest_version()]
    checked = []
    for version in versions:
        try:
            kubernetes_validate.validate(copy.deepcopy(manifest), version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            return []
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path) or "(top level)"
            raise InputError(
                f"invalid against the Kubernetes {version} schema at {where}: {exc.message}",
                field=f"{manifest.get('kind')}/{manifest.get('metadata', {}).get('name')}",
                value=None,
                fix="this is a defect in the rendered manifest: report it with the message",
            ) from None
        checked.append(version)
    return checked


class RenderedManifest(BaseModel):
    """One Kubernetes object: its kind, name, where it was validated, and the manifest itself."""

    kind: str
    name: str
    api_version: str
    validated_against: list[str] = Field(description="Kubernetes schema versions ([] = custom resource)")
    manifest: dict[str, Any]


class GkePlan(ToolResult):
    """`plan_gke_deployment` result: the node pool request, the manifests and what a dry run said."""

    cluster: str
    location: str
    namespace: str
    replicas: int
    max_replicas: int
    node_pool: dict[str, Any] = Field(description="container v1 NodePool request body (REST JSON)")
    node_pool_url: str
    manifests: list[RenderedManifest]
    # the text form shows the YAML; the structured form has the same manifests as objects
    yaml: str = Field(description="the manifests as one multi-document YAML (kubectl apply -f)", exclude=True)
    secret_command: str = Field(description="how to create the Secret the pods read (values never shown)")
    server_dry_run: list[str] = Field(
        default_factory=list, description="per object: what the API server said"
    )
    price: str | None = None
    usd_per_hour: float | None = None
    compute_quota: ComputeQuotaCheck | None = Field(
        default=None, description="the Compute Engine quota the nodes draw (not the TPU API quota)"
    )
    notes: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        dry = (
            "; server-side dry run passed"
            if self.server_dry_run and all(" ok" in s for s in self.server_dry_run)
            else ""
        )
        cost = f", ${self.usd_per_hour:,.2f}/h" if self.usd_per_hour is not None else ""
        return (
            f"GKE: node pool {self.node_pool['name']} ({self.replicas}-{self.max_replicas} x "
            f"{self.node_pool['config']['machineType']}) in {self.cluster}, {len(self.manifests)} objects in "
            f"namespace {self.namespace}{cost}{dry}"
        ) + "".join(f". {n}" for n in self.notes if n.startswith("WARNING:"))

    def render_text(self) -> str:
        """Headline, the node pool request, each object with its validation, the YAML, notes."""
        import json

        lines = [
            self.headline(),
            "",
            f"# node pool: POST {self.node_pool_url}",
            json.dumps(self.node_pool, indent=2),
            "",
        ]
        for m in self.manifests:
            how = f"validated against Kubernetes {', '.join(m.validated_against)}" if m.validated_against else (
                "custom resource: checked only by the server-side dry run"
            )  # fmt: skip
            lines.append(f"# {m.kind} {m.name} ({m.api_version}): {how}")
        lines.extend(f"# dry run: {s}" for s in self.server_dry_run)
        lines += [
            "",
            "# the Secret the pods read (create it yourself; values are never shown here):",
            self.secret_command,
        ]
        lines += ["", self.yaml]
        if self.price:
            lines.append(f"price: {self.price}")
        if self.compute_quota:
            q = self.compute_quota
            lines.append(f"quota ({q.service}, not the TPU API quota): {q.verdict}: {q.detail}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def render(
    settings: Settings,
    *,
    cluster: str,
    location: str | None = None,
    replicas: int = 1,
    max_replicas: int | None = None,
    namespace: str = "default",
    service_type: str = "ClusterIP",
    source_ranges: list[str] | None = None,
    queue_target: int = 2,
    open_to_internet: bool = False,
) -> GkePlan:
    """Render and validate offline the node pool request and every manifest (nothing is sent).

    ``source_ranges`` / ``open_to_internet``: who may reach a LoadBalancer Service, by the VM firewall's
    rule (`load_balancer_ranges`).

    Raises:
        InputError / ConfigError: a bad argument (named), or a manifest that fails its schema (a defect).
    """
    import yaml

    from tpu_devops import names as name_rules

    max_replicas = replicas if max_replicas is None else max_replicas
    _check(settings, replicas, max_replicas, namespace, service_type)
    source_ranges, exposure_warnings = load_balancer_ranges(
        settings, service_type, source_ranges, open_to_internet
    )
    # the pods run the image with the Secret's token and key: only an allowed repository's, as on a VM
    name_rules.check_image(settings.vllm_image, settings.image_repositories, "VLLM_IMAGE")
    name_rules.check_model_id(settings.model_name, "MODEL_NAME")
    if not _K8S_NAME.match(cluster or "") or len(cluster) > 40:
        raise InputError(
            "not a GKE cluster name", field="cluster", value=cluster, fix="pass your cluster's name"
        )
    if isinstance(queue_target, bool) or not 1 <= queue_target <= 1000:
        raise InputError(
            "out of range",
            field="queue_target",
            value=queue_target,
            fix="use 1..1000 waiting requests per pod",
        )
    location = check_location(settings, location)
    zone = node_zone(settings, location)
    objects = [
        deployment(settings, replicas=replicas, namespace=namespace),
        service(settings, namespace=namespace, service_type=service_type, source_ranges=source_ranges),
        pod_monitoring(settings, namespace=namespace),
        hpa(
            settings,
            namespace=namespace,
            replicas=replicas,
            max_replicas=max_replicas,
            queue_target=queue_target,
        ),
    ]
    rendered = [
        RenderedManifest(
            kind=o["kind"],
            name=o["metadata"]["name"],
            api_version=o["apiVersion"],
            validated_against=validate_offline(o),
            manifest=o,
        )
        for o in objects
    ]
    n = names(settings)
    project = settings.project or "PROJECT"
    secret_cmd = (
        f"kubectl -n {namespace} create secret generic {n['secret']} "
        f'--from-literal=hf_token="$HF_TOKEN" --from-literal=api_key="$VLLM_API_KEY" && '
        f"kubectl -n {namespace} label secret {n['secret']} {selector(settings).replace(',', ' ')}"
    )
    notes = [
        f"ownership: node pool resourceLabels {settings.rig_labels}; Kubernetes objects labelled {selector(settings)}; "
        "teardown deletes only what carries these labels",
        "autoscaling needs the Custom Metrics Stackdriver Adapter in the cluster (Google's GKE autoscaling guide) and "
        "Managed Service for Prometheus (on by default in GKE)",
        "the compile cache is per pod (emptyDir): every new pod compiles again (~12 min on v5e); no cache is "
        "shared between pods yet",
    ]
    if image_source := name_rules.non_default_source(settings.vllm_image):
        notes.insert(0, image_source)
    notes[:0] = exposure_warnings
    if settings.provisioning_model == "flex-start":
        notes.append(
            f"flex-start nodes come from the cluster autoscaler when pods wait and live at most "
            f"{settings.max_run_duration_s} s (maxRunDuration); GKE needs 1.33.0-gke.1712000 or later"
        )
    elif settings.provisioning_model == "spot":
        notes.append(
            "spot nodes can be reclaimed at any time: the Deployment reschedules, each restart costs a cold boot"
        )
    return GkePlan(
        cluster=cluster,
        location=location,
        namespace=namespace,
        replicas=replicas,
        max_replicas=max_replicas,
        node_pool=node_pool_body(settings, replicas=replicas, max_replicas=max_replicas, zone=zone),
        node_pool_url=f"projects/{project}/locations/{location}/clusters/{cluster}/nodePools",
        manifests=rendered,
        yaml=yaml.safe_dump_all([m.manifest for m in rendered], sort_keys=False),
        secret_command=secret_cmd,
        notes=notes,
    )
