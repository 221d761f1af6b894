"""Thin adapter over the Cloud Quotas API (``google.cloud.cloudquotas_v1``, REST transport).

``ListQuotaInfos`` under ``projects/{p}/locations/global/services/tpu.googleapis.com`` returns one
``QuotaInfo`` per quota id with ``dimensionsInfos[]``: each has ``dimensions`` (``{"zone": ...}`` or
``{"region": ...}``, empty for the default) and ``details.value`` (the limit). The API reports limits,
not usage (DESIGN §3: quota is not capacity). Sync; call via `common.run_blocking`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.gcp import common
from tpu_devops.gcp.tpu import _EndpointOnly, _is_google_error, api_error

TPU_SERVICE = "tpu.googleapis.com"


@dataclass(frozen=True)
class QuotaLimit:
    """One limit: quota id, the dimension it is keyed by (``zone`` / ``region`` / ``default``), where, how much.

    ``value`` counts chips (TPU quota units); -1 means unlimited.
    """

    quota_id: str
    dimension: str
    location: str
    value: int


def list_tpu_quota_limits(settings: Settings) -> list[QuotaLimit]:
    """Every per-location limit of every TPU quota id of the project (all pages).

    Raises:
        ConfigError: no project configured.
        PermissionError_ / CloudError: the Cloud Quotas API refused or failed (after retries).
    """
    project = require_project(settings)
    client = _client(settings.gcp_endpoint)
    parent = f"projects/{project}/locations/global/services/{TPU_SERVICE}"
    out: list[QuotaLimit] = []
    try:
        for info in client.list_quota_infos(parent=parent, retry=common.retry_policy(), timeout=30.0):
            for dim_info in info.dimensions_infos:
                dims = dict(dim_info.dimensions)
                if "zone" in dims:
                    dimension, location = "zone", dims["zone"]
                elif "region" in dims:
                    dimension, location = "region", dims["region"]
                else:
                    dimension, location = "default", ""
                out.append(QuotaLimit(info.quota_id, dimension, location, int(dim_info.details.value)))
    except Exception as exc:
        if _is_google_error(exc):
            raise api_error(exc, action="list TPU quota (Cloud Quotas API)") from None
        raise
    return out


@functools.lru_cache(maxsize=4)
def _client(endpoint: str) -> Any:
    from google.cloud import cloudquotas_v1

    stub = _EndpointOnly(endpoint)
    return cloudquotas_v1.CloudQuotasClient(
        transport="rest",
        credentials=common.credentials(stub),  # type: ignore[arg-type]
        client_options=common.client_options(stub, "cloudquotas"),  # type: ignore[arg-type]
    )
