"""`verify_model_health`: is the endpoint up, serving the right model, answering, calling tools?

Four probes in order, each timed; the first failure stops the ones that depend on it (a ``base_url`` that
is not this rig's endpoint gets the first two only: `tpu_devops.serving.egress`):

1. ``GET /health`` (vLLM answers 200 with an empty body once the engine is up);
2. ``GET /v1/models``: the configured model must be listed (else ``model_mismatch``);
3. one short chat completion: must return non-empty content (else ``empty_content``);
4. one tool-calling probe (``tool_choice="auto"``, a one-argument function): must come back as a
   structured ``tool_calls`` entry. A 400 ``"auto" tool choice requires --enable-auto-tool-choice and
   --tool-call-parser to be set`` (vLLM's message) is ``tool_parser_missing``; raw Gemma 4 syntax
   (``<|tool_call>call:NAME{...}<tool_call|>``) in ``content`` is ``tool_call_unparsed`` (wrong or no
   parser; Gemma 4 needs ``--tool-call-parser gemma4``).

Failure classes (``failure``): ``no_endpoint``, ``connection_refused`` (nothing listens yet: booting,
or vLLM exited), ``unresolvable_host`` (the URL's host name does not resolve), ``booting`` (503),
``timeout`` (no connection: a firewall drops it or the VM is not up; or no answer: busy),
``unauthorized`` (401: no key sent, or not the key vLLM read at boot), ``not_found`` (404: wrong path
or port), ``redirect``, ``refused_target`` (a metadata / link-local address), ``model_mismatch``,
``empty_content``, ``tool_parser_missing``, ``tool_call_unparsed``, ``tool_not_called``,
``not_openai_api`` (another service answers), ``http_error``. Each comes with the fix for that case.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from pydantic import BaseModel, Field, model_validator

from tpu_devops.config import Settings
from tpu_devops.host.results import Table, ToolResult
from tpu_devops.host.untrusted import fence
from tpu_devops.serving.answers import cut_off, degenerate
from tpu_devops.serving.client import PROBE_CHAT_TIMEOUT_S, http_client, probe_timeout
from tpu_devops.serving.errors import ServingError, classify
from tpu_devops.serving.models import looks_instruction_tuned, model_cards
from tpu_devops.serving.resolve import Endpoint, for_endpoint, resolve_endpoint
from tpu_devops.serving.server_kind import LLAMA_CPP, UNKNOWN, VLLM, identify
from tpu_devops.serving.stream import stream_chat

PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_current_time",
        "description": "Get the current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA time zone, e.g. UTC"}},
            "required": ["timezone"],
        },
    },
}
GEMMA_TOOL_CALL_OPEN = "<|tool_call>"
# A question with one checkable answer: a model that echoes or loops cannot pass by accident.
CHAT_PROBE = "What is 17 + 25? Reply with the number only."
CHAT_PROBE_ANSWER = "42"


class Probe(BaseModel):
    """One probe: ``ok``, latency in ms, what was seen, and the failure class + fix when not ok.

    The structured form says ``ok`` once: a probe that failed has its ``failure`` class (the probes stop at
    the first failure), and its fix is the result's ``fix``.
    """

    name: str
    ok: bool = Field(exclude=True)
    latency_ms: float | None = None
    detail: str | None = None
    failure: str | None = Field(default=None, description="set on the probe that failed (its class)")
    fix: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _failure_names_the_failed(self) -> Probe:
        # the structured form tells ok from failed by ``failure`` alone: the two must agree
        if self.ok == (self.failure is not None):
            raise ValueError(f"probe {self.name}: ok={self.ok} with failure={self.failure!r}")
        return self


class HealthResult(ToolResult):
    """`verify_model_health` output. ``failure`` is the first failing probe's class (None if healthy)."""

    healthy: bool
    endpoint: str | None
    endpoint_source: str | None
    model: str
    failure: str | None
    fix: str | None
    probes: Table[Probe]
    notices: list[str] = []

    def headline(self) -> str:
        if self.healthy:
            total = sum(p.latency_ms or 0 for p in self.probes)
            return (
                f"healthy: {self.model} at {self.endpoint} passed {len(self.probes)} probes in {total:.0f} ms"
            )
        return f"UNHEALTHY ({self.failure}): {self.probes[-1].detail if self.probes else ''} Fix: {self.fix}"

    def render_text(self) -> str:
        """Headline, then one line per probe (ok / FAIL, latency, what was seen), then notices."""
        lines = [self.headline(), f"endpoint: {self.endpoint or '-'} ({self.endpoint_source or 'none'})"]
        for p in self.probes:
            ms = f"{p.latency_ms:,.1f} ms" if p.latency_ms is not None else "-"
            failure = f" [{p.failure}]" if getattr(p, "failure", None) else ""
            lines.append(f"  {p.name:<9} {'ok' if p.ok else 'FAIL':<4} {ms:>11}  {p.detail or ''}{failure}")
        lines.extend(f"note: {n}" for n in self.notices)
        return "\n".join(lines)


