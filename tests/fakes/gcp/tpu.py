"""Fake of the Cloud TPU REST surface (v2 and v2alpha1): queued resources, nodes, locations.

It keeps state and walks the real queued-resource state machine
(ACCEPTED -> WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE; FAILED with ``failedData.error``;
SUSPENDING -> SUSPENDED once a flex-start request's ``runDuration.maxRunDuration`` elapses (flex-start:
the queued resource's ``provisioningModel = "FLEX_START"``), or when the node is deleted). States advance lazily on every read, by a controllable clock (`FakeClock`) and per-state
dwell times (``timings``), so tests can run instantly or step through each state.

Scripting (per zone, see `FakeTpu.script`): the create outcome a zone produces, using the error
payload shape Google returns (``{"error": {"code", "message", "status", "details"}}``):

- ``"ok"``: the request is fulfilled.
- ``"unsupported"``: flex-start refused synchronously (400 INVALID_ARGUMENT,
  ``FLEX_START provisioning model is not supported for accelerator type "..." in location "..."``).
- ``"stockout"``: accepted, then FAILED with "There is no more capacity in the zone".
- ``"quota"``: accepted, then FAILED with "Quota '...' exhausted. Limit N in region R".
- ``"permission_denied"``: 403 PERMISSION_DENIED on create.
- ``"invalid_accelerator"``: 400 INVALID_ARGUMENT naming the accelerator type.
- ``"not_offered"``: 400 INVALID_ARGUMENT in Cloud TPU's error-glossary wording, "Accelerator type X as
  preemptible (P) and reserved (R) is not available in zone Z, please contact support." (the zone does
  not offer the type with these flags; other zones may).
- ``"wait"``: stays in WAITING_FOR_RESOURCES forever.

A network that is not in ``networks`` always yields 404 "network ... not found" (the seed's lost
afternoon). ``fail_next(status, times, only)`` makes the next calls (of one handler with ``only``) answer
429 / 503 once-then-succeed; a 429 is Google's per-minute request quota refusal (`rate_limit_error`);
``lose_next_responses(times)`` carries the next calls out and then answers 503 as if the response had
been lost on the way back; ``latency_s`` delays every call (asynchronously, so concurrent calls overlap).

``requestId`` (create and delete) is honoured as Google documents it ("Idempotent request UUID",
AIP-155): a request repeating an earlier ``requestId`` gets the earlier operation back and changes
nothing; a create whose id is taken by a request with another ``requestId`` gets 409 ALREADY_EXISTS.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

# 44 zones: the count of zones where the seed quota scan found v5e quota (DESIGN §3).
DEFAULT_ZONES: tuple[str, ...] = (
    "us-west4-a", "us-west4-b", "us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f",
    "us-east1-b", "us-east1-c", "us-east1-d", "us-east4-a", "us-east4-b", "us-east4-c",
    "us-east5-a", "us-east5-b", "us-east5-c", "us-south1-a", "us-south1-b", "us-south1-c",
    "us-west1-a", "us-west1-b", "us-west1-c", "europe-west4-a", "europe-west4-b", "europe-west4-c",
    "europe-west1-b", "europe-west1-c", "europe-west1-d", "europe-west2-a", "europe-west2-b",
    "europe-west3-a", "europe-west3-b", "europe-north1-a", "asia-southeast1-a", "asia-southeast1-b",
    "asia-southeast1-c", "asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c",
    "asia-east1-a", "asia-east1-b", "asia-east1-c", "asia-south1-a", "asia-south1-b", "me-west1-a",
)  # fmt: skip

OUTCOMES = (
    "ok",
    "unsupported",
    "stockout",
    "quota",
    "permission_denied",
    "invalid_accelerator",
    "not_offered",
    "wait",
)
STATE_ORDER = ("ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE")


class FakeClock:
    """A manual clock: ``clock()`` returns the current fake time; ``advance(s)`` moves it."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def google_error(
    code: int, status: str, message: str, details: list[dict[str, Any]] | None = None
) -> JSONResponse:
    """A response with Google's JSON error shape."""
    body = {"error": {"code": code, "message": message, "status": status, "details": details or []}}
    return JSONResponse(body, status_code=code)


