"""Is this a Google Cloud VM whose metadata server answers? Asked only when there is a reason to think
so, once, with a short timeout, in the background from the server's start.

Why: off Google Cloud, google-auth's ``google.auth.default()`` ends its search for credentials by pinging
the metadata server: 3 attempts of up to 3 s each with 1 s and 2 s pauses between them (google-auth
``compute_engine/_metadata.py`` ``ping``, ``_exponential_backoff.py``). A user with no credentials waited
3.7 s for the first ``get_help`` and 9.6 s for ``plan_queued_resource`` (measured on the 2-core dev VM,
2026-12, 0.3 s and 0.8 s with ``NO_GCE_CHECK=true``). ``NO_GCE_CHECK=true`` skips the ping, but hosts
such as Codex pass the server only HOME, LANG, PATH and TERM.

So the server asks the metadata server only when one of these says it may be there (`gce_hint`):

- the DMI product name starts with "Google" (``/sys/class/dmi/id/product_name`` reads "Google Compute
  Engine" on Compute Engine VMs, TPU VMs and GKE nodes: the check google-auth itself falls back to,
  ``detect_gce_residency_linux``);
- ``GCE_METADATA_HOST``, ``GCE_METADATA_ROOT`` or ``GCE_METADATA_IP`` names a metadata server (google-auth's
  own variables, ``google/auth/environment_vars.py``);
- ``K_SERVICE`` or ``CLOUD_RUN_JOB`` (Cloud Run's container runtime contract) or ``GAE_SERVICE`` (App Engine
  standard and flexible) is set.

and then with one request, answered within `PROBE_TIMEOUT_S` or not at all (`metadata_server`): the GET of
the server's root with ``Metadata-Flavor: Google`` that google-auth's ``ping`` sends, to the same address
(``GCE_METADATA_IP``, else 169.254.169.254), accepted on the same terms (HTTP 200 and the header
``Metadata-Flavor: Google`` in the answer). `start_probe` sends it in a daemon thread when the server starts,
so a tool call rarely waits for it. ``NO_GCE_CHECK=true`` still means never.

Standard library only: this module loads at the server's start.
"""

from __future__ import annotations

import http.client
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# On a VM the metadata server is a link-local hop that answers in milliseconds; google-auth's 3 s covers
# the DNS lookup of metadata.google.internal, which this probe never makes (it dials the IP).
PROBE_TIMEOUT_S = 0.5
# A probe that got no answer is sent again, when credentials are next needed, after this long: a VM whose
# metadata server was slow once is not left without credentials for the rest of the session.
RETRY_AFTER_S = 60.0
DEFAULT_IP = "169.254.169.254"
DMI_PRODUCT_NAME = Path("/sys/class/dmi/id/product_name")
HINT_VARIABLES = ("GCE_METADATA_HOST", "GCE_METADATA_ROOT", "GCE_METADATA_IP")
RUNTIME_VARIABLES = ("K_SERVICE", "CLOUD_RUN_JOB", "GAE_SERVICE")


@dataclass(frozen=True)
class MetadataServer:
    """What is known about the metadata server: ``answered`` is True, False, or None while the probe is
    still waiting for its answer; ``detail`` says why, in words (where it was asked, or why it was not)."""

    answered: bool | None
    detail: str


