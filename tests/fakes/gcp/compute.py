"""Fake of the Compute Engine v1 REST surface for firewall rules (what a rig's endpoint needs).

Paths (Compute Engine API v1 reference, ``firewalls`` and ``globalOperations``):
``GET|POST /compute/v1/projects/{p}/global/firewalls`` (list with ``filter``, insert),
``GET|PATCH|DELETE /compute/v1/projects/{p}/global/firewalls/{name}`` and
``GET /compute/v1/projects/{p}/global/operations/{op}``. Writes return a ``compute#operation`` that is
already ``DONE`` (rules apply in seconds on Google's side); a write repeated with the same
``requestId`` returns the first operation and changes nothing, as Compute documents for requestId.

Errors use Compute's own payload shape, which differs from the newer APIs:
``{"error": {"code", "message", "errors": [{"message", "domain": "global", "reason"}]}}`` with the
messages Compute answers: 409 ``The resource 'projects/P/global/firewalls/N' already exists``
(``alreadyExists``), 404 ``The resource '...' was not found`` (``notFound``), 403 ``Required
'compute.firewalls.create' permission for '...'`` (``forbidden``), 400 ``Invalid value for field
'resource.name': ...`` (``invalid``).

Regions (``GET /compute/v1/projects/{p}/regions/{region}``, ``regions.get``): a ``compute#region``
whose ``quotas[]`` are ``{metric, limit, usage}``, as Compute reports them (limit and usage);
``region_quotas[region] = {metric: (limit, usage)}`` scripts exactly what a region reports (else
`DEFAULT_REGION_QUOTAS`); a region ending in ``-x`` does not exist (404).

Scripting: ``networks`` (VPC names that exist), ``denied`` (verbs ``create`` / ``get`` / ``update`` /
``delete`` / ``list`` answering 403, ``regions`` for regions.get), ``requests`` (every call, with its
body).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

BASE = "https://www.googleapis.com/compute/v1"
_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_FILTER = re.compile(r'^\s*name\s+eq\s+"?([^"]*)"?\s*$')


# What every region reports unless scripted: a project with room for a few TPU v5e GKE nodes (chips).
DEFAULT_REGION_QUOTAS: dict[str, tuple[float, float]] = {
    "CPUS": (24.0, 0.0),
    "IN_USE_ADDRESSES": (8.0, 0.0),
    "TPU_LITE_PODSLICE_V5": (8.0, 0.0),
    "PREEMPTIBLE_TPU_LITE_PODSLICE_V5": (16.0, 0.0),
}


def compute_error(code: int, reason: str, message: str) -> JSONResponse:
    """A response in Compute Engine's error shape."""
    body = {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }
    return JSONResponse(body, status_code=code)


def _now() -> str:
    return datetime.now(UTC).astimezone().isoformat(timespec="milliseconds")