def _failed(name: str, err: ServingError, started: float) -> Probe:
    return Probe(
        name=name,
        ok=False,
        latency_ms=round((time.perf_counter() - started) * 1000, 1),
        detail=err.message,
        failure=err.failure,
        fix=err.fix,
    )


async def verify_health(
    settings: Settings, *, model: str | None = None, base_url: str | None = None, tools: bool = True
) -> HealthResult:
    """Run the probes (module docstring) and return each with its latency; never raises for an
    endpoint failure: the failure is the answer.

    Raises:
        InputError: ``base_url`` is malformed.
    """
    want = model or settings.model_name
    probes: list[Probe] = []
    notices: list[str] = []

    def result(ep_url: str | None, source: str | None) -> HealthResult:
        bad = next((p for p in probes if not p.ok), None)
        return HealthResult(
            healthy=bad is None,
            endpoint=ep_url,
            endpoint_source=source,
            model=want,
            failure=bad.failure if bad else None,
            fix=bad.fix if bad else None,
            probes=probes,
            notices=notices,
        )

    started = time.perf_counter()
    try:
        ep = await resolve_endpoint(settings, base_url)
    except ServingError as err:
        probes.append(_failed("endpoint", err, started))
        return result(None, None)

    # 1. /health
    started = time.perf_counter()
    try:
        response = await http_client(ep.url).get("/health", timeout=probe_timeout())
        response.raise_for_status()
        probes.append(
            Probe(name="health", ok=True, latency_ms=_ms(started), detail=f"HTTP {response.status_code}")
        )
    except Exception as exc:
        probes.append(_failed("health", for_endpoint(classify(exc, ep.url), ep), started))
        return result(ep.url, ep.source)

    # 2. /v1/models
    started = time.perf_counter()
    try:
        response = await http_client(ep.url).get(
            "/v1/models", headers=ep.auth_headers(), timeout=probe_timeout()
        )
        response.raise_for_status()
        cards = model_cards(response, ep.url)
    except Exception as exc:
        probes.append(_failed("models", for_endpoint(classify(exc, ep.url), ep), started))
        return result(ep.url, ep.source)
    served = [str(c.get("id")) for c in cards]
    if want not in served:
        probes.append(
            Probe(
                name="models",
                ok=False,
                latency_ms=_ms(started),
                detail=f"the server serves {', '.join(served) or 'nothing'}, not {want!r}",
                failure="model_mismatch",
                fix=f"set MODEL_NAME={served[0]}"
                if served
                else "check the vllm serve command's model argument",
            )
        )
        return result(ep.url, ep.source)
    server = identify(cards, want, settings.max_model_len)
    probes.append(
        Probe(
            name="models",
            ok=True,
            latency_ms=_ms(started),
            detail=f"{server.label} serves {want} (context {server.context_tokens or 'unknown'}: {server.context_source})",
        )
    )
    if not looks_instruction_tuned(want):
        notices.append(f"{want!r} does not look instruction-tuned (-it); chat answers may be poor")
    if not ep.owned:  # a host an argument names gets probes only (`tpu_devops.serving.egress`)
        notices.append(
            f"chat and tool-call probes not sent: base_url {ep.url} is not this rig's endpoint "
            f"({ep.rig or 'VLLM_URL or the discovered node'}), and requests with a body go only there; "
            "set VLLM_URL to that server to probe its chat"
        )
        return result(ep.url, ep.source)

    # 3. one short chat completion
    started = time.perf_counter()
    try:
        answer = await stream_chat(
            ep.url,
            want,
            [{"role": "user", "content": CHAT_PROBE}],
            api_key=ep.api_key,
            max_tokens=32,
            temperature=0,
            timeout_s=PROBE_CHAT_TIMEOUT_S,
        )
    except ServingError as err:
        probes.append(_failed("chat", for_endpoint(err, ep), started))
        return result(ep.url, ep.source)
    if not answer.content.strip():
        probes.append(
            Probe(
                name="chat",
                ok=False,
                latency_ms=_ms(started),
                detail=f"empty content (finish_reason={answer.finish_reason}, completion_tokens={answer.completion_tokens})",
                failure="empty_content",
                fix=_empty_fix(server.kind),
            )
        )
        return result(ep.url, ep.source)
    if problem := judge_probe_answer(answer.content, answer.finish_reason):
        probes.append(
            Probe(
                name="chat",
                ok=False,
                latency_ms=_ms(started),
                detail=f"{problem}: {_model_text(answer.content.strip()[:80])}",
                failure="wrong_answer",
                fix="the model answers but not sensibly: check the chat template (vLLM: the model's own; "
                "llama-server: --jinja), that MODEL_NAME is an instruction-tuned (-it) checkpoint, and the quantization",
            )
        )
        return result(ep.url, ep.source)
    stats = answer.stats()
    probes.append(
        Probe(
            name="chat",
            ok=True,
            latency_ms=_ms(started),
            detail=f"{answer.content.strip()[:60]!r} (TTFT {stats.ttft_ms} ms, {stats.completion_tokens} tokens)",
        )
    )

    # 4. tool-calling probe
    if tools:
        probes.append(await _tool_probe(ep, want, server.kind))
    return result(ep.url, ep.source)


