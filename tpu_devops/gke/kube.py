"""The Kubernetes API through the official ``kubernetes`` client: read, server-side apply, list, delete.

Only the four kinds the GKE deployment renders (Deployment, Service, HorizontalPodAutoscaler,
PodMonitoring) plus reading a Secret's key names, the pods' status, the namespace's events and a
pod's log tail (bounded: `LOG_TAIL_LINES` lines, `LOG_LIMIT_BYTES` bytes, `MAX_EVENTS` events). Writes are server-side apply
(``application/apply-patch+yaml``, field manager ``tpu-devops``; Kubernetes "Server-Side Apply"), with
``dryRun=All`` for the plan: the API server runs admission and validation and stores nothing.
Every call is blocking: run it through `tpu_devops.gcp.common.run_blocking`. The ``ApiClient`` comes
from `tpu_devops.gke.connect` (the GKE API, or a kubeconfig read as data): nothing a tool is handed runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tpu_devops.errors import CloudError, NotFoundError, PermissionError_, TpuDevopsError

FIELD_MANAGER = "tpu-devops"
TIMEOUT = (10, 30)  # (connect, read) seconds per request
APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Kind:
    """How to reach one kind: typed API class and method suffix, or a custom resource (group, version, plural)."""

    kind: str
    api: str  # AppsV1Api / CoreV1Api / AutoscalingV2Api / CustomObjectsApi
    suffix: str = ""  # deployment / service / horizontal_pod_autoscaler
    group: str = ""
    version: str = ""
    plural: str = ""


KINDS = {
    "Deployment": Kind("Deployment", "AppsV1Api", "deployment"),
    "Service": Kind("Service", "CoreV1Api", "service"),
    "HorizontalPodAutoscaler": Kind("HorizontalPodAutoscaler", "AutoscalingV2Api", "horizontal_pod_autoscaler"),
    "PodMonitoring": Kind("PodMonitoring", "CustomObjectsApi", group="monitoring.googleapis.com", version="v1", plural="podmonitorings"),
}  # fmt: skip


MAX_EVENTS = 500  # one page of the namespace's events, newest kept by the API server's own order
LOG_TAIL_LINES = 400
LOG_LIMIT_BYTES = 64 << 10


def _error(exc: Exception, action: str) -> Exception:
    """A typed error for a failed Kubernetes call, with the API server's Status message."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, TpuDevopsError):  # a read cap (`tpu_devops.host.bounded`) names itself and its fix
        return exc
    if not isinstance(exc, ApiException):
        from urllib3.exceptions import HTTPError

        if isinstance(exc, HTTPError | OSError):
            return CloudError(
                f"cannot {action}: the Kubernetes API did not answer ({type(exc).__name__})",
                field="cluster",
                fix="check that the cluster's control plane is reachable from this machine (authorized networks) "
                "and try again",
            )
        return CloudError(
            f"cannot {action}: unexpected answer from the Kubernetes API ({type(exc).__name__}: {exc})"
        )
    message = exc.reason or ""
    try:
        status = json.loads(exc.body or "{}")
        message = status.get("message") or message
    except (TypeError, ValueError):
        pass
    if exc.status == 404:
        return NotFoundError(f"cannot {action}: {message}")
    if exc.status in (401, 403):
        return PermissionError_(
            f"cannot {action}: {message}",
            field="credentials",
            fix="use credentials with edit rights in the namespace (roles/container.developer on the project, or "
            "an RBAC binding in the cluster)",
        )
    return CloudError(f"cannot {action}: HTTP {exc.status} {message}")


