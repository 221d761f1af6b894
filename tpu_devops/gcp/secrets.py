"""Thin adapter over Secret Manager (``google.cloud.secretmanager_v1``, REST transport).

Only what the rig needs: does the Hugging Face token secret exist with an enabled ``latest`` version
(checked through version metadata, never by reading the payload), and writing a new version. The
token value is passed straight into the request payload and never logged, returned or stored.
Sync; call via `common.run_blocking`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import NotFoundError
from tpu_devops.gcp import common
from tpu_devops.gcp.tpu import _EndpointOnly, _is_google_error, api_error


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
    client = _client(settings.gcp_endpoint)
    name = f"projects/{project}/secrets/{secret_id}"
    try:
        client.get_secret(name=name, retry=common.retry_policy(), timeout=30.0)
    except Exception as exc:
        if not _is_google_error(exc):
            raise
        err = api_error(exc, action=f"read secret {secret_id}")
        if isinstance(err, NotFoundError):
            return SecretStatus(name, False, None, None)
        raise err from None
    try:
        version = client.get_secret_version(
            name=f"{name}/versions/latest", retry=common.retry_policy(), timeout=30.0
        )
    except Exception as exc:
        if not _is_google_error(exc):
            raise
        err = api_error(exc, action=f"read the latest version of secret {secret_id}")
        if isinstance(err, NotFoundError):
            return SecretStatus(name, True, None, None)
        raise err from None
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
    client = _client(settings.gcp_endpoint)
    parent = f"projects/{project}"
    try:
        try:
            client.create_secret(
                parent=parent,
                secret_id=secret_id,
                secret=secretmanager_v1.Secret(replication=secretmanager_v1.Replication(automatic={})),
                retry=common.retry_policy(),
                timeout=30.0,
            )
        except gexc.Conflict:  # 409 ALREADY_EXISTS over REST
            pass
        payload = secretmanager_v1.SecretPayload(data=value.encode("utf-8"))
        version = client.add_secret_version(
            parent=f"{parent}/secrets/{secret_id}", payload=payload, retry=common.retry_policy(), timeout=30.0
        )
    except Exception as exc:
        if _is_google_error(exc):
            raise api_error(exc, action=f"write secret {secret_id}") from None
        raise
    return version.name


@functools.lru_cache(maxsize=4)
def _client(endpoint: str) -> Any:
    from google.cloud import secretmanager_v1

    stub = _EndpointOnly(endpoint)
    return secretmanager_v1.SecretManagerServiceClient(
        transport="rest",
        credentials=common.credentials(stub),  # type: ignore[arg-type]
        client_options=common.client_options(stub, "secretmanager"),  # type: ignore[arg-type]
    )