def gce_hint(environ: dict[str, str] | None = None, product_name: Path = DMI_PRODUCT_NAME) -> str | None:
    """Why this may be a Google Cloud VM (module docstring), in words, or None: no sign of one, or
    ``NO_GCE_CHECK=true`` (google-auth's switch that turns the metadata server off). Never raises."""
    env = os.environ if environ is None else environ
    if env.get("NO_GCE_CHECK", "").strip().lower() == "true":
        return None
    for var in HINT_VARIABLES + RUNTIME_VARIABLES:
        if env.get(var, "").strip():
            return f"{var} is set"
    try:
        with product_name.open("rb") as f:
            name = f.read(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return f"the DMI product name is {name!r}" if name.startswith("Google") else None


def probe_address(environ: dict[str, str] | None = None) -> tuple[str, int]:
    """(host, port) google-auth pings: ``GCE_METADATA_IP`` (``host[:port]``), else 169.254.169.254:80."""
    env = os.environ if environ is None else environ
    raw = env.get("GCE_METADATA_IP", "").strip() or DEFAULT_IP
    parts = urlsplit(f"http://{raw}")
    try:
        port = parts.port or 80
    except ValueError:  # a malformed port: asked at the default one, and it will not answer
        port = 80
    return parts.hostname or DEFAULT_IP, port


def _ask(host: str, port: int) -> bool:
    connection = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
    try:
        connection.request("GET", "/", headers={"Metadata-Flavor": "Google"})
        response = connection.getresponse()
        return response.status == 200 and response.getheader("Metadata-Flavor") == "Google"
    finally:
        connection.close()


class _Probe:
    """One probe at a time; its answer is kept (a missing one for `RETRY_AFTER_S`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.started = 0.0
        self.where = ""  # "host:port (asked because <hint>)"
        self.answered: bool | None = None
        self.outcome = ""

    def start(self, hint: str) -> None:
        with self.lock:
            if self.thread is not None and (
                not self.done.is_set() or self.answered or time.monotonic() - self.started < RETRY_AFTER_S
            ):
                return
            host, port = probe_address()
            self.done = threading.Event()
            self.started = time.monotonic()
            self.where = f"{host}:{port} (asked because {hint})"
            self.answered, self.outcome = None, ""
            self.thread = threading.Thread(
                target=self._run, args=(host, port, self.done), name="gce-metadata-probe", daemon=True
            )
            self.thread.start()

    def _run(self, host: str, port: int, done: threading.Event) -> None:
        try:
            answered = _ask(host, port)
            outcome = "answered" if answered else "answered, but not as a Google metadata server"
        except (OSError, http.client.HTTPException) as exc:
            answered, outcome = False, f"did not answer ({type(exc).__name__})"
        with self.lock:
            if done is self.done:
                self.answered, self.outcome = answered, outcome
                log.info("metadata server at %s: %s", self.where, outcome)
                done.set()

    def state(self, wait: bool) -> MetadataServer:
        with self.lock:
            done, started = self.done, self.started
        if wait:
            done.wait(max(0.0, started + PROBE_TIMEOUT_S - time.monotonic()))
        with self.lock:
            if done.is_set():
                return MetadataServer(self.answered, f"the metadata server at {self.where} {self.outcome}")
            if wait:  # the probe may still be answered later; this caller goes on without it
                return MetadataServer(
                    False, f"the metadata server at {self.where} did not answer within {PROBE_TIMEOUT_S:g} s"
                )
            return MetadataServer(None, f"the metadata server at {self.where} has not answered yet")


_probe = _Probe()


def start_probe() -> str | None:
    """Send the probe in the background when `gce_hint` gives a reason (the server's start calls this);
    returns the reason, or None when nothing was sent. Never raises."""
    hint = gce_hint()
    if hint:
        _probe.start(hint)
    return hint


def metadata_server(wait: bool = True) -> MetadataServer:
    """Whether a metadata server answered (module docstring).

    ``wait``: wait for the probe's answer, at most `PROBE_TIMEOUT_S` after it was sent (a caller that needs
    credentials); else say what is known now (``answered=None`` while it is pending: `get_help`). Without a
    reason to think this is a Google Cloud VM, ``answered=False`` at once, and nothing is sent.
    """
    hint = start_probe()
    if not hint:
        off = os.environ.get("NO_GCE_CHECK", "").strip().lower() == "true"
        return MetadataServer(
            False,
            "no metadata server was asked (NO_GCE_CHECK=true)"
            if off
            else "no metadata server was asked (no sign of a Google Cloud VM: the DMI product name is not "
            "Google's and GCE_METADATA_HOST is unset)",
        )
    return _probe.state(wait)
