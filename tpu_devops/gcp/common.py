"""What every Google adapter shares: credentials, endpoints, clients, retries, errors, worker threads.

- Credentials: Application Default Credentials (``google.auth.default`` through `tpu_devops.gcp.adc`,
  which asks no metadata server off Google Cloud). When
  ``TPU_DEVOPS_GCP_ENDPOINT`` points at a local fake, anonymous credentials are used instead.
- Endpoints: each service's public host, or the local base URL from ``TPU_DEVOPS_GCP_ENDPOINT``
  (one fake serves every surface; paths are the real REST paths).
- Retries: google.api_core's ``Retry`` for 429 / 500 / 502 / 503 / 504 and transport timeouts, with
  exponential backoff; never for 4xx configuration errors.
- Clients: `rest_client` builds (once per endpoint) a google-cloud client on its REST transport.
- Errors: `google_errors` / `api_error` turn google.api_core / google.auth exceptions into the typed
  errors of `tpu_devops.errors`, each with Google's message (URL removed) and a fix.
- Blocking client calls run in worker threads (`run_blocking`) so the MCP event loop keeps serving.
- Reads: every session reads its responses under the caps of `tpu_devops.host.bounded` (`bounded_session`).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio

from tpu_devops.config import Settings
from tpu_devops.errors import CloudError, NotFoundError, PermissionError_, QuotaError
from tpu_devops.gcp import adc
from tpu_devops.host import deadline

T = TypeVar("T")

PUBLIC_HOSTS = {
    "tpu": "tpu.googleapis.com",
    "cloudquotas": "cloudquotas.googleapis.com",
    "secretmanager": "secretmanager.googleapis.com",
    "logging": "logging.googleapis.com",
    "cloudbilling": "cloudbilling.googleapis.com",
    "container": "container.googleapis.com",
    "compute": "compute.googleapis.com",
    "storage": "storage.googleapis.com",
}

# Bounded so that one tool call stays well inside an MCP client's ~60 s timeout; inside a tool call both
# are cut further to what is left of its budget (`tpu_devops.host.deadline`).
RETRY_INITIAL_S = 0.5
RETRY_MAXIMUM_S = 8.0
RETRY_DEADLINE_S = 45.0
CALL_TIMEOUT_S = 30.0  # one HTTP request; retries stop at RETRY_DEADLINE_S
# One access-token request. Google's token endpoint answers in well under a second; this leaves most of a
# tool call's budget to say that it did not, instead of spending all of it (google-auth waits 120 s).
TOKEN_TIMEOUT_S = 8.0
POOL_SIZE = 48  # connections kept per host: enough for a 44-zone listing without churn

# The fix for a 403 per service (the permissions are the ones each REST reference lists).
PERMISSION_FIXES = {
    "tpu": "grant the caller roles/tpu.admin (or the permission named) on the project",
    "cloudquotas": "grant the caller cloudquotas.quotas.get (the permission quotaInfos.list requires) on the project",
    "secretmanager": "grant the caller roles/secretmanager.admin (or the secretmanager permission named) on the project",
    "container": "grant the caller roles/container.admin (or the container.* permission named) on the project",
    "compute": "grant the caller roles/compute.securityAdmin (compute.firewalls.* permissions) on the project",
    "storage": "grant the caller roles/storage.admin on the project (it creates the product bucket and grants the "
    "TPU VM's service account object access on it), or name a bucket you own in TPU_DEVOPS_BUCKET",
}
# google.api_core prefixes REST error messages with "METHOD URL: "; the URL adds nothing for a person.
_URL_PREFIX = re.compile(r"^(?:GET|POST|PUT|PATCH|DELETE) \S+: ")
# Google's 403 for an API that is off: ErrorInfo reason SERVICE_DISABLED, message "... API has not been
# used in project N before or it is disabled. Enable it by visiting ...".
_SERVICE_DISABLED = re.compile(r"has not been used in project .* or it is disabled", re.I | re.S)


def base_url(settings: Settings, service: str) -> str:
    """``https://<service host>`` or the local fake's base URL (no trailing slash)."""
    if settings.gcp_endpoint:
        return settings.gcp_endpoint.rstrip("/")
    return f"https://{PUBLIC_HOSTS[service]}"


def client_options(settings: Settings, service: str) -> dict[str, Any]:
    """``client_options`` for a google-cloud client: the fake's endpoint when one is configured."""
    return _options(settings.gcp_endpoint)


