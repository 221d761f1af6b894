"""What every Google adapter shares: credentials, endpoints, retries and worker threads.

- Credentials: Application Default Credentials (``google.auth.default``). When
  ``TPU_DEVOPS_GCP_ENDPOINT`` points at a local fake, anonymous credentials are used instead.
- Endpoints: each service's public host, or the local base URL from ``TPU_DEVOPS_GCP_ENDPOINT``
  (one fake serves every surface; paths are the real REST paths).
- Retries: google.api_core's ``Retry`` for 429 / 500 / 502 / 503 / 504 and transport timeouts, with
  exponential backoff; never for 4xx configuration errors.
- Blocking client calls run in worker threads (`run_blocking`) so the MCP event loop keeps serving.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from tpu_devops.config import Settings

T = TypeVar("T")

PUBLIC_HOSTS = {
    "tpu": "tpu.googleapis.com",
    "cloudquotas": "cloudquotas.googleapis.com",
    "secretmanager": "secretmanager.googleapis.com",
    "logging": "logging.googleapis.com",
    "cloudbilling": "cloudbilling.googleapis.com",
}

# Bounded so that one tool call stays well inside an MCP client's ~60 s timeout.
RETRY_INITIAL_S = 0.5
RETRY_MAXIMUM_S = 8.0
RETRY_DEADLINE_S = 45.0


def base_url(settings: Settings, service: str) -> str:
    """``https://<service host>`` or the local fake's base URL (no trailing slash)."""
    if settings.gcp_endpoint:
        return settings.gcp_endpoint.rstrip("/")
    return f"https://{PUBLIC_HOSTS[service]}"


def client_options(settings: Settings, service: str) -> dict[str, Any]:
    """``client_options`` for a google-cloud client: the fake's endpoint when one is configured."""
    if settings.gcp_endpoint:
        return {"api_endpoint": settings.gcp_endpoint.rstrip("/")}
    return {}


@functools.lru_cache(maxsize=4)
def _adc(endpoint: str) -> Any:
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    if endpoint:
        return AnonymousCredentials()
    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    return credentials


def credentials(settings: Settings) -> Any:
    """ADC, or anonymous credentials for a local fake.

    Raises:
        google.auth.exceptions.DefaultCredentialsError: no ADC; adapters turn it into a ConfigError
        with the fix (``gcloud auth application-default login``).
    """
    return _adc(settings.gcp_endpoint)


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


def retry_policy(deadline_s: float = RETRY_DEADLINE_S) -> Any:
    """google.api_core ``Retry`` with exponential backoff on `is_retryable` errors only."""
    from google.api_core.retry import Retry

    return Retry(
        predicate=is_retryable,
        initial=RETRY_INITIAL_S,
        maximum=RETRY_MAXIMUM_S,
        multiplier=2.0,
        timeout=deadline_s,
    )


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call in a worker thread (never on the event loop)."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