class FakeCompute:
    """Firewall rules of one project: ``firewalls[name] = rule JSON``."""

    def __init__(self, project: str = "demo-project") -> None:
        self.project = project
        self.networks = {"default"}
        self.firewalls: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self.denied: set[str] = set()
        # region -> metric -> (limit, usage); every region also reports a few standard metrics
        self.region_quotas: dict[str, dict[str, tuple[float, float]]] = {}
        self.requests: list[dict[str, Any]] = []
        self._by_request_id: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(4_000_000_000_000_000_001)
        self._lock = threading.Lock()

    # ---- helpers --------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return f"projects/{self.project}/global/firewalls/{name}"

    async def _prelude(
        self, request: Request, verb: str
    ) -> tuple[dict[str, Any] | None, JSONResponse | None]:
        text = (await request.body()).decode("utf-8", "replace")
        self.requests.append({"method": request.method, "path": request.url.path,
                              "query": dict(request.query_params), "body": text})  # fmt: skip
        project = request.path_params["project"]
        target = f"projects/{project}/global/firewalls/{request.path_params.get('name', '')}".rstrip("/")
        if project != self.project or verb in self.denied:
            return None, compute_error(
                403, "forbidden", f"Required 'compute.firewalls.{verb}' permission for '{target}'"
            )
        try:
            body = json.loads(text) if text else None
        except json.JSONDecodeError:
            return None, compute_error(400, "parseError", "Parse Error")
        return body, None

    def _network_url(self, network: str | None) -> tuple[str | None, str]:
        name = (network or "default").rstrip("/").rsplit("/", 1)[-1]
        return (
            f"{BASE}/projects/{self.project}/global/networks/{name}" if name in self.networks else None
        ), name

    def _operation(self, verb: str, name: str, request_id: str | None) -> dict[str, Any]:
        op_name = f"operation-{int(time.time() * 1000)}-{next(self._ids)}"
        now = _now()
        op = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": op_name,
            "operationType": verb,
            "targetLink": f"{BASE}/{self._path(name)}",
            "targetId": str(next(self._ids)),
            "status": "DONE",
            "user": "tpu-devops@example.iam.gserviceaccount.com",
            "progress": 100,
            "insertTime": now,
            "startTime": now,
            "endTime": now,
            "selfLink": f"{BASE}/projects/{self.project}/global/operations/{op_name}",
        }
        self.operations[op_name] = op
        if request_id:
            self._by_request_id[request_id] = op
        return op

    def _validate(self, body: dict[str, Any], *, partial: bool) -> JSONResponse | None:
        name = body.get("name")
        if not partial or name is not None:
            if not isinstance(name, str) or not _NAME.match(name):
                return compute_error(
                    400,
                    "invalid",
                    f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'",
                )
        for rule in body.get("allowed", []) or []:
            if "IPProtocol" not in rule:
                return compute_error(
                    400, "required", "Required field 'resource.allowed[0].IPProtocol' not specified"
                )
        return None

    # ---- handlers -------------------------------------------------------------------------------

    async def collection(self, request: Request) -> JSONResponse:
        verb = "create" if request.method == "POST" else "list"
        body, err = await self._prelude(request, verb)
        if err:
            return err
        if request.method == "GET":
            prefix = ".*"
            if flt := request.query_params.get("filter"):
                m = _FILTER.match(flt)
                if not m:
                    return compute_error(
                        400,
                        "invalid",
                        f"Invalid value for field 'filter': '{flt}'. Invalid list filter expression.",
                    )
                prefix = m.group(1)
            with self._lock:
                items = [
                    copy.deepcopy(r) for n, r in sorted(self.firewalls.items()) if re.fullmatch(prefix, n)
                ]
            out: dict[str, Any] = {"kind": "compute#firewallList", "id": f"projects/{self.project}/global/firewalls",
                                   "selfLink": f"{BASE}/projects/{self.project}/global/firewalls"}  # fmt: skip
            if items:
                out["items"] = items
            return JSONResponse(out)
        body = body or {}
        if err := self._validate(body, partial=False):
            return err
        request_id = request.query_params.get("requestId")
        with self._lock:
            if request_id and request_id in self._by_request_id:
                return JSONResponse(self._by_request_id[request_id])
            name = body["name"]
            if name in self.firewalls:
                return compute_error(
                    409, "alreadyExists", f"The resource '{self._path(name)}' already exists"
                )
            network, net_name = self._network_url(body.get("network"))
            if network is None:
                return compute_error(
                    404,
                    "notFound",
                    f"The resource 'projects/{self.project}/global/networks/{net_name}' was not found",
                )
            rule = {
                "kind": "compute#firewall",
                "id": str(next(self._ids)),
                "creationTimestamp": _now(),
                "priority": 1000,
                "direction": "INGRESS",
                "logConfig": {"enable": False},
                "disabled": False,
                **copy.deepcopy(body),
                "network": network,
                "selfLink": f"{BASE}/{self._path(name)}",
            }
            self.firewalls[name] = rule
            return JSONResponse(self._operation("insert", name, request_id))

    async def member(self, request: Request) -> JSONResponse:
        verb = {"GET": "get", "PATCH": "update", "DELETE": "delete"}[request.method]
        body, err = await self._prelude(request, verb)
        if err:
            return err
        name = request.path_params["name"]
        request_id = request.query_params.get("requestId")
        with self._lock:
            if request_id and request_id in self._by_request_id:
                return JSONResponse(self._by_request_id[request_id])
            rule = self.firewalls.get(name)
            if rule is None:
                return compute_error(404, "notFound", f"The resource '{self._path(name)}' was not found")
            if request.method == "GET":
                return JSONResponse(copy.deepcopy(rule))
            if request.method == "DELETE":
                del self.firewalls[name]
                return JSONResponse(self._operation("delete", name, request_id))
            patch = body or {}
            if err := self._validate(patch, partial=True):
                return err
            if patch.get("name", name) != name:
                return compute_error(
                    400, "invalid", "Invalid value for field 'resource.name': the name cannot be changed"
                )
            if "network" in patch and self._network_url(patch["network"])[0] != rule["network"]:
                return compute_error(
                    400,
                    "invalid",
                    "Invalid value for field 'resource.network': the network cannot be changed",
                )
            rule.update({k: copy.deepcopy(v) for k, v in patch.items() if k != "network"})
            return JSONResponse(self._operation("patch", name, request_id))

    async def operation(self, request: Request) -> JSONResponse:
        body, err = await self._prelude(request, "get")
        if err:
            return err
        op = self.operations.get(request.path_params["op"])
        if op is None:
            return compute_error(
                404,
                "notFound",
                f"The resource 'projects/{self.project}/global/operations/{request.path_params['op']}' was not found",
            )
        return JSONResponse(op)

    async def region(self, request: Request) -> JSONResponse:
        project, region = request.path_params["project"], request.path_params["region"]
        self.requests.append(
            {"method": "GET", "path": request.url.path, "query": dict(request.query_params), "body": ""}
        )
        target = f"projects/{project}/regions/{region}"
        if project != self.project or "regions" in self.denied:
            return compute_error(
                403, "forbidden", f"Required 'compute.regions.get' permission for '{target}'"
            )
        if region.endswith("-x"):
            return compute_error(404, "notFound", f"The resource '{target}' was not found")
        metrics = self.region_quotas.get(region, DEFAULT_REGION_QUOTAS)
        quotas = [{"metric": m, "limit": lim, "usage": use} for m, (lim, use) in sorted(metrics.items())]
        return JSONResponse({
            "kind": "compute#region", "id": str(abs(hash(region)) % 10**15), "name": region, "status": "UP",
            "description": region, "selfLink": f"{BASE}/{target}", "quotas": quotas,
            "zones": [f"{BASE}/projects/{project}/zones/{region}-{z}" for z in "abc"],
        })  # fmt: skip

    def routes(self) -> list[Route]:
        base = "/compute/v1/projects/{project}/global"
        return [
            Route("/compute/v1/projects/{project}/regions/{region}", self.region, methods=["GET"]),
            Route(f"{base}/firewalls", self.collection, methods=["GET", "POST"]),
            Route(f"{base}/firewalls/{{name}}", self.member, methods=["GET", "PATCH", "DELETE"]),
            Route(f"{base}/operations/{{op}}", self.operation, methods=["GET"]),
        ]


class FakePublicIp:
    """What a "what is my IP" service answers (``GET /public-ip`` -> the address as plain text), so a
    plan under the fake never asks the internet. ``address`` is the caller's public IPv4 the fake
    pretends to see (TEST-NET-3 by default, RFC 5737)."""

    PATH = "/public-ip"
    google = False  # not a Google API: served beside the discovery validator (tests/fakes/gcp/__init__.py)

    def __init__(self, address: str = "203.0.113.7") -> None:
        self.address = address
        self.calls = 0

    async def answer(self, request: Request) -> PlainTextResponse:
        self.calls += 1
        return PlainTextResponse(self.address)

    def routes(self) -> list[Route]:
        return [Route(self.PATH, self.answer, methods=["GET"])]