# Google's refusal when a per-minute API request quota is spent: field report B13 (tests/data/field-reports/
# B13-gcp-quota-metric-rate-limit.txt, marin PR #6198) gives the create wording; reads and deletes follow the
# same pattern with their own quota metric. Google adds an ErrorInfo with reason RATE_LIMIT_EXCEEDED.
_QUOTA_METRIC = {"POST": "Create requests", "GET": "Read requests", "DELETE": "Delete requests"}
PROJECT_NUMBER = "000000000000"


def rate_limit_error(method: str) -> JSONResponse:
    """The 429 RESOURCE_EXHAUSTED a TPU API call of ``method`` gets when its per-minute quota is spent."""
    metric = _QUOTA_METRIC.get(method, "Read requests")
    return google_error(
        429,
        "RESOURCE_EXHAUSTED",
        f"Quota exceeded for quota metric '{metric}' and limit '{metric} per minute per project' of service "
        f"'tpu.googleapis.com' for consumer 'project_number:{PROJECT_NUMBER}'.",
        [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "RATE_LIMIT_EXCEEDED",
                "domain": "googleapis.com",
                "metadata": {"service": "tpu.googleapis.com", "consumer": f"projects/{PROJECT_NUMBER}"},
            }
        ],
    )


def _not_found(name: str) -> JSONResponse:
    """Google's 404 for a resource name that does not exist."""
    return google_error(404, "NOT_FOUND", f"Resource '{name}' was not found")


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _duration_s(text: str | None) -> float | None:
    if not text:
        return None
    return float(str(text).rstrip("s"))


@dataclass
class QueuedRecord:
    project: str
    zone: str
    qr_id: str
    body: dict[str, Any]
    outcome: str
    state: str = "ACCEPTED"
    entered_at: float = 0.0
    created_at: float = 0.0
    active_at: float | None = None
    failed_error: dict[str, Any] | None = None
    history: list[str] = field(default_factory=list)


