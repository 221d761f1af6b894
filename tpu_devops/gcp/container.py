"""Thin adapter over the GKE API (``google.cloud.container_v1``, REST transport): TPU node pools.

Only what the GKE scale-out needs: create a node pool from its REST JSON body (built by
`tpu_devops.gke.manifests.node_pool_body`), read one, delete one, read an operation. Bodies cross the
boundary as JSON dicts in the API's own camelCase field names (``NodePool.from_json``), so the request
is exactly the JSON the plan showed. Sync; call via `common.run_blocking`.
"""

from __future__ import annotations

import json
from typing import Any

from tpu_devops.config import Settings
from tpu_devops.gcp import common

SERVICE = "container"


def _client(settings: Settings) -> Any:
    from google.cloud import container_v1

    return common.rest_client(container_v1.ClusterManagerClient, settings.gcp_endpoint)


def _to_dict(message: Any) -> dict[str, Any]:
    return json.loads(
        type(message).to_json(message, preserving_proto_field_name=False, use_integers_for_enums=False)
    )


def cluster_name(project: str, location: str, cluster: str) -> str:
    """``projects/P/locations/L/clusters/C``."""
    return f"projects/{project}/locations/{location}/clusters/{cluster}"


def create_node_pool(settings: Settings, parent: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create the node pool ``body`` (container v1 ``NodePool`` JSON) in cluster ``parent``.

    Returns the long-running operation as JSON (``name``, ``status``, ...).

    Raises:
        PermissionError_, QuotaError, CloudError: typed Google failures (e.g. 409 ALREADY_EXISTS).
    """
    from google.cloud import container_v1

    node_pool = container_v1.NodePool.from_json(json.dumps(body))
    with common.google_errors(f"create node pool {body.get('name')}", SERVICE):
        op = _client(settings).create_node_pool(
            parent=parent, node_pool=node_pool, retry=common.retry_policy(), timeout=common.call_timeout()
        )
    return _to_dict(op)


def get_node_pool(settings: Settings, name: str) -> dict[str, Any]:
    """The node pool ``projects/P/locations/L/clusters/C/nodePools/N`` as JSON.

    Raises:
        NotFoundError: no such node pool (or cluster). CloudError: other failures.
    """
    with common.google_errors(f"read node pool {name.rsplit('/', 1)[-1]}", SERVICE):
        pool = _client(settings).get_node_pool(
            name=name, retry=common.retry_policy(), timeout=common.call_timeout()
        )
    return _to_dict(pool)


def delete_node_pool(settings: Settings, name: str) -> dict[str, Any]:
    """Delete the node pool ``name``; returns the operation as JSON.

    Raises:
        NotFoundError: already gone. CloudError: other failures.
    """
    with common.google_errors(f"delete node pool {name.rsplit('/', 1)[-1]}", SERVICE):
        op = _client(settings).delete_node_pool(
            name=name, retry=common.retry_policy(), timeout=common.call_timeout()
        )
    return _to_dict(op)


def get_operation(settings: Settings, name: str) -> dict[str, Any]:
    """The operation ``projects/P/locations/L/operations/O`` as JSON (``status`` RUNNING / DONE, ``error``)."""
    with common.google_errors(f"read operation {name.rsplit('/', 1)[-1]}", SERVICE):
        op = _client(settings).get_operation(
            name=name, retry=common.retry_policy(), timeout=common.call_timeout()
        )
    return _to_dict(op)


def get_cluster(settings: Settings, name: str) -> dict[str, Any]:
    """The cluster ``projects/P/locations/L/clusters/C`` as JSON: what this server needs to reach its
    Kubernetes API is ``endpoint`` (the control plane's IP) and ``masterAuth.clusterCaCertificate`` (the
    base64 PEM root of trust), container v1 ``Cluster``.

    Raises:
        NotFoundError: no such cluster. PermissionError_: no container.clusters.get. CloudError: others.
    """
    with common.google_errors(f"read cluster {name.rsplit('/', 1)[-1]}", SERVICE):
        cluster = _client(settings).get_cluster(
            name=name, retry=common.retry_policy(), timeout=common.call_timeout()
        )
    return _to_dict(cluster)