def _options(endpoint: str) -> dict[str, Any]:
    return {"api_endpoint": endpoint.rstrip("/")} if endpoint else {}


@functools.lru_cache(maxsize=4)
def _adc(endpoint: str) -> Any:
    from google.auth.credentials import AnonymousCredentials

    if endpoint:
        return AnonymousCredentials()
    credentials, _ = adc.default_credentials()
    return credentials


def credentials(settings: Settings) -> Any:
    """ADC, or anonymous credentials for a local fake.

    Raises:
        google.auth.exceptions.DefaultCredentialsError: no ADC; adapters turn it into a typed error
        with the fix (``gcloud auth application-default login``), e.g. through `api_error`.
    """
    return _adc(settings.gcp_endpoint)


def endpoint_credentials(endpoint: str) -> Any:
    """`credentials` keyed by ``Settings.gcp_endpoint`` alone (for clients cached per endpoint).

    Raises:
        PermissionError_: no Application Default Credentials (field ``credentials``, with the fix).
    """
    with google_errors("find Google credentials", "tpu"):
        return _adc(endpoint)


def adc_project() -> str | None:
    """The project named by the Application Default Credentials (None when they name none).

    Raises:
        PermissionError_: no Application Default Credentials (field ``credentials``, with the fix).
    """
    with google_errors("find Google credentials", "tpu"):
        _, project = adc.default_credentials()
    return project


@functools.lru_cache(maxsize=16)
def rest_client(client_cls: type, endpoint: str) -> Any:
    """One ``client_cls`` (a google-cloud ``*Client``) on the REST transport per endpoint, reused.

    ``endpoint`` is ``Settings.gcp_endpoint`` ("" for Google's public host). GAPIC clients are
    thread-safe for concurrent calls, so one instance serves every worker thread.

    Raises:
        PermissionError_: no Application Default Credentials (not cached: the next call tries again).
    """
    client = client_cls(
        transport="rest", credentials=endpoint_credentials(endpoint), client_options=_options(endpoint)
    )
    bounded_session(getattr(client._transport, "_session", None))
    return client


@functools.lru_cache(maxsize=4)
def authorized_session(endpoint: str) -> Any:
    """A google-auth ``AuthorizedSession`` (ADC, or anonymous for a local fake) per endpoint, reused.

    For REST calls no installed client can express (see `tpu_devops.gcp.tpu`).

    Raises:
        PermissionError_: no Application Default Credentials.
    """
    from google.auth.transport.requests import AuthorizedSession

    session = AuthorizedSession(endpoint_credentials(endpoint))
    bounded_session(session)
    return session


def bounded_session(session: Any) -> Any:
    """Mount on a requests ``Session`` (a google-auth ``AuthorizedSession``, a client's own) the adapter that
    reads every response under the caps of `tpu_devops.host.bounded` (size, time, decompression), keeping
    up to `POOL_SIZE` connections per host so concurrent calls (a 44-zone listing) reuse them. Every Google
    client of this package goes through it. Returns ``session`` (None passes through)."""
    if session is None:
        return None
    from tpu_devops.host.bounded import bounded_adapter

    adapter = bounded_adapter(pool_connections=4, pool_maxsize=POOL_SIZE)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    if hasattr(session, "_auth_request"):  # a google-auth AuthorizedSession: its token refreshes too
        session._auth_request = token_request()
    return session


def token_request() -> Any:
    """google-auth's requests transport for access-token refreshes (the OAuth token endpoint, or a
    metadata server), with every request's timeout cut to `TOKEN_TIMEOUT_S` and to what is left of the tool
    call's budget, and its response read under the caps of `tpu_devops.host.bounded`.

    google-auth waits up to 120 s for a token by default (``google/auth/transport/requests.py``
    ``_DEFAULT_TIMEOUT``), and a worker thread cannot be cancelled: an unreachable token endpoint held a
    tool call for that long, past every host's patience.

    Raises (when called):
        DeadlineError: the budget is (nearly) spent before the token request.
        google.auth.exceptions.TransportError: the endpoint did not answer (typed by `api_error`).
    """
    return _token_request_class()()