def judge_probe_answer(content: str, finish_reason: str | None) -> str | None:
    """Why the chat probe's answer is wrong (``CHAT_PROBE_ANSWER`` missing, degenerate, cut off), or None."""
    if reason := degenerate(content):
        return reason
    if cut_off(finish_reason):
        return "the answer was cut off at the token limit (finish_reason=length)"
    if not re.search(rf"(?<!\d){CHAT_PROBE_ANSWER}(?!\d)", content):
        return f"wrong answer (expected {CHAT_PROBE_ANSWER})"
    return None


def _model_text(text: str) -> str:
    """Model-written text on one line, fenced as untrusted data."""
    return fence(text.replace("\n", " "), "model").replace("\n", "")


def _parser_fix(kind: str) -> str:
    if kind == VLLM:
        return "restart vLLM with --enable-auto-tool-choice --tool-call-parser gemma4 (the parser turns Gemma syntax into tool_calls)"
    if kind == LLAMA_CPP:
        return "start llama-server with --jinja (tool calls need the model's Jinja chat template)"
    return "enable the server's tool-call parsing for this model (its chat template must support tools)"


def _not_called_fix(kind: str) -> str:
    """The fix for a model that answered in text instead of calling the tool, on this server kind."""
    retry = "; small models sometimes answer in text: retry"
    if kind == VLLM:
        return (
            "check vLLM runs with --enable-auto-tool-choice --tool-call-parser gemma4 and the model's chat template"
            + retry
        )
    if kind == LLAMA_CPP:
        return (
            "start llama-server with --jinja (tool calls go through the model's own chat template; "
            "--chat-template-file when the GGUF's template has no tool support)" + retry
        )
    return "check the server's tool-call parsing for this model and its chat template" + retry


def _empty_fix(kind: str) -> str:
    """The fix for an empty answer, on this server kind."""
    common = "use chat completions on -it models (not /v1/completions); if a reasoning parser eats the answer raise max_tokens"
    if kind == VLLM:
        return common + "; check the chat template and --reasoning-parser gemma4"
    if kind == LLAMA_CPP:
        return common + "; check the chat template (llama-server --jinja uses the model's own)"
    return common + "; check the server's chat template for this model"


async def _tool_probe(ep: Endpoint, model: str, kind: str = UNKNOWN) -> Probe:
    started = time.perf_counter()
    try:
        answer = await stream_chat(
            ep.url,
            model,
            [{"role": "user", "content": "What time is it in UTC? Use the tool."}],
            api_key=ep.api_key,
            max_tokens=128,
            temperature=0,
            tools=[PROBE_TOOL],
            tool_choice="auto",
            timeout_s=PROBE_CHAT_TIMEOUT_S,
        )
    except ServingError as err:
        return _failed("tool_call", for_endpoint(err, ep), started)
    if GEMMA_TOOL_CALL_OPEN in answer.content or "call:get_current_time" in answer.content:
        return Probe(
            name="tool_call",
            ok=False,
            latency_ms=_ms(started),
            detail=f"the model wrote a raw tool call in content: {answer.content[:80]!r}",
            failure="tool_call_unparsed",
            fix=_parser_fix(kind),
        )
    call = next((c for c in answer.tool_calls if c.get("name") == PROBE_TOOL["function"]["name"]), None)
    if call is None:
        return Probe(
            name="tool_call",
            ok=False,
            latency_ms=_ms(started),
            detail=f"no tool call came back (finish_reason={answer.finish_reason}, content={answer.content[:60]!r})",
            failure="tool_not_called",
            fix=_not_called_fix(kind),
        )
    args: Any
    try:
        args = json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError:
        args = None
    required = PROBE_TOOL["function"]["parameters"]["required"]
    if not isinstance(args, dict) or not all(
        isinstance(args.get(k), str) and args[k].strip() for k in required
    ):
        return Probe(
            name="tool_call",
            ok=False,
            latency_ms=_ms(started),
            detail=f"malformed tool call: arguments {_model_text(str(call.get('arguments'))[:80])} are not a JSON object "
            f"with {', '.join(required)}",
            failure="tool_call_malformed",
            fix=_parser_fix(kind),
        )
    return Probe(name="tool_call", ok=True, latency_ms=_ms(started), detail=f"called {call['name']}({args})")


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
