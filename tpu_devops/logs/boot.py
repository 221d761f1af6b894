"""Boot-log diagnosis for vLLM on TPU: parse what a boot logged and classify why it failed.

Public API (reused by the log summarizer and the Cloud Logging reader):

- `diagnose_boot_text(text) -> BootDiagnosis`: facts (vLLM version, non-default args, phase timeline,
  HBM budget, KV tokens, compile seconds), findings, the boot state and its root cause, problems after
  startup (serving), and a cross-check of the logged KV pool against `sizing` for the same arguments.
- `diagnose_vllm_boot(log_text=None, path=None)`: the tool entry point.

Findings come from `logs.scan` (one pass, the rule table of `logs.rules` read through
`logs.signatures`, the same table `summarize_logs` reads): every failure event is explained by a rule or
reported as an unrecognised failure with its line, line number and exception type; known noise is
counted, never alarmed on. The verdict keeps boot state and serving apart:

- ``failed``: a failure logged after the last successful milestone (arguments parsed, weights loaded,
  memory statistics, KV cache sized / initialized, engine ready, application startup complete), with
  no later ``Application startup complete``. The root cause is the highest-weight finding (a known
  rule beats the fallback, a wrapper or symptom comes last), the earliest on ties.
- ``ready``: the server started. A failure after that is reported as ``after_start`` (requests rejected
  for want of a chat template, an engine that died while serving), never as a boot failure, and the
  headline never says plain "boot OK" while one exists.
- ``incomplete``: no failure after the last milestone and no startup yet. Errors followed by later
  progress are listed as ``recovered``.

A failure of scope ``autoscaling`` (an HPA that cannot read its metric, from Kubernetes events) sits
``beside`` the server: it is never the boot's root cause and the headline says serving is not affected.
An exception header that announces its reason on the next lines (pydantic's ``N validation error for
ModelConfig`` then ``  Value error, ...``) is read with those lines (`logs.failure_lines`).

Performance: `logs.scan` finds candidate lines with ``str.find``; facts are single ``re.search`` calls;
line numbers come from a bisect over newline offsets, so the work stays linear in the log size
(``scripts/bench_planning.py``). Patterns never match across a newline.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tpu_devops.config import Settings
from tpu_devops.errors import InputError
from tpu_devops.host import files
from tpu_devops.host.results import Table, ToolResult
from tpu_devops.host.untrusted import (
    UntrustedContent,
    UntrustedData,
    fence,
    injection_notice,
    inline,
    looks_like_instruction,
    untrusted_data,
)
from tpu_devops.logs import signatures as sg
from tpu_devops.logs.scan import Event, Scan, Text, scan_text
from tpu_devops.logs.signatures import match_line  # noqa: F401  (re-exported: one rule set)

SignatureSeverity = Literal["error", "warning", "info", "noise"]
When = Literal["boot", "after start", "recovered", "beside"]
MAX_LOG_BYTES = 512 * 1024 * 1024
MAX_FINDING_LINES = 50


# ---- facts ---------------------------------------------------------------------------------------

_TS = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")
_FACTS: dict[str, re.Pattern[str]] = {
    "version": re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+-]*)"),
    "engine_version": re.compile(r"Initializing a V1 LLM engine \(v([^)\n]+)\)"),
    "banner_model": re.compile(r"█ +model +(\S+)"),
    "tpu": re.compile(r"tpu_type=(\S+) \| worker_id=\d+ \| num_chips=(\d+)"),
    "max_len": re.compile(r"Using max model len (\d+)"),
    "memory": re.compile(
        r"Memory statistics \| total_hbm_limit_gb=([\d.]+)GiB \| total_hbm_limit_cap_gb=([\d.]+)GiB \| "
        r"total_hbm_used_gb=([\d.]+)GiB \| total_hbm_avail_gb=([\d.]+)GiB"
    ),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    "kv_init": re.compile(r"Init kv-cache \| num_total_layers=(\d+) \| num_blocks=\[(\d+)"),
    "kv_shape": re.compile(r"regular_attn_shape=\(num_blocks, \((\d+), (\d+), (\d+), (\d+)\)\)"),
    "kv_dtype": re.compile(r"regular_attn_dtype=(\w+)"),
    "weights_loaded": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "checkpoint": re.compile(r"Checkpoint size: ([\d.]+) GiB"),
    "engine_init": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s \(compilation: ([\d.]+) s\)"
    ),
    "warmup": re.compile(r"Warm-up call pass finished in ([\d.]+) \[secs\]"),
    "compile_cache": re.compile(r"Enabling JAX compile cache"),
    "server_url": re.compile(r"Starting vLLM server on (http\S+)"),
    "startup_complete": re.compile(r"Application startup complete"),
}


class BootFinding(BaseModel):
    """A classified finding: a rule of the table, the unrecognised-failure fallback, or a derived check."""

    id: str
    severity: SignatureSeverity
    signature: str | None = Field(
        None,
        description="the rule id of logs.rules that matched (None: unrecognised failure or derived check)",
    )
    kind: str | None = Field(
        None, description="failure | symptom | wrapper | warning | info (None: derived check)"
    )
    scope: str | None = Field(None, description="boot | serving | cloud | autoscaling")
    when: When | None = Field(
        None,
        description="boot: stopped the boot; after start: logged after Application startup complete; "
        "recovered: later progress shows the boot went on; beside: around a server that serves (autoscaling), "
        "stopping neither the boot nor a request",
    )
    title: str
    cause: str
    fix: str
    source: str
    count: int = Field(1, description="matching lines (failures: events)")
    first_line: int | None = Field(None, description="1-based line number of the first match")
    lines: list[int] = Field(default_factory=list, description=f"line numbers (at most {MAX_FINDING_LINES})")
    spans: list[tuple[int, int]] = Field(
        default_factory=list, description="(first, last) line of each event, its traceback included"
    )
    exception_type: str | None = None
    weight: int | None = Field(
        None, description="rank as a root cause: rules 60-100, unrecognised 30-45, symptom 25, wrapper -60"
    )
    timestamp: str | None = None
    excerpt: str | None = Field(None, description="first matching line, up to 300 characters")
    details: dict[str, str] = Field(default_factory=dict)


class Phase(BaseModel):
    """A boot milestone."""

    phase: str
    line: int
    timestamp: str | None
    elapsed_s: float | None = Field(None, description="seconds since the first timestamped line")
    detail: str | None = None


class LoggedBudget(BaseModel):
    """The HBM budget the boot logged (GiB) and the KV pool it sized."""

    total_hbm_gib: float | None = None
    cap_gib: float | None = None
    used_gib: float | None = Field(None, description="weights after loading")
    kv_avail_gib: float | None = None
    kv_tokens: int | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    kv_layers: int | None = None
    kv_dtype: str | None = None
    max_concurrency: float | None = None
    concurrency_at_tokens: int | None = None


class CrossCheck(BaseModel):
    """Logged KV pool vs `sizing` for the same model, accelerator and arguments."""

    model: str
    accelerator_type: str
    gpu_memory_utilization: float
    max_model_len: int
    bytes_per_token_config: int
    bytes_per_token_implied: float | None = Field(None, description="logged KV GiB / logged tokens")
    predicted_kv_tokens: int
    logged_kv_tokens: int
    deviation_pct: float
    catalog_hbm_gib: float
    logged_hbm_gib: float
    agrees: bool = Field(description="the plan is within 0.5% of the logged KV pool")
    # the numbers above in a sentence: the text form shows it, the structured form has the numbers
    verdict: str = Field(exclude=True)


class BootDiagnosis(UntrustedContent, ToolResult):
    """`diagnose_vllm_boot` result. Values copied from the log (excerpts, arguments, names, unrecognised
    failure lines) are untrusted data (`tpu_devops.host.untrusted`); excerpts are fenced in the text rendering."""

    untrusted: UntrustedData = untrusted_data(
        "logs",
        "findings[].excerpt",
        "findings[].details",
        "root_cause.excerpt",
        "root_cause.details",
        "after_start.excerpt",
        "after_start.details",
        "beside.excerpt",
        "beside.details",
        "non_default_args",
        "model",
        "vllm_version",
        "tpu_type",
    )

    source: str
    lines: int
    status: Literal["ready", "failed", "incomplete"]
    vllm_version: str | None
    model: str | None
    tpu_type: str | None
    non_default_args: dict[str, Any]
    phases: Table[Phase]
    budget: LoggedBudget
    weights_load_s: float | None
    compile_s: float | None = Field(
        description="XLA compilation seconds from the 'init engine' line, else the sum of warm-up passes logged so far"
    )
    engine_init_s: float | None = Field(
        description="profile + KV cache + warm-up seconds ('init engine ... took')"
    )
    compile_cache_enabled: bool
    cross_check: CrossCheck | None
    root_cause: BootFinding | None = Field(description="why the boot failed (status failed), else None")
    after_start: BootFinding | None = Field(
        None, description="the main failure logged after the server started (requests rejected, engine died)"
    )
    beside: BootFinding | None = Field(
        None,
        description="the main failure around the server that stops neither its boot nor its requests (an HPA "
        "that cannot read its metric): serving is fine",
    )
    unrecognised: int = Field(0, description="failure findings no rule explains")
    findings: list[BootFinding]
    suspected_injection: list[int] = Field(
        default_factory=list,
        description="lines that read like instructions to an AI agent (possible prompt injection): never a "
        "finding or a cause, whatever rule they would match",
    )
    noise: dict[str, int] = Field(description="harmless known lines by signature id")
    # where the harmless lines are (at most MAX_FINDING_LINES each): for checks that every error line is
    # accounted for; neither form shows them (``noise`` counts them)
    noise_lines: dict[str, list[int]] = Field(default_factory=dict, exclude=True)
    warm_boot: list[str] = Field(
        default_factory=list,
        description="for the configured deployment: the bucket, whether a warm compile cache and staged weights "
        "exist, the expected boot time (seed measurement); empty without a project",
    )

    def structured(self) -> dict[str, Any]:
        """The structured form without repeating the root cause (and the after-start failure) in
        ``findings``: those list the other findings."""
        data = super().structured()
        shown = [f for f in (data.get("root_cause"), data.get("after_start"), data.get("beside")) if f]
        rest = [f for f in data.get("findings", []) if f not in shown]
        if len(rest) != len(data.get("findings", [])):
            data["findings"] = rest
            if not rest:
                del data["findings"]
        return data

    def recognised(self) -> bool:
        """False when nothing in the text is a vLLM boot line (a wrong file, a pasted non-log)."""
        return bool(
            self.vllm_version
            or self.non_default_args
            or self.findings
            or self.noise
            or any(p.phase != "first log line" for p in self.phases)
            or any(v is not None for v in self.budget.model_dump().values())
        )

    def render_text(self) -> str:
        """Headline, what booted, the timeline, the budget, the cross-check, then each finding."""
        lines = [self.headline()]
        what = ", ".join(
            x
            for x in (
                f"vLLM {self.vllm_version}" if self.vllm_version else None,
                inline(self.model) if self.model else None,
                inline(self.tpu_type) if self.tpu_type else None,
                f"{self.lines:,} lines from {self.source}",
            )
            if x
        )
        lines.append(what)
        if self.non_default_args:
            args = ", ".join(f"{k}={inline(str(v))}" for k, v in self.non_default_args.items())
            lines.append(f"non-default args: {args}")
        for p in self.phases:
            at = f"{p.elapsed_s:>7,.0f} s" if p.elapsed_s is not None else f"line {p.line:>5}"
            stamp = f" ({p.timestamp}, line {p.line})" if p.timestamp else ""
            lines.append(f"  {at}  {p.phase}" + (f": {p.detail}" if p.detail else "") + stamp)
        b = self.budget
        if b.total_hbm_gib is not None:
            lines.append(
                f"HBM (GiB): total {b.total_hbm_gib}, cap {b.cap_gib}, weights {b.used_gib}, KV {b.kv_avail_gib}"
                + (f"; {b.kv_tokens:,} KV tokens" if b.kv_tokens else "")
                + (f" in {b.kv_blocks:,} blocks of {b.block_size}" if b.kv_blocks and b.block_size else "")
                + (f", {b.kv_layers} KV layers, {b.kv_dtype}" if b.kv_layers else "")
                + (
                    f"; max concurrency {b.max_concurrency}x at {b.concurrency_at_tokens:,} tokens"
                    if b.max_concurrency and b.concurrency_at_tokens
                    else ""
                )
            )
        if self.cross_check:
            lines.append(f"cross-check: {self.cross_check.verdict}")
        timing = [
            f"weights {self.weights_load_s:g} s" if self.weights_load_s else None,
            f"compile {self.compile_s:g} s" if self.compile_s else None,
            "compile cache on" if self.compile_cache_enabled else "compile cache off",
        ]
        lines.append("timing: " + ", ".join(t for t in timing if t))
        for f in self.findings:
            where = f" (line {f.first_line}{f', x{f.count}' if f.count > 1 else ''})" if f.first_line else ""
            when = f" [{f.when}]" if f.when and f.when != "boot" else ""
            weight = f"weight {f.weight}" if f.weight is not None else None
            tags = ", ".join(x for x in (f.id, f.kind, f.scope, weight) if x)
            lines.append(f"{f.severity.upper()}{when} {f.title}{where} [{tags}]")
            lines.append(f"  cause: {f.cause}")
            lines.append(f"  fix: {f.fix}")
            if f.source:
                lines.append(f"  source: {f.source}")
            if f.excerpt:
                lines.append(f"  log: {fence(f.excerpt[:200])}")
        if self.suspected_injection:
            lines.append(injection_notice([f"line {n}" for n in self.suspected_injection], "lines"))
        if self.noise:
            lines.append("harmless noise: " + ", ".join(f"{k} x{v}" for k, v in self.noise.items()))
        lines += [f"warm boot (this deployment): {w}" for w in self.warm_boot]
        return "\n".join(lines)

    def headline(self) -> str:
        """Boot state and its cause; a failure after startup is said as such, never hidden by "boot OK"; a
        failure beside serving (autoscaling) is never called a boot failure."""
        if self.root_cause:
            rc = self.root_cause
            where = f" (line {rc.first_line})" if rc.first_line else ""
            return f"boot FAILED: {rc.title}{where}. Fix: {rc.fix}"
        version = f"vLLM {self.vllm_version}" if self.vllm_version else "vLLM"
        beside = None
        if self.beside:
            b = self.beside
            beside = f"{b.title}" + (f" (line {b.first_line})" if b.first_line else "") + f". Fix: {b.fix}"
        if self.status == "ready":
            tokens = f", {self.budget.kv_tokens:,} KV tokens" if self.budget.kv_tokens else ""
            if self.after_start:
                a = self.after_start
                what = "requests fail" if a.scope == "serving" else "then it failed"
                where = f" (line {a.first_line})" if a.first_line else ""
                return f"boot OK ({version}{tokens}), but {what}: {a.title}{where}. Fix: {a.fix}"
            if beside:
                return f"boot OK ({version}{tokens}), serving not affected; autoscaling fails: {beside}"
            earlier = sum(f.when == "recovered" for f in self.findings)
            note = f"; {earlier} earlier error(s) did not stop it" if earlier else ""
            return f"boot OK ({version}{tokens}){note}"
        progress = [
            p for p in self.phases if p.phase != "first log line" and not p.phase.startswith("failure")
        ]
        if self.after_start:
            # A serving-time failure (a liveness kill, a rejected request) in a log without the startup line.
            a = self.after_start
            where = f" (line {a.first_line})" if a.first_line else ""
            return (
                "no 'Application startup complete' in this log, but the server was serving and failed: "
                f"{a.title}{where}. Fix: {a.fix}"
            )
        if beside and not (self.vllm_version or self.non_default_args or progress):
            return f"no vLLM failure in this log (serving not affected); autoscaling fails: {beside}"
        if beside:
            return f"boot incomplete: no 'Application startup complete' yet; autoscaling fails: {beside}"
        recovered = [f for f in self.findings if f.when == "recovered"]
        if recovered:
            return (
                f"boot incomplete: no 'Application startup complete' yet; {len(recovered)} error(s) logged "
                f"earlier (first line {recovered[0].first_line}) did not stop later progress"
            )
        return "boot incomplete: no failure logged and no 'Application startup complete' yet"


# ---- scanning ------------------------------------------------------------------------------------


def _redact(line: str) -> str:
    """Excerpts leave this module redacted (tokens, keys, emails, IPs) by `tpu_devops.host.redact`."""
    try:
        from tpu_devops.host.redact import redact_text
    except ImportError:  # the redaction module ships with the log tools; planning works without it
        return line
    return redact_text(line)


def _timestamp(line: str) -> str | None:
    m = _TS.search(line)
    return m.group(1) if m else None


def _timestamp_near(log: Text, pos: int) -> str | None:
    """The timestamp of the line at ``pos``, else of the closest earlier line (within 4 KiB)."""
    own = _timestamp(log.line_at(pos))
    if own:
        return own
    found = _TS.findall(log.text, max(0, pos - 4096), pos)
    return found[-1] if found else None


def _seconds(ts: str | None, first: str | None) -> float | None:
    if not ts or not first:
        return None
    try:
        a = datetime.strptime("2000-" + first, "%Y-%m-%d %H:%M:%S")
        b = datetime.strptime("2000-" + ts, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return (b - a).total_seconds()


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _find(log: Text, key: str) -> re.Match[str] | None:
    return _FACTS[key].search(log.text)


def _context(text: str, args: dict[str, Any], version: str | None = None) -> sg.Context:
    ctx = sg.context_from_args({k: v for k, v in args.items() if k != "_unparsed"})
    ctx.vllm_version = version
    if not ctx.quantized and "Qwix" in text and sg.QWIX_LINE.search(text):
        ctx.quantized, ctx.quantization = True, ctx.quantization or "qwix"
    return ctx


def _when(scan: Scan, line: int, scope: str) -> When:
    """Where a failure at ``line`` sits relative to the milestones (see the module docstring)."""
    if scope == "autoscaling":
        return "beside"
    if scan.started_line and line > scan.started_line:
        return "after start"
    if scope == "serving":
        return "after start"
    if scan.last_ok_line and line < scan.last_ok_line:
        return "recovered"
    return "boot"


CONTINUATION_LINES = 4  # lines after an exception header read for the reason it announces


def _event_reading(scan: Scan, ev: Event, ctx: sg.Context) -> sg.Reading:
    hit = ev.best_hit()
    if hit is not None:
        return sg.explain(hit.sig, ev.groups(hit.sig), ctx)
    kind = ev.kind if ev.kind in sg.FALLBACK else "error"
    header = scan.line(ev.key_line)
    total = len(scan.log.newlines) + 1
    following = [
        scan.line(n) for n in range(ev.key_line + 1, min(ev.key_line + CONTINUATION_LINES, total) + 1)
    ]
    reading, reason = sg.read_continued(header, following, ctx)
    if reading is not None:
        return reading
    return sg.unrecognised(header, kind, reason)  # type: ignore[arg-type]


_MASK = re.compile(r"\d+(?:\.\d+)?")


def _finding_at(
    scan: Scan, line: int, reading: sg.Reading, *, when: When | None, exception_type: str | None = None
) -> BootFinding:
    """A finding of ``reading`` first seen at ``line`` (count and lines are added by the caller)."""
    pos = scan.log.text.find(scan.line(line))
    severity: SignatureSeverity
    if reading.kind in ("failure", "symptom", "wrapper"):
        severity = "warning" if when == "recovered" else "error"
    else:
        severity = reading.kind  # type: ignore[assignment]
    return BootFinding(
        id=reading.id,
        severity=severity,
        signature=reading.rule,
        kind=reading.kind,
        scope=reading.scope,
        when=when,
        title=reading.title,
        cause=reading.cause,
        fix=reading.fix,
        source=reading.source,
        count=0,
        first_line=line,
        exception_type=exception_type or reading.details.get("exception_type"),
        timestamp=_timestamp_near(scan.log, max(pos, 0)),
        excerpt=_redact(scan.line(line).strip()[:300]),
        details=reading.details,
    )


def _suspected(scan: Scan, ev: Event) -> bool:
    """True when a line of the event (its key line, at most 200 of the others) reads like an instruction to
    an AI agent (`looks_like_instruction`)."""
    return any(looks_like_instruction(scan.line(n)) for n in {ev.key_line, *ev.lines[:200]})


def _failure_findings(
    scan: Scan, ctx: sg.Context, suspected: list[int]
) -> tuple[list[BootFinding], dict[int, int]]:
    """One finding per rule (or per distinct unrecognised line) and place; weights by id(finding). An
    event whose lines read like instructions to an AI agent is no finding: its line goes to ``suspected``."""
    merged: dict[tuple[str, str], BootFinding] = {}
    weights: dict[int, int] = {}
    for ev in scan.events:
        if _suspected(scan, ev):
            suspected.append(ev.key_line)
            continue
        reading = _event_reading(scan, ev, ctx)
        when = _when(scan, ev.key_line, reading.scope)
        body = sg.split_line(scan.line(ev.key_line)).body.strip()
        key = (reading.id if reading.rule else "unrecognised:" + _MASK.sub("#", body)[:200], when)
        span_start = ev.traceback_line or ev.key_line
        found = merged.get(key)
        if found is None:
            found = _finding_at(scan, ev.key_line, reading, when=when, exception_type=ev.exception)
            merged[key] = found
            weights[id(found)] = reading.weight
        found.count += 1
        if len(found.lines) < MAX_FINDING_LINES:
            found.spans.append((span_start, ev.last))
            found.lines.append(ev.key_line)
    return list(merged.values()), weights


def _point_wrappers(findings: list[BootFinding], weights: dict[int, int]) -> None:
    """A wrapper ("See root cause above") or a bare exit status points at the specific failure."""
    specific = [f for f in findings if f.kind == "failure" and f.severity == "error"]
    for w in findings:
        if w.kind not in ("wrapper", "symptom") or w.severity != "error":
            continue
        same = [f for f in specific if f.when == w.when]
        before = [f for f in same if (f.first_line or 0) <= (w.first_line or 0)]
        pool = before or same
        if not pool:
            continue
        target = min(pool, key=lambda f: sg.root_key(weights[id(f)], f.first_line or 0))
        line = target.first_line
        w.details["cause_line"] = str(line)
        w.title = f"{w.title} (cause at line {line})"
        w.cause = f"{w.cause}; the specific error is at line {line}: {target.title}"
        w.fix = f"fix the cause at line {line}: {target.fix}"


def _best(findings: list[BootFinding], weights: dict[int, int], when: When) -> BootFinding | None:
    pool = [f for f in findings if f.when == when and f.severity == "error" and f.kind != "info"]
    return min(pool, key=lambda f: sg.root_key(weights[id(f)], f.first_line or 0)) if pool else None


def _note_findings(scan: Scan, budget: LoggedBudget) -> list[BootFinding]:
    """Info rules (fp8 announced, block size scaled, torchax path), one finding per rule."""
    out: dict[str, BootFinding] = {}
    for hit in scan.notes:
        if looks_like_instruction(scan.line(hit.line)):
            continue
        f = out.get(hit.sig.id)
        if f is None:
            f = _finding_at(scan, hit.line, sg.explain(hit.sig, hit.groups), when=None)
            out[hit.sig.id] = f
        f.count += 1
        if len(f.lines) < MAX_FINDING_LINES:
            f.lines.append(hit.line)
    fp8 = out.get("kv-fp8-auto-logged")
    if fp8 is not None and budget.kv_dtype and not budget.kv_dtype.startswith(("fp8", "float8")):
        fp8.id, fp8.title = "fp8-logged-bf16-allocated", f"fp8 KV announced but {budget.kv_dtype} allocated"
        fp8.cause = (
            f"the platform logged an fp8 KV dtype, but Init kv-cache allocated {budget.kv_dtype}: capacity is "
            "the bf16 figure"
        )
        fp8.fix = "plan with bf16 KV (18,432 B/token for E2B); do not count on fp8 capacity"
    return list(out.values())


def diagnose_boot_text(text: str, *, source: str = "log_text") -> BootDiagnosis:
    """Diagnose one vLLM TPU boot log (container output, any length). Never raises on odd input."""
    scan = scan_text(text)
    log = scan.log
    first_ts_match = _TS.search(text)
    first_ts = first_ts_match.group(1) if first_ts_match else None

    # Facts.
    version = _find(log, "version") or _find(log, "engine_version")
    banner = _find(log, "banner_model")
    tpu = _find(log, "tpu")
    parsed, args_m = sg.logged_args(text)
    args = parsed if parsed or args_m is None else {"_unparsed": _redact(args_m.group(0)[:500])}
    model = str(args.get("model") or args.get("model_tag") or (banner.group(1) if banner else "")) or None
    budget = LoggedBudget()
    mem = _find(log, "memory")
    if mem:
        budget.total_hbm_gib, budget.cap_gib, budget.used_gib, budget.kv_avail_gib = (
            float(g) for g in mem.groups()
        )
    kv_tokens = _find(log, "kv_tokens")
    if kv_tokens:
        budget.kv_tokens = _num(kv_tokens.group(1))
    conc = _find(log, "concurrency")
    if conc:
        budget.concurrency_at_tokens, budget.max_concurrency = _num(conc.group(1)), float(conc.group(2))
    kv_init = _find(log, "kv_init")
    if kv_init:
        budget.kv_layers, budget.kv_blocks = int(kv_init.group(1)), int(kv_init.group(2))
    shape = _find(log, "kv_shape")
    if shape:
        budget.block_size = int(shape.group(1))
    dtype = _find(log, "kv_dtype")
    if dtype:
        budget.kv_dtype = dtype.group(1)
    weights = _find(log, "weights_loaded")
    engine = _find(log, "engine_init")
    warmups = [float(m.group(1)) for m in _FACTS["warmup"].finditer(text)]
    compile_s = float(engine.group(2)) if engine else (round(sum(warmups), 2) if warmups else None)

    # Findings: failures (rules and the fallback), info rules, noise.
    ctx = _context(text, args, version.group(1) if version else None)
    suspected: list[int] = []
    findings, weights_of = _failure_findings(scan, ctx, suspected)
    _point_wrappers(findings, weights_of)
    for f in findings:
        if f.id == "program-allocation-oom" and f.severity == "error":
            if kv_init is not None and log.line_no(kv_init.start()) < (f.first_line or 0):
                f.details["after"] = "KV cache init"
            if budget.cap_gib and budget.total_hbm_gib:
                f.details["hbm_above_cap_gib"] = f"{budget.total_hbm_gib - budget.cap_gib:.2f}"
    root = _best(findings, weights_of, "boot")
    after_start = _best(findings, weights_of, "after start")
    beside = _best(findings, weights_of, "beside")
    started = scan.started_line is not None
    status: Literal["ready", "failed", "incomplete"] = (
        "failed" if root is not None else ("ready" if started else "incomplete")
    )
    findings.extend(_note_findings(scan, budget))

    # Phase timeline.
    phases: list[Phase] = []

    def phase(name: str, m: re.Match[str] | None, detail: str | None = None) -> None:
        if m is None:
            return
        ts = _timestamp_near(log, m.start())
        phases.append(
            Phase(
                phase=name,
                line=log.line_no(m.start()),
                timestamp=ts,
                elapsed_s=_seconds(ts, first_ts),
                detail=detail,
            )
        )

    if first_ts_match:
        phase("first log line", first_ts_match)
    phase("arguments parsed", args_m)
    phase("weights loaded", weights, f"{weights.group(1)} s" if weights else None)
    phase("memory statistics", mem, f"cap {budget.cap_gib} GiB, used {budget.used_gib} GiB" if mem else None)
    phase("KV cache sized", kv_tokens, f"{budget.kv_tokens:,} tokens" if budget.kv_tokens else None)
    phase(
        "KV cache initialized",
        kv_init,
        f"{budget.kv_blocks} blocks x {budget.block_size}" if kv_init else None,
    )
    phase(
        "engine ready (compile done)",
        engine,
        f"{engine.group(1)} s, compilation {engine.group(2)} s" if engine else None,
    )
    phase("application startup complete", _find(log, "startup_complete"))
    for name, cause in (
        ("failure", root),
        ("failure after start", after_start),
        ("failure beside serving", beside),
    ):
        if cause is not None and cause.first_line:
            phases.append(
                Phase(
                    phase=name,
                    line=cause.first_line,
                    timestamp=cause.timestamp,
                    elapsed_s=_seconds(cause.timestamp, first_ts),
                    detail=cause.title,
                )
            )
    phases.sort(key=lambda p: p.line)

    cross = _cross_check(model, tpu.group(1) if tpu else None, args, budget, _find(log, "max_len"))
    if cross is not None and abs(cross.deviation_pct) > 2:
        findings.append(
            BootFinding(
                id="kv-pool-mismatch",
                severity="warning",
                title="logged KV pool differs from the plan",
                cause=cross.verdict,
                fix="check the model config, kv dtype and accelerator type used for planning",
                source="sizing cross-check",
            )
        )
    if not _find(log, "compile_cache") and (mem or started):
        findings.append(
            BootFinding(
                id="compile-cache-off",
                severity="info",
                title="JAX compile cache not enabled",
                cause="no 'Enabling JAX compile cache' line: every boot recompiles (cold 857 s vs warm 497 s)",
                fix="mount ~/.cache/vllm into the container",
                source="seed (DESIGN §3)",
            )
        )
    if model and re.search(r"gemma-?4", model, re.I) and args and not args.get("enable_auto_tool_choice"):
        findings.append(
            BootFinding(
                id="tool-flags-not-set",
                severity="warning",
                title="tool calling flags not set",
                cause="Gemma 4 was started without --enable-auto-tool-choice / --tool-call-parser: tool requests get HTTP 400",
                fix="--enable-auto-tool-choice --tool-call-parser gemma4 --reasoning-parser gemma4",
                source="DESIGN §3",
            )
        )
    order = {"error": 0, "warning": 1, "info": 2, "noise": 3}
    findings.sort(
        key=lambda f: (order[f.severity], *sg.root_key(weights_of.get(id(f), 0), f.first_line or 10**9))
    )
    for f in findings:
        f.weight = weights_of.get(id(f))
    return BootDiagnosis(
        source=source,
        lines=len(log.newlines) + (0 if text.endswith("\n") or not text else 1),
        status=status,
        vllm_version=version.group(1) if version else None,
        model=model,
        tpu_type=tpu.group(1) if tpu else None,
        non_default_args=args,
        phases=phases,
        budget=budget,
        weights_load_s=float(weights.group(1)) if weights else None,
        compile_s=compile_s,
        engine_init_s=float(engine.group(1)) if engine else None,
        compile_cache_enabled=bool(_find(log, "compile_cache")),
        cross_check=cross,
        root_cause=root,
        after_start=after_start,
        beside=beside,
        unrecognised=sum(f.signature is None and f.kind == "failure" for f in findings),
        findings=findings,
        suspected_injection=sorted(set(suspected))[:MAX_FINDING_LINES],
        noise={k: len(v) for k, v in scan.noise.items()},
        noise_lines={k: v[:MAX_FINDING_LINES] for k, v in scan.noise.items()},
    )


def _cross_check(
    model: str | None,
    tpu_type: str | None,
    args: dict[str, Any],
    b: LoggedBudget,
    max_len_m: re.Match[str] | None,
) -> CrossCheck | None:
    """Compare the logged KV tokens with `sizing` (bundled configs only: no network here)."""
    if not (model and tpu_type and b.kv_tokens and b.total_hbm_gib and b.cap_gib and b.used_gib):
        return None
    from tpu_devops.catalog import resolve_accelerator_type
    from tpu_devops.errors import TpuDevopsError
    from tpu_devops.planning import sizing

    if sizing.bundled_config_path(model) is None:
        return None
    try:
        accel = resolve_accelerator_type(tpu_type)
        cfg, _, _ = sizing.load_model_config(model)
        geom = sizing.geometry_from_config(cfg, model=model)
        util = float(args.get("gpu_memory_utilization") or round(b.cap_gib / b.total_hbm_gib, 2))
        max_len = int(
            args.get("max_model_len")
            or (max_len_m.group(1) if max_len_m else 0)
            or geom.max_position_embeddings
            or 8192
        )
        plan = sizing.plan_from_geometry(
            geom,
            accel,
            weights_gib=b.used_gib,
            weights_source="logged total_hbm_used_gb",
            gpu_memory_utilization=util,
            max_model_len=max_len,
            tensor_parallel_size=int(args.get("tensor_parallel_size") or 1),
        )
    except (TpuDevopsError, ValueError, TypeError):
        return None
    if plan.kv_tokens is None:  # not reached while the logged weights are passed in: nothing to compare
        return None
    deviation = (plan.kv_tokens - b.kv_tokens) / b.kv_tokens * 100
    implied = round(b.kv_avail_gib * 2**30 / b.kv_tokens, 1) if b.kv_avail_gib else None
    agree = abs(deviation) <= 0.5
    verdict = (
        f"plan {plan.kv_tokens:,} vs logged {b.kv_tokens:,} tokens ({deviation:+.2f}%): "
        + ("agrees" if agree else "differs")
        + f"; config geometry gives {plan.kv.bytes_per_token:,} B/token"
        + (f", the log implies {implied:,.0f}" if implied else "")
    )
    return CrossCheck(
        model=model,
        accelerator_type=accel.name,
        gpu_memory_utilization=util,
        max_model_len=max_len,
        bytes_per_token_config=plan.kv.bytes_per_token,
        bytes_per_token_implied=implied,
        predicted_kv_tokens=plan.kv_tokens,
        logged_kv_tokens=b.kv_tokens,
        deviation_pct=round(deviation, 3),
        catalog_hbm_gib=accel.generation.hbm_gib_visible,
        logged_hbm_gib=b.total_hbm_gib,
        agrees=agree,
        verdict=verdict,
    )


def refuse_two_sources(node: str, log_text: str | None, path: str | None) -> None:
    """With ``node`` the log comes from Cloud Logging: a pasted log or a path as well is ambiguous.

    Raises:
        InputError: ``log_text`` or ``path`` given together with ``node``.
    """
    if log_text or path:
        raise InputError(
            "give one log source: node (read from Cloud Logging), log_text or path",
            field="node",
            value=node,
            fix="drop node to diagnose the pasted text or the file, or drop log_text/path to read the node's log",
        )


def _looks_like_json(p: Path) -> bool:
    """True when the file's first non-blank character opens a JSON array or object (a log export)."""
    with files.open_regular(p, field="path", value=str(p), max_bytes=MAX_LOG_BYTES, binary=True) as fh:
        head = fh.read(4096).lstrip()
    return head[:1] in (b"[", b"{")


