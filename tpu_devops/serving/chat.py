"""Talking to the serving endpoint: which URL, which model, one streamed chat completion with stats.

Everything that reaches vLLM goes through here so that failures are classified once:

- the endpoint comes from an explicit ``base_url``, else ``VLLM_URL`` (settings.vllm_url), else
  discovery (`tpu_devops.serving.endpoint.get_vllm_endpoint`, imported lazily);
- the model is the caller's, else ``MODEL_NAME`` when the server serves it, else the first model of
  ``/v1/models`` (with a notice);
- chat completions only: ``/v1/completions`` returns empty text on ``-it`` models (DESIGN §3);
- every transport or HTTP failure becomes a `ServingError` whose ``failure`` names the class
  (``connection_refused``, ``unresolvable_host`` (DNS), ``booting``, ``timeout``, ``unauthorized``
  (401), ``not_found`` (404 on a path), ``model_mismatch``, ``redirect``, ``refused_target``,
  ``tool_parser_missing``, ``not_openai_api``, ``http_error``, ``no_endpoint``) with the fix; an error
  body quoted back is trimmed to one line of `ERROR_TEXT_CHARS` and redacted (it is the server's text,
  and a base_url may point anywhere).

The API key (`tpu_devops.provisioning.api_key`) goes only to this rig's endpoint: ``VLLM_URL`` when set, else the
discovered node, or a ``base_url`` that is the same URL as one of them. Any other ``base_url`` is
dialled without it (an ``Endpoint`` whose ``api_key`` is "" and whose ``key_note`` says why), every URL
is checked by `tpu_devops.serving.egress` (no metadata servers or link-local addresses, no userinfo),
and redirects are never followed.

Streaming stats follow ``vllm bench serve``'s definitions: TTFT is the time from sending the request to
the first chunk that carries output (content, reasoning or a tool call); TPOT is
``(latency - TTFT) / (completion_tokens - 1)``; the inter-chunk gaps after the first token are the
ITLs. Token counts are the server's ``usage`` (``stream_options.include_usage``), not counted chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from tpu_devops.config import Settings
from tpu_devops.errors import EndpointError, InputError, TpuDevopsError
from tpu_devops.host.results import ToolResult
from tpu_devops.host.untrusted import UntrustedContent, UntrustedData, fence, untrusted_data
from tpu_devops.serving.answers import degenerate
from tpu_devops.serving.client import http_client, normalize_base_url, openai_client, probe_timeout
from tpu_devops.serving.server_kind import UNKNOWN, ServerInfo, identify

# A gap this much longer than the median inter-token gap (and at least STALL_MIN_MS) is a stall.
T = TypeVar("T", bound=BaseException)

STALL_FACTOR = 10.0
STALL_MIN_MS = 500.0
# Wall time for one query_gemma answer (seconds): hosts cancel a tool call after ~60 s (DESIGN §2);
# a 20,000-token answer took 296 s on a CPU llama-server.
QUERY_DEADLINE_S = 50.0
ERROR_TEXT_CHARS = 200  # characters of a server's error body quoted back (one line, redacted)
_TOOL_PARSER_MISSING = "tool choice requires --enable-auto-tool-choice"
_MODEL_MISSING = re.compile(r"The model `([^`]*)` does not exist")
log = logging.getLogger(__name__)


class ServingError(EndpointError):
    """An endpoint failure with its class (``failure``) so health checks can report it as data."""

    def __init__(
        self,
        message: str,
        *,
        failure: str,
        field: str | None = None,
        value: Any = None,
        fix: str | None = None,
    ):
        super().__init__(message, field=field, value=value, fix=fix)
        self.failure = failure
        # Set for ``context_overflow``: the server's own count of the prompt and its context (tokens).
        self.prompt_tokens: int | None = None
        self.context_tokens: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "failure": self.failure}


@dataclass(frozen=True)
class Endpoint:
    """A resolved endpoint: ``url`` like ``http://10.0.0.5:8000`` and where it came from.

    ``api_key``: the rig's key when this is the rig's endpoint and a key is available, else "" (then
    ``key_note`` says why none is sent); ``key_source``: ``VLLM_API_KEY`` or ``secret <id>``.
    """

    url: str
    source: str  # "argument", "VLLM_URL" or "discovery"
    api_key: str = field(default="", repr=False)
    key_source: str = ""
    key_note: str | None = None

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
    port = _port(ep.url)
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


def _port(url: str) -> int:
    """The TCP port of ``url`` (the scheme's default when none is written)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a malformed port: name the default instead of failing a message
        return 80


async def resolve_endpoint(settings: Settings, base_url: str | None = None) -> Endpoint:
    """The vLLM base URL: ``base_url``, else ``VLLM_URL``, else discovery of the ACTIVE TPU we own, with
    the API key attached only when it is this rig's endpoint (module docstring).

    Raises:
        InputError: ``base_url`` (or VLLM_URL, or a discovered address) is malformed, carries userinfo,
            or is / resolves to a metadata server or link-local address.
        ServingError(failure="no_endpoint"): nothing configured and discovery unavailable or empty.
    """
    from tpu_devops.serving import egress

    if base_url:
        await egress.check_url(base_url, "base_url")
        url = normalize_base_url(base_url)
        key = await _call_key(settings)
        if not key.value:
            return Endpoint(url, "argument", key_note=key.note)
        rig = await _rig_url(settings)
        if rig is None or not _same_endpoint(url, rig):
            note = (
                f"the API key goes only to this rig's endpoint ({rig or 'VLLM_URL or the discovered node'}); "
                f"base_url {url} is not it"
            )
            return Endpoint(url, "argument", key_note=note)
        return Endpoint(url, "argument", key.value, key.source)
    if settings.vllm_url:
        await egress.check_url(settings.vllm_url, "VLLM_URL")
        return await _keyed(settings, normalize_base_url(settings.vllm_url), "VLLM_URL")
    url = await _discovered_url(settings)
    await egress.check_url(url, "endpoint (discovered)")
    return await _keyed(settings, url, "discovery")


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


def classify(exc: BaseException, url: str, model: str | None = None) -> ServingError:
    """Turn an openai / httpx exception into a `ServingError` with its failure class and fix.

    Error strings matched are vLLM's: ``"auto" tool choice requires --enable-auto-tool-choice and
    --tool-call-parser to be set`` (400), ``The model `X` does not exist.`` (404) and the
    ``{"error": "Unauthorized"}`` 401 of its API-key middleware. A 401 is said generically here;
    `for_endpoint` says whether a key was sent (it knows the `Endpoint`).
    """
    import httpx
    import openai

    from tpu_devops.serving.egress import RefusedTarget

    if isinstance(exc, ServingError):
        return exc
    refused = _cause(exc, RefusedTarget)
    if refused is not None:
        return ServingError(
            f"request to {url} refused: {refused.reason}",
            failure="refused_target",
            field="VLLM_URL",
            value=url,
            fix="point it at the vLLM server itself (its node's IP, a tunnel on 127.0.0.1, or VLLM_URL)",
        )
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        if isinstance(exc, httpx.ConnectTimeout) or _caused_by(exc, httpx.ConnectTimeout):
            err = ServingError(
                f"{url} did not accept a connection in time: a firewall drops the packets, or the host is down",
                failure="timeout",
                field="VLLM_URL",
                value=url,
                fix=f"check that the host is up and that port {_port(url)} is reachable from here (a firewall rule "
                "for your address, or a tunnel); never open it to everyone on a server without an API key",
            )
            err.connect_phase = True  # type: ignore[attr-defined]
            return err
        return ServingError(
            f"{url} accepted the connection but did not answer in time",
            failure="timeout",
            field="VLLM_URL",
            value=url,
            fix="the server is busy (a benchmark or long generations) or stuck: retry; get_metrics shows its queue",
        )
    if _caused_by(exc, socket.gaierror):
        host = httpx.URL(url).host
        return ServingError(
            f"the host name {host!r} of {url} does not resolve (DNS)",
            failure="unresolvable_host",
            field="VLLM_URL",
            value=url,
            fix="check the spelling of the URL, or use the node's external IP (get_vllm_endpoint finds it)",
        )
    if isinstance(
        exc, openai.APIConnectionError | httpx.ConnectError | httpx.RemoteProtocolError | httpx.ReadError
    ):
        return ServingError(
            f"connection to {url} refused or dropped: nothing is listening on port {_port(url)}, or the server "
            "exited or is still starting",
            failure="connection_refused",
            field="VLLM_URL",
            value=url,
            fix=f"start the server (or wait for it) and check it listens on port {_port(url)}; then retry",
        )
    status = getattr(exc, "status_code", None)
    if status is None and isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
    text = _error_text(exc)  # matched in full below; quoted back only through quoted_text
    if status == 401:
        return ServingError(
            f"{url} answered 401 Unauthorized: it requires an API key",
            failure="unauthorized",
            field="VLLM_URL",
            value=url,
            fix="the key this server sends must be the one vLLM read at boot (secret VLLM_API_KEY_SECRET_ID)",
        )
    if status is not None and 300 <= status < 400:
        location = _response_header(exc, "location")
        where = f" to {_origin_of(location)}" if location else ""
        return ServingError(
            f"{url} answered {status}, redirecting{where}: redirects are not followed (the API key goes only to "
            "this rig's endpoint)",
            failure="redirect",
            field="VLLM_URL",
            value=url,
            fix="point it at the vLLM server itself, not a proxy or login page that redirects",
        )
    if status == 503:
        return ServingError(
            f"{url} answered 503: the engine is starting or unhealthy",
            failure="booting",
            field="VLLM_URL",
            value=url,
            fix="wait until the server has loaded the model (vLLM logs 'Application startup complete'; llama-server "
            "answers /health with 200), then retry",
        )
    if status == 404 and (m := _MODEL_MISSING.search(text)):
        return ServingError(
            f"the server does not serve model {m.group(1)!r}",
            failure="model_mismatch",
            field="MODEL_NAME",
            value=m.group(1),
            fix="set MODEL_NAME (or the model argument) to the id listed by /v1/models",
        )
    if status == 404:
        path = _request_path(exc)
        return ServingError(
            f"{url} answered 404 for {path or 'the request'}: no such path on this server ({quoted_text(text)})",
            failure="not_found",
            field="VLLM_URL",
            value=url,
            fix="use the server's root as the URL (http://HOST:PORT, without /v1 or another path; a proxy that "
            "serves vLLM under a prefix needs that prefix), and check the port is vLLM's (vllm serve --port)",
        )
    if status == 400 and _TOOL_PARSER_MISSING in text:
        return ServingError(
            "the server rejects tool_choice=auto: tool calling is not enabled",
            failure="tool_parser_missing",
            field="vllm serve flags",
            value="missing --enable-auto-tool-choice --tool-call-parser",
            fix="restart vLLM with --enable-auto-tool-choice --tool-call-parser gemma4 --reasoning-parser gemma4",
        )
    if status == 400 and (overflow := context_overflow(text)):
        prompt, context = overflow
        body_prompt, body_ctx, llama = _overflow_body(exc)
        prompt, context = prompt if prompt is not None else body_prompt, context or body_ctx
        slot = (
            f"; llama-server gives each slot --ctx-size / --parallel tokens, so {context or 'n_ctx'} is one slot's "
            "share: raise --ctx-size (to --parallel x the longest request) or lower --parallel"
            if llama or _LLAMA_OVERFLOW.search(text)
            else ""
        )
        asked = _requested_max_tokens(exc)
        if prompt is not None and context and asked and prompt < context:
            # The prompt fits by itself: max_tokens is what overflows, so name it and its ceiling.
            err = ServingError(
                f"the request does not fit the server's context: {prompt:,} prompt tokens + max_tokens {asked:,} "
                f"= {prompt + asked:,} tokens, context {context:,}" + (" per slot" if slot else ""),
                failure="context_overflow",
                field="max_tokens",
                value=asked,
                fix=f"lower max_tokens to at most {context - prompt:,} (the context holds prompt + output), or "
                f"shorten the prompt{slot}",
            )
        else:
            shown = f"{prompt:,}" if prompt is not None else "?"
            err = ServingError(
                f"the request does not fit the server's context: {shown} prompt tokens, context "
                f"{f'{context:,}' if context else '?'}" + (" per slot" if slot else ""),
                failure="context_overflow",
                field="prompt",
                value=prompt,
                fix="shorten the prompt or lower max_tokens (the context holds prompt + output)" + slot,
            )
        err.prompt_tokens, err.context_tokens = prompt, context
        return err
    answered = f"answered HTTP {status}" if status is not None else f"failed ({type(exc).__name__})"
    return ServingError(
        f"{url} {answered}: {quoted_text(text)}",
        failure="http_error",
        field="VLLM_URL",
        value=url,
        fix="read the message above; check MODEL_NAME, max_tokens and the prompt length against the server's context",
    )


# vLLM: "This model's maximum context length is 8192 tokens. However, you requested 9761 tokens (9061 in
# the messages, 700 in the completion)" or "... your request has 9061 input tokens"; llama.cpp
# (tools/server, type exceed_context_size_error): "request (9761 tokens) exceeds the available context
# size (8192 tokens), try increasing it".
# llama.cpp before the numbers moved into the message: "the request exceeds the available context size, try
# increasing it", with n_prompt_tokens and n_ctx only in the error body.
_OVERFLOW = re.compile(
    r"maximum context length is (\d+)|exceeds the available context size \((\d+)|"
    r"(the request exceeds the available context size)",
    re.I,
)
_LLAMA_OVERFLOW = re.compile(r"exceeds the available context size|exceed_context_size_error", re.I)
_OVERFLOW_PROMPT = tuple(
    re.compile(p, re.I)
    for p in (r"(\d+) in the messages", r"request has (\d+) input tokens", r"request \((\d+) tokens\)")
)


def context_overflow(text: str) -> tuple[int | None, int | None] | None:
    """(prompt tokens, context tokens) from a vLLM or llama.cpp context-overflow message, else None. The
    older llama.cpp wording carries no number (both None: they are in the error body, `_overflow_body`)."""
    m = _OVERFLOW.search(text)
    if not m:
        return None
    if m.group(3):
        return None, None
    context = int(next(g for g in m.groups() if g))
    found = next((m for m in (p.search(text) for p in _OVERFLOW_PROMPT) if m), None)
    return (int(found.group(1)) if found else None), context


def _overflow_body(exc: BaseException) -> tuple[int | None, int | None, bool]:
    """(n_prompt_tokens, n_ctx, is llama.cpp) from llama-server's error body (``exceed_context_size_error``
    with ``n_prompt_tokens`` and ``n_ctx``: ggml-org/llama.cpp tools/server), else (None, None, False)."""
    body = getattr(exc, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(inner, dict):
        return None, None, False

    def count(key: str) -> int | None:
        value = inner.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    return count("n_prompt_tokens"), count("n_ctx"), inner.get("type") == "exceed_context_size_error"


def _cause(exc: BaseException, kind: type[T]) -> T | None:
    """The first exception of ``kind`` in the exception's cause / context chain, or None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, kind):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """True when ``kind`` is anywhere in the exception's cause / context chain."""
    return _cause(exc, kind) is not None


def quoted_text(text: str, limit: int = ERROR_TEXT_CHARS) -> str:
    """A server's text made safe to quote back: redacted (`tpu_devops.host.redact`), control characters
    and runs of whitespace folded to one space, cut to ``limit`` characters."""
    from tpu_devops.host.redact import redact_text

    flat = " ".join(re.sub(r"[\x00-\x1f\x7f]", " ", text).split())
    # redact before cutting, so a secret is never cut into a piece no pattern recognises
    flat = redact_text(flat)
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _error_text(exc: BaseException, limit: int = 65536) -> str:
    """The server's error message (vLLM's ``error.message`` when present), at most ``limit`` characters
    (matched against known messages; never quoted back as is: see `quoted_text`)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:limit]
    response = getattr(exc, "response", None)
    if response is not None:
        try:
            return response.text[:limit]
        except Exception:  # a streamed response may not be readable
            pass
    return str(exc)[:limit]


def _response_header(exc: BaseException, name: str) -> str | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers.get(name) if headers is not None else None


def _origin_of(location: str) -> str:
    """``scheme://host[:port]`` of a redirect target (never its path or query), quoted safely."""
    import httpx

    try:
        u = httpx.URL(location)
    except Exception:
        return "an unparsable location"
    if not u.host:
        return "another path on the same server"
    return quoted_text(f"{u.scheme}://{u.host}" + (f":{u.port}" if u.port else ""), 80)


def _requested_max_tokens(exc: BaseException) -> int | None:
    """``max_tokens`` (or ``max_completion_tokens``) of the chat request that failed, read back from the
    request the client sent; None when it is not there or not readable."""
    request = getattr(exc, "request", None) or getattr(getattr(exc, "response", None), "request", None)
    try:
        body = json.loads(request.content) if request is not None else {}
    except Exception:
        return None
    value = body.get("max_tokens") or body.get("max_completion_tokens") if isinstance(body, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _request_path(exc: BaseException) -> str | None:
    request = getattr(exc, "request", None) or getattr(getattr(exc, "response", None), "request", None)
    try:
        return quoted_text(request.url.path, 80) if request is not None else None
    except Exception:
        return None


async def served_models(url: str, *, api_key: str = "") -> list[dict[str, Any]]:
    """The model cards of ``GET /v1/models`` (vLLM adds ``max_model_len`` to each).

    ``api_key``: `Endpoint.api_key` (vLLM guards ``/v1/*`` when started with a key).

    Raises:
        ServingError: classified transport or HTTP failure.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = await http_client(url).get("/v1/models", headers=headers, timeout=probe_timeout())
        response.raise_for_status()
    except Exception as exc:
        raise classify(exc, url) from exc
    return model_cards(response, url)


def model_cards(response: Any, url: str) -> list[dict[str, Any]]:
    """The ``data`` list of an OpenAI ``/v1/models`` answer (``{"object": "list", "data": [{"id"...}]}``).

    Raises:
        ServingError(failure="not_openai_api"): the answer is not that shape (another service on the port).
    """
    try:
        body = response.json()
    except ValueError:
        body = None
    cards = body.get("data") if isinstance(body, dict) else None
    if not isinstance(cards, list) or not all(isinstance(c, dict) and "id" in c for c in cards):
        raise ServingError(
            f"GET {url}/v1/models did not return an OpenAI model list (got {quoted_text(response.text, 80)!r})",
            failure="not_openai_api",
            field="VLLM_URL",
            value=url,
            fix="point at the model server's own port (vLLM: vllm serve --port, default 8000; llama-server: --port, "
            "default 8080), not another service or a proxy page",
        )
    return cards


@dataclass
class ModelChoice:
    """The model a request will use and why (``notices`` explain substitutions). ``max_model_len``
    is the context one request may use (tokens), whatever the server calls it (`server`)."""

    model: str
    served: list[str]
    max_model_len: int | None
    notices: list[str] = field(default_factory=list)
    server: ServerInfo = field(default_factory=lambda: ServerInfo(UNKNOWN, None, "unknown"))


def looks_instruction_tuned(model: str) -> bool:
    """True for ``-it`` / instruct / chat checkpoints (chat template present)."""
    name = model.lower()
    return bool(re.search(r"(-it\b|-it-|instruct|chat)", name))


async def choose_model(
    settings: Settings, url: str, model: str | None = None, *, api_key: str = ""
) -> ModelChoice:
    """Pick the model: ``model`` argument, else ``MODEL_NAME`` if served, else the first served one.

    ``api_key``: `Endpoint.api_key` of ``url`` ("" for an endpoint that is not the rig's).

    Raises:
        ServingError: ``/v1/models`` failed, or an explicitly requested model is not served
            (failure ``model_mismatch``).
    """
    cards = await served_models(url, api_key=api_key)
    served = [str(c.get("id")) for c in cards]
    notices: list[str] = []
    if model:
        if served and model not in served:
            raise ServingError(
                f"the server does not serve model {model!r} (it serves {', '.join(served)})",
                failure="model_mismatch",
                field="model",
                value=model,
                fix=f"use one of: {', '.join(served)}",
            )
        chosen = model
    elif settings.model_name in served or not served:
        chosen = settings.model_name
    else:
        chosen = served[0]
        notices.append(
            f"MODEL_NAME {settings.model_name!r} is not served here; using {chosen!r} from /v1/models"
        )
    if not looks_instruction_tuned(chosen):
        notices.append(
            f"{chosen!r} does not look instruction-tuned (-it): chat completions need a chat template; "
            "base models answer poorly or are rejected"
        )
    server = identify(cards, chosen, settings.max_model_len)
    return ModelChoice(chosen, served, server.context_tokens, notices, server)


class ChatStats(BaseModel):
    """Timing of one streamed answer. Milliseconds; tokens from the server's ``usage``.

    ``tpot_mean_ms`` = (latency - TTFT) / (completion_tokens - 1) as ``vllm bench serve`` defines it;
    ``itl_median_ms`` and ``max_gap_ms`` are over the gaps between output chunks after the first;
    ``output_tokens_per_s`` = completion_tokens / latency; ``decode_tokens_per_s`` = 1000 / TPOT.
    """

    ttft_ms: float | None
    latency_ms: float
    tpot_mean_ms: float | None
    itl_median_ms: float | None
    max_gap_ms: float | None
    max_gap_after_token: int | None
    output_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    output_chunks: int
    tokens_from: str  # "server usage" or "counted chunks (server sent no usage)"
    stalled: bool


@dataclass
class StreamedAnswer:
    """Raw result of `stream_chat`: text, tool calls, reasons and per-chunk times (perf_counter s)."""

    content: str
    reasoning: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    sent_at: float
    chunk_times: list[float]
    done_at: float
    # Why the stream ended early with a partial answer: "deadline" (stopped at deadline_s) or the
    # failure class of a server that dropped the stream mid-answer; None when it finished.
    interrupted: str | None = None

    def stats(self) -> ChatStats:
        """Compute `ChatStats` from the chunk times and usage."""
        times = self.chunk_times
        latency = (times[-1] if times else self.done_at) - self.sent_at
        ttft = times[0] - self.sent_at if times else None
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        n_out = self.completion_tokens if self.completion_tokens is not None else len(times)
        tpot = (latency - ttft) / (n_out - 1) if ttft is not None and n_out and n_out > 1 else None
        median_gap = statistics.median(gaps) if gaps else None
        max_gap = max(gaps) if gaps else None
        stalled = bool(
            max_gap is not None
            and median_gap is not None
            and max_gap * 1000 >= STALL_MIN_MS
            and max_gap >= STALL_FACTOR * max(median_gap, 1e-6)
        )
        return ChatStats(
            ttft_ms=_ms(ttft),
            latency_ms=round(latency * 1000, 3),
            tpot_mean_ms=_ms(tpot),
            itl_median_ms=_ms(median_gap),
            max_gap_ms=_ms(max_gap),
            max_gap_after_token=(gaps.index(max_gap) + 1) if gaps and max_gap is not None else None,
            output_tokens_per_s=round(n_out / latency, 3) if n_out and latency > 0 else None,
            decode_tokens_per_s=round(1 / tpot, 3) if tpot else None,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=n_out,
            output_chunks=len(times),
            tokens_from="server usage"
            if self.completion_tokens is not None
            else "counted chunks (server sent no usage)",
            stalled=stalled,
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


async def stream_chat(
    url: str,
    model: str,
    messages: list[dict[str, Any]],
    *,
    api_key: str = "",
    max_tokens: int = 256,
    temperature: float | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    extra_body: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    deadline_s: float | None = None,
) -> StreamedAnswer:
    """One streamed chat completion with ``stream_options.include_usage``; times every output chunk.

    ``timeout_s``: read timeout (seconds between bytes) for this request; default the client's 120 s.
    ``deadline_s``: wall time for the whole answer (seconds): at the deadline the stream is closed and
    what arrived is returned with ``interrupted="deadline"``. A server that drops the stream after some
    output also returns the partial answer (``interrupted`` = the failure class) instead of raising.

    Raises:
        ServingError: classified failure before any output (refused, 503, 404 model, 400 tool parser, ...).
    """
    client = openai_client(url, api_key)
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if temperature is not None:
        kwargs["temperature"] = temperature
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = tool_choice or "auto"
    if extra_body:
        kwargs["extra_body"] = extra_body
    if timeout_s is not None:
        kwargs["timeout"] = probe_timeout(timeout_s)
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage: dict[str, int | None] = {}
    finish: dict[str, str] = {}
    times: list[float] = []
    interrupted: str | None = None
    stream: Any = None
    if deadline_s is not None:
        kwargs["timeout"] = probe_timeout(min(deadline_s, timeout_s or deadline_s))
    sent = time.perf_counter()
    try:
        async with asyncio.timeout(deadline_s):
            stream = await client.chat.completions.create(**kwargs)
            await _read_stream(stream, content, reasoning, calls, times, usage, finish)
    except TimeoutError:
        interrupted = "deadline"
    except Exception as exc:
        err = classify(exc, url, model)
        if not (content or reasoning or calls):
            raise err from exc
        # The server died mid-answer: what it said so far is kept, marked as cut off.
        log.info("stream from %s ended after %d chunks: %s", url, len(times), err.message)
        interrupted = err.failure
    finally:
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.close()
    if interrupted == "deadline" and not (content or reasoning or calls):
        raise ServingError(
            f"{url} produced no output within the {deadline_s:.0f} s deadline",
            failure="timeout",
            field="VLLM_URL",
            value=url,
            fix="the server is busy or slow (CPU?): retry, or ask for fewer tokens",
        )
    return StreamedAnswer(
        content="".join(content),
        reasoning="".join(reasoning),
        tool_calls=[calls[i] for i in sorted(calls)],
        finish_reason=None if interrupted else finish.get("finish"),
        prompt_tokens=usage.get("prompt"),
        completion_tokens=usage.get("completion"),
        sent_at=sent,
        chunk_times=times,
        done_at=time.perf_counter(),
        interrupted=interrupted,
    )


async def _read_stream(
    stream: Any,
    content: list[str],
    reasoning: list[str],
    calls: dict[int, dict[str, Any]],
    times: list[float],
    usage: dict[str, int | None],
    finish: dict[str, str],
) -> None:
    """Collect a chat-completion stream into the given lists (kept when the stream breaks)."""
    async for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            usage["prompt"] = chunk.usage.prompt_tokens
            usage["completion"] = chunk.usage.completion_tokens
        for choice in chunk.choices:
            delta = choice.delta
            produced = False
            if delta.content:
                content.append(delta.content)
                produced = True
            extra = getattr(delta, "model_extra", None) or {}
            piece = extra.get("reasoning_content") or extra.get("reasoning")
            if piece:
                reasoning.append(str(piece))
                produced = True
            for tc in delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    entry["id"] = tc.id
                    produced = True
                if tc.function is not None:
                    entry["name"] += tc.function.name or ""
                    entry["arguments"] += tc.function.arguments or ""
            if produced:
                times.append(now)
            if choice.finish_reason:
                finish["finish"] = choice.finish_reason


class ChatResult(UntrustedContent, ToolResult):
    """`query_gemma` / `query_gemma_with_stats` output. ``stats`` only with stats requested.
    ``cut_off``: the answer is partial (deadline, token limit, or a server that died mid-answer)."""

    untrusted: UntrustedData = untrusted_data("model", "content", "reasoning")
    cut_off: bool = False
    endpoint: str
    endpoint_source: str
    model: str
    content: str
    reasoning: str | None = None
    finish_reason: str | None
    stats: ChatStats | None = None
    notices: list[str] = []

    def headline(self) -> str:
        if self.stats is None:  # our own words: the model's text is untrusted and stays in its fence
            cut = " (CUT OFF)" if self.finish_reason == "length" else ""
            size = f"{len(self.content):,} characters" if self.content else "an empty answer"
            return f"{self.model} answered: {size}, finish_reason={self.finish_reason}{cut}"
        s = self.stats
        line = (
            f"{s.completion_tokens} tokens: TTFT {s.ttft_ms} ms, TPOT {s.tpot_mean_ms} ms "
            f"(median {s.itl_median_ms}), {s.output_tokens_per_s} tok/s, largest gap {s.max_gap_ms} ms"
        )
        return line + (" - STREAM STALLED (KV-cache preemption looks like this)" if s.stalled else "")

    def render_text(self) -> str:
        """The answer (after the stats line when measured), then who answered, then notices."""
        lines = [self.headline(), ""]
        lines.append(
            fence(self.content, "model")
            if self.content
            else f"(empty answer, finish_reason={self.finish_reason})"
        )
        s = self.stats
        tokens = (
            f", {s.prompt_tokens} prompt + {s.completion_tokens} completion tokens ({s.tokens_from})"
            if s
            else ""
        )
        lines += [
            "",
            f"-- {self.model} at {self.endpoint} ({self.endpoint_source}), finish_reason={self.finish_reason}{tokens}",
        ]
        if s:
            gap = f" after token {s.max_gap_after_token}" if s.max_gap_after_token is not None else ""
            lines.append(
                f"stream: latency {s.latency_ms} ms, TTFT {s.ttft_ms} ms, TPOT mean {s.tpot_mean_ms} ms / median "
                f"{s.itl_median_ms} ms, {s.output_tokens_per_s} tok/s overall, {s.decode_tokens_per_s} tok/s decoding, "
                f"{s.output_chunks} chunks, largest gap {s.max_gap_ms} ms{gap}, stalled: {'yes' if s.stalled else 'no'}"
            )
        lines.extend(f"note: {n}" for n in self.notices)
        return "\n".join(lines)


async def query(
    settings: Settings,
    prompt: str,
    *,
    system: str | None = None,
    max_tokens: int = 512,
    temperature: float | None = None,
    model: str | None = None,
    base_url: str | None = None,
    with_stats: bool = False,
) -> ChatResult:
    """Ask the served Gemma one question (streamed) and return the answer, optionally with stats.

    Args:
        prompt: the user message (non-empty).
        system: optional system message.
        max_tokens: output cap, 1..32768 tokens.
        temperature: sampling temperature 0..2 (None: the server's default).
    Raises:
        InputError: empty prompt, max_tokens or temperature out of range.
        ServingError: endpoint or model failures, classified with the fix.
    """
    if not prompt or not prompt.strip():
        raise InputError("the prompt is empty", field="prompt", value=prompt, fix="pass the question to ask")
    if not 1 <= max_tokens <= 32768:
        raise InputError("out of range", field="max_tokens", value=max_tokens, fix="use 1..32768")
    if temperature is not None and not 0 <= temperature <= 2:
        raise InputError("out of range", field="temperature", value=temperature, fix="use 0..2")
    ep = await resolve_endpoint(settings, base_url)
    with attributed(ep):
        choice = await choose_model(settings, ep.url, model, api_key=ep.api_key)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}
        ]
        answer = await stream_chat(
            ep.url,
            choice.model,
            messages,
            api_key=ep.api_key,
            max_tokens=max_tokens,
            temperature=temperature,
            deadline_s=QUERY_DEADLINE_S,
        )
    notices = list(choice.notices)
    got = f"{answer.completion_tokens or len(answer.chunk_times)} tokens"
    if answer.interrupted == "deadline":
        notices.append(
            f"CUT OFF: stopped at the {QUERY_DEADLINE_S:.0f} s deadline after {got} (hosts cancel calls that run "
            "longer): the answer is partial; ask for fewer max_tokens for a complete one"
        )
    elif answer.interrupted:
        notices.append(
            f"CUT OFF: the server dropped the stream ({answer.interrupted}) after {got}: the answer is partial"
        )
    elif answer.finish_reason == "length":
        notices.append(f"CUT OFF at max_tokens={max_tokens} (finish_reason=length): the answer is incomplete")
    if answer.content and (problem := degenerate(answer.content)):
        notices.append(f"the answer looks degenerate: {problem}")
    if not answer.content and not answer.tool_calls:
        notices.append(
            "empty content: on -it models use chat completions (this tool does); if reasoning is on, "
            "raise max_tokens; check the prompt fits max_model_len"
        )
    stats = answer.stats() if with_stats else None
    if stats and stats.stalled:
        notices.append(
            f"the stream stalled {stats.max_gap_ms} ms after token {stats.max_gap_after_token}: from outside this "
            "is KV-cache preemption; get_metrics shows vllm:num_preemptions_total"
        )
    return ChatResult(
        cut_off=bool(answer.interrupted) or answer.finish_reason == "length",
        endpoint=ep.url,
        endpoint_source=ep.source,
        model=choice.model,
        content=answer.content,
        reasoning=answer.reasoning or None,
        finish_reason=answer.finish_reason,
        stats=stats,
        notices=notices,
    )
