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
``http_code`` and ``status`` (e.g. 404 / ``NOT_FOUND``) and Google's own message
(`tpu_devops.gcp.common.google_errors`); retries (429 / 5xx / timeouts only) come from
`tpu_devops.gcp.common.retry_policy`; clients and the session are shared per endpoint
(`common.rest_client`, `common.authorized_session`).
"""

from __future__ import annotations

import json
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
            return fn(*args, retry=common.retry_policy(), timeout=common.CALL_TIMEOUT_S, **kwargs)

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
            "get_node",
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
            "create_queued_resource",
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

        url = f"{common.base_url(self.settings, SERVICE)}/v2alpha1/{path}"

        def send() -> dict[str, Any]:
            resp = session.request(method, url, params=params, json=body, timeout=common.CALL_TIMEOUT_S)
            if resp.status_code >= 400:
                raise gexc.from_http_response(resp)
            return resp.json()

        with common.google_errors(action, SERVICE):
            session = common.authorized_session(self.settings.gcp_endpoint)
            return common.retry_policy()(send)()

    def delete_node(self, zone: str, node_id: str) -> None:
        """Request deletion of a TPU node (returns once the API accepted it)."""
        self._call(
            f"delete node {node_id} in {zone}",
            "delete_node",
            name=f"{self._parent(zone)}/nodes/{node_id}",
        )

    def delete_queued_resource(self, zone: str, qr_id: str, *, force: bool = False) -> None:
        """Request deletion of a queued resource; ``force`` also deletes nodes still attached."""
        from google.cloud import tpu_v2

        request = tpu_v2.DeleteQueuedResourceRequest(
            name=f"{self._parent(zone)}/queuedResources/{qr_id}", force=force
        )
        self._call(f"delete queued resource {qr_id} in {zone}", "delete_queued_resource", request=request)


def _needs_v2alpha1(body: dict[str, Any]) -> bool:
    if "runDuration" in body:
        return True
    for spec in body.get("tpu", {}).get("nodeSpec", []):
        if "provisioningModel" in spec.get("node", {}).get("schedulingConfig", {}):
            return True
    return False


def _to_dict(message_cls: Any, message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(message_cls.pb(message))
