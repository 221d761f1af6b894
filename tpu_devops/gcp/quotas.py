"""Thin adapter over the Cloud Quotas API (``google.cloud.cloudquotas_v1``, REST transport).

``ListQuotaInfos`` under ``projects/{p}/locations/global/services/tpu.googleapis.com`` returns one
``QuotaInfo`` per quota id with ``dimensionsInfos[]``: each has ``dimensions`` (``{"zone": ...}`` or
``{"region": ...}``, empty for the default) and ``details.value`` (the limit). The API reports limits,
not usage (DESIGN §3: quota is not capacity). Sync; call via `common.run_blocking`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_devops.config import Settings, require_project
from tpu_devops.gcp import common

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
    from google.cloud import cloudquotas_v1

    project = require_project(settings)
    parent = f"projects/{project}/locations/global/services/{TPU_SERVICE}"
    out: list[QuotaLimit] = []
    with common.google_errors("list TPU quota (Cloud Quotas API)", "cloudquotas"):
        client = common.rest_client(cloudquotas_v1.CloudQuotasClient, settings.gcp_endpoint)
        pages = client.list_quota_infos(
            parent=parent, retry=common.retry_policy(), timeout=common.call_timeout()
        )
        for info in pages:
            for dim_info in info.dimensions_infos:
                dims = dict(dim_info.dimensions)
                if "zone" in dims:
                    dimension, location = "zone", dims["zone"]
                elif "region" in dims:
                    dimension, location = "region", dims["region"]
                else:
                    dimension, location = "default", ""
                out.append(QuotaLimit(info.quota_id, dimension, location, int(dim_info.details.value)))
    return out
