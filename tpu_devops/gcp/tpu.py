"""Thin adapter over the Cloud TPU API: queued resources, nodes, locations. Sync; call via `run_blocking`.

Versions: ``google.cloud.tpu_v2`` (REST transport) for nodes, locations and deletes. Queued resources
are created and read as REST JSON with a google-auth ``AuthorizedSession`` (ADC), because the installed
clients (google-cloud-tpu 1.28: v2 and v2alpha1) cannot express flex-start: the queued resource's
``provisioningModel`` (``FLEX_START``) and ``runDuration.maxRunDuration`` exist only on the v2alpha1
REST surface (TPU v2alpha1 discovery document rev. 20261001, as bundled in google-api-python-client;
gcloud: ``alpha compute tpus queued-resources create --provisioning-model=flex-start
--max-run-duration``), and parsing a read with those clients would silently drop both fields, making a
flex-start request look like on-demand. Every create goes the same way, to the version the body needs
(`tpu_devops.provisioning.requests.api_version`), with the body as exact JSON text, so that a plan can
show the bytes that are sent. Errors on that path are parsed with
``google.api_core.exceptions.from_http_response`` so both paths raise the same exceptions.

Creates and deletes carry the API's ``requestId`` (discovery: a query parameter of
``queuedResources.create`` / ``.delete``, "Idempotent request UUID"). The id is fixed before the first
attempt, so an api_core retry after a lost response re-sends the same id and Google answers with the
original operation instead of creating a second request.

Every resource is returned as its REST JSON dict (camelCase, as the API documents it), so the domain
code reads one shape whichever path produced it. Google errors become typed `CloudError`s carrying
``http_code`` and ``status`` (e.g. 404 / ``NOT_FOUND``) and Google's own message
(`tpu_devops.gcp.common.google_errors`); retries (429 / 5xx / timeouts only) come from
`tpu_devops.gcp.common.retry_policy`; clients and the session are shared per endpoint
(`common.rest_client`, `common.authorized_session`).
"""

from __future__ import annotations

import uuid
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.gcp import common

