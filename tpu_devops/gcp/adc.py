"""Application Default Credentials, without google-auth's wait for a metadata server that is not there.

`default_credentials` is ``google.auth.default()`` (cloud-platform scope) with one change: when no
credentials file is configured, it asks google-auth only once `tpu_devops.gcp.metadata` has found a
metadata server that answers; otherwise it raises google-auth's own ``DefaultCredentialsError`` at once,
saying why. With a credentials file google-auth reads it and never reaches the metadata server, as before.

google-auth's search order (``google/auth/_default.py`` ``default``): ``GOOGLE_APPLICATION_CREDENTIALS``,
then gcloud's ADC file (``application_default_credentials.json`` in ``CLOUDSDK_CONFIG``, else
``~/.config/gcloud``, or ``%APPDATA%\\gcloud`` on Windows: ``google/auth/_cloud_sdk.py``), then App Engine's
legacy python27 runtime (which cannot run this server), then the metadata server. Every adapter gets its credentials here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpu_devops.gcp import metadata

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
# How `default_credentials`' own refusal starts (it says where it looked; callers prefix what failed).
LOOKED = "GOOGLE_APPLICATION_CREDENTIALS is unset"


def gcloud_config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """gcloud's configuration directory: ``CLOUDSDK_CONFIG``, else ``~/.config/gcloud`` (``%APPDATA%\\gcloud``
    on Windows), as google-auth's ``_cloud_sdk.get_config_path`` finds it."""
    env = os.environ if environ is None else environ
    if env.get("CLOUDSDK_CONFIG"):
        return Path(env["CLOUDSDK_CONFIG"]).expanduser()
    if os.name == "nt" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "gcloud"
    return Path.home() / ".config" / "gcloud"


def well_known_file(environ: Mapping[str, str] | None = None) -> Path:
    """The ADC file ``gcloud auth application-default login`` writes."""
    return gcloud_config_dir(environ) / "application_default_credentials.json"


def credentials_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """The credentials file google-auth will read: ``GOOGLE_APPLICATION_CREDENTIALS`` when set (even if it
    names no file: google-auth then says so), else gcloud's ADC file when it exists, else None."""
    env = os.environ if environ is None else environ
    explicit = env.get("GOOGLE_APPLICATION_CREDENTIALS", "")
    if explicit:
        return Path(explicit).expanduser()
    path = well_known_file(env)
    return path if path.is_file() else None


def default_credentials() -> tuple[Any, str | None]:
    """``google.auth.default(scopes=[cloud-platform])``: (credentials, project id or None).

    Blocking (a file read; on a Google Cloud VM, requests to its metadata server): call it from a worker
    thread in async code. Without a credentials file it waits at most
    `tpu_devops.gcp.metadata.PROBE_TIMEOUT_S` for the metadata probe.

    Raises:
        google.auth.exceptions.DefaultCredentialsError: no credentials (the message says where it looked),
            or a credentials file google-auth cannot use.
    """
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    if credentials_file() is None:
        server = metadata.metadata_server(wait=True)
        if not server.answered:
            raise DefaultCredentialsError(
                f"{LOOKED}, {well_known_file()} does not exist, and {server.detail}"
            )
    return google.auth.default(scopes=[CLOUD_PLATFORM])
