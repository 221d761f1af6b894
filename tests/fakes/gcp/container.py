"""Fake of the GKE (container v1) REST surface: clusters, their node pools, and operations.

Paths (container v1 discovery document, ``projects.locations.clusters``, ``.clusters.nodePools`` and
``projects.locations.operations``): ``GET /v1/{name=projects/*/locations/*/clusters/*}`` (a ``Cluster``
with ``endpoint`` and ``masterAuth.clusterCaCertificate``: those of a `FakeKube` when the cluster was
added with one, so that a client reaches that fake's API server over verified TLS),
``POST /v1/{parent=projects/*/locations/*/clusters/*}/nodePools``,
``GET|DELETE /v1/{name=projects/*/locations/*/clusters/*/nodePools/*}``,
``GET /v1/{name=projects/*/locations/*/operations/*}``. Requests reach it only after `FakeGcp`'s
discovery validator accepted them against the container v1 document; operations start RUNNING and turn
DONE after ``polls_to_done`` reads; errors use Google's ``{"error": {code, message, status}}``.
"""

from __future__ import annotations

import itertools
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.gcp.tpu import google_error


class FakeContainer:
    """Clusters (``add_cluster``) holding node pools; ``requests`` records every create body."""

    def __init__(self, project: str = "demo-project", polls_to_done: int = 1) -> None:
        self.project = project
        self.clusters: dict[str, dict[str, dict[str, Any]]] = {}  # cluster path -> pool name -> pool
        self.cluster_info: dict[str, dict[str, Any]] = {}  # cluster path -> Cluster JSON (clusters.get)
        self.cluster_reads: list[str] = []  # paths of every clusters.get
        self.operations: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.polls_to_done = polls_to_done
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def add_cluster(self, location: str, name: str, kube: Any = None) -> str:
        """A RUNNING cluster; with ``kube`` (a started `FakeKube`) its endpoint and CA are that fake's, and
        the fake admits the anonymous credentials every client of these fakes holds."""
        import base64

        path = f"projects/{self.project}/locations/{location}/clusters/{name}"
        self.clusters.setdefault(path, {})
        info: dict[str, Any] = {
            "name": name, "location": location, "status": "RUNNING", "currentMasterVersion": "1.33.2-gke.1240000",
            "selfLink": f"https://container.googleapis.com/v1/{path}", "masterAuth": {},
        }  # fmt: skip
        if kube is not None:
            kube.anonymous = True
            info["endpoint"] = kube.endpoint
            info["masterAuth"] = {"clusterCaCertificate": base64.b64encode(kube.ca_pem.encode()).decode()}
        self.cluster_info[path] = info
        return path

    async def cluster(self, request: Request) -> JSONResponse:
        p = request.path_params
        path = f"projects/{p['project']}/locations/{p['location']}/clusters/{p['cluster']}"
        self.cluster_reads.append(path)
        if path not in self.cluster_info:
            return google_error(404, "NOT_FOUND", f"Not found: {path}.")
        return JSONResponse(self.cluster_info[path])

    def _operation(self, location: str, kind: str, target: str) -> dict[str, Any]:
        name = f"operation-{next(self._ids)}"
        op = {
            "name": name,
            "zone": location,
            "operationType": kind,
            "status": "RUNNING",
            "selfLink": f"https://container.googleapis.com/v1/projects/{self.project}/locations/{location}/operations/{name}",
            "targetLink": f"https://container.googleapis.com/v1/{target}",
        }
        self.operations[f"projects/{self.project}/locations/{location}/operations/{name}"] = op
        return op

    async def create(self, request: Request) -> JSONResponse:
        p = request.path_params
        parent = f"projects/{p['project']}/locations/{p['location']}/clusters/{p['cluster']}"
        if parent not in self.clusters:
            return google_error(404, "NOT_FOUND", f"Not found: {parent}.")
        body = await request.json()
        self.requests.append(body)
        pool = body.get("nodePool") or {}
        # The one check the discovery validator cannot make: the document gives NodePool.name no
        # "required" mark (only CreateNodePoolRequest's prose says "Required"), yet GKE refuses a pool
        # without one with this 400 (reported in pulumi/pulumi-google-native#270). Everything else about
        # the body (fields, types, enums) is `FakeGcp`'s discovery validator's.
        if not pool.get("name"):
            return google_error(400, "INVALID_ARGUMENT", "Node_pool.name must be specified.")
        if pool["name"] in self.clusters[parent]:
            return google_error(409, "ALREADY_EXISTS", f"Already exists: {parent}/nodePools/{pool['name']}.")
        stored = {
            **pool,
            "status": "PROVISIONING",
            "selfLink": f"https://container.googleapis.com/v1/{parent}/nodePools/{pool['name']}",
        }
        self.clusters[parent][pool["name"]] = stored
        return JSONResponse(
            self._operation(p["location"], "CREATE_NODE_POOL", f"{parent}/nodePools/{pool['name']}")
        )

    async def member(self, request: Request) -> JSONResponse:
        p = request.path_params
        parent = f"projects/{p['project']}/locations/{p['location']}/clusters/{p['cluster']}"
        pools = self.clusters.get(parent)
        if pools is None or p["pool"] not in pools:
            return google_error(404, "NOT_FOUND", f"Not found: {parent}/nodePools/{p['pool']}.")
        if request.method == "DELETE":
            del pools[p["pool"]]
            return JSONResponse(
                self._operation(p["location"], "DELETE_NODE_POOL", f"{parent}/nodePools/{p['pool']}")
            )
        return JSONResponse(pools[p["pool"]])

    async def operation(self, request: Request) -> JSONResponse:
        p = request.path_params
        key = f"projects/{p['project']}/locations/{p['location']}/operations/{p['op']}"
        op = self.operations.get(key)
        if op is None:
            return google_error(404, "NOT_FOUND", f"Not found: {key}.")
        self.polls[key] = self.polls.get(key, 0) + 1
        if self.polls[key] >= self.polls_to_done and op["status"] == "RUNNING":
            op["status"] = "DONE"
            target = op["targetLink"].split("/v1/", 1)[1]
            parent, _, name = target.rpartition("/nodePools/")
            if name in self.clusters.get(parent, {}):
                self.clusters[parent][name]["status"] = "RUNNING"
        return JSONResponse(op)

    def routes(self) -> list[Route]:
        base = "/v1/projects/{project}/locations/{location}"
        return [
            Route(base + "/clusters/{cluster}", self.cluster, methods=["GET"]),
            Route(base + "/clusters/{cluster}/nodePools", self.create, methods=["POST"]),
            Route(base + "/clusters/{cluster}/nodePools/{pool}", self.member, methods=["GET", "DELETE"]),
            Route(base + "/operations/{op}", self.operation, methods=["GET"]),
        ]