class Kube:
    """The calls the deployment needs, on one ``ApiClient``."""

    def __init__(self, api_client: Any):
        from kubernetes import client

        from tpu_devops.host.bounded import bound_pool_manager

        self._client = client
        self.api_client = api_client
        bound_pool_manager(api_client.rest_client)  # every answer read under the caps (size, time)

    def _api(self, kind: Kind) -> Any:
        return getattr(self._client, kind.api)(self.api_client)

    def _call(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=TIMEOUT, **kwargs)
        except Exception as exc:
            raise _error(exc, action) from None

    def read(self, kind_name: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as JSON, or None when it does not exist."""
        kind = KINDS[kind_name]
        api = self._api(kind)
        try:
            if kind.plural:
                return self._call(
                    f"read {kind_name} {name}", api.get_namespaced_custom_object, kind.group, kind.version, namespace, kind.plural, name
                )  # fmt: skip
            obj = self._call(
                f"read {kind_name} {name}", getattr(api, f"read_namespaced_{kind.suffix}"), name, namespace
            )
        except NotFoundError:
            return None
        return self.api_client.sanitize_for_serialization(obj)

    def apply(self, manifest: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        """Server-side apply ``manifest`` (``dryRun=All`` when ``dry_run``); the object the server returned."""
        kind = KINDS[manifest["kind"]]
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        api = self._api(kind)
        opts: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_content_type": APPLY}
        if dry_run:
            opts["dry_run"] = "All"
        action = f"{'dry-run ' if dry_run else ''}apply {manifest['kind']} {name}"
        if kind.plural:
            obj = self._call(
                action, api.patch_namespaced_custom_object, kind.group, kind.version, namespace, kind.plural, name, manifest, **opts
            )  # fmt: skip
            return obj
        obj = self._call(
            action, getattr(api, f"patch_namespaced_{kind.suffix}"), name, namespace, manifest, **opts
        )
        return self.api_client.sanitize_for_serialization(obj)

    def list_ours(self, kind_name: str, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """Objects of ``kind_name`` in ``namespace`` matching ``label_selector`` (our labels)."""
        kind = KINDS[kind_name]
        api = self._api(kind)
        action = f"list {kind_name} objects"
        if kind.plural:
            data = self._call(
                action, api.list_namespaced_custom_object, kind.group, kind.version, namespace, kind.plural, label_selector=label_selector
            )  # fmt: skip
            return list(data.get("items") or [])
        data = self._call(
            action, getattr(api, f"list_namespaced_{kind.suffix}"), namespace, label_selector=label_selector
        )
        return list(self.api_client.sanitize_for_serialization(data).get("items") or [])

    def delete(self, kind_name: str, namespace: str, name: str) -> None:
        """Delete one object (foreground: a Deployment's pods go with it)."""
        kind = KINDS[kind_name]
        api = self._api(kind)
        body = self._client.V1DeleteOptions(propagation_policy="Foreground")
        if kind.plural:
            self._call(
                f"delete {kind_name} {name}", api.delete_namespaced_custom_object, kind.group, kind.version, namespace, kind.plural, name, body=body
            )  # fmt: skip
            return
        self._call(
            f"delete {kind_name} {name}",
            getattr(api, f"delete_namespaced_{kind.suffix}"),
            name,
            namespace,
            body=body,
        )

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """One value of a Secret (base64-decoded), or None when the Secret or the key is missing. The
        caller sends it only where it belongs and never shows it."""
        import base64

        api = self._client.CoreV1Api(self.api_client)
        try:
            secret = self._call(f"read secret {name}", api.read_namespaced_secret, name, namespace)
        except NotFoundError:
            return None
        raw = (secret.data or {}).get(key)
        return base64.b64decode(raw).decode() if raw else None

    def secret_keys(self, namespace: str, name: str) -> set[str] | None:
        """The key names of a Secret (values are dropped at once, never returned), or None when missing."""
        api = self._client.CoreV1Api(self.api_client)
        try:
            secret = self._call(f"read secret {name}", api.read_namespaced_secret, name, namespace)
        except NotFoundError:
            return None
        return set((secret.data or {}).keys()) | set((secret.string_data or {}).keys())

    def pods(self, namespace: str, label_selector: str) -> list[tuple[str, bool]]:
        """(name, ready) of every pod matching the selector."""
        api = self._client.CoreV1Api(self.api_client)
        pods = self._call("list pods", api.list_namespaced_pod, namespace, label_selector=label_selector)
        found = []
        for pod in pods.items:
            conditions = (pod.status.conditions or []) if pod.status else []
            found.append(
                (pod.metadata.name, any(c.type == "Ready" and c.status == "True" for c in conditions))
            )
        return found

    def pod_objects(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """Every pod matching the selector as JSON (metadata and status: conditions, container states)."""
        api = self._client.CoreV1Api(self.api_client)
        pods = self._call("list pods", api.list_namespaced_pod, namespace, label_selector=label_selector)
        return list(self.api_client.sanitize_for_serialization(pods).get("items") or [])

    def events(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's events as JSON (core v1 ``Event``: involvedObject, reason, message, type,
        lastTimestamp), at most `MAX_EVENTS`. Their text is data to match, never to act on."""
        api = self._client.CoreV1Api(self.api_client)
        found = self._call("list events", api.list_namespaced_event, namespace, limit=MAX_EVENTS)
        return list(self.api_client.sanitize_for_serialization(found).get("items") or [])

    def pod_log(self, namespace: str, pod: str, container: str, *, previous: bool = False) -> str:
        """The last `LOG_TAIL_LINES` lines (at most `LOG_LIMIT_BYTES`) of a container's log; ``previous``:
        of its last terminated run (what a crash-looping container printed before it exited)."""
        api = self._client.CoreV1Api(self.api_client)
        text = self._call(
            f"read the log of pod {pod}", api.read_namespaced_pod_log, pod, namespace, container=container,
            previous=previous, tail_lines=LOG_TAIL_LINES, limit_bytes=LOG_LIMIT_BYTES,
        )  # fmt: skip
        return str(text or "")[:LOG_LIMIT_BYTES]

    def ready_pods(self, namespace: str, label_selector: str) -> tuple[int, int]:
        """(ready, total) pods matching the selector."""
        found = self.pods(namespace, label_selector)
        return sum(ready for _, ready in found), len(found)

    def pod_get(self, namespace: str, pod: str, port: int, path: str) -> str:
        """``GET path`` on one pod through the API server's pod proxy (``pods/<name>:<port>/proxy/<path>``):
        reaches a single replica behind the Service, from outside the cluster."""
        api = self._client.CoreV1Api(self.api_client)
        return self._call(
            f"read {path} of pod {pod}", api.connect_get_namespaced_pod_proxy_with_path, f"{pod}:{port}", namespace, path.lstrip("/")
        )  # fmt: skip
