"""Cloud Logging ``entries.list`` through `google-cloud-logging` over its JSON/HTTP transport.

The client is ``google.cloud.logging.Client(project, credentials, _use_grpc=False,
client_options={"api_endpoint": base})``: the REST path honours a local ``api_endpoint`` (the fake
in ``tests/fakes/gcp/logging.py``) while gRPC would not. One call reads one page, sent as the
library's own ``POST /v2/entries:list`` request (``resourceNames``, ``filter``, ``orderBy``,
``pageSize``, ``pageToken``; response ``entries`` and ``nextPageToken``; reference:
cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list). The raw page is used rather than
``Client.list_entries`` because that generator hides ``nextPageToken`` (no passthrough) and converts
every entry to an object the caller would convert back; it also silently adds a 24 h window, which
`tpu_devops.logs.filters.build_filter` already makes explicit.

``google.*`` is imported lazily inside functions so listing tools stays fast.
"""

from __future__ import annotations

import logging
from typing import Any

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import (
    CloudError,
    ConfigError,
    InputError,
    NotFoundError,
    PermissionError_,
    QuotaError,
    TpuDevopsError,
)
from tpu_devops.gcp.common import base_url, bounded_session, call_timeout, credentials, retry_policy
from tpu_devops.host import deadline

log = logging.getLogger(__name__)

# entries.list accepts pageSize up to 1000 (LogEntries.list reference).
MAX_PAGE_SIZE = 1000
ORDERS = {"asc": "timestamp asc", "desc": "timestamp desc"}


_CLIENTS: dict[tuple[str, str], Any] = {}


def logging_client(settings: Settings) -> Any:
    """The shared `google.cloud.logging.Client` (HTTP transport) for these settings.

    Raises:
        ConfigError: no project configured, or no Application Default Credentials.
    """
    project = require_project(settings)
    endpoint = base_url(settings, "logging")
    client = _CLIENTS.get((project, endpoint))
    if client is not None:
        return client
    try:
        creds = credentials(settings)
    except Exception as exc:  # google.auth.exceptions.DefaultCredentialsError
        raise ConfigError(
            f"no Google credentials: {exc}",
            field="credentials",
            value=None,
            fix="run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
        ) from None
    from google.cloud import logging as gcl

    client = gcl.Client(
        project=project, credentials=creds, _use_grpc=False, client_options={"api_endpoint": endpoint}
    )
    bounded_session(client._http)  # a page is read under the caps of `tpu_devops.host.bounded`
    _CLIENTS[(project, endpoint)] = client
    return client


def _classify(exc: Exception, filter_: str, page_token: str | None) -> Exception:
    from google.api_core import exceptions as gexc

    message = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, gexc.BadRequest) and page_token and "token" in message.lower():
        return InputError(
            f"Cloud Logging rejected the page token: {message}",
            field="page_token",
            value=page_token,
            fix="pass next_page_token from the previous call with the same filter and order, or drop it",
        )
    if isinstance(exc, gexc.BadRequest):
        return InputError(
            f"Cloud Logging rejected the query: {message}",
            field="filter",
            value=filter_,
            fix="check the filter syntax (cloud.google.com/logging/docs/view/logging-query-language)",
        )
    if isinstance(exc, gexc.Forbidden | gexc.Unauthorized):
        return PermissionError_(
            f"Cloud Logging denied entries.list: {message}",
            field="roles/logging.viewer",
            value=None,
            fix="grant roles/logging.viewer (or roles/logging.privateLogViewer) on the project",
        )
    if isinstance(exc, gexc.NotFound):
        return NotFoundError(f"not found: {message}", field="project", fix="check GOOGLE_CLOUD_PROJECT")
    if isinstance(exc, gexc.TooManyRequests):
        return QuotaError(
            f"Cloud Logging read quota exhausted: {message}",
            field="entries.list",
            fix="wait a minute and narrow the window (the read quota is per minute)",
        )
    return CloudError(f"Cloud Logging entries.list failed: {message}", field="entries.list")


def list_entries_page(
    settings: Settings,
    *,
    filter_: str,
    order: str = "desc",
    page_size: int = 100,
    page_token: str | None = None,
    resource_names: list[str] | None = None,
) -> dict[str, Any]:
    """Read one page of log entries (blocking: call it from a worker thread in async code).

    Args:
        filter_: a Logging query-language filter (build it with `tpu_devops.logs.filters`).
        order: ``"desc"`` (newest first) or ``"asc"``.
        page_size: entries per page, 1..1000.
        page_token: ``nextPageToken`` from the previous page, passed through unchanged.
        resource_names: default ``["projects/<project>"]``.

    Returns:
        ``{"entries": [LogEntry JSON, ...], "nextPageToken": str | None}``.

    Raises:
        InputError (bad order / page size / filter / page token), PermissionError_, NotFoundError, QuotaError,
        CloudError, ConfigError (no project or credentials).
    """
    if order not in ORDERS:
        raise InputError("not an order", field="order", value=order, fix="use desc (newest first) or asc")
    if not 1 <= int(page_size) <= MAX_PAGE_SIZE:
        raise InputError("page size out of range", field="page_size", value=page_size, fix="use 1 to 1000")
    client = logging_client(settings)
    body: dict[str, Any] = {
        "resourceNames": resource_names or [f"projects/{client.project}"],
        "filter": filter_,
        "orderBy": ORDERS[order],
        "pageSize": int(page_size),
    }
    if page_token:
        body["pageToken"] = page_token

    def call() -> Any:  # each attempt's timeout is what is left of the tool call's budget
        return client.logging_api.api_request(
            method="POST", path="/entries:list", data=body, timeout=call_timeout()
        )

    try:
        response = retry_policy()(call)()
    except TpuDevopsError:  # ConfigError, and DeadlineError when the budget is spent
        raise
    except Exception as exc:
        left = deadline.remaining()
        if left is not None and left < deadline.MIN_REQUEST_S:  # the time ran out, whatever the last try said
            raise deadline.expired("reading Cloud Logging") from None
        classified = _classify(exc, filter_, page_token)
        log.info("entries.list failed: %s", classified)
        raise classified from None
    response = response if isinstance(response, dict) else {}
    return {"entries": response.get("entries") or [], "nextPageToken": response.get("nextPageToken") or None}