class FakeTpu:
    """State and routes of the fake TPU API.

    Args:
        project: the project the fake answers for (others get 403 PERMISSION_DENIED).
        zones: locations offered by ``projects/{p}/locations``.
        clock: callable returning the current time (a `FakeClock` for step-by-step tests).
    """

    def __init__(
        self,
        project: str = "demo-project",
        zones: tuple[str, ...] = DEFAULT_ZONES,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.project = project
        self.zones = list(zones)
        self.clock: Callable[[], float] = clock or time.time
        self.timings: dict[str, float] = {"ACCEPTED": 0.0, "WAITING_FOR_RESOURCES": 0.0, "PROVISIONING": 0.0}
        self.networks = {"default"}
        self.scripts: dict[str, str] = {}
        self.latency_s = 0.0
        self.locations_page_size: int | None = None  # None: every location on one page
        # loopback: whatever dials a node's external IP (endpoint discovery, check_setup) stays on this machine
        self.external_ip = "127.0.0.1"
        self.queued: dict[tuple[str, str], QueuedRecord] = {}
        self.nodes: dict[tuple[str, str], dict[str, Any]] = {}
        # (zone, node id) -> {"namespace/key": value}: what the VM wrote (worker 0)
        self.guest_attributes: dict[tuple[str, str], dict[str, str]] = {}
        self.requests: list[dict[str, Any]] = []  # every call: method, path, query, headers, body text
        self._failures: list[tuple[int, str | None]] = []  # (status, only this handler or None)
        self.broken_zones: dict[str, int] = {}
        self._lose = 0
        self._lose_only: str | None = None
        self._create_hooks: list[Callable[[QueuedRecord], None]] = []
        self.creates_held = threading.Event()
        # A node that comes up is handed to each hook (zone, node id, node JSON), which may answer the
        # external IP it gets (the simulated VM that boots it, tests/fakes/vm/fleet.py); gone hooks hear
        # of its end. Called under the fake's lock: a hook must not block.
        self.node_hooks: list[Callable[[str, str, dict[str, Any]], str | None]] = []
        self.node_gone_hooks: list[Callable[[str, str], None]] = []
        self._by_request_id: dict[tuple[str, str], dict[str, Any]] = {}  # (method, requestId) -> operation
        self._lock = threading.Lock()
        self._ops = itertools.count(1)
        self._ip = itertools.count(10)

    # ---- scripting -----------------------------------------------------------------------------

    def script(self, zone: str, outcome: str) -> None:
        """Make creates in ``zone`` produce ``outcome`` (one of `OUTCOMES`)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; use one of {OUTCOMES}")
        self.scripts[zone] = outcome

    def fail_next(self, status: int = 503, times: int = 1, only: str | None = None) -> None:
        """The next ``times`` calls answer ``status``: 429 is `rate_limit_error` (a per-minute request
        quota), 503 UNAVAILABLE. ``only``: count and fail only calls of that handler (``"create_queued"``,
        ``"list_queued"``, ...), so that e.g. creates are rate-limited while reads still answer."""
        self._failures.extend([(status, only)] * times)

    def fail_zone(self, zone: str, status: int | None = 503) -> None:
        """Every listing of queued resources in ``zone`` answers ``status`` (503 UNAVAILABLE, 403
        PERMISSION_DENIED, 500 INTERNAL) until called again with ``status=None``: a zone that stays down."""
        if status is None:
            self.broken_zones.pop(zone, None)
        else:
            self.broken_zones[zone] = status

    def lose_next_responses(self, times: int = 1, only: str | None = None) -> None:
        """The next ``times`` calls are carried out, then answered 503 (the response lost on the way).
        ``only``: count and lose only calls of that handler (``"create_queued"``, ``"delete_queued"``, ...),
        so that e.g. every create is committed and unanswered while reads still answer."""
        self._lose += times
        self._lose_only = only

    def hold_creates(self, held: bool = True) -> None:
        """While held, a create that arrives waits before it is committed (a request in transit: its sender
        may die meanwhile, and it still lands once released with ``hold_creates(False)``)."""
        if held:
            self.creates_held.set()
        else:
            self.creates_held.clear()

    def on_create(self, hook: Callable[[QueuedRecord], None]) -> None:
        """Call ``hook(record)`` right after a create is committed (under the fake's lock): a test stages
        what another server does at that moment (a concurrent create, a zone going down)."""
        self._create_hooks.append(hook)

    def add_foreign(
        self,
        zone: str,
        qr_id: str,
        labels: dict[str, str] | None = None,
        state: str = "ACTIVE",
        created_at: float | None = None,
        valid_until_s: float | None = None,
        external_ips: bool = True,
    ) -> None:
        """Plant a queued resource this server did not create (someone else's, or another server's of the
        same rig), in ``state``; ``created_at`` (fake-clock seconds) sets its ``createTime``;
        ``valid_until_s`` its ``queueingPolicy.validUntilDuration`` (a waiting one then expires);
        ``external_ips`` its node's ``networkConfig.enableExternalIps``."""
        body = {
            "tpu": {
                "nodeSpec": [
                    {
                        "parent": f"projects/{self.project}/locations/{zone}",
                        "nodeId": qr_id,
                        "node": {
                            "acceleratorType": "v5litepod-1",
                            "runtimeVersion": "v2-alpha-tpuv5-lite",
                            "labels": labels or {},
                            "networkConfig": {"enableExternalIps": external_ips},
                        },
                    }
                ]
            }
        }
        if valid_until_s is not None:
            body["queueingPolicy"] = {"validUntilDuration": f"{valid_until_s:.0f}s"}
        now = self.clock() if created_at is None else created_at
        outcome = "wait" if state == "WAITING_FOR_RESOURCES" else "ok"
        rec = QueuedRecord(
            self.project, zone, qr_id, body, outcome, state=state, entered_at=now, created_at=now
        )
        self.queued[(zone, qr_id)] = rec
        if state == "ACTIVE":
            rec.active_at = now
            self._make_node(rec)

    # ---- state machine -------------------------------------------------------------------------

    def _is_flex(self, body: dict[str, Any]) -> bool:
        """Flex-start is the queued resource's ``provisioningModel`` (v2alpha1); nodes cannot say it."""
        return body.get("provisioningModel") == "FLEX_START"

    def _enter(self, rec: QueuedRecord, state: str, at: float) -> None:
        rec.state = state
        rec.entered_at = at
        rec.history.append(state)
        if state == "ACTIVE":
            rec.active_at = at
            self._make_node(rec)
        if state in ("SUSPENDED", "FAILED"):
            for spec in rec.body.get("tpu", {}).get("nodeSpec", []):
                self._drop_node(rec.zone, spec.get("nodeId", rec.qr_id))

    def _advance(self, rec: QueuedRecord) -> None:
        now = self.clock()
        for _ in range(10):
            if rec.state in ("ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING"):
                if rec.outcome == "wait" and rec.state == "WAITING_FOR_RESOURCES":
                    valid = _duration_s(rec.body.get("queueingPolicy", {}).get("validUntilDuration"))
                    if valid is not None and now >= rec.created_at + valid:
                        rec.failed_error = {
                            "code": 4,
                            "message": "The request could not be fulfilled before validUntilDuration expired.",
                        }
                        self._enter(rec, "FAILED", rec.created_at + valid)
                        continue
                    return
                due = rec.entered_at + self.timings.get(rec.state, 0.0)
                if now < due:
                    return
                if rec.outcome in ("stockout", "quota") and rec.state == "WAITING_FOR_RESOURCES":
                    rec.failed_error = self._failure_payload(rec)
                    self._enter(rec, "FAILED", due)
                    continue
                self._enter(rec, STATE_ORDER[STATE_ORDER.index(rec.state) + 1], due)
                continue
            if rec.state == "ACTIVE" and self._is_flex(rec.body) and rec.active_at is not None:
                max_run = _duration_s(rec.body.get("runDuration", {}).get("maxRunDuration"))
                if max_run is not None and now >= rec.active_at + max_run:
                    self._enter(rec, "SUSPENDING", rec.active_at + max_run)
                    self._enter(rec, "SUSPENDED", rec.active_at + max_run)
                    continue
            return

    def _failure_payload(self, rec: QueuedRecord) -> dict[str, Any]:
        region = rec.zone.rsplit("-", 1)[0]
        if rec.outcome == "stockout":
            return {
                "code": 8,
                "message": f'There is no more capacity in the zone "{rec.zone}"; you can try in another zone '
                "where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x5a1d]",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "stockout"}],
            }
        return {
            "code": 8,
            "message": f"Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. Limit 4 in region {region}",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "QUOTA_EXCEEDED"}],
        }

    def _make_node(self, rec: QueuedRecord) -> None:
        for spec in rec.body.get("tpu", {}).get("nodeSpec", []):
            node_id = spec.get("nodeId", rec.qr_id)
            node = copy.deepcopy(spec.get("node", {}))
            node.update(
                {
                    "name": f"projects/{rec.project}/locations/{rec.zone}/nodes/{node_id}",
                    "state": "READY",
                    "health": "HEALTHY",
                    "queuedResource": f"projects/{rec.project}/locations/{rec.zone}/queuedResources/{rec.qr_id}",
                    "createTime": _rfc3339(rec.active_at or self.clock()),
                    "networkEndpoints": [{"ipAddress": f"10.128.0.{next(self._ip)}", "port": 8470}],
                }
            )
            # As the API: a worker gets an external address only when networkConfig.enableExternalIps is
            # true (a boolean that defaults to false; gcloud sets it unless --internal-ips).
            if (node.get("networkConfig") or {}).get("enableExternalIps") is True:
                node["networkEndpoints"][0]["accessConfig"] = {"externalIp": self.external_ip}
            self.nodes[(rec.zone, node_id)] = node
            for hook in self.node_hooks:
                ip = hook(rec.zone, node_id, node)
                if ip and "accessConfig" in node["networkEndpoints"][0]:
                    node["networkEndpoints"][0]["accessConfig"]["externalIp"] = ip

    def _drop_node(self, zone: str, node_id: str) -> dict[str, Any] | None:
        """Remove a node (it is gone: deleted, or its queued resource suspended or failed) and tell the
        ``node_gone_hooks``; the node's JSON, or None when there was none."""
        node = self.nodes.pop((zone, node_id), None)
        if node is not None:
            for hook in self.node_gone_hooks:
                hook(zone, node_id)
            self.guest_attributes.pop((zone, node_id), None)  # a node's guest attributes go with it
        return node

    def _qr_json(self, rec: QueuedRecord) -> dict[str, Any]:
        self._advance(rec)
        out = copy.deepcopy(rec.body)
        out["name"] = f"projects/{rec.project}/locations/{rec.zone}/queuedResources/{rec.qr_id}"
        out["createTime"] = _rfc3339(rec.created_at)
        state: dict[str, Any] = {"state": rec.state}
        if rec.state == "FAILED" and rec.failed_error:
            state["failedData"] = {"error": rec.failed_error}
        if rec.state == "SUSPENDED":
            state["stateInitiator"] = "SERVICE"
        out["state"] = state
        return out

    # ---- HTTP plumbing -------------------------------------------------------------------------

    async def _prelude(self, request: Request) -> JSONResponse | None:
        body = (await request.body()).decode("utf-8", "replace")
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": str(request.url.query),
                "headers": dict(request.headers),
                "body": body,
            }
        )
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        handler = getattr(request.state, "handler", None)
        due = next((i for i, (_, only) in enumerate(self._failures) if only in (None, handler)), None)
        if due is not None:
            status, _ = self._failures.pop(due)
            if status == 429:
                return rate_limit_error(request.method)
            return google_error(status, "UNAVAILABLE", "The service is currently unavailable.")
        project = request.path_params.get("project")
        if project is not None and project != self.project:
            return google_error(403, "PERMISSION_DENIED", f"Permission denied on resource project {project}.")
        return None

    def _operation(self, project: str, zone: str, verb: str, target: str) -> dict[str, Any]:
        return {
            "name": f"projects/{project}/locations/{zone}/operations/operation-{next(self._ops)}",
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                "createTime": _rfc3339(self.clock()),
                "target": target,
                "verb": verb,
                "apiVersion": "v2",
            },
            "done": False,
        }

    def _replay(self, verb: str, request_id: str | None) -> JSONResponse | None:
        """The operation an earlier ``verb`` with this ``requestId`` returned, or None (first time)."""
        if not request_id:
            return None
        with self._lock:
            op = self._by_request_id.get((verb, request_id))
        return None if op is None else JSONResponse(op)

    def _remember(self, verb: str, request_id: str | None, op: dict[str, Any]) -> dict[str, Any]:
        if request_id:
            with self._lock:
                self._by_request_id[(verb, request_id)] = op
        return op

    def _losing(self, handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        """``handler``, tagged with its name (what `fail_next` ``only`` matches), answering 503 after doing
        its work while `lose_next_responses` is armed."""

        async def endpoint(request: Request) -> Any:
            request.state.handler = handler.__name__  # what `fail_next(only=...)` matches
            response = await handler(request)
            if self._lose and self._lose_only in (None, handler.__name__):
                self._lose -= 1
                return google_error(503, "UNAVAILABLE", "The service is currently unavailable.")
            return response

        return endpoint

    def routes(self) -> list[Route]:
        out: list[Route] = []
        for v in ("v2", "v2alpha1"):
            base = f"/{v}/projects/{{project}}/locations"
            out += [
                Route(
                    f"/{v}/projects/{{project}}/locations", self._losing(self.list_locations), methods=["GET"]
                ),
                Route(f"{base}/{{zone}}/queuedResources", self._losing(self.list_queued), methods=["GET"]),
                Route(f"{base}/{{zone}}/queuedResources", self._losing(self.create_queued), methods=["POST"]),
                Route(
                    f"{base}/{{zone}}/queuedResources/{{qr_id}}",
                    self._losing(self.get_queued),
                    methods=["GET"],
                ),
                Route(
                    f"{base}/{{zone}}/queuedResources/{{qr_id}}",
                    self._losing(self.delete_queued),
                    methods=["DELETE"],
                ),
                Route(f"{base}/{{zone}}/nodes", self._losing(self.list_nodes), methods=["GET"]),
                Route(f"{base}/{{zone}}/nodes/{{node_id}}", self._losing(self.get_node), methods=["GET"]),
                Route(
                    f"{base}/{{zone}}/nodes/{{node_id}}", self._losing(self.delete_node), methods=["DELETE"]
                ),
                Route(f"{base}/{{zone}}/nodes/{{node_id}}", self._losing(self.patch_node), methods=["PATCH"]),
                Route(
                    f"{base}/{{zone}}/nodes/{{node_id}}:getGuestAttributes",
                    self._losing(self.get_guest_attributes),
                    methods=["POST"],
                ),
            ]
        return out

    def _zone_check(self, zone: str) -> JSONResponse | None:
        if zone not in self.zones:
            return google_error(404, "NOT_FOUND", f'Location "{zone}" not found or not supported.')
        return None

    async def list_locations(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        p = request.path_params["project"]
        start = int(request.query_params.get("pageToken") or 0)
        end = len(self.zones) if self.locations_page_size is None else start + self.locations_page_size
        locs = [{"name": f"projects/{p}/locations/{z}", "locationId": z} for z in self.zones[start:end]]
        body: dict[str, Any] = {"locations": locs}
        if end < len(self.zones):
            body["nextPageToken"] = str(end)
        return JSONResponse(body)

    async def list_queued(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        zone = request.path_params["zone"]
        if err := self._zone_check(zone):
            return err
        if zone in self.broken_zones:
            status = self.broken_zones[zone]
            name, text = {
                403: ("PERMISSION_DENIED", f"Permission 'tpu.queuedResources.list' denied on 'projects/{self.project}/locations/{zone}'"),
                500: ("INTERNAL", "Internal error encountered."),
            }.get(status, ("UNAVAILABLE", "The service is currently unavailable."))  # fmt: skip
            return google_error(status, name, text)
        with self._lock:
            items = [self._qr_json(r) for (z, _), r in sorted(self.queued.items()) if z == zone]
        return JSONResponse({"queuedResources": items})

    async def get_queued(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        zone, qr_id = request.path_params["zone"], request.path_params["qr_id"]
        with self._lock:
            rec = self.queued.get((zone, qr_id))
            if rec is None:
                return _not_found(f"projects/{self.project}/locations/{zone}/queuedResources/{qr_id}")
            return JSONResponse(self._qr_json(rec))

    async def create_queued(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        while self.creates_held.is_set():  # `hold_creates`: the create stays in transit until released
            await asyncio.sleep(0.01)
        project, zone = request.path_params["project"], request.path_params["zone"]
        if err := self._zone_check(zone):
            return err
        qr_id = request.query_params.get("queuedResourceId") or request.query_params.get("queued_resource_id")
        if not qr_id:
            return google_error(400, "INVALID_ARGUMENT", "queued_resource_id is required")
        request_id = request.query_params.get("requestId")
        if replay := self._replay("create", request_id):
            return replay
        body = json.loads((await request.body()) or b"{}")
        specs = body.get("tpu", {}).get("nodeSpec", [])
        if not specs:
            return google_error(400, "INVALID_ARGUMENT", "tpu.node_spec is required")
        node = specs[0].get("node", {})
        network = (node.get("networkConfig") or {}).get("network") or "default"
        net_name = network.rsplit("/", 1)[-1]
        if net_name not in self.networks:
            return google_error(
                404,
                "NOT_FOUND",
                f"The resource 'projects/{project}/global/networks/{net_name}' was not found",
            )
        outcome = self.scripts.get(zone, "ok")
        accel = node.get("acceleratorType", "")
        if outcome == "permission_denied":
            return google_error(
                403,
                "PERMISSION_DENIED",
                f"Permission 'tpu.queuedResources.create' denied on resource 'projects/{project}/locations/{zone}' (or it may not exist).",
            )
        if outcome == "invalid_accelerator":
            return google_error(
                400, "INVALID_ARGUMENT", f'Accelerator type "{accel}" is not available in zone "{zone}".'
            )
        if outcome == "not_offered":
            sched = node.get("schedulingConfig") or {}
            preemptible = bool(
                "spot" in body or self._is_flex(body) or sched.get("spot") or sched.get("preemptible")
            )
            reserved = bool(sched.get("reserved") or "reservationName" in body)
            return google_error(
                400,
                "INVALID_ARGUMENT",
                f"generic::invalid_argument: Accelerator type {accel} as preemptible ({str(preemptible).lower()}) and "
                f"reserved ({str(reserved).lower()}) is not available in zone {zone}, please contact support.",
            )
        if outcome == "unsupported" and self._is_flex(body):
            return google_error(
                400,
                "INVALID_ARGUMENT",
                f'FLEX_START provisioning model is not supported for accelerator type "{accel}" in location "{zone}".',
            )
        with self._lock:
            if (zone, qr_id) in self.queued:
                return google_error(
                    409,
                    "ALREADY_EXISTS",
                    f"Resource 'projects/{project}/locations/{zone}/queuedResources/{qr_id}' already exists",
                )
            now = self.clock()
            rec = QueuedRecord(
                project, zone, qr_id, body, outcome, entered_at=now, created_at=now, history=["ACCEPTED"]
            )
            self.queued[(zone, qr_id)] = rec
            for hook in self._create_hooks:
                hook(rec)
        target = f"projects/{project}/locations/{zone}/queuedResources/{qr_id}"
        return JSONResponse(
            self._remember("create", request_id, self._operation(project, zone, "create", target))
        )

    async def delete_queued(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        project, zone, qr_id = (request.path_params[k] for k in ("project", "zone", "qr_id"))
        force = request.query_params.get("force", "").lower() == "true"
        request_id = request.query_params.get("requestId")
        if replay := self._replay("delete", request_id):
            return replay
        with self._lock:
            rec = self.queued.get((zone, qr_id))
            if rec is None:
                return _not_found(f"projects/{project}/locations/{zone}/queuedResources/{qr_id}")
            self._advance(rec)
            if rec.state == "PROVISIONING":
                return google_error(
                    400,
                    "FAILED_PRECONDITION",
                    "Cannot delete a queued resource in state PROVISIONING; wait until it is ACTIVE or FAILED.",
                )
            node_ids = [s.get("nodeId", qr_id) for s in rec.body.get("tpu", {}).get("nodeSpec", [])]
            live = [n for n in node_ids if (zone, n) in self.nodes]
            if live and not force:
                return google_error(
                    400,
                    "FAILED_PRECONDITION",
                    f"Queued resource {qr_id} still has node(s) {live}; delete them first or set force=true.",
                )
            for n in live:
                self._drop_node(zone, n)
            del self.queued[(zone, qr_id)]
        target = f"projects/{project}/locations/{zone}/queuedResources/{qr_id}"
        return JSONResponse(
            self._remember("delete", request_id, self._operation(project, zone, "delete", target))
        )

    async def list_nodes(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        zone = request.path_params["zone"]
        with self._lock:
            for rec in list(self.queued.values()):
                self._advance(rec)
            nodes = [n for (z, _), n in sorted(self.nodes.items()) if z == zone]
        return JSONResponse({"nodes": nodes})

    async def get_node(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        zone, node_id = request.path_params["zone"], request.path_params["node_id"]
        with self._lock:
            for rec in list(self.queued.values()):
                self._advance(rec)
            node = self.nodes.get((zone, node_id))
        if node is None:
            return _not_found(f"projects/{self.project}/locations/{zone}/nodes/{node_id}")
        return JSONResponse(node)

    async def delete_node(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        project, zone, node_id = (request.path_params[k] for k in ("project", "zone", "node_id"))
        with self._lock:
            node = self._drop_node(zone, node_id)
            if node is None:
                return _not_found(f"projects/{project}/locations/{zone}/nodes/{node_id}")
            qr_name = node.get("queuedResource", "")
            for rec in self.queued.values():
                if rec.zone == zone and qr_name.endswith(f"/{rec.qr_id}") and rec.state == "ACTIVE":
                    now = self.clock()
                    self._enter(rec, "SUSPENDING", now)
                    self._enter(rec, "SUSPENDED", now)
        return JSONResponse(
            self._operation(project, zone, "delete", f"projects/{project}/locations/{zone}/nodes/{node_id}")
        )

    # Fields nodes.patch may update (discovery: "Supported fields: [description, tags, labels, metadata,
    # network_config.enable_external_ips]"), as mask paths in both spellings.
    PATCHABLE = {"description": "description", "tags": "tags", "labels": "labels", "metadata": "metadata"}

    async def patch_node(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        project, zone, node_id = (request.path_params[k] for k in ("project", "zone", "node_id"))
        mask = request.query_params.get("updateMask") or request.query_params.get("update_mask") or ""
        paths = [p.strip() for p in mask.split(",") if p.strip()]
        if not paths:
            return google_error(400, "INVALID_ARGUMENT", "update_mask is required")
        unsupported = [p for p in paths if p not in self.PATCHABLE]
        if unsupported:
            return google_error(400, "INVALID_ARGUMENT", f"Unsupported update mask path(s): {unsupported}")
        body = json.loads((await request.body()) or b"{}")
        with self._lock:
            node = self.nodes.get((zone, node_id))
            if node is None:
                return _not_found(f"projects/{project}/locations/{zone}/nodes/{node_id}")
            for path in paths:  # a masked field is replaced whole (a map included)
                field_name = self.PATCHABLE[path]
                if field_name in body:
                    node[field_name] = copy.deepcopy(body[field_name])
                else:
                    node.pop(field_name, None)
        op = self._operation(project, zone, "update", f"projects/{project}/locations/{zone}/nodes/{node_id}")
        return JSONResponse(op)

    async def get_guest_attributes(self, request: Request) -> JSONResponse:
        if err := await self._prelude(request):
            return err
        project, zone, node_id = (request.path_params[k] for k in ("project", "zone", "node_id"))
        body = json.loads((await request.body()) or b"{}")
        query = str(body.get("queryPath") or body.get("query_path") or "")
        with self._lock:
            if (zone, node_id) not in self.nodes:
                return _not_found(f"projects/{project}/locations/{zone}/nodes/{node_id}")
            attrs = dict(self.guest_attributes.get((zone, node_id), {}))
        prefix = query.strip("/")
        items = []
        for full, value in sorted(attrs.items()):
            if prefix and not (full == prefix or full.startswith(prefix + "/")):
                continue
            namespace, _, key = full.partition("/")
            items.append({"namespace": namespace, "key": key, "value": value})
        return JSONResponse({"guestAttributes": [{"queryPath": query, "queryValue": {"items": items}}]})

    def put_guest_attribute(self, zone: str, node_id: str, key: str, value: str) -> None:
        """What the VM's metadata-server PUT to ``instance/guest-attributes/<key>`` does."""
        with self._lock:
            self.guest_attributes.setdefault((zone, node_id), {})[key] = value

    def node_metadata(self, zone: str, node_id: str) -> dict[str, str]:
        """The node's metadata map (what the VM sees as instance attributes); empty when it is gone."""
        with self._lock:
            node = self.nodes.get((zone, node_id))
            return dict((node or {}).get("metadata") or {})

    # ---- inspection helpers for tests ----------------------------------------------------------

    def state_of(self, zone: str, qr_id: str) -> str | None:
        """Current state of a queued resource (advanced to now), or None when it does not exist."""
        with self._lock:
            rec = self.queued.get((zone, qr_id))
            if rec is None:
                return None
            self._advance(rec)
            return rec.state

    def creates(self) -> list[dict[str, Any]]:
        """The create calls received, in order: ``{"zone", "path", "body"}``."""
        out = []
        for r in self.requests:
            if r["method"] == "POST" and r["path"].endswith("/queuedResources"):
                zone = r["path"].split("/locations/")[1].split("/")[0]
                out.append({"zone": zone, "path": r["path"], "body": json.loads(r["body"] or "{}")})
        return out
