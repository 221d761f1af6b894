"""Fake of the Cloud Storage JSON API v1: buckets, their IAM policy, objects, the service agent.

Paths (JSON API reference, checked against the ``storage.v1`` discovery document by the validator):
``POST /storage/v1/b?project=P``, ``GET /storage/v1/b/{b}``, ``GET|PUT /storage/v1/b/{b}/iam``,
``GET /storage/v1/b/{b}/o`` (``prefix``, ``maxResults``, ``pageToken``), ``GET /storage/v1/b/{b}/o/{o}``
(JSON, or the bytes with ``alt=media``), ``PATCH /storage/v1/b/{b}/o/{o}`` (custom ``metadata``),
``POST /upload/storage/v1/b/{b}/o`` (``uploadType=media`` with ``name``, or ``multipart``) and
``GET /storage/v1/projects/{p}/serviceAccount``.

Who is calling: a request without a bearer token is the operator (the product's own calls through
the client library with anonymous credentials) and may do anything in the project; a bearer token in
``tokens`` is that principal (the TPU VM's service account) and needs an object role bound on the
bucket (``roles/storage.objectUser`` / ``objectAdmin`` / ``objectViewer`` for reads), as Google checks,
else 403 with Google's wording. ``foreign`` names buckets that exist in another project (403 on read,
409 on create: bucket names are global).
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.gcp.tpu import google_error

READ_ROLES = {"roles/storage.objectViewer", "roles/storage.objectUser", "roles/storage.objectAdmin"}
WRITE_ROLES = {"roles/storage.objectUser", "roles/storage.objectAdmin", "roles/storage.objectCreator"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class FakeStorage:
    """Buckets of one project: ``buckets[name]`` (the bucket JSON), ``objects[name][object] = (bytes,
    metadata JSON)``, ``policies[name]`` (IAM policy JSON)."""

    def __init__(self, project: str = "demo-project", project_number: str = "123456789012") -> None:
        self.project = project
        self.project_number = project_number
        self.buckets: dict[str, dict[str, Any]] = {}
        self.objects: dict[str, dict[str, tuple[bytes, dict[str, Any]]]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.foreign: set[str] = set()
        self.tokens: dict[str, str] = {}
        self.requests: list[dict[str, Any]] = []
        self._etag = itertools.count(1)
        self._generation = itertools.count(int(time.time() * 1e6))

    # ---- helpers for tests -----------------------------------------------------------------

    def vm_account(self) -> str:
        """The default compute service account of this project (what a TPU VM runs as)."""
        return f"{self.project_number}-compute@developer.gserviceaccount.com"

    def put(self, bucket: str, name: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Plant an object directly (test setup)."""
        self._store(bucket, name, data, {"metadata": metadata} if metadata else {})

    # ---- state ------------------------------------------------------------------------------

    def _store(self, bucket: str, name: str, data: bytes, meta: dict[str, Any]) -> dict[str, Any]:
        gen = str(next(self._generation))
        resource = {
            "kind": "storage#object",
            "id": f"{bucket}/{name}/{gen}",
            "name": name,
            "bucket": bucket,
            "generation": gen,
            "metageneration": "1",
            "contentType": meta.get("contentType") or "application/octet-stream",
            "size": str(len(data)),
            "timeCreated": _now(),
            "updated": _now(),
            "storageClass": "STANDARD",
        }
        if meta.get("metadata"):
            resource["metadata"] = {str(k): str(v) for k, v in meta["metadata"].items()}
        self.objects.setdefault(bucket, {})[name] = (data, resource)
        return resource

    def _principal(self, request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if not auth.lower().startswith("bearer "):
            return None
        return self.tokens.get(auth[7:].strip(), "unknown-principal")

    def _denied(self, request: Request, bucket: str, permission: str, roles: set[str]) -> Response | None:
        if bucket in self.foreign:
            return google_error(
                403,
                "PERMISSION_DENIED",
                f"caller does not have {permission} access to the Google Cloud Storage bucket. "
                f"Permission '{permission}' denied on resource (or it may not exist).",
            )
        principal = self._principal(request)
        if principal is None:
            return None
        for binding in self.policies.get(bucket, {}).get("bindings", []):
            if binding.get("role") in roles and f"serviceAccount:{principal}" in binding.get("members", []):
                return None
        return google_error(
            403,
            "PERMISSION_DENIED",
            f"{principal} does not have {permission} access to the Google Cloud Storage object. "
            f"Permission '{permission}' denied on resource (or it may not exist).",
        )

    def _no_bucket(self, bucket: str) -> Response | None:
        if bucket not in self.buckets and bucket not in self.foreign:
            return google_error(404, "NOT_FOUND", "The specified bucket does not exist.")
        return None

    async def _record(self, request: Request) -> bytes:
        body = await request.body()
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": str(request.url.query),
                "headers": dict(request.headers),
                "size": len(body),
            }
        )
        return body

    # ---- routes ------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [
            Route("/storage/v1/projects/{project}/serviceAccount", self.service_account, methods=["GET"]),
            Route("/storage/v1/b", self.insert_bucket, methods=["POST"]),
            Route("/storage/v1/b/{bucket}", self.get_bucket, methods=["GET"]),
            Route("/storage/v1/b/{bucket}/iam", self.get_policy, methods=["GET"]),
            Route("/storage/v1/b/{bucket}/iam", self.set_policy, methods=["PUT"]),
            Route("/storage/v1/b/{bucket}/o", self.list_objects, methods=["GET"]),
            Route("/storage/v1/b/{bucket}/o/{name:path}", self.get_object, methods=["GET"]),
            Route("/storage/v1/b/{bucket}/o/{name:path}", self.patch_object, methods=["PATCH"]),
            Route("/upload/storage/v1/b/{bucket}/o", self.upload, methods=["POST"]),
        ]

    async def service_account(self, request: Request) -> Response:
        await self._record(request)
        if request.path_params["project"] != self.project:
            return google_error(403, "PERMISSION_DENIED", "The caller does not have permission")
        return JSONResponse(
            {
                "kind": "storage#serviceAccount",
                "email_address": f"service-{self.project_number}@gs-project-accounts.iam.gserviceaccount.com",
            }
        )

    def _bucket_json(self, name: str) -> dict[str, Any]:
        return self.buckets[name]

    async def insert_bucket(self, request: Request) -> Response:
        body = json.loads(await self._record(request) or b"{}")
        if request.query_params.get("project") != self.project:
            return google_error(403, "PERMISSION_DENIED", "The caller does not have permission")
        name = body.get("name", "")
        if name in self.buckets or name in self.foreign:
            return google_error(
                409,
                "ALREADY_EXISTS" if name in self.foreign else "ALREADY_EXISTS",
                "The requested bucket name is not available. The bucket namespace is shared by all users "
                "of the system. Please select a different name and try again."
                if name in self.foreign
                else "Your previous request to create the named bucket succeeded and you already own it.",
            )
        iam = body.get("iamConfiguration") or {}
        ubla = bool((iam.get("uniformBucketLevelAccess") or {}).get("enabled"))
        resource = {
            "kind": "storage#bucket",
            "id": name,
            "name": name,
            "projectNumber": self.project_number,
            "metageneration": "1",
            "location": str(body.get("location") or "US").upper(),
            "locationType": "region" if body.get("location") else "multi-region",
            "storageClass": body.get("storageClass") or "STANDARD",
            "timeCreated": _now(),
            "updated": _now(),
            "etag": "CAE=",
            "labels": body.get("labels") or {},
            "lifecycle": body.get("lifecycle") or {},
            "iamConfiguration": {
                "uniformBucketLevelAccess": {"enabled": ubla},
                "bucketPolicyOnly": {"enabled": ubla},
                "publicAccessPrevention": iam.get("publicAccessPrevention") or "inherited",
            },
        }
        if not resource["lifecycle"]:
            resource.pop("lifecycle")
        self.buckets[name] = resource
        self.objects[name] = {}
        self.policies[name] = {
            "kind": "storage#policy",
            "resourceId": f"projects/_/buckets/{name}",
            "version": 1,
            "etag": f"CA{next(self._etag)}=",
            "bindings": [
                {"role": "roles/storage.legacyBucketOwner", "members": [f"projectOwner:{self.project}"]},
                {"role": "roles/storage.legacyBucketReader", "members": [f"projectViewer:{self.project}"]},
            ],
        }
        return JSONResponse(resource)

    async def get_bucket(self, request: Request) -> Response:
        await self._record(request)
        bucket = request.path_params["bucket"]
        if err := self._no_bucket(bucket) or self._denied(
            request, bucket, "storage.buckets.get", {"roles/storage.admin"}
        ):
            return err
        return JSONResponse(self._bucket_json(bucket))

    async def get_policy(self, request: Request) -> Response:
        await self._record(request)
        bucket = request.path_params["bucket"]
        if err := self._no_bucket(bucket) or self._denied(
            request, bucket, "storage.buckets.getIamPolicy", {"roles/storage.admin"}
        ):
            return err
        return JSONResponse(self.policies[bucket])

    async def set_policy(self, request: Request) -> Response:
        body = json.loads(await self._record(request) or b"{}")
        bucket = request.path_params["bucket"]
        if err := self._no_bucket(bucket) or self._denied(
            request, bucket, "storage.buckets.setIamPolicy", {"roles/storage.admin"}
        ):
            return err
        current = self.policies[bucket]
        if body.get("etag") and body["etag"] != current["etag"]:
            return google_error(
                412, "FAILED_PRECONDITION", "At least one of the pre-conditions you specified did not hold."
            )
        policy = {
            "kind": "storage#policy",
            "resourceId": current["resourceId"],
            "version": body.get("version", 1),
            "etag": f"CA{next(self._etag)}=",
            "bindings": [
                {"role": b["role"], "members": sorted(set(b.get("members", [])))}
                for b in body.get("bindings", [])
            ],
        }
        self.policies[bucket] = policy
        return JSONResponse(policy)

    async def list_objects(self, request: Request) -> Response:
        await self._record(request)
        bucket = request.path_params["bucket"]
        if err := self._no_bucket(bucket) or self._denied(
            request, bucket, "storage.objects.list", READ_ROLES
        ):
            return err
        prefix = request.query_params.get("prefix", "")
        limit = int(request.query_params.get("maxResults") or 1000)
        start = int(request.query_params.get("pageToken") or 0)
        names = sorted(n for n in self.objects.get(bucket, {}) if n.startswith(prefix))
        page = names[start : start + limit]
        out: dict[str, Any] = {
            "kind": "storage#objects",
            "items": [self.objects[bucket][n][1] for n in page],
        }
        if start + limit < len(names):
            out["nextPageToken"] = str(start + limit)
        return JSONResponse(out)

    async def get_object(self, request: Request) -> Response:
        await self._record(request)
        bucket, name = request.path_params["bucket"], request.path_params["name"]
        if err := self._no_bucket(bucket) or self._denied(request, bucket, "storage.objects.get", READ_ROLES):
            return err
        found = self.objects.get(bucket, {}).get(name)
        if found is None:
            return google_error(404, "NOT_FOUND", f"No such object: {bucket}/{name}")
        data, resource = found
        if request.query_params.get("alt") == "media":
            return Response(data, media_type=resource["contentType"])
        return JSONResponse(resource)

    async def patch_object(self, request: Request) -> Response:
        body = json.loads(await self._record(request) or b"{}")
        bucket, name = request.path_params["bucket"], request.path_params["name"]
        if err := self._no_bucket(bucket) or self._denied(
            request, bucket, "storage.objects.update", WRITE_ROLES - {"roles/storage.objectCreator"}
        ):
            return err
        found = self.objects.get(bucket, {}).get(name)
        if found is None:
            return google_error(404, "NOT_FOUND", f"No such object: {bucket}/{name}")
        data, resource = found
        if "metadata" in body:
            merged = dict(resource.get("metadata") or {})
            for k, v in (body["metadata"] or {}).items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = str(v)
            resource["metadata"] = merged
        resource["metageneration"] = str(int(resource["metageneration"]) + 1)
        resource["updated"] = _now()
        return JSONResponse(resource)

    async def upload(self, request: Request) -> Response:
        raw = await self._record(request)
        bucket = request.path_params["bucket"]
        if err := self._no_bucket(bucket) or self._denied(
            request, bucket, "storage.objects.create", WRITE_ROLES
        ):
            return err
        kind = request.query_params.get("uploadType", "")
        if kind == "media":
            name = request.query_params.get("name", "")
            if not name:
                return google_error(400, "INVALID_ARGUMENT", "Required parameter: name")
            meta = {"contentType": request.headers.get("content-type")}
            return JSONResponse(self._store(bucket, name, raw, meta))
        if kind == "multipart":
            ctype = request.headers.get("content-type", "")
            message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {ctype}\r\n\r\n".encode() + raw)
            parts = list(message.iter_parts())
            if len(parts) != 2:
                return google_error(
                    400, "INVALID_ARGUMENT", "Multipart upload needs metadata and media parts"
                )
            meta = json.loads(parts[0].get_payload(decode=True) or b"{}")
            data = parts[1].get_payload(decode=True) or b""
            name = meta.get("name") or request.query_params.get("name", "")
            if not name:
                return google_error(400, "INVALID_ARGUMENT", "Required parameter: name")
            return JSONResponse(self._store(bucket, name, data, meta))
        return google_error(400, "INVALID_ARGUMENT", f"Unsupported upload type {kind!r}")
