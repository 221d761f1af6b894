"""Logs: Cloud Logging reads, this rig's node logs, template summaries with the root cause first, the boot
diagnosis, and questions answered by the self-hosted Gemma. Log text is redacted (tokens, keys, emails,
IPs, project numbers) before any of it leaves the process, and marked as untrusted data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

import tpu_devops
from tpu_devops.config import get_settings
from tpu_devops.host.results import MAX_EVIDENCE_TOKENS
from tpu_devops.host.toolsets import READ, Toolset
from tpu_devops.tools.args import SANE, EndpointRef, LogQuery, LogWindow, Node, Since

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.gcp.common
    import tpu_devops.logs.analyst
    import tpu_devops.logs.boot
    import tpu_devops.logs.evidence
    import tpu_devops.logs.sources
    import tpu_devops.planning.warmboot

toolset = Toolset("logs", "read, summarize and diagnose logs; ask Gemma about them", default=True)
tool = toolset.tool
toolset.renamed("get_vllm_docker_logs", "get_cloud_logging_logs with log='container'")
toolset.renamed("get_tpu_system_logs", "get_cloud_logging_logs with log='system'")

Text = Annotated[str | None, Field(description="text to search for")]
Limit = Annotated[int, Field(ge=1, le=500, description="entries per page")]
PageToken = Annotated[str | None, Field(max_length=4096, description="from the last page"), SANE]
TokenBudget = Annotated[
    int,
    Field(ge=500, le=MAX_EVIDENCE_TOKENS, description="evidence tokens"),
]


@tool(title="Read Cloud Logging entries", kind=READ, open_world=True)
def get_cloud_logging_logs(
    window: LogWindow,
    log: Annotated[
        Literal["any", "container", "system"],
        Field(description="any, or our node's container or system log"),
    ] = "any",
    node: Node = None,
    filter: Annotated[str | None, Field(max_length=20_000, description="Cloud Logging filter"), SANE] = None,
    resource_type: Annotated[str | None, Field(description="resource type, e.g. tpu_worker")] = None,
    log_id: Annotated[str | None, Field(description="log name")] = None,
    text: Text = None,
    limit: Limit = 50,
    page_token: PageToken = None,
    order: Annotated[Literal["desc", "asc"], Field(description="desc: newest first")] = "desc",
) -> tpu_devops.logs.sources.LogsPage:
    """Cloud Logging entries, or our node's logs.

    log=any reads log entries from Cloud Logging matching the filter and window. log=container reads the vLLM
    container's log on our TPU node (Docker gcplogs driver; no SSH); log=system the node's startup script
    (google_metadata_script_runner), syslog, and audit activity / system events such as preemption and
    maintenance; both default to the last 24 h. A compact redacted form (timestamp, severity, short log
    name, resource labels, message, insertId); says when more entries match and returns the page token to
    continue."""
    settings = get_settings()
    sources = tpu_devops.logs.sources
    if log == "any":
        if node is not None:
            from tpu_devops.errors import InputError

            raise InputError(
                "node reads a node's own log: it needs log='container' or log='system'",
                field="node",
                value=node,
                fix="pass log='container' (vLLM) or log='system' with node, or filter by resource labels instead",
            )
        return sources.get_cloud_logging_logs(
            settings, **window.values(), filter=filter, resource_type=resource_type, log_id=log_id, text=text,
            limit=limit, page_token=page_token, order=order,
        )  # fmt: skip
    given = {k: v for k, v in (("filter", filter), ("resource_type", resource_type), ("log_id", log_id)) if v}
    if given:
        from tpu_devops.errors import InputError

        name = next(iter(given))
        raise InputError(
            f"{name} applies to log='any' only: a node's log has its own filter",
            field=name,
            value=given[name],
            fix=f"leave {name} out with log='{log}', or pass log='any'",
        )
    return sources.get_node_logs(
        settings, log, node=node, since=window.since or "24h", until=window.until, severity=window.severity,
        text=text, limit=limit, page_token=page_token, order=order,
    )  # fmt: skip


@tool(title="Summarize logs", kind=READ, open_world=True)
def summarize_logs(
    query: LogQuery, token_budget: TokenBudget = 6000
) -> tpu_devops.logs.evidence.SummaryResult:
    """Summarize logs: root cause first, with fixes.

    Summarize logs (a Cloud Logging query or an exported file) into templates, root cause first: per
    template the count, severity, first/last seen, rate and two exemplar insertIds; plus the failures read
    by the same rules as diagnose_vllm_boot (vLLM boot failures, OOMs, preemption / maintenance, Hugging
    Face, image pulls, quota and capacity) with their fix, failures no rule explains listed as
    unrecognised, and known noise that is never a root cause. Triage is by content as well as severity (a
    failure logged at INFO counts). Kubernetes events (GKE's Cloud Logging export, kubectl get events -o
    json) are read as a source too. Secrets and personal data are redacted."""
    return tpu_devops.logs.evidence.summarize_logs(
        get_settings(), token_budget=token_budget, **query.values()
    )


@tool(title="Ask Gemma about the logs", kind=READ, open_world=True)
async def analyze_cloud_logging(
    question: Annotated[str, Field(max_length=4000, description="your question")],
    query: LogQuery,
    endpoint: EndpointRef,
    max_steps: Annotated[int, Field(ge=1, le=8, description="model rounds")] = 4,
    token_budget: TokenBudget = 6000,
) -> tpu_devops.logs.analyst.AnalysisResult:
    """Ask Gemma about the logs (citations checked).

    Answer a question about the logs with the self-hosted Gemma: it reads a redacted evidence summary and
    may search logs, fetch an entry by insertId or count by a field (read-only tools only). Every citation is
    checked against the logs. Without a reachable model the deterministic summary is returned and the answer
    says the model was not consulted. When the model needs longer than a tool call, its answer continues as
    a job (job_id; poll get_job) and the deterministic summary answers meanwhile."""
    return await tpu_devops.logs.analyst.analyze_logs(
        get_settings(),
        question,
        max_steps=max_steps,
        token_budget=token_budget,
        **endpoint.values(),
        **query.values(),
    )


@tool(title="Diagnose a vLLM boot log", kind=READ, open_world=True)
async def diagnose_vllm_boot(
    log_text: Annotated[str | None, Field(max_length=1_000_000, description="the log, pasted")] = None,
    path: Annotated[str | None, Field(max_length=4096, description="log file"), SANE] = None,
    node: Annotated[Node, Field(description="read this node's log")] = None,
    since: Annotated[Since, Field(description="with node: start, 6h or 2d ago")] = "24h",
) -> tpu_devops.logs.boot.BootDiagnosis:
    """Why vLLM did or did not boot: cause and fix.

    Why did (or didn't) vLLM boot? Parses the vLLM version, non-default args, phase timeline (weights,
    memory statistics, KV init, compile seconds, startup complete), the logged HBM budget and KV tokens
    cross-checked against plan_capacity, and classifies failures with cause, fix and the numbers read out:
    program allocation / HBM / VMEM / SMEM OOM, KV cache smaller than one request, unsupported weight
    quantization, TP not dividing the model, torchax path failures, image pull failures and startup-script
    exits, Hugging Face 401/403/404/429 and unreachable, invalid flags and parsers. A line no rule explains
    is an "unrecognised failure" with its line number, never dropped; harmless noise (vllm._C, Triton,
    metadata 404s) is counted, never a root cause. Boot state is apart from serving problems (a server that
    started and rejects requests is "boot OK, but requests fail"). With node, the container log is read from
    Cloud Logging (redacted) instead of being pasted. With a project configured, it also says whether a warm
    compile cache and staged weights exist for the deployment and the expected boot time (seed measurement)."""
    settings = get_settings()
    run = tpu_devops.gcp.common.run_blocking
    logs = tpu_devops.logs
    if node:
        logs.boot.refuse_two_sources(node, log_text, path)
        log_text = await run(logs.sources.fetch_container_log_text, settings, node, since=since)
    diagnosis = await run(logs.boot.diagnose_vllm_boot, log_text=log_text, path=path, settings=settings)
    return await tpu_devops.planning.warmboot.annotate(settings, diagnosis)
