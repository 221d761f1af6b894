"""Fake of the Cloud Quotas REST surface: ``GET /v1/projects/{p}/locations/global/services/{s}/quotaInfos``.

`QuotaInfo` JSON follows the v1 reference: ``quotaId``, ``metric``, ``dimensions``, and
``dimensionsInfos[]`` with ``dimensions`` ({"zone": ...} or {"region": ...}), ``details.value``
(int64, so a JSON string) and ``applicableLocations``. Limits are seeded for the v5e families (on-demand
and Preemptible) in every zone of `DEFAULT_ZONES` (4 chips per zone, 8 per region) and can be replaced
with `FakeQuotas.set_limit`. Quota is limit only: the API reports no usage (DESIGN §3).
``disabled = True`` answers as Google does for an API the project has not enabled: 403
PERMISSION_DENIED with an ``ErrorInfo`` whose reason is ``SERVICE_DISABLED``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.gcp.tpu import DEFAULT_ZONES, google_error

V5E_FAMILIES = {
    "TPUV5sLitepodPerProjectPerZoneForTPUAPI": "zone",
    "TPUV5sLitepodPerProjectPerRegionForTPUAPI": "region",
    "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI": "zone",
    "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI": "region",
}


class FakeQuotas:
    """Quota limits per (quota id, location). ``limits[quota_id][location] = chips``."""

    def __init__(self, project: str = "demo-project", zones: tuple[str, ...] = DEFAULT_ZONES) -> None:
        self.project = project
        self.limits: dict[str, dict[str, int]] = {}
        self.dimension: dict[str, str] = dict(V5E_FAMILIES)
        regions = sorted({z.rsplit("-", 1)[0] for z in zones})
        for quota_id, dim in V5E_FAMILIES.items():
            locations = zones if dim == "zone" else regions
            self.limits[quota_id] = {loc: (4 if dim == "zone" else 8) for loc in locations}
        self.page_size = 3
        self.disabled = False
        self.requests: list[str] = []
        self._failures: list[int] = []

    def set_limit(self, quota_id: str, location: str, value: int) -> None:
        """Set one limit (creates the quota id if new; its dimension is guessed from the id)."""
        self.dimension.setdefault(quota_id, "zone" if "Zone" in quota_id else "region")
        self.limits.setdefault(quota_id, {})[location] = value

    def fail_next(self, status: int = 503, times: int = 1) -> None:
        """The next ``times`` calls answer ``status``."""
        self._failures.extend([status] * times)

    def _info(self, service: str, quota_id: str) -> dict[str, Any]:
        dim = self.dimension[quota_id]
        infos = [
            {"dimensions": {dim: loc}, "details": {"value": str(v)}, "applicableLocations": [loc]}
            for loc, v in sorted(self.limits[quota_id].items())
        ]
        infos.append({"dimensions": {}, "details": {"value": "0"}, "applicableLocations": []})
        return {
            "name": f"projects/{self.project}/locations/global/services/{service}/quotaInfos/{quota_id}",
            "quotaId": quota_id,
            "metric": f"{service}/tpu_v5s_litepod",
            "service": service,
            "isPrecise": True,
            "containerType": "PROJECT",
            "dimensions": [dim],
            "metricDisplayName": quota_id,
            "quotaDisplayName": quota_id,
            "metricUnit": "1",
            "dimensionsInfos": infos,
        }

    async def list_quota_infos(self, request: Request) -> JSONResponse:
        self.requests.append(str(request.url))
        if self._failures:
            status = self._failures.pop(0)
            return google_error(
                status, "UNAVAILABLE" if status >= 500 else "RESOURCE_EXHAUSTED", "try again later"
            )
        project, service = request.path_params["project"], request.path_params["service"]
        if self.disabled:
            return google_error(
                403,
                "PERMISSION_DENIED",
                f"Cloud Quotas API has not been used in project {project} before or it is disabled. Enable it "
                f"by visiting https://console.developers.google.com/apis/api/cloudquotas.googleapis.com/overview"
                f"?project={project} then retry.",
                [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "SERVICE_DISABLED",
                        "domain": "googleapis.com",
                        "metadata": {
                            "service": "cloudquotas.googleapis.com",
                            "consumer": f"projects/{project}",
                        },
                    }
                ],
            )
        if project != self.project:
            return google_error(
                403, "PERMISSION_DENIED", f"Permission 'cloudquotas.quotas.get' denied on project {project}."
            )
        ids = sorted(self.limits) if service == "tpu.googleapis.com" else []
        start = int(request.query_params.get("pageToken") or 0)
        page = ids[start : start + self.page_size]
        body: dict[str, Any] = {"quotaInfos": [self._info(service, q) for q in page]}
        if start + self.page_size < len(ids):
            body["nextPageToken"] = str(start + self.page_size)
        return JSONResponse(body)

    def routes(self) -> list[Route]:
        return [
            Route(
                "/v1/projects/{project}/locations/{location}/services/{service}/quotaInfos",
                self.list_quota_infos,
                methods=["GET"],
            )
        ]
