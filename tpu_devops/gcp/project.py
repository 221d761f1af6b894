"""The Google Cloud project when none is configured: the one Application Default Credentials name.

Why: MCP hosts do not always pass the environment on. Gemini CLI removes ``GOOGLE_CLOUD_PROJECT``,
``GOOGLE_APPLICATION_CREDENTIALS`` and every variable named like a key or token before it starts a server
(issue #17 §2), so a project exported in the user's shell never arrives. google-auth's
``google.auth.default()`` still finds the project the way gcloud users expect: the service-account key
or the ADC file's quota project, then the gcloud configuration (``gcloud config get-value project``),
then the metadata server on Google Cloud. `detected_project` asks it once per process and says which of
those it was, so `get_help` / `check_setup` can show where the project came from.

Source: google-auth ``google/auth/_default.py`` (``default``, ``_get_gcloud_sdk_credentials``) and
``google/auth/_cloud_sdk.py``; the ADC file location is the one ``gcloud auth application-default login``
writes (https://cloud.google.com/docs/authentication/application-default-credentials).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DetectedProject:
    """A project id and, in words, where google-auth found it."""

    project: str
    source: str


def _adc_file() -> Path:
    explicit = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if explicit:
        return Path(explicit)
    config = os.environ.get("CLOUDSDK_CONFIG") or str(Path.home() / ".config" / "gcloud")
    return Path(config) / "application_default_credentials.json"


def _source(project: str) -> str:
    path = _adc_file()
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "the metadata server (google.auth.default on Google Cloud)"
    if project in (info.get("project_id"), info.get("quota_project_id")):
        return f"Application Default Credentials ({path})"
    return "the gcloud configuration (gcloud config get-value project)"


@functools.lru_cache(maxsize=1)
def detected_project() -> DetectedProject | None:
    """The project google-auth's default credentials name, or None (no credentials, or none named).

    Asked once per process (a restart asks again). Never raises: a missing project is reported where a
    tool needs one (`tpu_devops.config.require_project`).
    """
    try:
        import google.auth
        from google.auth.exceptions import GoogleAuthError

        try:
            _, project = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except GoogleAuthError as exc:
            log.info("no project from Application Default Credentials: %s", type(exc).__name__)
            return None
    except Exception:  # a broken credentials file must not break the tool that only wanted a project id
        log.warning("looking up the default project failed", exc_info=True)
        return None
    return DetectedProject(project, _source(project)) if project else None
