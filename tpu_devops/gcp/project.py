"""The Google Cloud project when none is configured, read where gcloud and google-auth keep it.

Why: MCP hosts do not always pass the environment on. Gemini CLI removes ``GOOGLE_CLOUD_PROJECT`` and
``GOOGLE_APPLICATION_CREDENTIALS`` before it starts a server, Codex passes only HOME, LANG, PATH and TERM,
so a project exported in the user's shell never arrives. google-auth's ``google.auth.default()`` finds
the project of a user's ADC file only by running ``gcloud config config-helper`` (``google/auth/
_cloud_sdk.py`` ``get_project_id``), so without gcloud on PATH it found none, and it never reads the
file's ``quota_project_id``. `detected_project` reads the files themselves, in this order:

1. ``CLOUDSDK_CORE_PROJECT``: gcloud's own override of ``core/project``;
2. ``project_id`` in the credentials file (``GOOGLE_APPLICATION_CREDENTIALS``, else gcloud's ADC file):
   service-account keys carry one, which is what google-auth answers first;
3. the active gcloud configuration (``gcloud config set project``): its name in ``CLOUDSDK_ACTIVE_CONFIG_NAME``,
   else in ``<config dir>/active_config``, else ``default``; the project in the ``[core]`` section of
   ``<config dir>/configurations/config_<name>``, the directory being ``CLOUDSDK_CONFIG`` or
   ``~/.config/gcloud``: what ``gcloud config get-value project`` prints;
4. ``quota_project_id`` in the credentials file (``gcloud auth application-default login`` writes the
   project of the gcloud configuration there, or ``set-quota-project`` does);
5. on a Google Cloud VM whose metadata server answers (`tpu_devops.gcp.metadata`), the VM's project, from
   google-auth.

Each answer says where it came from, so `get_help` and `check_setup` can show it. Sources: gcloud's
``named_configs`` and ``properties`` layout (``~/.config/gcloud/configurations/config_default``, INI);
google-auth ``_default.py`` / ``_cloud_sdk.py``; the ADC file is the one ``gcloud auth
application-default login`` writes (https://cloud.google.com/docs/authentication/application-default-credentials).
"""

from __future__ import annotations

import configparser
import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tpu_devops.gcp import adc, metadata

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 1 << 20  # credentials files and gcloud configurations are a few KiB


@dataclass(frozen=True)
class DetectedProject:
    """A project id and, in words, where it was found."""

    project: str
    source: str


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _credentials_info() -> tuple[Path | None, dict]:
    path = adc.credentials_file()
    text = _read(path) if path else None
    if text is None:
        return path, {}
    try:
        info = json.loads(text)
    except ValueError:
        return path, {}
    return path, info if isinstance(info, dict) else {}


def active_gcloud_configuration() -> tuple[str, Path]:
    """(name, path) of gcloud's active configuration (module docstring, step 3); the file may not exist."""
    config_dir = adc.gcloud_config_dir()
    name = os.environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME", "").strip()
    if not name:
        name = ((_read(config_dir / "active_config") or "").strip().splitlines() or ["default"])[0].strip()
    return name or "default", config_dir / "configurations" / f"config_{name or 'default'}"


def gcloud_configuration_project() -> DetectedProject | None:
    """The ``[core] project`` of the active gcloud configuration, or None."""
    name, path = active_gcloud_configuration()
    text = _read(path)
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as exc:
        log.info("unreadable gcloud configuration %s: %s", path, type(exc).__name__)
        return None
    project = parser.get("core", "project", fallback="").strip()
    return DetectedProject(project, f"the gcloud configuration {name!r} ({path})") if project else None


def project_from_files() -> DetectedProject | None:
    """Steps 1-4 of the module docstring: no network, no subprocess. Never raises."""
    if env := os.environ.get("CLOUDSDK_CORE_PROJECT", "").strip():
        return DetectedProject(env, "the gcloud configuration (CLOUDSDK_CORE_PROJECT)")
    path, info = _credentials_info()
    if isinstance(info.get("project_id"), str) and info["project_id"].strip():
        return DetectedProject(info["project_id"].strip(), f"Application Default Credentials ({path})")
    if found := gcloud_configuration_project():
        return found
    quota = info.get("quota_project_id")
    if isinstance(quota, str) and quota.strip():
        return DetectedProject(
            quota.strip(), f"the quota project of Application Default Credentials ({path})"
        )
    return None


@functools.lru_cache(maxsize=1)
def _vm_project() -> DetectedProject | None:
    """The VM's project from google-auth (cached: it costs requests to the metadata server)."""
    try:
        from google.auth.exceptions import GoogleAuthError

        try:
            _, project = adc.default_credentials()
        except GoogleAuthError as exc:
            log.info("no project from the metadata server: %s", type(exc).__name__)
            return None
    except Exception:  # a broken credentials setup must not break the tool that only wanted a project id
        log.warning("asking the metadata server for the project failed", exc_info=True)
        return None
    host, port = metadata.probe_address()
    return DetectedProject(project, f"the metadata server ({host}:{port})") if project else None


def detected_project(wait: bool = True) -> DetectedProject | None:
    """The project the module docstring's steps find first, or None.

    ``wait``: on a Google Cloud VM, wait (at most `tpu_devops.gcp.metadata.PROBE_TIMEOUT_S`) for the
    metadata server's answer; ``wait=False`` answers from the files alone while the probe is pending.
    The files are read on every call (a ``gcloud config set project`` applies at once). Never raises: a
    missing project is reported where a tool needs one (`tpu_devops.config.require_project`).
    """
    found = project_from_files()
    if found or adc.credentials_file() is not None:
        return found
    if not metadata.metadata_server(wait=wait).answered:
        return None
    return _vm_project()


def missing_project_reason() -> str:
    """Why `detected_project` found none, in words (for ``project_source``), without waiting."""
    server = metadata.metadata_server(wait=False)
    _, path = active_gcloud_configuration()
    files = f"GOOGLE_CLOUD_PROJECT is unset and neither the gcloud configuration ({path}) nor Application "
    files += "Default Credentials name one"
    if server.answered is None:
        return f"{files}; {server.detail}"
    return files
