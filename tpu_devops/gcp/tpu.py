"""Thin adapter over the Cloud TPU API: queued resources, nodes, locations. Sync; call via `run_blocking`.

Versions: ``google.cloud.tpu_v2`` (REST transport) for what the v2 surface can express and read back:
nodes, locations, deletes, and creates for spot and on-demand. Flex-start cannot be expressed by the
installed clients (v2 or v2alpha1): the node's ``schedulingConfig.provisioningModel``
(``FLEX_START``) and the queued resource's ``runDuration.maxRunDuration`` exist only on the v2alpha1
REST surface (Google.Apis.TPU.v2alpha1 reference: ``Data.SchedulingConfig.ProvisioningModel``,
``Data.RunDuration.MaxRunDuration`` / ``TerminationTime``; gcloud exposes them as
``gcloud alpha compute tpus queued-resources create --provisioning-model=flex-start
--max-run-duration``). The enum value ``FLEX_START`` is the spelling in Google's own refusal message
(``FLEX_START provisioning model is not supported for accelerator type ...``, DESIGN §3).
Placement: ``provisioningModel`` inside ``tpu.nodeSpec[].node.schedulingConfig`` (it is a
SchedulingConfig property); ``runDuration`` at the QueuedResource's top level, next to
``queueingPolicy`` (gcloud's ``--max-run-duration`` is a queued-resource flag). The RunDuration class
was confirmed in the reference; its exact parent could not be confirmed offline, so check it against
the live discovery document (``https://tpu.googleapis.com/$discovery/rest?version=v2alpha1``) before
relying on it. That create is sent as REST JSON to
``POST {base}/v2alpha1/projects/{p}/locations/{zone}/queuedResources?queuedResourceId={id}`` with a
google-auth ``AuthorizedSession`` (ADC), and its errors are parsed with
``google.api_core.exceptions.from_http_response`` so both paths raise the same exceptions. Queued
resources are also *read* over v2alpha1 REST: parsing them with the installed clients would silently
drop those two fields, and a flex-start request would then look like on-demand.

Every resource is returned as its REST JSON dict (camelCase, as the API documents it), so the domain
code reads one shape whichever path produced it. Google errors become typed `CloudError`s carrying
``http_code`` and ``status`` (e.g. 404 / ``NOT_FOUND``) and Google's own message; retries (429 / 5xx /
timeouts only) come from `tpu_devops.gcp.common.retry_policy`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import CloudError, NotFoundError, PermissionError_, QuotaError
from tpu_devops.gcp import common

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 30.0
# google.api_core prefixes REST error messages with "METHOD URL: "; the URL adds nothing for a person.
_URL_PREFIX = re.compile(r"^(?:GET|POST|PUT|PATCH|DELETE) \S+: ")
POOL_SIZE = 48  # connections kept per host: enough for a 44-zone listing without churn


def api_error(exc: BaseException, *, action: str) -> CloudError:
    """Turn a google.api_core / google.auth exception into a typed `CloudError`.

    The result carries ``http_code`` (int or None), ``status`` (Google's canonical status name, e.g.
    ``RESOURCE_EXHAUSTED``) and ``google_message`` (Google's text without the URL) for classification.
    """
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    if isinstance(exc, aexc.DefaultCredentialsError):
        err: CloudError = PermissionError_(
            "no Application Default Credentials found",
            field="credentials",
            fix="run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)",
        )
        err.http_code, err.status, err.google_message = None, "UNAUTHENTICATED", str(exc)  # type: ignore[attr-defined]
        return err
    code = getattr(exc, "code", None)
    code = int(code) if isinstance(code, int) else None
    message = _URL_PREFIX.sub("", str(getattr(exc, "message", None) or exc))
    status = None
    grpc_status = getattr(exc, "grpc_status_code", None)
    if grpc_status is not None:
        status = grpc_status.name
    if status is None and isinstance(exc, gexc.GoogleAPICallError):
        status = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
                  429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(code or 0)  # fmt: skip
    text = f"{action}: {message}"
    if isinstance(exc, gexc.NotFound):
        err = NotFoundError(text)
    elif isinstance(exc, gexc.Forbidden | gexc.Unauthenticated):
        err = PermissionError_(
            text, fix="grant the caller roles/tpu.admin (or the permission named) on the project"
        )
    elif isinstance(exc, gexc.TooManyRequests) and "quota" in message.lower():
        err = QuotaError(text)
    else:
        err = CloudError(text)
    err.http_code, err.status, err.google_message = code, status, message  # type: ignore[attr-defined]
    return err


class TpuApi:
    """Cloud TPU API for one project. Methods block; call them through `common.run_blocking`.

    Raises (every method): `NotFoundError`, `PermissionError_`, `QuotaError`, `CloudError` with the
    Google message; `ConfigError` when no project is configured.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.project = require_project(settings)

    # ---- clients ---------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        return _client(self.settings.gcp_endpoint)

    def _parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def _call(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, retry=common.retry_policy(), timeout=CALL_TIMEOUT_S, **kwargs)
        except Exception as exc:
            if _is_google_error(exc):
                raise api_error(exc, action=action) from None
            raise

    # ---- reads -----------------------------------------------------------------------------

    def list_zones(self) -> list[str]:
        """Zones (location ids) where the TPU API is offered to this project, sorted."""
        resp = self._call(
            "list TPU locations", self.client.list_locations, {"name": f"projects/{self.project}"}
        )
        return sorted(loc.location_id for loc in resp.locations)

    def list_queued_resources(self, zone: str) -> list[dict[str, Any]]:
        """Every queued resource in ``zone`` as v2alpha1 REST JSON dicts (all pages).

        Read over v2alpha1 REST because the installed clients drop the flex-start fields
        (``schedulingConfig.provisioningModel``, ``runDuration``) when parsing.
        """
        out: list[dict[str, Any]] = []
        token = ""
        while True:
            params = {"pageToken": token} if token else {}
            page = self._rest(
                "GET",
                f"{self._parent(zone)}/queuedResources",
                f"list queued resources in {zone}",
                params=params,
            )
            out.extend(page.get("queuedResources", []) or [])
            token = page.get("nextPageToken") or ""
            if not token:
                return out

    def get_queued_resource(self, zone: str, qr_id: str) -> dict[str, Any]:
        """One queued resource as v2alpha1 REST JSON. Raises `NotFoundError` when it does not exist."""
        return self._rest(
            "GET", f"{self._parent(zone)}/queuedResources/{qr_id}", f"get queued resource {qr_id} in {zone}"
        )

    def get_node(self, zone: str, node_id: str) -> dict[str, Any]:
        """One TPU node (with ``networkEndpoints[].accessConfig.externalIp``) as a REST JSON dict."""
        from google.cloud import tpu_v2

        node = self._call(
            f"get node {node_id} in {zone}",
            self.client.get_node,
            name=f"{self._parent(zone)}/nodes/{node_id}",
        )
        return _to_dict(tpu_v2.Node, node)

    # ---- writes ----------------------------------------------------------------------------

    def create_queued_resource(self, zone: str, qr_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Submit a queued resource; returns the long-running operation as a dict (``name``, ``done``).

        ``body`` is the v2alpha1 REST JSON of the QueuedResource. When a node asks for
        ``schedulingConfig.provisioningModel`` or the body has ``runDuration`` (flex-start), the request
        goes as REST JSON to v2alpha1 (see the module docstring); otherwise through the v2 client.
        The operation is not waited for: the queued resource's own state is what callers poll.
        """
        if _needs_v2alpha1(body):
            return self._create_v2alpha1(zone, qr_id, body)
        from google.cloud import tpu_v2

        qr = tpu_v2.QueuedResource.from_json(json.dumps(body))
        op = self._call(
            f"create queued resource {qr_id} in {zone}",
            self.client.create_queued_resource,
            parent=self._parent(zone),
            queued_resource_id=qr_id,
            queued_resource=qr,
        )
        return {"name": op.operation.name, "done": op.operation.done}

    def _create_v2alpha1(self, zone: str, qr_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._rest(
            "POST",
            f"{self._parent(zone)}/queuedResources",
            f"create queued resource {qr_id} in {zone}",
            params={"queuedResourceId": qr_id},
            body=body,
        )

    def _rest(
        self,
        method: str,
        path: str,
        action: str,
        *,
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One v2alpha1 REST call with ADC, the shared retry policy, and Google's errors typed."""
        from google.api_core import exceptions as gexc

        url = f"{common.base_url(self.settings, 'tpu')}/v2alpha1/{path}"
        session = _session(self.settings.gcp_endpoint)

        def send() -> dict[str, Any]:
            resp = session.request(method, url, params=params, json=body, timeout=CALL_TIMEOUT_S)
            if resp.status_code >= 400:
                raise gexc.from_http_response(resp)
            return resp.json()

        try:
            return common.retry_policy()(send)()
        except Exception as exc:
            if _is_google_error(exc):
                raise api_error(exc, action=action) from None
            raise

    def delete_node(self, zone: str, node_id: str) -> None:
        """Request deletion of a TPU node (returns once the API accepted it)."""
        self._call(
            f"delete node {node_id} in {zone}",
            self.client.delete_node,
            name=f"{self._parent(zone)}/nodes/{node_id}",
        )

    def delete_queued_resource(self, zone: str, qr_id: str, *, force: bool = False) -> None:
        """Request deletion of a queued resource; ``force`` also deletes nodes still attached."""
        from google.cloud import tpu_v2

        request = tpu_v2.DeleteQueuedResourceRequest(
            name=f"{self._parent(zone)}/queuedResources/{qr_id}", force=force
        )
        self._call(
            f"delete queued resource {qr_id} in {zone}", self.client.delete_queued_resource, request=request
        )


def _needs_v2alpha1(body: dict[str, Any]) -> bool:
    if "runDuration" in body:
        return True
    for spec in body.get("tpu", {}).get("nodeSpec", []):
        if "provisioningModel" in spec.get("node", {}).get("schedulingConfig", {}):
            return True
    return False


def _is_google_error(exc: BaseException) -> bool:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    return isinstance(exc, gexc.GoogleAPIError | aexc.GoogleAuthError)


def _to_dict(message_cls: Any, message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(message_cls.pb(message))


@functools.lru_cache(maxsize=4)
def _client(endpoint: str) -> Any:
    """One REST `TpuClient` per endpoint (thread-safe for concurrent calls)."""
    from google.cloud import tpu_v2

    settings_stub = _EndpointOnly(endpoint)
    try:
        client = tpu_v2.TpuClient(
            transport="rest",
            credentials=common.credentials(settings_stub),  # type: ignore[arg-type]
            client_options=common.client_options(settings_stub, "tpu"),  # type: ignore[arg-type]
        )
    except Exception as exc:
        if _is_google_error(exc):
            raise api_error(exc, action="create the TPU API client") from None
        raise
    _widen_pool(getattr(client._transport, "_session", None))
    return client


@functools.lru_cache(maxsize=4)
def _session(endpoint: str) -> Any:
    from google.auth.transport.requests import AuthorizedSession

    session = AuthorizedSession(common.credentials(_EndpointOnly(endpoint)))  # type: ignore[arg-type]
    _widen_pool(session)
    return session


def _widen_pool(session: Any) -> None:
    """Keep up to `POOL_SIZE` connections per host so concurrent zone listings reuse them."""
    if session is None:
        return
    from requests.adapters import HTTPAdapter

    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE)
    session.mount("https://", adapter)
    session.mount("http://", adapter)


class _EndpointOnly:
    """The two settings `common.credentials` / `client_options` read (for cached, settings-free clients)."""

    def __init__(self, endpoint: str) -> None:
        self.gcp_endpoint = endpoint
