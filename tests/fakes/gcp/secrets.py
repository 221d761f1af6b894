"""Fake of the Secret Manager v1 REST surface: get/create secret, add/get/access version.

Paths (v1 reference): ``GET|POST /v1/projects/{p}/secrets[/{s}]``, ``POST .../{s}:addVersion``,
``GET .../{s}/versions/{v}`` and ``GET .../{s}/versions/{v}:access``; ``latest`` resolves to the newest
enabled version. Payloads are kept base64 as sent. ``denied`` holds secret ids whose access answers
403 PERMISSION_DENIED (an unreadable secret); ``deny_times[secret_id] = n`` refuses the next n reads
of it that way (an IAM grant that lands after the VM asked).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.gcp.tpu import google_error


class FakeSecretManager:
    """Secrets of one project: ``secrets[secret_id] = [version payload (bytes), ...]``."""

    def __init__(self, project: str = "demo-project") -> None:
        self.project = project
        self.secrets: dict[str, list[bytes]] = {}
        self.denied: set[str] = set()
        self.deny_times: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []

    def put(self, secret_id: str, value: str) -> None:
        """Plant a secret version directly (test setup)."""
        self.secrets.setdefault(secret_id, []).append(value.encode())

    def _secret_json(self, secret_id: str) -> dict[str, Any]:
        return {
            "name": f"projects/{self.project}/secrets/{secret_id}",
            "replication": {"automatic": {}},
            "createTime": "2026-01-01T00:00:00Z",
        }

    def _version_json(self, secret_id: str, n: int) -> dict[str, Any]:
        return {
            "name": f"projects/{self.project}/secrets/{secret_id}/versions/{n}",
            "state": "ENABLED",
            "createTime": "2026-01-01T00:00:00Z",
        }

    async def _record(self, request: Request) -> str:
        body = (await request.body()).decode("utf-8", "replace")
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "headers": dict(request.headers),
                "body": body,
            }
        )
        return body

    async def collection(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        if request.path_params["project"] != self.project:
            return google_error(403, "PERMISSION_DENIED", "Permission 'secretmanager.secrets.create' denied")
        secret_id = request.query_params.get("secretId") or request.query_params.get("secret_id") or ""
        if not secret_id:
            return google_error(400, "INVALID_ARGUMENT", "secret_id is required")
        if secret_id in self.secrets:
            return google_error(
                409, "ALREADY_EXISTS", f"Secret [projects/{self.project}/secrets/{secret_id}] already exists."
            )
        json.loads(body or "{}")
        self.secrets[secret_id] = []
        return JSONResponse(self._secret_json(secret_id))

    async def member(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        if request.path_params["project"] != self.project:
            return google_error(403, "PERMISSION_DENIED", "Permission denied on project")
        rest = request.path_params["rest"]
        secret_id, _, tail = rest.partition("/")
        verb = ""
        if ":" in (tail or secret_id):
            if tail:
                tail, _, verb = tail.partition(":")
            else:
                secret_id, _, verb = secret_id.partition(":")
        if secret_id not in self.secrets:
            return google_error(
                404,
                "NOT_FOUND",
                f"Secret [projects/{self.project}/secrets/{secret_id}] not found or has no versions.",
            )
        if self.deny_times.get(secret_id, 0) > 0:
            self.deny_times[secret_id] -= 1
            return google_error(
                403,
                "PERMISSION_DENIED",
                f"Permission 'secretmanager.versions.access' denied for resource 'projects/{self.project}/secrets/{secret_id}'",
            )
        if secret_id in self.denied:
            return google_error(
                403,
                "PERMISSION_DENIED",
                f"Permission 'secretmanager.versions.access' denied for resource 'projects/{self.project}/secrets/{secret_id}'",
            )
        versions = self.secrets[secret_id]
        if request.method == "POST" and verb == "addVersion":
            data = json.loads(body or "{}").get("payload", {}).get("data", "")
            versions.append(base64.b64decode(data))
            return JSONResponse(self._version_json(secret_id, len(versions)))
        if not tail:
            return JSONResponse(self._secret_json(secret_id))
        if not tail.startswith("versions/"):
            return google_error(404, "NOT_FOUND", "unknown path")
        ref = tail.split("/", 1)[1]
        n = len(versions) if ref == "latest" else int(ref) if ref.isdigit() else 0
        if not 1 <= n <= len(versions):
            return google_error(
                404,
                "NOT_FOUND",
                f"Secret Version [projects/{self.project}/secrets/{secret_id}/versions/{ref}] not found.",
            )
        if verb == "access":
            return JSONResponse(
                {
                    "name": f"projects/{self.project}/secrets/{secret_id}/versions/{n}",
                    "payload": {"data": base64.b64encode(versions[n - 1]).decode()},
                }
            )
        return JSONResponse(self._version_json(secret_id, n))

    def routes(self) -> list[Route]:
        return [
            Route("/v1/projects/{project}/secrets", self.collection, methods=["POST"]),
            Route("/v1/projects/{project}/secrets/{rest:path}", self.member, methods=["GET", "POST"]),
        ]
