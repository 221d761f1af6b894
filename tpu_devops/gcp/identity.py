"""Who this server acts as: the principal of its Application Default Credentials (ADC).

Read with google-auth's own description of the credentials (``Credentials.get_cred_info()``, google-auth
>= 2.36: ``principal`` is the service account email for key files, impersonation and VM credentials,
and the user's ``account`` for ``gcloud auth application-default login`` files that record it). No
network call off Google Cloud: the principal is read from what ``google.auth.default`` loaded
(`tpu_devops.gcp.adc`: the metadata server is asked only on a Google Cloud VM). Used only to label who created a TPU (`created_by_label`), never to
authorise anything: ownership is this server's rig label (DESIGN §2).

Sync; the lookup is cached for the process and runs in a worker thread from async code.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import logging
import socket

log = logging.getLogger(__name__)

CREATED_BY_CHARS = 12  # hex digits of sha256 kept in the label: 48 bits, plenty to tell installations apart


@functools.lru_cache(maxsize=1)
def adc_principal() -> str:
    """The ADC principal (``svc@p.iam.gserviceaccount.com``, ``alice@example.com``), lower-cased.

    When the credentials name no principal (no ADC at all, a user file without ``account``, VM
    credentials before their email is resolved) the fallback is ``local:<os user>@<host>``, which still
    tells two installations apart. Never raises.
    """
    principal = ""
    try:
        from tpu_devops.gcp.adc import default_credentials

        credentials, _ = default_credentials()
        describe = getattr(credentials, "get_cred_info", None)  # google-auth >= 2.36
        info = (describe() if describe else None) or {}
        principal = str(
            info.get("principal")
            or getattr(credentials, "service_account_email", "")
            or getattr(credentials, "account", "")
            or ""
        )
        if principal == "default":  # VM credentials not yet resolved: the project's default account
            principal = "vm-default-service-account"
    except Exception as exc:  # no ADC, an unreadable file: the fallback below still identifies us
        log.debug("no ADC principal (%s); using the local user and host", type(exc).__name__)
    if not principal:
        try:
            user = getpass.getuser()
        except Exception:  # no login name in some containers
            user = "unknown"
        principal = f"local:{user}@{socket.gethostname()}"
    return principal.strip().lower()


def created_by_label(principal: str) -> str:
    """The ``created-by`` label value for ``principal``: the first `CREATED_BY_CHARS` hex digits of its
    SHA-256. Label-value-safe (lowercase hex; GCP label values allow ``[a-z0-9_-]``, at most 63) and
    reveals no email to whoever can list the project's TPUs."""
    return hashlib.sha256(principal.encode("utf-8")).hexdigest()[:CREATED_BY_CHARS]
