"""In-process fake of the Kubernetes API server for the kinds tpu-devops deploys (as moto fakes AWS).

Real paths (``/apis/apps/v1/namespaces/{ns}/deployments/{name}``, ``/api/v1/namespaces/{ns}/services``,
``/apis/autoscaling/v2/...horizontalpodautoscalers``, ``/apis/monitoring.googleapis.com/v1/...podmonitorings``,
secrets and pods), bearer-token authentication, and the API's ``Status`` payloads for failures
(``reason`` NotFound / Invalid / Unauthorized / UnsupportedMediaType / BadRequest). Server-side apply
(PATCH ``application/apply-patch+yaml``) needs ``fieldManager`` like the real server; ``dryRun=All``
validates and answers without storing. Built-in kinds are validated against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict), answering 422 Invalid when they do not conform. Label selectors
are the equality form (``a=b,c=d``). Deployments get pods that boot (container running, startup probe
not passed) and become Ready on ``mark_ready``; ``set_pod_status`` scripts any other pod status (an
image pull back-off, an unschedulable pod, a crash loop), ``add_event`` the namespace's core v1 events
(the scheduler's, the cluster autoscaler's, the kubelet's, with their real reasons) and ``pod_logs`` a
container's log (``GET .../pods/{name}/log``, ``previous`` for the last terminated run).

It serves HTTPS only, with a throwaway CA (`tests.fakes.vm.tls`), like a GKE control plane: ``endpoint``
and ``ca_pem`` are what the fake GKE API's ``clusters.get`` hands out (`FakeContainer.add_cluster` with
``kube=``), and ``kubeconfig`` writes a data-only kubeconfig with the CA and a bearer token. Requests must
carry ``Bearer TOKEN`` or a token in ``google_tokens``; with ``anonymous`` (set by the fake GKE API, whose
clients hold anonymous credentials like every fake's) a request without credentials passes too.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread

TOKEN = "fake-kube-token"
# plural -> (API prefix, group for messages, kind)
RESOURCES = {
    "deployments": ("/apis/apps/v1", "apps", "Deployment"),
    "services": ("/api/v1", "", "Service"),
    "horizontalpodautoscalers": ("/apis/autoscaling/v2", "autoscaling", "HorizontalPodAutoscaler"),
    "podmonitorings": ("/apis/monitoring.googleapis.com/v1", "monitoring.googleapis.com", "PodMonitoring"),
}


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> JSONResponse:
    """The API server's ``Status`` object for a failure."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    if details:
        body["details"] = details
    return JSONResponse(body, status_code=code)


def matches(labels: dict[str, str], selector: str | None) -> bool:
    """Equality-based label selector match (``a=b,c=d``; ``a==b`` too)."""
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.replace("==", "=").partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


