"""Thin adapter over Secret Manager (``google.cloud.secretmanager_v1``, REST transport).

Only what the rig needs: does a secret exist with an enabled ``latest`` version (checked through
version metadata, never by reading the payload), writing a new version, and reading the vLLM API key
(`access_secret`: the one payload this server reads, for its own calls to its own endpoint). Values
are passed straight into the request payload or back to the caller and never logged or stored.
Sync; call via `common.run_blocking`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import NotFoundError
from tpu_devops.gcp import common

SERVICE = "secretmanager"


@dataclass(frozen=True)
class SecretStatus:
    """``exists``: the secret is there; ``latest_version``: e.g. ``projects/p/secrets/s/versions/3``
    (None when it has no version); ``state``: ``ENABLED`` / ``DISABLED`` / ``DESTROYED`` or None."""

    secret_name: str
    exists: bool
    latest_version: str | None
    state: str | None


def secret_status(settings: Settings, secret_id: str) -> SecretStatus:
    """Whether ``secret_id`` exists and its ``latest`` version is usable (metadata only).

    Raises:
        PermissionError_: the caller may not read the secret's metadata (the VM may still be able to).
        CloudError: any other API failure.
    """
    project = require_project(settings)
    name = f"projects/{project}/secrets/{secret_id}"
    try:
        with common.google_errors(f"read secret {secret_id}", SERVICE):
            _client(settings).get_secret(
                name=name, retry=common.retry_policy(), timeout=common.call_timeout()
            )
    except NotFoundError:
        return SecretStatus(name, False, None, None)
    try:
        with common.google_errors(f"read the latest version of secret {secret_id}", SERVICE):
            version = _client(settings).get_secret_version(
                name=f"{name}/versions/latest", retry=common.retry_policy(), timeout=common.call_timeout()
            )
    except NotFoundError:
        return SecretStatus(name, True, None, None)
    state = version.state.name if hasattr(version.state, "name") else str(version.state)
    return SecretStatus(name, True, version.name, state)


def add_secret_version(settings: Settings, secret_id: str, value: str) -> str:
    """Create the secret (automatic replication) if missing, then add ``value`` as a new version.

    Returns the new version's resource name (never the value). The error messages raised never
    contain the value.

    Raises:
        PermissionError_: missing ``secretmanager.secrets.create`` / ``secretmanager.versions.add``.
        CloudError: any other API failure.
    """
    from google.api_core import exceptions as gexc
    from google.cloud import secretmanager_v1

    project = require_project(settings)
    parent = f"projects/{project}"
    with common.google_errors(f"write secret {secret_id}", SERVICE):
        client = _client(settings)
        try:
            client.create_secret(
                parent=parent,
                secret_id=secret_id,
                secret=secretmanager_v1.Secret(replication=secretmanager_v1.Replication(automatic={})),
                retry=common.retry_policy(),
                timeout=common.call_timeout(),
            )
        except gexc.Conflict:  # 409 ALREADY_EXISTS over REST
            pass
        payload = secretmanager_v1.SecretPayload(data=value.encode("utf-8"))
        version = client.add_secret_version(
            parent=f"{parent}/secrets/{secret_id}",
            payload=payload,
            retry=common.retry_policy(),
            timeout=common.call_timeout(),
        )
    return version.name


def access_secret(settings: Settings, secret_id: str) -> str | None:
    """The payload of ``secret_id``'s ``latest`` version as text (stripped), or None when the secret or
    its version does not exist. REST ``GET .../versions/latest:access`` (Secret Manager v1 reference,
    ``projects.secrets.versions.access``); the error messages raised never contain the payload.

    Raises:
        PermissionError_: the caller lacks ``secretmanager.versions.access`` on the secret.
        CloudError: any other API failure.
    """
    project = require_project(settings)
    name = f"projects/{project}/secrets/{secret_id}/versions/latest"
    try:
        with common.google_errors(f"read secret {secret_id}", SERVICE):
            response = _client(settings).access_secret_version(
                name=name, retry=common.retry_policy(), timeout=common.call_timeout()
            )
    except NotFoundError:
        return None
    return response.payload.data.decode("utf-8", "replace").strip()


def _client(settings: Settings) -> Any:
    from google.cloud import secretmanager_v1

    return common.rest_client(secretmanager_v1.SecretManagerServiceClient, settings.gcp_endpoint)
