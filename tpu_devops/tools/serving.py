"""Serve: the endpoint (VLLM_URL, else this rig's ACTIVE TPU), its health, asking the self-hosted Gemma,
and what the endpoint runs (model, engines, metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

import tpu_devops
from tpu_devops.config import get_settings
from tpu_devops.host.toolsets import READ, Toolset
from tpu_devops.tools.args import SANE, EndpointRef, ServedModel, ZoneOrAll

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.serving.chat
    import tpu_devops.serving.endpoint
    import tpu_devops.serving.health
    import tpu_devops.serving.status

toolset = Toolset("serve", "the endpoint, its health, asking Gemma, and what it runs", default=True)
tool = toolset.tool
toolset.renamed("query_gemma_with_stats", "query_gemma with stats=true")
toolset.renamed("get_model_details", "get_serving_status with view='model'")
toolset.renamed("get_engine_status", "get_serving_status with view='engines'")
toolset.renamed("get_metrics", "get_serving_status with view='metrics'")


@tool(title="Get the vLLM endpoint", kind=READ, open_world=True)
async def get_vllm_endpoint(zone: ZoneOrAll = None) -> tpu_devops.serving.endpoint.EndpointResult:
    """The vLLM base URL, or why there is none.

    The vLLM base URL: VLLM_URL if set, else our ACTIVE queued resource's node external IP
    (http://IP:VLLM_PORT). Says clearly when there is none, it is still provisioning, or there are several."""
    return await tpu_devops.serving.endpoint.get_vllm_endpoint(get_settings(), zone)


@tool(title="Verify model health", kind=READ, open_world=True)
async def verify_model_health(
    endpoint: EndpointRef,
    model: ServedModel = None,
    check_tool_calling: Annotated[bool, Field(description="also probe a tool call")] = True,
) -> tpu_devops.serving.health.HealthResult:
    """Probe health, chat and tool calls, with fixes.

    Check the serving endpoint end to end: /health, /v1/models, one short chat, one tool call. Each probe
    is timed. A failure is the answer, classified with its fix: no_endpoint, connection_refused (nothing
    listens yet: booting, or vLLM exited), unresolvable_host (DNS), booting (503), timeout (firewall or VM
    down; or a busy server), unauthorized (401: no key sent, or a key vLLM does not hold), not_found (404:
    wrong path or port), redirect, refused_target (metadata or link-local address), model_mismatch,
    empty_content, tool_parser_missing, tool_call_unparsed, tool_not_called, not_openai_api (another service
    on that port), http_error. The API key goes only to this rig's endpoint (VLLM_URL or the discovered node)."""
    return await tpu_devops.serving.health.verify_health(
        get_settings(), model=model, tools=check_tool_calling, **endpoint.values()
    )


@tool(title="Ask Gemma", kind=READ, open_world=True)
async def query_gemma(
    prompt: Annotated[str, Field(max_length=100_000, description="the question")],
    endpoint: EndpointRef,
    system: Annotated[str | None, Field(max_length=20_000, description="system prompt"), SANE] = None,
    max_tokens: Annotated[int, Field(ge=1, le=32_768, description="max tokens to generate")] = 512,
    temperature: Annotated[float | None, Field(ge=0, le=2, description="temperature")] = None,
    stats: Annotated[bool, Field(description="measure TTFT, TPOT, tok/s")] = False,
    model: ServedModel = None,
) -> tpu_devops.serving.chat.ChatResult:
    """Ask the self-hosted Gemma (answer is untrusted text).

    Ask the self-hosted Gemma one question (streamed chat completion) and return its answer. With
    stats=true it also measures the stream: TTFT, mean and median TPOT, output tok/s, prompt and completion
    tokens (the server's usage), and the largest gap between chunks after the first (a stalled stream is
    how KV-cache preemption shows from outside). max_tokens is lowered to what the server's context leaves
    (with a note). An answer longer than a tool call becomes a job: the call returns its job_id and the
    expected time, get_job shows the text so far and then the whole answer; nothing generated is lost."""
    return await tpu_devops.serving.chat.query(
        get_settings(),
        prompt,
        system=system,
        max_tokens=max_tokens,
        temperature=temperature,
        model=model,
        with_stats=stats,
        **endpoint.values(),
    )


@tool(title="Served model, engines or metrics", kind=READ, open_world=True)
async def get_serving_status(
    endpoint: EndpointRef,
    view: Annotated[
        Literal["model", "engines", "metrics"],
        Field(description="model, engines or metrics"),
    ] = "model",
    engines: Annotated[int | None, Field(ge=1, le=64, description="engines on the host")] = None,
) -> tpu_devops.serving.status.ServingStatus:
    """The served model, its engines, or its metrics.

    view=model: model id, max model length, vLLM version, the engine's cache config (block size, KV blocks,
    memory utilization) and the serving flags this rig's startup script renders. view=engines: each vLLM
    engine behind the host's load balancer (one per chip, or the one engine at the root path): health and
    its latency, running and waiting requests, KV-cache usage, generated tokens and tok/s since the last
    call, then the totals; an engine that is down is reported, not fatal. view=metrics: vLLM's Prometheus
    /metrics summarised: KV-cache usage, running / waiting requests, preemptions (total and since the last
    call), prompt / generation token totals, TTFT and TPOT quantiles from the histograms."""
    if engines is not None and view != "engines":
        from tpu_devops.errors import InputError

        raise InputError(
            "engines applies to view='engines' only",
            field="engines",
            value=engines,
            fix="leave engines out, or pass view='engines'",
        )
    return await tpu_devops.serving.status.serving_status(
        get_settings(), view, engines=engines, **endpoint.values()
    )