SERVICE = "tpu"


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
        from google.cloud import tpu_v2

        return common.rest_client(tpu_v2.TpuClient, self.settings.gcp_endpoint)

    def _parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def _call(self, action: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(...)`` with the shared retry policy, timeout and typed errors."""
        with common.google_errors(action, SERVICE):
            fn = getattr(self.client, method)
            return fn(*args, retry=common.retry_policy(), timeout=common.call_timeout(), **kwargs)

    # ---- reads -----------------------------------------------------------------------------

    def list_zones(self) -> list[str]:
        """Zones (location ids) where the TPU API is offered to this project, sorted (all pages)."""
        zones: list[str] = []
        token = ""
        while True:
            request = {"name": f"projects/{self.project}", "page_token": token}
            resp = self._call("list TPU locations", "list_locations", request)
            zones.extend(loc.location_id for loc in resp.locations)
            token = resp.next_page_token
            if not token:
                return sorted(zones)

    def list_queued_resources(self, zone: str) -> list[dict[str, Any]]:
        """Every queued resource in ``zone`` as v2alpha1 REST JSON dicts (all pages).

        Read over v2alpha1 REST because the installed clients drop the flex-start fields
        (the queued resource's ``provisioningModel`` and ``runDuration``) when parsing.
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
            "get_node",
            name=f"{self._parent(zone)}/nodes/{node_id}",
        )
        return _to_dict(tpu_v2.Node, node)

    def get_guest_attributes(self, zone: str, node_id: str, query_path: str) -> dict[str, str]:
        """Guest attributes of worker 0 under ``query_path`` (e.g. ``tpu-devops/``) as
        ``{"namespace/key": value}`` (TPU API ``nodes.getGuestAttributes``; an empty map when none).

        Raises `NotFoundError` when the node does not exist.
        """
        from google.cloud import tpu_v2

        request = tpu_v2.GetGuestAttributesRequest(
            name=f"{self._parent(zone)}/nodes/{node_id}", query_path=query_path, worker_ids=["0"]
        )
        resp = self._call(
            f"read guest attributes of node {node_id} in {zone}", "get_guest_attributes", request
        )
        out: dict[str, str] = {}
        for attrs in resp.guest_attributes:
            for item in attrs.query_value.items:
                out[f"{item.namespace}/{item.key}"] = item.value
        return out

    # ---- writes ----------------------------------------------------------------------------

    def set_node_metadata(self, zone: str, node_id: str, metadata: dict[str, str]) -> dict[str, Any]:
        """Replace the node's whole metadata map with ``metadata`` (``nodes.patch`` with
        ``updateMask=metadata``); returns the long-running operation as a dict.

        A field mask names the whole ``metadata`` map, so the map sent replaces the node's map: callers
        send every key they keep (``startup-script`` included), as gcloud's ``tpu-vm`` commands do
        (googlecloudsdk/command_lib/compute/tpus/tpu_vm/util.py: ``UpdateMetadataKey`` edits the map read
        from the node, then ``UpdateNode`` patches it with the mask).
        """
        from google.cloud import tpu_v2
        from google.protobuf import field_mask_pb2

        node = tpu_v2.Node(name=f"{self._parent(zone)}/nodes/{node_id}", metadata=metadata)
        op = self._call(
            f"update the metadata of node {node_id} in {zone}",
            "update_node",
            node=node,
            update_mask=field_mask_pb2.FieldMask(paths=["metadata"]),
        )
        operation = getattr(op, "operation", None)
        return {"name": getattr(operation, "name", ""), "done": bool(getattr(operation, "done", False))}

    def create_queued_resource(
        self, zone: str, qr_id: str, body_text: str, *, version: str, request_id: str
    ) -> dict[str, Any]:
        """Submit a queued resource; returns the long-running operation as a dict (``name``, ``done``).

        ``body_text`` is the QueuedResource REST JSON exactly as it is to be sent
        (`tpu_devops.provisioning.requests.request_text`); ``version`` is ``v2`` or ``v2alpha1``;
        ``request_id`` a UUID that every retry of this create re-sends. The operation is not waited for:
        the queued resource's own state is what callers poll.

        Raises:
            ValueError: ``version`` is not a TPU API version that has queued resources.
        """
        if version not in ("v2", "v2alpha1"):
            raise ValueError(f"no queued resources in TPU API version {version!r}")
        return self._rest(
            "POST",
            f"{self._parent(zone)}/queuedResources",
            f"create queued resource {qr_id} in {zone}",
            version=version,
            params={"queuedResourceId": qr_id, "requestId": request_id},
            data=body_text,
            retry_rate_limits=False,
        )

    def _rest(
        self,
        method: str,
        path: str,
        action: str,
        *,
        version: str = "v2alpha1",
        params: dict[str, str] | None = None,
        data: str | None = None,
        retry_rate_limits: bool = True,
    ) -> dict[str, Any]:
        """One REST call with ADC, the shared retry policy, and Google's errors typed.

        ``data`` is sent as is (UTF-8 JSON); every retry sends the same params and bytes.
        ``retry_rate_limits`` False: a 429 RESOURCE_EXHAUSTED (a per-minute request quota, field report
        B13) is raised at once instead of retried within the call. A create sets it: each retry spends the
        same create quota again, inside a tool call the retries would eat its whole budget and end in a
        deadline error instead of "rate limited", and the sweep waits it out itself at its own pace
        (`tpu_devops.provisioning.sweep`, 1, 2 then 4 poll intervals). 5xx and lost connections are still
        retried (the create's requestId makes that safe).
        """
        from google.api_core import exceptions as gexc

        url = f"{common.base_url(self.settings, SERVICE)}/{version}/{path}"
        payload = None if data is None else data.encode("utf-8")
        headers = {"Content-Type": "application/json"} if payload is not None else None

        def send() -> dict[str, Any]:
            resp = session.request(
                method, url, params=params, data=payload, headers=headers, timeout=common.call_timeout()
            )
            if resp.status_code >= 400:
                raise gexc.from_http_response(resp)
            return resp.json()

        with common.google_errors(action, SERVICE):
            session = common.authorized_session(self.settings.gcp_endpoint)
            policy = common.retry_policy()
            if not retry_rate_limits:
                policy = policy.with_predicate(
                    lambda exc: common.is_retryable(exc) and not isinstance(exc, gexc.TooManyRequests)
                )
            return policy(send)()

    def delete_node(self, zone: str, node_id: str) -> None:
        """Request deletion of a TPU node (returns once the API accepted it)."""
        self._call(
            f"delete node {node_id} in {zone}",
            "delete_node",
            name=f"{self._parent(zone)}/nodes/{node_id}",
        )

    def delete_queued_resource(
        self, zone: str, qr_id: str, *, force: bool = False, request_id: str | None = None
    ) -> None:
        """Request deletion of a queued resource; ``force`` also deletes nodes still attached.

        ``request_id``: the API's idempotent request UUID (a new one when None), the same on every retry.
        """
        from google.cloud import tpu_v2

        request = tpu_v2.DeleteQueuedResourceRequest(
            name=f"{self._parent(zone)}/queuedResources/{qr_id}",
            force=force,
            request_id=request_id or str(uuid.uuid4()),
        )
        self._call(f"delete queued resource {qr_id} in {zone}", "delete_queued_resource", request=request)


def _to_dict(message_cls: Any, message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(message_cls.pb(message))