class FakeKube:
    """Objects by (plural, namespace, name); secrets by (namespace, name); pods per Deployment."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.pods: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (ns, deployment) -> pods
        self.pod_backends: dict[tuple[str, str], str] = {}  # (ns, pod) -> URL its proxy forwards to
        self.events: dict[str, list[dict[str, Any]]] = {}  # ns -> core v1 Events
        self.pod_logs: dict[tuple[str, str, bool], str] = {}  # (ns, pod, previous) -> log text
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, query)
        self.authorizations: list[str | None] = []  # the Authorization header of every request
        self.google_tokens: set[str] = set()  # Google access tokens the API server accepts
        self.anonymous = False
        self._uid = itertools.count(1)
        self.app = Starlette(routes=self.routes())
        self._thread: ServerThread | None = None
        self._tls: str | None = None

    # ---- scripting ----------------------------------------------------------------------------------

    def add_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.secrets[(namespace, name)] = dict(data)

    def add_object(
        self, plural: str, namespace: str, name: str, labels: dict[str, str] | None = None
    ) -> None:
        """An object someone else created (for ownership tests)."""
        _, group, kind = RESOURCES[plural]
        api_version = f"{group}/{'v2' if plural == 'horizontalpodautoscalers' else 'v1'}" if group else "v1"
        self.objects[(plural, namespace, name)] = {
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "uid": f"uid-{next(self._uid)}"},
        }  # fmt: skip

    def mark_ready(self, namespace: str, deployment: str) -> None:
        for pod in self.pods.get((namespace, deployment), []):
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ]
            for c in pod["status"].get("containerStatuses", []):
                c.update(ready=True, started=True)

    def set_pod_status(self, namespace: str, deployment: str, index: int, status: dict[str, Any]) -> str:
        """Replace pod ``index`` of ``deployment``'s status (as the kubelet / scheduler would write it);
        returns the pod's name."""
        pod = self.pods[(namespace, deployment)][index]
        pod["status"] = copy.deepcopy(status)
        return pod["metadata"]["name"]

    def add_event(
        self, namespace: str, kind: str, name: str, reason: str, message: str, *, type: str = "Warning",
        source: str = "kubelet", at: str | None = None,
    ) -> None:  # fmt: skip
        """One core v1 Event about ``kind``/``name`` (``at``: RFC 3339, default now)."""
        from datetime import UTC, datetime

        when = at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        n = next(self._uid)
        self.events.setdefault(namespace, []).append({
            "metadata": {"name": f"{name}.{n:016x}", "namespace": namespace, "creationTimestamp": when},
            "involvedObject": {"kind": kind, "namespace": namespace, "name": name, "apiVersion": "v1"},
            "reason": reason, "message": message, "type": type, "count": 1,
            "source": {"component": source}, "firstTimestamp": when, "lastTimestamp": when,
        })  # fmt: skip

    # ---- handlers -----------------------------------------------------------------------------------

    def _auth(self, request: Request) -> JSONResponse | None:
        self.requests.append((request.method, request.url.path, dict(request.query_params)))
        given = request.headers.get("authorization")
        self.authorizations.append(given)
        if given is None and self.anonymous:
            return None
        if given != f"Bearer {TOKEN}" and given not in {f"Bearer {t}" for t in self.google_tokens}:
            return status(401, "Unauthorized", "Unauthorized")
        return None

    def _not_found(self, plural: str, name: str) -> JSONResponse:
        _, group, _ = RESOURCES[plural]
        what = f"{plural}.{group}" if group else plural
        return status(
            404, "NotFound", f'{what} "{name}" not found', {"name": name, "group": group, "kind": plural}
        )

    async def collection(self, request: Request) -> JSONResponse:
        if denied := self._auth(request):
            return denied
        plural, ns = request.path_params["plural"], request.path_params["namespace"]
        if plural not in RESOURCES or not request.url.path.startswith(RESOURCES[plural][0] + "/"):
            return status(404, "NotFound", "the server could not find the requested resource")
        items = [
            o for (p, n, _), o in sorted(self.objects.items())
            if p == plural and n == ns and matches(o["metadata"].get("labels") or {}, request.query_params.get("labelSelector"))
        ]  # fmt: skip
        kind = RESOURCES[plural][2]
        return JSONResponse(
            {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}
        )

    async def member(self, request: Request) -> JSONResponse:
        if denied := self._auth(request):
            return denied
        plural, ns, name = (request.path_params[k] for k in ("plural", "namespace", "name"))
        if plural not in RESOURCES or not request.url.path.startswith(RESOURCES[plural][0] + "/"):
            return status(404, "NotFound", "the server could not find the requested resource")
        key = (plural, ns, name)
        if request.method == "GET":
            obj = self.objects.get(key)
            return JSONResponse(obj) if obj else self._not_found(plural, name)
        if request.method == "DELETE":
            if key not in self.objects:
                return self._not_found(plural, name)
            gone = self.objects.pop(key)
            self.pods.pop((ns, name), None) if plural == "deployments" else None
            if plural in ("services", "podmonitorings"):  # the API answers these with the deleted object
                return JSONResponse(gone)
            return JSONResponse({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                 "details": {"name": name, "group": RESOURCES[plural][1], "kind": plural}})  # fmt: skip
        return await self._apply(request, key)

    async def _apply(self, request: Request, key: tuple[str, str, str]) -> JSONResponse:
        plural, ns, name = key
        if request.headers.get("content-type", "").split(";")[0] != "application/apply-patch+yaml":
            return status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/apply-patch+yaml",
            )
        field_manager = request.query_params.get("fieldManager")
        if not field_manager:
            return status(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            )
        dry = request.query_params.get("dryRun")
        if dry not in (None, "All"):
            return status(400, "BadRequest", f"Invalid dryRun value {dry!r}: valid values are All")
        import yaml

        body = yaml.safe_load(await request.body())
        prefix, group, kind = RESOURCES[plural]
        meta = body.get("metadata") or {}
        if body.get("kind") != kind or meta.get("name") != name or meta.get("namespace", ns) != ns:
            return status(
                400,
                "BadRequest",
                f"the name or kind of the object ({body.get('kind')} {meta.get('name')}) does not match the URL",
            )
        if plural != "podmonitorings":
            import kubernetes_validate

            try:
                kubernetes_validate.validate(
                    copy.deepcopy(body), kubernetes_validate.latest_version(), strict=True
                )
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                what = f"{kind}.{group}" if group else kind
                return status(422, "Invalid", f'{what} "{name}" is invalid: {where}: Invalid value: {exc.message}',
                              {"name": name, "group": group, "kind": kind, "causes": [{"field": where, "message": exc.message}]})  # fmt: skip
        existing = self.objects.get(key)
        stored = copy.deepcopy(body)
        stored["metadata"] = {**meta, "namespace": ns, "uid": (existing or {}).get("metadata", {}).get("uid") or f"uid-{next(self._uid)}",
                              "resourceVersion": str(next(self._uid))}  # fmt: skip
        if plural == "services" and stored["spec"].get("type") == "LoadBalancer":
            stored["status"] = {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}
        if dry == "All":
            return JSONResponse(stored)
        self.objects[key] = stored
        if plural == "deployments":
            self._scale(ns, name, int(stored["spec"].get("replicas", 1)), stored)
        return JSONResponse(stored, status_code=200 if existing else 201)

    def _scale(self, ns: str, deployment: str, replicas: int, obj: dict[str, Any]) -> None:
        pods = self.pods.setdefault((ns, deployment), [])
        labels = obj["spec"]["template"]["metadata"]["labels"]
        container = obj["spec"]["template"]["spec"]["containers"][0]
        while len(pods) < replicas:
            # a pod on its node, vLLM booting: the container runs, the startup probe has not passed yet
            booting = {
                "name": container["name"],
                "image": container["image"],
                "imageID": f"docker.io/{container['image']}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }
            pods.append({"metadata": {"name": f"{deployment}-{len(pods)}", "namespace": ns, "labels": dict(labels)},
                         "status": {"phase": "Running", "containerStatuses": [booting],
                                    "conditions": [{"type": "PodScheduled", "status": "True"},
                                                   {"type": "Ready", "status": "False"}]}})  # fmt: skip
        del pods[replicas:]

    async def pods_list(self, request: Request) -> JSONResponse:
        if denied := self._auth(request):
            return denied
        ns = request.path_params["namespace"]
        items = [
            pod for (n, _), pods in self.pods.items() if n == ns for pod in pods
            if matches(pod["metadata"]["labels"], request.query_params.get("labelSelector"))
        ]  # fmt: skip
        return JSONResponse({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def events_list(self, request: Request) -> JSONResponse:
        if denied := self._auth(request):
            return denied
        ns = request.path_params["namespace"]
        limit = int(request.query_params.get("limit") or 0)
        items = list(self.events.get(ns, []))
        items = items[:limit] if limit else items
        return JSONResponse({"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def pod_log(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        ns, name = request.path_params["namespace"], request.path_params["name"]
        previous = request.query_params.get("previous") == "true"
        if not any(
            p["metadata"]["name"] == name for (n, _), pods in self.pods.items() if n == ns for p in pods
        ):
            return status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        text = self.pod_logs.get((ns, name, previous))
        if text is None:
            if previous:
                return status(
                    400, "BadRequest", f'previous terminated container "vllm" in pod "{name}" not found'
                )
            text = ""
        tail = request.query_params.get("tailLines")
        if tail:
            text = "".join(text.splitlines(keepends=True)[-int(tail) :])
        limit = request.query_params.get("limitBytes")
        if limit:
            text = text.encode()[: int(limit)].decode("utf-8", "ignore")
        return Response(text, media_type="text/plain")

    async def pod_proxy(self, request: Request) -> Response:
        """``GET /api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/{path}``: forwarded to the pod's backend
        (``pod_backends[(ns, pod)]``, a loopback URL), as the API server proxies to the pod's IP."""
        if denied := self._auth(request):
            return denied
        ns, target, path = (request.path_params[k] for k in ("namespace", "name", "path"))
        pod = target.split(":", 1)[0]
        backend = self.pod_backends.get((ns, pod))
        if backend is None:
            return status(503, "ServiceUnavailable", f'no endpoints available for pod "{pod}"')
        import httpx

        async with httpx.AsyncClient() as client:
            r = await client.get(f"{backend}/{path}")
        return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))

    async def secret(self, request: Request) -> JSONResponse:
        if denied := self._auth(request):
            return denied
        ns, name = request.path_params["namespace"], request.path_params["name"]
        data = self.secrets.get((ns, name))
        if data is None:
            return status(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"})
        import base64

        return JSONResponse({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": name, "namespace": ns},
                             "type": "Opaque", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})  # fmt: skip

    def routes(self) -> list[Route]:
        routes = [
            Route("/api/v1/namespaces/{namespace}/pods", self.pods_list, methods=["GET"]),
            Route("/api/v1/namespaces/{namespace}/events", self.events_list, methods=["GET"]),
            Route("/api/v1/namespaces/{namespace}/pods/{name}/log", self.pod_log, methods=["GET"]),
            Route(
                "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path:path}",
                self.pod_proxy,
                methods=["GET"],
            ),
            Route("/api/v1/namespaces/{namespace}/secrets/{name}", self.secret, methods=["GET"]),
        ]
        for prefix in sorted({p for p, _, _ in RESOURCES.values()}):
            routes.append(
                Route(prefix + "/namespaces/{namespace}/{plural}", self.collection, methods=["GET"])
            )
            routes.append(
                Route(
                    prefix + "/namespaces/{namespace}/{plural}/{name}",
                    self.member,
                    methods=["GET", "PATCH", "DELETE"],
                )
            )
        return routes

    # ---- running ------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._thread is not None
        return self._thread.url

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:PORT``: the control plane's address as GKE's ``Cluster.endpoint`` gives it."""
        return self.url.removeprefix("https://")

    @property
    def ca_pem(self) -> str:
        """The PEM of the CA that signed this fake's certificate."""
        assert self._tls is not None
        return Path(self._tls, "ca.pem").read_text()

    def kubeconfig(self, path: Any, token: str = TOKEN, **user: Any) -> str:
        """Write a data-only kubeconfig for this fake (context ``fake``: server, CA, bearer token; ``user``
        replaces the user's fields) and return its path."""
        import base64

        ca = base64.b64encode(self.ca_pem.encode()).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": "fake", "user": user or {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }  # fmt: skip
        path.write_text(json.dumps(config))
        return str(path)

    def __enter__(self) -> FakeKube:
        import tempfile

        from tests.fakes.vm.tls import make_certificates

        self._tls = tempfile.mkdtemp(prefix="fake-kube-tls-")
        _, cert, key = make_certificates(Path(self._tls))
        self._thread = ServerThread(self.app, ssl_certfile=str(cert), ssl_keyfile=str(key)).start()
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil

        if self._thread:
            self._thread.stop()
        if self._tls:
            shutil.rmtree(self._tls, ignore_errors=True)
