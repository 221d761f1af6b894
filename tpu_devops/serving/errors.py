"""Serving failures, classified once: every transport or HTTP failure of an OpenAI-compatible endpoint
becomes a `ServingError` whose ``failure`` names the class with the fix.

Classes: ``connection_refused``, ``unresolvable_host`` (DNS), ``booting`` (503), ``timeout``,
``unauthorized`` (401), ``not_found`` (404 on a path), ``model_mismatch``, ``redirect``,
``refused_target``, ``read_limit`` (a cap of `tpu_devops.host.bounded`), ``tool_parser_missing``, ``context_overflow``, ``not_openai_api``, ``http_error``,
``no_endpoint``. An error body quoted back is trimmed to one line of `ERROR_TEXT_CHARS` and redacted
(it is the server's text, and a base_url may point anywhere).

What a failure means for one endpoint (a booting TPU VM, the rig's firewall, which key was sent) is
added by `tpu_devops.serving.resolve.for_endpoint`, which knows the endpoint.
"""

from __future__ import annotations

import json
import re
import socket
from typing import Any, TypeVar

from tpu_devops.errors import EndpointError

T = TypeVar("T", bound=BaseException)

ERROR_TEXT_CHARS = 200  # characters of a server's error body quoted back (one line, redacted)
_TOOL_PARSER_MISSING = "tool choice requires --enable-auto-tool-choice"
_MODEL_MISSING = re.compile(r"The model `([^`]*)` does not exist")


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


def port_of(url: str) -> int:
    """The TCP port of ``url`` (the scheme's default when none is written)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a malformed port: name the default instead of failing a message
        return 80


def classify(exc: BaseException, url: str, model: str | None = None) -> ServingError:
    """Turn an openai / httpx exception into a `ServingError` with its failure class and fix.

    Error strings matched are vLLM's: ``"auto" tool choice requires --enable-auto-tool-choice and
    --tool-call-parser to be set`` (400), ``The model `X` does not exist.`` (404) and the
    ``{"error": "Unauthorized"}`` 401 of its API-key middleware. A 401 is said generically here;
    `for_endpoint` says whether a key was sent (it knows the `Endpoint`).
    """
    import httpx
    import openai

    from tpu_devops.host.bounded import ReadLimitError
    from tpu_devops.serving.egress import RefusedTarget

    if isinstance(exc, ServingError):
        return exc
    capped = _cause(exc, ReadLimitError)
    if capped is not None:  # before the transport classes: openai wraps it as a connection error
        err = ServingError(capped.message, failure="read_limit", field="VLLM_URL", value=url, fix=capped.fix)
        err.cap = capped.cap  # type: ignore[attr-defined]
        return err
    refused = _cause(exc, RefusedTarget)
    if refused is not None:
        return ServingError(
            f"request to {url} refused: {refused.reason}",
            failure="refused_target",
            field="VLLM_URL",
            value=url,
            fix=refused.fix
            or "point it at the vLLM server itself (its node's IP, a tunnel on 127.0.0.1, or VLLM_URL)",
        )
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        if isinstance(exc, httpx.ConnectTimeout) or _caused_by(exc, httpx.ConnectTimeout):
            err = ServingError(
                f"{url} did not accept a connection in time: a firewall drops the packets, or the host is down",
                failure="timeout",
                field="VLLM_URL",
                value=url,
                fix=f"check that the host is up and that port {port_of(url)} is reachable from here (a firewall rule "
                "for your address, or a tunnel); never open it to everyone on a server without an API key",
            )
            err.connect_phase = True  # type: ignore[attr-defined]
            return err
        return ServingError(
            f"{url} accepted the connection but did not answer in time",
            failure="timeout",
            field="VLLM_URL",
            value=url,
            fix="the server is busy (a benchmark or long generations) or stuck: retry; get_serving_status(view='metrics') shows its queue",
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
            f"connection to {url} refused or dropped: nothing is listening on port {port_of(url)}, or the server "
            "exited or is still starting",
            failure="connection_refused",
            field="VLLM_URL",
            value=url,
            fix=f"start the server (or wait for it) and check it listens on port {port_of(url)}; then retry",
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