@functools.lru_cache(maxsize=1)
def _token_request_class() -> type:
    import requests
    from google.auth.transport.requests import Request

    class BoundedTokenRequest(Request):
        def __init__(self) -> None:
            super().__init__(bounded_session(requests.Session()))

        def __call__(self, url: str, method: str = "GET", body: Any = None, headers: Any = None,
                     timeout: Any = None, **kwargs: Any) -> Any:  # fmt: skip
            asked = min(timeout) if isinstance(timeout, tuple) else timeout
            cap = TOKEN_TIMEOUT_S if asked is None else min(float(asked), TOKEN_TIMEOUT_S)
            limit = deadline.timeout(cap, "getting a Google access token")
            return super().__call__(url, method=method, body=body, headers=headers, timeout=limit, **kwargs)

    return BoundedTokenRequest


def verify_credentials(settings: Settings) -> str:
    """Find the Application Default Credentials and get an access token with them (one bounded request to
    their token endpoint), so a revoked or expired key is found here, not by the first real call.
    Blocking: call it from a worker thread. Returns what they are (``authorized_user credentials``,
    ``service_account credentials for x@p.iam.gserviceaccount.com``...).

    Raises:
        PermissionError_: no credentials, or the token endpoint refused them (``invalid_grant``: revoked or
            expired), field ``credentials``, with the fix for that cause.
        CloudError: the token endpoint could not be reached or did not answer in time (field
            ``credentials``; nothing is known about the credentials themselves).
        DeadlineError: the tool call's budget was spent before the token request.
    """
    creds = endpoint_credentials(settings.gcp_endpoint)
    if settings.gcp_endpoint:
        return f"anonymous credentials (local endpoint {settings.gcp_endpoint})"
    with google_errors("get an access token with the Application Default Credentials", "tpu"):
        creds.refresh(token_request())
    return _describe(creds)


def _describe(creds: Any) -> str:
    """``service_account credentials for x@p.iam.gserviceaccount.com``, ``authorized_user credentials``."""
    module = type(creds).__module__.rsplit(".", 1)[-1]
    kind = {"credentials": "authorized_user", "service_account": "service_account"}.get(module, module)
    email = getattr(creds, "service_account_email", None)
    return f"{kind} credentials" + (f" for {email}" if isinstance(email, str) and "@" in email else "")


