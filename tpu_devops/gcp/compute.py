"""Thin adapter over Compute Engine v1 firewall rules and regional quotas (``google.cloud.compute_v1``,
REST transport).

Regional quotas: ``regions.get`` answers ``quotas[]`` of ``{metric, limit, usage}`` (limit and current
usage, unlike Cloud Quotas, which reports limits only); GKE TPU nodes draw these (`region_quotas`).

Only what a rig's endpoint needs: insert, get, patch (new source ranges), delete and list of firewall
rules (Compute Engine API v1 reference, ``firewalls``: ``insert``, ``get``, ``patch``, ``delete``,
``list``). Rules are global per project; ``network`` names the VPC they apply to. Rules carry no
labels, so the domain code (`tpu_devops.provisioning.access`) recognises its own by name prefix and
description. Every write carries a ``requestId`` (a UUID) so that a retry after a lost response is not
applied twice (Compute v1: "the server will know to ignore the request if it has already been
completed"), and waits for the operation (``ExtendedOperation.result``) so an error in the operation
is raised here, not lost. Resources are returned as REST JSON dicts (camelCase). Errors become typed
`CloudError`s via `tpu_devops.gcp.common.google_errors`. Sync; call via `common.run_blocking`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.gcp import common

SERVICE = "compute"


class ComputeApi:
    """Compute Engine firewall rules of one project. Methods block.

    Raises (every method): `NotFoundError`, `PermissionError_`, `CloudError` with Google's message;
    `ConfigError` when no project is configured.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.project = require_project(settings)

    @property
    def client(self) -> Any:
        from google.cloud import compute_v1

        return common.rest_client(compute_v1.FirewallsClient, self.settings.gcp_endpoint)

    def get_firewall(self, name: str) -> dict[str, Any]:
        """One firewall rule as REST JSON. Raises `NotFoundError` when it does not exist."""
        from google.cloud import compute_v1

        with common.google_errors(f"read firewall rule {name}", SERVICE):
            rule = self.client.get(
                project=self.project,
                firewall=name,
                retry=common.retry_policy(),
                timeout=common.call_timeout(),
            )
        return _to_dict(compute_v1.Firewall, rule)

    def list_firewalls(self, name_prefix: str) -> list[dict[str, Any]]:
        """Rules whose name starts with ``name_prefix`` (server-side filter ``name eq "prefix.*"``)."""
        from google.cloud import compute_v1

        request = compute_v1.ListFirewallsRequest(project=self.project, filter=f'name eq "{name_prefix}.*"')
        with common.google_errors("list firewall rules", SERVICE):
            pages = self.client.list(
                request=request, retry=common.retry_policy(), timeout=common.call_timeout()
            )
            return [_to_dict(compute_v1.Firewall, rule) for rule in pages]

    def insert_firewall(self, body: dict[str, Any]) -> None:
        """Create the rule ``body`` (REST JSON of a Firewall) and wait for its operation."""
        from google.cloud import compute_v1

        rule = compute_v1.Firewall.from_json(json.dumps(body))
        self._write(
            f"create firewall rule {body.get('name')}",
            "insert",
            compute_v1.InsertFirewallRequest,
            firewall_resource=rule,
        )

    def patch_firewall(self, name: str, body: dict[str, Any]) -> None:
        """Update the fields of ``body`` in rule ``name`` (PATCH semantics) and wait for the operation."""
        from google.cloud import compute_v1

        rule = compute_v1.Firewall.from_json(json.dumps(body))
        self._write(
            f"update firewall rule {name}",
            "patch",
            compute_v1.PatchFirewallRequest,
            firewall=name,
            firewall_resource=rule,
        )

    def delete_firewall(self, name: str) -> None:
        """Delete rule ``name`` and wait for the operation. Raises `NotFoundError` when it is gone."""
        from google.cloud import compute_v1

        self._write(f"delete firewall rule {name}", "delete", compute_v1.DeleteFirewallRequest, firewall=name)

    def region_quotas(self, region: str) -> dict[str, tuple[float, float]]:
        """``{metric: (limit, usage)}`` of one region's Compute Engine quotas (``regions.get``).

        Raises `NotFoundError` for an unknown region, `PermissionError_` without compute.regions.get.
        """
        from google.cloud import compute_v1

        with common.google_errors(f"read the Compute Engine quotas of region {region}", SERVICE):
            found = common.rest_client(compute_v1.RegionsClient, self.settings.gcp_endpoint).get(
                project=self.project,
                region=region,
                retry=common.retry_policy(),
                timeout=common.call_timeout(),
            )
        return {q.metric: (float(q.limit), float(q.usage)) for q in found.quotas}

    def _write(self, action: str, method: str, request_cls: Any, **fields: Any) -> None:
        """One write with a fresh ``requestId``, then wait for its operation (errors typed)."""
        request = request_cls(project=self.project, request_id=str(uuid.uuid4()), **fields)
        with common.google_errors(action, SERVICE):
            operation = getattr(self.client, method)(
                request=request, retry=common.retry_policy(), timeout=common.call_timeout()
            )
            operation.result(timeout=common.call_timeout())


def _to_dict(message_cls: Any, message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(message_cls.pb(message))
