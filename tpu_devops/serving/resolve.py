"""Which endpoint a serving call dials, with which key, and what its failures mean there.

- the endpoint comes from an explicit ``base_url``, else ``VLLM_URL`` (settings.vllm_url), else
  discovery (`tpu_devops.serving.endpoint.get_vllm_endpoint`, imported lazily);
- this rig's endpoint is ``VLLM_URL`` when set, else the discovered node, or a ``base_url`` that is the
  same URL as one of them: it is *owned*, and only it receives what is ours: the API key
  (`tpu_devops.provisioning.api_key`), prompts, log evidence, benchmark load. Any other ``base_url`` is
  a host an argument names (a prompt-injected model can name any): it gets probes only (``GET`` with no
  key: health, models, metrics, version), and a call that would send it something (``sends``) is
  refused before anything is sent (`tpu_devops.serving.egress.refuse_unowned`); the clients refuse it
  again per request. Every URL is checked by `tpu_devops.serving.egress` (no metadata servers or
  link-local addresses, no userinfo), and redirects are never followed;
- `for_endpoint` adds to a `ServingError` what it means for that endpoint: which key was sent on a
  401, and the TPU-specific causes only for this rig's discovered node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tpu_devops.config import Settings
from tpu_devops.errors import TpuDevopsError
from tpu_devops.serving.client import normalize_base_url
from tpu_devops.serving.errors import ServingError, port_of


@dataclass(frozen=True)
class Endpoint:
    """A resolved endpoint: ``url`` like ``http://10.0.0.5:8000`` and where it came from.

    ``api_key``: the rig's key when this is the rig's endpoint and a key is available, else "" (then
    ``key_note`` says why none is sent); ``key_source``: ``VLLM_API_KEY`` or ``secret <id>``.
    ``owned``: this rig's endpoint (or a deployment of ours): it may receive prompts, evidence and load;
    ``rig``: the owned URL a ``base_url`` was compared with (for the refusal's text).
    """

    url: str
    source: str  # "argument", "VLLM_URL", "discovery" or "deployment"
    api_key: str = field(default="", repr=False)
    key_source: str = ""
    key_note: str | None = None
    owned: bool = True
    rig: str | None = None

    @property
    def field(self) -> str:
        """The input a person would change: ``base_url``, ``VLLM_URL`` or the discovered endpoint."""
        return {"argument": "base_url", "discovery": "endpoint (discovered)"}.get(self.source, "VLLM_URL")

    def auth_headers(self) -> dict[str, str]:
        """``{"Authorization": "Bearer <key>"}`` for the rig's endpoint, ``{}`` for any other."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@contextlib.contextmanager
def attributed(ep: Endpoint) -> Iterator[None]:
    """`for_endpoint` every `ServingError` raised inside the block for ``ep``."""
    try:
        yield
    except ServingError as err:
        for_endpoint(err, ep)
        raise


def for_endpoint(err: ServingError, ep: Endpoint) -> ServingError:
    """``err`` with the endpoint's real source as its field; for a 401, whether a key was sent and which
    one, with the fix for that case; and, for this rig's discovered TPU endpoint only, the TPU-specific
    causes (a booting VM, the rig's firewall rule): a laptop server or a proxy named by ``VLLM_URL``
    gets no TPU advice."""
    if err.field == "VLLM_URL":
        err.field = ep.field
    if err.failure == "unauthorized":
        _explain_unauthorized(err, ep)
    if ep.source != "discovery" or "TPU" in err.message:
        return err
    port = port_of(ep.url)
    if err.failure == "connection_refused":
        err.message += (
            f"; on this rig's TPU VM that means vLLM is not listening on tcp:{port} yet (the VM is still booting: "
            "cold start ~14 min of image pull, weights, XLA compile) or it exited; a firewall would not refuse, "
            "it drops (a timeout)"
        )
        err.fix = f"wait and retry; if tcp:{port} still refuses past ~20 min, read the boot log (diagnose_vllm_boot)"
    elif err.failure == "timeout" and getattr(err, "connect_phase", False):
        err.message += (
            f"; on this rig's TPU VM that means the firewall drops tcp:{port} from your address, or the VM is "
            "not up yet"
        )
        err.fix = (
            f"check_setup says whether this rig's firewall rule admits you: it admits only the ranges it was "
            "created with, so if your public IP changed, recreate the TPU with allowed_source_ranges; a node "
            "without an external IP is reached from inside the VPC (VLLM_URL) or through the IAP tunnel (README). "
            f"Do not open tcp:{port} to 0.0.0.0/0"
        )
    return err


def _explain_unauthorized(err: ServingError, ep: Endpoint) -> None:
    if ep.api_key:
        err.message = f"{ep.url} refused the API key from {ep.key_source} (401): it is not the key the server was started with"
        err.fix = (
            "unset VLLM_API_KEY in this server's environment (the secret's key is used then)"
            if ep.key_source == "VLLM_API_KEY"
            else f"vLLM reads the key once at boot: if {ep.key_source} got a new version since, recreate the TPU "
            "(or restart its vLLM container) so both sides hold the same key"
        )
        return
    err.message = (
        f"{ep.url} requires an API key (401) and none was sent: {ep.key_note or 'no key is available'}"
    )
    err.fix = (
        "omit base_url to use this rig's endpoint (the key is sent only there), or set VLLM_URL to it"
        if ep.source == "argument" and ep.key_note and "only to this rig" in ep.key_note
        else "set VLLM_API_KEY to the server's key, or create the TPU with this server (it stores the key in "
        "Secret Manager, VLLM_API_KEY_SECRET_ID) and grant yourself roles/secretmanager.secretAccessor on it"
    )


async def resolve_endpoint(
    settings: Settings, base_url: str | None = None, *, sends: str | None = None
) -> Endpoint:
    """The vLLM base URL: ``base_url``, else ``VLLM_URL``, else discovery of the ACTIVE TPU we own, with
    the API key attached only when it is this rig's endpoint (module docstring).

    ``sends``: what the call will send there, in words (``"the prompt"``, ``"log evidence"``,
    ``"benchmark load"``); None for probes that send nothing of ours.

    Raises:
        InputError: ``base_url`` (or VLLM_URL, or a discovered address) is malformed, carries userinfo,
            or is / resolves to a metadata server or link-local address; or ``sends`` is given and
            ``base_url`` is not this rig's endpoint (field ``base_url``, with the fix).
        ServingError(failure="no_endpoint"): nothing configured and discovery unavailable or empty.
    """
    from tpu_devops.serving import egress

    if base_url:
        await egress.check_url(base_url, "base_url")
        url = normalize_base_url(base_url)
        rig = await _rig_url(settings)
        if rig is None or not _same_endpoint(url, rig):
            ep = Endpoint(url, "argument", key_note=_not_rig_note(url, rig), owned=False, rig=rig)
            if sends:
                raise egress.refuse_unowned(url, rig, sends)
            return ep
        egress.mark_owned(url, "argument")
        key = await _call_key(settings)
        return Endpoint(url, "argument", key.value, key.source, key.note, rig=rig)
    if settings.vllm_url:
        await egress.check_url(settings.vllm_url, "VLLM_URL")
        url = normalize_base_url(settings.vllm_url)
        egress.mark_owned(url, "VLLM_URL")
        return await _keyed(settings, url, "VLLM_URL")
    url = await _discovered_url(settings)
    await egress.check_url(url, "endpoint (discovered)")
    egress.mark_owned(url, "discovery")
    return await _keyed(settings, url, "discovery")


def _not_rig_note(url: str, rig: str | None) -> str:
    return (
        f"the API key goes only to this rig's endpoint ({rig or 'VLLM_URL or the discovered node'}); "
        f"base_url {url} is not it"
    )


async def _call_key(settings: Settings) -> Any:
    from tpu_devops.provisioning.api_key import key_for_calls

    return await key_for_calls(settings)


async def _keyed(settings: Settings, url: str, source: str) -> Endpoint:
    key = await _call_key(settings)
    return Endpoint(url, source, key.value, key.source, key.note)


def _same_endpoint(a: str, b: str) -> bool:
    """Same scheme, host, port (defaults filled in) and path: ``http://H:80/`` is ``http://h``."""
    import httpx

    def parts(url: str) -> tuple[str, str, int, str]:
        u = httpx.URL(url)
        return u.scheme, u.host.lower(), u.port or (443 if u.scheme == "https" else 80), u.path.rstrip("/")

    try:
        return parts(a) == parts(b)
    except Exception:  # an unparsable URL is never the rig's
        return False


async def _rig_url(settings: Settings) -> str | None:
    """This rig's endpoint: ``VLLM_URL``, else the discovered node's URL; None when there is none or
    discovery fails (the key is then sent nowhere but to those two)."""
    if settings.vllm_url:
        return normalize_base_url(settings.vllm_url)
    if not settings.project:
        return None
    try:
        return await _discovered_url(settings)
    except TpuDevopsError:
        return None


async def _discovered_url(settings: Settings) -> str:
    """The discovered node's base URL.

    Raises:
        ServingError(failure="no_endpoint"): discovery unavailable, failed or found nothing ACTIVE.
    """
    try:
        from tpu_devops.serving import endpoint as discovery
    except ImportError:
        raise ServingError(
            "no serving endpoint is configured and endpoint discovery is not available in this build",
            failure="no_endpoint",
            field="VLLM_URL",
            value="",
            fix="set VLLM_URL to the vLLM server, e.g. http://EXTERNAL_IP:8000",
        ) from None
    try:
        found = await discovery.get_vllm_endpoint(settings)
    except TpuDevopsError as exc:  # no project, no ACTIVE TPU, several, still provisioning, ...
        raise ServingError(
            f"endpoint discovery: {exc.message}",
            failure="no_endpoint",
            field=exc.field or "VLLM_URL",
            value=exc.value,
            fix=exc.fix or "set VLLM_URL to the vLLM server, e.g. http://EXTERNAL_IP:8000",
        ) from exc
    url = found if isinstance(found, str) else getattr(found, "url", None)
    if not url:
        status = getattr(found, "status", "none")
        state = getattr(found, "state", None)
        raise ServingError(
            f"endpoint discovery found no serving TPU (status {status}{f', state {state}' if state else ''})",
            failure="no_endpoint",
            field="VLLM_URL",
            value="",
            fix=getattr(found, "next_step", None) or "create a TPU and wait for ACTIVE, or set VLLM_URL",
        )
    return normalize_base_url(url)