def read_export_text(path: str) -> tuple[str, int]:
    """The messages of a Cloud Logging export (``gcloud logging read --format=json`` array, JSON lines,
    or ``{"entries": [...]}``), redacted, oldest first, one per line: the text ``docker logs`` would show.

    Exports list the newest entry first; entries are sorted by ``timestamp`` (stable; entries without one
    keep their place at the start). Returns ``(text, entry_count)``.

    Raises:
        InputError: malformed JSON, or no LogEntry with a message in the file.
    """
    from tpu_devops.logs.sources import FileSource

    source = FileSource(path, max_entries=500_000)
    records = [r for page in source.pages() for r in page]
    records = [r for r in records if r.message.strip()]
    if not records:
        raise InputError(
            "a JSON file with no log entries (no LogEntry with textPayload or jsonPayload.message)",
            field="path",
            value=path,
            fix="pass a Cloud Logging export (gcloud logging read --format=json) or the container's plain-text "
            "output (docker logs vllm > boot.log); summarize_logs reads other exports",
        )
    stamps = [e for e in (r.epoch() for r in records) if e is not None]
    if len(stamps) > 1 and stamps[0] > stamps[-1]:
        records.reverse()  # newest first (gcloud's order): entries with equal timestamps come out in order
    records.sort(key=lambda r: r.epoch() or 0.0)
    return "\n".join(r.message for r in records), len(records)


