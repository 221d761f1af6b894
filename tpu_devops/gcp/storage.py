"""Thin adapter over Cloud Storage (``google-cloud-storage``, JSON API). Sync; call via `run_blocking`.

Only what the product bucket needs (`tpu_devops.provisioning.bucket`): read or create one bucket (uniform
bucket-level access, public access prevention, labels, a lifecycle rule), read and extend its IAM
policy, list objects under a prefix with their custom metadata, and the project number (from the
project's Cloud Storage service agent, ``service-<number>@gs-project-accounts.iam.gserviceaccount.com``,
JSON API ``projects.serviceAccount.get``) so a bucket can be checked to belong to this project.
Object contents are never downloaded here: what the server needs to know is in object metadata.

Errors become the typed errors of `tpu_devops.errors` through `common.google_errors` (404 ->
`NotFoundError`, 403 -> `PermissionError_` with the IAM fix, 409 -> `CloudError` with status
``ALREADY_EXISTS``); retries are `common.retry_policy` (429 / 5xx / timeouts only).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import CloudError, NotFoundError
from tpu_devops.gcp import common

SERVICE = "storage"
_AGENT = re.compile(r"^service-(\d+)@gs-project-accounts\.iam\.gserviceaccount\.com$")


@dataclass(frozen=True)
class BucketInfo:
    """What the product reads of a bucket. ``project_number`` as Google states it (a string)."""

    name: str
    location: str
    project_number: str
    labels: dict[str, str]
    uniform_access: bool
    public_access_prevention: str
    lifecycle_rules: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ObjectInfo:
    """One object: name, size in bytes, last update (RFC 3339) and custom metadata."""

    name: str
    size: int
    updated: str | None
    metadata: dict[str, str]


@functools.lru_cache(maxsize=4)
def _client(endpoint: str, project: str) -> Any:
    import google.cloud.storage as storage

    found = storage.Client(
        project=project,
        credentials=common.endpoint_credentials(endpoint),
        client_options={"api_endpoint": endpoint.rstrip("/")} if endpoint else None,
    )
    common.bounded_session(found._http)
    return found


def client(settings: Settings) -> Any:
    """One ``google.cloud.storage.Client`` per endpoint and project (ADC, or the local fake's URL)."""
    return _client(settings.gcp_endpoint, require_project(settings))


def _kw() -> dict[str, Any]:
    return {"retry": common.retry_policy(), "timeout": common.CALL_TIMEOUT_S}


def project_number(settings: Settings) -> str:
    """This project's number, read from its Cloud Storage service agent's email.

    Raises:
        CloudError: the answer is not a service agent email; any API failure (typed).
    """
    project = require_project(settings)
    with common.google_errors("read the project's Cloud Storage service agent", SERVICE):
        email = client(settings).get_service_account_email(project=project, timeout=common.CALL_TIMEOUT_S)
    match = _AGENT.match(email or "")
    if not match:
        raise CloudError(
            f"unexpected Cloud Storage service agent {email!r}: cannot tell the project number",
            fix="check GOOGLE_CLOUD_PROJECT names the project you mean",
        )
    return match.group(1)


def _info(bucket: Any) -> BucketInfo:
    iam = bucket.iam_configuration
    return BucketInfo(
        name=bucket.name,
        location=(bucket.location or "").lower(),
        project_number=str(bucket.project_number or ""),
        labels=dict(bucket.labels or {}),
        uniform_access=bool(iam.uniform_bucket_level_access_enabled),
        public_access_prevention=str(iam.public_access_prevention or ""),
        lifecycle_rules=[dict(rule) for rule in bucket.lifecycle_rules],
    )


def get_bucket(settings: Settings, name: str) -> BucketInfo | None:
    """The bucket, or None when no bucket has that name.

    Raises:
        PermissionError_: it exists but the caller may not read it (another project's bucket, or a
            missing ``storage.buckets.get``).
    """
    try:
        with common.google_errors(f"read bucket {name}", SERVICE):
            bucket = client(settings).get_bucket(name, **_kw())
    except NotFoundError:
        return None
    return _info(bucket)


def create_bucket(
    settings: Settings,
    name: str,
    *,
    location: str,
    labels: dict[str, str],
    expire_prefix: str,
    expire_after_days: int,
) -> BucketInfo:
    """Create ``name`` in ``location``: uniform bucket-level access, public access prevention enforced,
    ``labels``, and a lifecycle rule deleting objects under ``expire_prefix`` ``expire_after_days``
    days after they were written (Cloud Storage lifecycle ``Delete`` with ``age`` and ``matchesPrefix``).

    Raises:
        CloudError: status ``ALREADY_EXISTS`` when the name is taken (by anyone: names are global);
            `PermissionError_` without ``storage.buckets.create``.
    """
    with common.google_errors(f"create bucket {name}", SERVICE):
        c = client(settings)
        bucket = c.bucket(name)
        bucket.iam_configuration.uniform_bucket_level_access_enabled = True
        bucket.iam_configuration.public_access_prevention = "enforced"
        bucket.labels = dict(labels)
        bucket.add_lifecycle_delete_rule(age=expire_after_days, matches_prefix=[expire_prefix])
        created = c.create_bucket(bucket, location=location, timeout=common.CALL_TIMEOUT_S)
    return _info(created)


def iam_members(settings: Settings, name: str, role: str) -> set[str]:
    """Members bound to ``role`` on bucket ``name`` (e.g. ``serviceAccount:...``).

    Raises:
        PermissionError_: without ``storage.buckets.getIamPolicy``.
    """
    with common.google_errors(f"read the IAM policy of bucket {name}", SERVICE):
        policy = client(settings).bucket(name).get_iam_policy(requested_policy_version=3, **_kw())
    members: set[str] = set()
    for binding in policy.bindings:
        if binding.get("role") == role and not binding.get("condition"):
            members.update(binding.get("members", ()))
    return members


def add_iam_member(settings: Settings, name: str, role: str, member: str) -> None:
    """Bind ``member`` to ``role`` on bucket ``name`` (read-modify-write with the policy's etag, so a
    concurrent change is refused rather than overwritten).

    Raises:
        PermissionError_: without ``storage.buckets.setIamPolicy``.
    """
    with common.google_errors(f"grant {role} on bucket {name}", SERVICE):
        bucket = client(settings).bucket(name)
        policy = bucket.get_iam_policy(requested_policy_version=3, **_kw())
        for binding in policy.bindings:
            if binding.get("role") == role and not binding.get("condition"):
                binding["members"] = set(binding.get("members", ())) | {member}
                break
        else:
            policy.bindings.append({"role": role, "members": {member}})
        bucket.set_iam_policy(policy, timeout=common.CALL_TIMEOUT_S)


def list_objects(settings: Settings, name: str, prefix: str, *, limit: int = 200) -> list[ObjectInfo]:
    """Objects of bucket ``name`` under ``prefix`` (at most ``limit``, in name order).

    Raises:
        NotFoundError: no such bucket. PermissionError_: without ``storage.objects.list``.
    """
    with common.google_errors(f"list gs://{name}/{prefix}", SERVICE):
        blobs = client(settings).list_blobs(name, prefix=prefix, max_results=limit, **_kw())
        return [
            ObjectInfo(
                name=b.name,
                size=int(b.size or 0),
                updated=b.updated.isoformat() if b.updated else None,
                metadata=dict(b.metadata or {}),
            )
            for b in blobs
        ]