def is_google_error(exc: BaseException) -> bool:
    """True for exceptions raised by google.api_core or google.auth (which `api_error` can type)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    return isinstance(exc, gexc.GoogleAPIError | aexc.GoogleAuthError)


def api_error(exc: BaseException, *, action: str, service: str = "tpu") -> CloudError:
    """Turn a google.api_core / google.auth exception into a typed `CloudError` with a fix.

    ``service`` is a `PUBLIC_HOSTS` key; it picks the fix for 403s (`PERMISSION_FIXES`, or
    ``gcloud services enable <host>`` when Google says the API is disabled). The result carries
    ``http_code`` (int or None), ``status`` (Google's canonical status name, e.g.
    ``RESOURCE_EXHAUSTED``) and ``google_message`` (Google's text without the URL) for classification.
    Mapping: 404 -> `NotFoundError`; 401 / 403 and missing ADC -> `PermissionError_`; 429 that names a
    quota -> `QuotaError`; anything else -> `CloudError`.
    """
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    if isinstance(exc, aexc.DefaultCredentialsError):
        # `adc.default_credentials` says where it looked (files, the metadata server); google-auth's own
        # message is a link to its setup page.
        said = str(exc)
        err: CloudError = PermissionError_(
            f"no Application Default Credentials found: {said}"
            if said.startswith(adc.LOOKED)
            else "no Application Default Credentials found",
            field="credentials",
            fix="run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)",
        )
        err.http_code, err.status, err.google_message = None, "UNAUTHENTICATED", str(exc)  # type: ignore[attr-defined]
        return err
    if isinstance(exc, aexc.RefreshError | aexc.TransportError):
        return _credentials_error(exc, action)
    # Retries that ran out raise RetryError("Timeout of 45s exceeded, last exception: ..."): type and
    # classify it by that last exception (a 503 stays transient, a quota 429 stays a quota error).
    retried_out = isinstance(exc, gexc.RetryError)
    prefix = ""
    if retried_out and getattr(exc, "cause", None) is not None:
        exc, prefix = exc.cause, "retries ran out; last error: "  # type: ignore[attr-defined]
    message = prefix + _URL_PREFIX.sub("", str(getattr(exc, "message", None) or exc))
    code = getattr(exc, "code", None)
    code = int(code) if isinstance(code, int) else None
    status = None
    grpc_status = getattr(exc, "grpc_status_code", None)
    if grpc_status is not None:
        status = grpc_status.name
    if status is None and isinstance(exc, gexc.GoogleAPICallError):
        status = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
                  429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(code or 0)  # fmt: skip
    text = f"{action}: {message}"
    if isinstance(exc, gexc.NotFound):
        err = NotFoundError(text, fix="check the project, location and name in the message")
    elif isinstance(exc, gexc.Forbidden | gexc.Unauthenticated):
        disabled = getattr(exc, "reason", None) == "SERVICE_DISABLED" or _SERVICE_DISABLED.search(message)
        fix = (
            f"enable the API: gcloud services enable {PUBLIC_HOSTS[service]}"
            if disabled
            else PERMISSION_FIXES.get(service, "grant the caller the permission named on the project")
        )
        err = PermissionError_(text, fix=fix)
    elif isinstance(exc, gexc.TooManyRequests) and "quota" in message.lower():
        err = QuotaError(text, fix="wait for the quota to refill, or ask for more quota in the console")
    elif retried_out or (code or 0) >= 500 or isinstance(exc, gexc.TooManyRequests):
        err = CloudError(text, fix="Google's API was unavailable after retries: try again shortly")
    else:
        err = CloudError(text, fix="the request was refused: check the values named in the message")
    err.http_code, err.status, err.google_message = code, status, message  # type: ignore[attr-defined]
    return err


# OAuth 2.0 error codes of a token endpoint's refusal (RFC 6749 §5.2) that mean the credentials themselves
# are no longer good; Google answers ``invalid_grant`` for a revoked or expired refresh token and for a
# deleted or disabled service-account key ("Invalid JWT Signature.", "Token has been expired or revoked.").
_REFUSED_CREDENTIALS = ("invalid_grant", "invalid_client", "unauthorized_client", "access_denied")
_REVOKED_FIX = (
    "the credentials were revoked, expired or deleted: for your own login run "
    "`gcloud auth application-default login` again; for a service-account key create a new key "
    "(gcloud iam service-accounts keys create KEY.json --iam-account=SA_EMAIL) and point "
    "GOOGLE_APPLICATION_CREDENTIALS at it; then check_setup"
)
_UNREACHABLE_FIX = (
    "this machine could not reach Google's token endpoint (oauth2.googleapis.com:443, or the metadata "
    "server on a VM): check its network, DNS, firewall and HTTPS_PROXY / NO_PROXY, then try again; the "
    "credentials themselves were not checked"
)


def _auth_text(exc: BaseException) -> str:
    """The message of a google-auth error without its Python form: ``RefreshError`` carries ``(text,
    response_json)`` and ``TransportError`` wraps a requests exception whose text is a urllib3 repr
    (``HTTPConnectionPool(host='h', port=443): Read timed out. (read timeout=8.0)``, ``...: Max retries
    exceeded with url: /token (Caused by NewConnectionError("...: Failed to establish a new connection:
    [Errno 111] Connection refused"))``): that becomes ``h:443: Read timed out`` / ``h:443: [Errno 111]
    Connection refused``."""
    first = exc.args[0] if exc.args else exc
    text = first if isinstance(first, str) else str(first)
    host = re.search(r"host='([^']+)', port=(\d+)", text)
    cause = re.search(r"\(Caused by \w+\((.*)\)\)\s*$", text, re.S)
    if cause:
        text = cause.group(1).strip("'\"")
        text = re.sub(r"^<[^>]*>:?\s*|^\w*Connection\w*\(host='[^']*', port=\d+\):\s*", "", text)
    else:
        text = re.sub(r"^\w*Connection\w*\(host='[^']*', port=\d+\):\s*", "", text)
    text = re.sub(r"\s*\((?:read|connect) timeout=[\d.]+\)", "", text)
    text = re.sub(r"^Failed to establish a new connection:\s*", "", text)
    where = f"{host.group(1)}:{host.group(2)}: " if host else ""
    return (where + re.sub(r"\s+", " ", text)).strip().rstrip(".")[:300]


def _credentials_error(exc: BaseException, action: str) -> CloudError:
    """A google-auth ``RefreshError`` / ``TransportError`` as a typed error naming the real cause: the
    token endpoint refused the credentials (`_REFUSED_CREDENTIALS`: revoked, expired, deleted key), answered
    with an error of its own, or could not be reached / did not answer in time."""
    from google.auth import exceptions as aexc

    said = _auth_text(exc)
    if isinstance(exc, aexc.TransportError):
        timed_out = "timed out" in said.lower() or "timeout" in said.lower()
        err: CloudError = CloudError(
            f"{action}: Google's token endpoint "
            + ("did not answer within the time allowed" if timed_out else "could not be reached")
            + f" ({said})",
            field="credentials",
            fix=_UNREACHABLE_FIX,
        )
        status = "DEADLINE_EXCEEDED" if timed_out else "UNAVAILABLE"
    elif any(said.startswith(code) for code in _REFUSED_CREDENTIALS):
        err = PermissionError_(
            f"{action}: Google's token endpoint refused the credentials ({said})",
            field="credentials",
            fix=_REVOKED_FIX,
        )
        status = "UNAUTHENTICATED"
    elif getattr(exc, "retryable", False):
        err = CloudError(
            f"{action}: Google's token endpoint failed ({said})",
            field="credentials",
            fix="Google's token endpoint was unavailable: try again shortly",
        )
        status = "UNAVAILABLE"
    else:
        err = PermissionError_(
            f"{action}: the credentials could not get an access token ({said})",
            field="credentials",
            fix="check the credentials file (GOOGLE_APPLICATION_CREDENTIALS) or run "
            "`gcloud auth application-default login`; then check_setup",
        )
        status = "UNAUTHENTICATED"
    err.http_code, err.status, err.google_message = None, status, said  # type: ignore[attr-defined]
    return err


@contextlib.contextmanager
def google_errors(action: str, service: str) -> Iterator[None]:
    """Re-raise google.api_core / google.auth exceptions inside the block as `api_error` (others pass); a
    failure once the tool call's budget is spent is a `DeadlineError` (the time ran out, whatever the last
    attempt said)."""
    from google.auth import exceptions as aexc

    try:
        yield
    except Exception as exc:
        if isinstance(exc, aexc.RefreshError | aexc.TransportError):
            # the token request's own timeout is cut to the budget: its cause is the real one
            raise api_error(exc, action=action, service=service) from None
        if is_google_error(exc) or is_retryable(exc):
            left = deadline.remaining()
            if left is not None and left < deadline.MIN_REQUEST_S:
                raise deadline.expired(action) from None
        if is_google_error(exc):
            raise api_error(exc, action=action, service=service) from None
        raise


def is_retryable(exc: BaseException) -> bool:
    """True for 429, 5xx and transport timeouts / connection resets; False for every other 4xx."""
    from google.api_core import exceptions as gexc

    if isinstance(
        exc,
        gexc.TooManyRequests
        | gexc.InternalServerError
        | gexc.BadGateway
        | gexc.ServiceUnavailable
        | gexc.GatewayTimeout,
    ):
        return True
    if isinstance(exc, gexc.GoogleAPICallError):
        return False
    import requests

    return isinstance(exc, requests.ConnectionError | requests.Timeout | TimeoutError | ConnectionError)


def retry_policy(deadline_s: float | None = None) -> Any:
    """google.api_core ``Retry`` with exponential backoff on `is_retryable` errors only, giving up after
    ``deadline_s`` (default `RETRY_DEADLINE_S`, read at call time) or what is left of the tool call's budget
    (`tpu_devops.host.deadline`), whichever is less.

    Raises:
        DeadlineError: the budget is (nearly) spent.
    """
    from google.api_core.retry import Retry

    return Retry(
        predicate=is_retryable,
        initial=RETRY_INITIAL_S,
        maximum=RETRY_MAXIMUM_S,
        multiplier=2.0,
        timeout=deadline.timeout(
            RETRY_DEADLINE_S if deadline_s is None else deadline_s, "calling Google Cloud"
        ),
    )


def call_timeout(cap_s: float = CALL_TIMEOUT_S) -> float:
    """Seconds one HTTP request may take: `CALL_TIMEOUT_S`, cut to what is left of the tool call's budget
    (`tpu_devops.host.deadline`). Evaluate it per attempt (inside the retried function).

    Raises:
        DeadlineError: the budget is (nearly) spent.
    """
    return deadline.timeout(cap_s, "calling Google Cloud")


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call in a worker thread (never on the event loop)."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