def diagnose_vllm_boot(
    log_text: str | None = None, path: str | None = None, *, settings: Settings | None = None
) -> BootDiagnosis:
    """Tool entry point: diagnose a boot log given as text or as a file path.

    A file may be plain text (``docker logs vllm``) or a Cloud Logging export (JSON array / JSON lines of
    LogEntry, newest first): an export's messages are diagnosed in timestamp order. The path must lie
    under the directories tools may read (`tpu_devops.host.files`; ``settings`` default: the process's).

    Raises:
        InputError: neither or both inputs, missing/unreadable file, not a regular file, file over
        512 MiB, outside the allowed directories, empty log, a JSON file without log entries.
    """
    if (log_text is None or log_text == "") == (path is None or path == ""):
        raise InputError(
            "give exactly one of log_text, path or node",
            field="log_text" if not path else "path",
            value=None,
            fix="paste the container log as log_text, pass the path of a saved log file (plain text or a "
            "Cloud Logging JSON export), or pass node (a TPU node / queued resource id) to read it from "
            "Cloud Logging",
        )
    if path:
        from tpu_devops.config import get_settings

        p = files.readable_file(settings or get_settings(), path, field="path", max_bytes=MAX_LOG_BYTES)
        try:
            if _looks_like_json(p):
                text, entries = read_export_text(str(p))
                source = f"{p} (Cloud Logging export, {entries:,} entries, oldest first)"
            else:
                # newline="" keeps lone \r (progress bars) inside their line, so line numbers match grep -n.
                with files.open_regular(
                    p, field="path", value=path, max_bytes=MAX_LOG_BYTES, newline=""
                ) as fh:
                    text = fh.read(MAX_LOG_BYTES + 1)
                source = str(p)
        except OSError as exc:
            raise InputError(
                f"cannot read: {exc.strerror}", field="path", value=path, fix="check permissions"
            ) from None
    else:
        text = log_text or ""
        source = "log_text"
    if not text.strip():
        raise InputError(
            "the log is empty",
            field="path" if path else "log_text",
            value=path,
            fix="pass the vLLM container output",
        )
    diagnosis = diagnose_boot_text(text, source=source)
    if not diagnosis.recognised():
        raise InputError(
            f"no vLLM boot line found in {diagnosis.lines:,} line(s): no version, no 'non-default args', "
            "no memory statistics or KV cache lines, no known failure",
            field="path" if path else "log_text",
            value=path or text[:80],
            fix="pass the vLLM container's output (docker logs vllm), or the node id to read it from Cloud Logging",
        )
    return diagnosis
