"""Fake of the GKE (container v1) REST surface: node pools of existing clusters, and their operations.

Paths (container v1 discovery document, ``projects.locations.clusters.nodePools`` and
``projects.locations.operations``): ``POST /v1/{parent=projects/*/locations/*/clusters/*}/nodePools``,
``GET|DELETE /v1/{name=projects/*/locations/*/clusters/*/nodePools/*}``,
``GET /v1/{name=projects/*/locations/*/operations/*}``. Every create body is checked against the
``NodePool`` schema of the discovery document bundled with google-api-python-client (unknown fields,
wrong JSON types and enum values answer 400 INVALID_ARGUMENT, as Google does); operations start RUNNING
and turn DONE after ``polls_to_done`` reads; errors use Google's ``{"error": {code, message, status}}``.
"""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.gcp.tpu import google_error

_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


@cache
def discovery() -> dict[str, Any]:
    """The container v1 discovery document bundled with google-api-python-client."""
    import googleapiclient

    path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "container.v1.json"
    return json.loads(path.read_text(encoding="utf-8"))


def schema_errors(value: Any, schema: dict[str, Any], where: str, int_enums: bool = False) -> list[str]:
    """Where ``value`` departs from a discovery-document schema (unknown fields, JSON types, enums).

    ``int_enums``: the request asked for ``$alt=json;enum-encoding=int`` (the GAPIC REST transport does),
    so an enum may come as its index in the schema's ``enum`` list.
    """
    if "$ref" in schema:
        return schema_errors(value, discovery()["schemas"][schema["$ref"]], where, int_enums)
    if int_enums and "enum" in schema and isinstance(value, int) and not isinstance(value, bool):
        ok = 0 <= value < len(schema["enum"])
        return [] if ok else [f"{where}: enum index {value} out of range"]
    kind = schema.get("type")
    if kind == "integer":
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and value.lstrip("-").isdigit()
        )
        return [] if ok else [f"{where}: expected an integer, got {value!r}"]
    if kind in _TYPES and not isinstance(value, _TYPES[kind]):
        return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    errors: list[str] = []
    if kind == "object" and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                errors.append(
                    f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
                )
            else:
                errors += schema_errors(item, schema["properties"][key], f"{where}.{key}", int_enums)
    elif kind == "object" and "additionalProperties" in schema:
        for key, item in value.items():
            errors += schema_errors(item, schema["additionalProperties"], f"{where}[{key}]", int_enums)
    elif kind == "array":
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{where}[{i}]", int_enums)
    return errors


class FakeContainer:
    """Clusters (``add_cluster``) holding node pools; ``requests`` records every create body."""

    def __init__(self, project: str = "demo-project", polls_to_done: int = 1) -> None:
        self.project = project
        self.clusters: dict[str, dict[str, dict[str, Any]]] = {}  # cluster path -> pool name -> pool
        self.operations: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.polls_to_done = polls_to_done
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def add_cluster(self, location: str, name: str) -> str:
        path = f"projects/{self.project}/locations/{location}/clusters/{name}"
        self.clusters.setdefault(path, {})
        return path

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
        int_enums = "enum-encoding=int" in request.query_params.get("$alt", "")
        errors = schema_errors(body, {"$ref": "CreateNodePoolRequest"}, "create_node_pool_request", int_enums)
        pool = body.get("nodePool") or {}
        if not pool.get("name"):
            errors.append("node_pool.name: required")
        if errors:
            return google_error(400, "INVALID_ARGUMENT", "; ".join(errors))
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
            Route(base + "/clusters/{cluster}/nodePools", self.create, methods=["POST"]),
            Route(base + "/clusters/{cluster}/nodePools/{pool}", self.member, methods=["GET", "DELETE"]),
            Route(base + "/operations/{op}", self.operation, methods=["GET"]),
        ]
