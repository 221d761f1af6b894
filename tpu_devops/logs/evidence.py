"""Root-cause ranking and the evidence pack: the summary a small model (or a person) reads first.

Each template is read with the same rule table as `diagnose_vllm_boot` (`logs.rules` through
`logs.signatures`), on its exemplars' full text:

- a rule match gives the template its reading (cause, fix, the numbers read out) and the rule's weight
  (failures 60-100, symptoms 25, wrappers -60, known noise -100: noise is never a root cause, whatever
  its severity);
- otherwise the fallback classifies the line by content and severity: an exception line (45), an
  ERROR/CRITICAL line (40; an entry's own severity counts when the text has no level), a failure worded
  at a lower level by a non-vLLM writer such as the startup-script runner (30: ``docker: Error response
  from daemon ...`` is logged at INFO); these are "unrecognised failures", listed as such;
- traceback furniture (frames, code lines, ``^^^`` markers, separators) ranks last (-400);
- a failure whose last entry comes before the last boot milestone (``Application startup complete``,
  KV cache sized, ...; `logs.rules.MILESTONES`) did not stop the boot: it is shown as recovered and is
  not a root cause.

Ranking: weight, then position (the earliest first: the first failure of a burst is usually the cause),
then severity. The root cause is the first ranked template that is a failure; `diagnose_vllm_boot`
picks the same one from the same text.

The pack is plain text within a token budget (default 6,000; Gemma 4 E2B works best with short
prompts). Tokens are the calibrated Gemma estimate of `tpu_devops.serving.tokens` (log text runs 1.6-2.0
characters per token: every digit and most punctuation is a token). Every distinct ERROR-or-worse
template and every failure template is always listed (compact form if needed); exemplars and the rest
fill the budget in rank order. A line that reads like an instruction to an AI agent
(`tpu_devops.host.untrusted`) ranks last and is never a root cause.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.errors import InputError
from tpu_devops.host.results import MAX_EVIDENCE_TOKENS, Table, ToolResult
from tpu_devops.host.untrusted import (
    UntrustedContent,
    UntrustedData,
    fence,
    injection_notice,
    inline,
    looks_like_instruction,
    neutralize,
    untrusted_data,
)
from tpu_devops.logs import signatures as sg
from tpu_devops.logs.filters import SEVERITIES, SEVERITY_RANK
from tpu_devops.logs.mining import MiningResult, TemplateStats, TemplateView, mine
from tpu_devops.logs.signatures import Reading, Signature, SignatureHit
from tpu_devops.logs.sources import LogRecord, LogSource, ReadState, read_state, truncation_notice
from tpu_devops.serving.tokens import estimate_tokens

# First guess of characters per token when filling a budget; the pack is then checked with the
# estimate and refilled smaller until it fits (bundled packs measure 1.88-2.03 characters per token).
CHARS_PER_TOKEN = 1.9
DEFAULT_TOKEN_BUDGET = 6000
ERROR_RANK = SEVERITY_RANK["ERROR"]

FURNITURE_WEIGHT = -400
TRACEBACK_WEIGHT = -399  # furniture, unless no exception or failure line exists at all (a cut-off log)
RECOVERED_WEIGHT = 15  # below every failure, above ordinary lines
# An injected instruction ranks below everything and is never a root cause (`tpu_devops.host.untrusted`).
INJECTION_PENALTY = 10_000


@dataclass
class Ranked:
    """A template with its reading (a rule's, or the unrecognised-failure fallback's) and its rank."""

    stats: TemplateStats
    score: float
    signature: Signature | None
    reading: Reading | None = None
    weight: int = 0
    recovered: bool = False
    injection: bool = False  # reads like an instruction to an AI agent: data, never a finding

    @property
    def failure(self) -> bool:
        """A failure, symptom or wrapper (known or unrecognised), not known noise."""
        return self.reading is not None and self.reading.kind in ("failure", "symptom", "wrapper")


def is_root_cause(r: Ranked) -> bool:
    """True when ``r`` may be reported as a root cause: a failure (known or unrecognised) that later
    boot progress does not contradict. Known noise never is, whatever its severity."""
    return r.failure and not r.recovered and not r.injection


def check_token_budget(token_budget: int) -> int:
    """``token_budget`` as an int; raises InputError (field ``token_budget``) outside
    500..`MAX_EVIDENCE_TOKENS` (the largest evidence that keeps an answer under the hosts' size limit)."""
    if not 500 <= int(token_budget) <= MAX_EVIDENCE_TOKENS:
        raise InputError(
            "token_budget out of range",
            field="token_budget",
            value=token_budget,
            fix=f"use 500 to {MAX_EVIDENCE_TOKENS} (larger evidence would not fit in one tool answer)",
        )
    return int(token_budget)


def _read_template(
    t: TemplateStats, ctx: sg.Context, newest_first: bool = False
) -> tuple[Reading | None, Signature | None, int]:
    """(reading, rule, weight) of a template from its exemplars' full text, and for an exception header
    that announces its reason on the next lines, from those lines (the records that follow it in time:
    after it in the stream, or before it when the stream lists the newest first)."""
    best: tuple[Reading, Signature] | None = None
    for ex in t.exemplars or []:
        for line in ex.message.splitlines() or [ex.message]:
            for sig in sg.match_line(line):
                m = sig.search(line)
                if m is None:
                    continue
                if (
                    best is None
                    or sig.weight > best[1].weight
                    or (sig.kind == "noise" and best[1].kind != "noise")
                ):
                    best = (sg.explain(sig, m.groupdict(), ctx), sig)
                break
    if best is None and not t.exemplars:
        rule = sg.match(t.template)
        if rule is not None:
            best = (sg.explain(rule, {}, ctx), rule)
    if best is not None:
        return best[0], best[1], best[1].weight
    first = t.exemplars[0] if t.exemplars else None
    message = first.message if first else t.template
    reason = None
    if first is not None and (following := first.before if newest_first else first.after):
        continued, reason = sg.read_continued(message, following, ctx)
        if continued is not None and continued.rule is not None:
            return continued, sg.BY_ID[continued.rule], continued.weight
    parts = sg.split_line(message.splitlines()[0] if message else "")
    if parts.level is None and SEVERITY_RANK.get(first.severity if first else t.severity, 0) >= ERROR_RANK:
        parts = sg.LineParts(parts.proc, "ERROR", parts.src, parts.body)  # the entry's own severity
    kind = sg.classify(parts)
    if kind == "traceback":
        return None, None, TRACEBACK_WEIGHT
    if kind in ("furniture", "indented"):
        return None, None, FURNITURE_WEIGHT
    if kind in sg.FALLBACK:
        return sg.unrecognised(message.splitlines()[0], kind, reason), None, sg.FALLBACK[kind]
    return None, None, 0


def _position(t: TemplateStats, newest_first: bool) -> tuple[float, int]:
    first = t.first_epoch if t.first_epoch is not None else math.inf
    return (first, -t.last_order if newest_first else t.order)


def _last_position(t: TemplateStats, newest_first: bool) -> tuple[float, int]:
    last = t.last_epoch if t.last_epoch is not None else -math.inf
    return (last, -t.order if newest_first else t.last_order)


def context_of(result: MiningResult) -> sg.Context:
    """The evidence context (logged arguments, quantization) from the templates' exemplars."""
    return sg.context_from_lines(ex.message for t in result.templates for ex in t.exemplars)


def rank(result: MiningResult, context: sg.Context | None = None) -> list[Ranked]:
    """Templates ordered root cause first (see the module docstring)."""
    ctx = context if context is not None else context_of(result)
    down = result.newest_first
    last_ok: tuple[float, int] | None = None
    for t in result.templates:
        if any(sg.milestone_of(ex.message) for ex in t.exemplars):
            pos = _last_position(t, down)
            last_ok = pos if last_ok is None or pos > last_ok else last_ok
    ranked: list[Ranked] = []
    for t in result.templates:
        reading, sig, weight = _read_template(t, ctx, down)
        r = Ranked(t, 0.0, sig, reading, weight)
        if r.failure and last_ok is not None and _last_position(t, down) < last_ok:
            r.recovered = True
        r.injection = looks_like_instruction(t.template) or any(
            looks_like_instruction(e.message) for e in t.exemplars
        )
        ranked.append(r)
    if not any(r.failure for r in ranked):
        for r in ranked:
            if r.weight == TRACEBACK_WEIGHT:  # a traceback whose exception line never came
                line = r.stats.exemplars[0].message if r.stats.exemplars else r.stats.template
                r.reading, r.weight = sg.unrecognised(line, "traceback"), sg.FALLBACK["traceback"]
                r.recovered = last_ok is not None and _last_position(r.stats, down) < last_ok
    for r in ranked:
        r.score = _effective(r) * 100.0 + SEVERITY_RANK.get(r.stats.severity, 0)
    ranked.sort(
        key=lambda r: (-_effective(r), _position(r.stats, down), -SEVERITY_RANK.get(r.stats.severity, 0))
    )
    return ranked


def _effective(r: Ranked) -> int:
    if r.injection:
        return -INJECTION_PENALTY
    return min(r.weight, RECOVERED_WEIGHT) if r.recovered else r.weight


def root_of(ranked: list[Ranked]) -> Ranked | None:
    """The root-cause template: the first ranked one that `is_root_cause`."""
    return next((r for r in ranked if is_root_cause(r)), None)


def signature_hits(ranked: list[Ranked]) -> list[SignatureHit]:
    """Matched rules (highest weight first), each with its templates and example insertIds."""
    hits: dict[str, SignatureHit] = {}
    for r in ranked:
        sig, reading = r.signature, r.reading
        if sig is None or reading is None or r.injection:  # a suspected injection is never a finding
            continue
        hit = hits.get(reading.id)
        if hit is None:
            hit = SignatureHit(
                id=reading.id,
                category=sig.category,
                title=reading.title,
                weight=sig.weight,
                cause=reading.cause,
                fix=reading.fix,
                source=reading.source,
                kind=sig.kind,
                scope=sig.scope,
                details=reading.details,
            )
            hits[reading.id] = hit
        hit.templates.append(r.stats.id)
        hit.count += r.stats.count
        for ex in r.stats.exemplars:
            if len(hit.insert_ids) < 4 and ex.insert_id not in hit.insert_ids:
                hit.insert_ids.append(ex.insert_id)
    return sorted(hits.values(), key=lambda h: -h.weight)


def _short_time(ts: str) -> str:
    return ts[11:19] if len(ts) >= 19 else ts


def _template_line(t: TemplateStats, result: MiningResult, width: int) -> str:
    text = neutralize(t.template.strip())
    if len(text) > width:
        text = text[: width - 1] + "…"
    if width <= 80:  # compact form under a tight budget: no span or rate
        return f"{t.id} {t.severity} x{t.count}: {text}"
    rate = result.rate_per_min(t)
    rate_s = f" {rate:g}/min" if rate is not None else ""
    span = f" {_short_time(t.first_seen)}..{_short_time(t.last_seen)}" if t.first_seen else ""
    return f"{t.id} {t.severity} x{t.count}{span}{rate_s}: {text}"


def _exemplar_lines(t: TemplateStats, width: int) -> list[str]:
    lines = []
    for ex in t.exemplars:
        msg = neutralize(ex.message.strip())
        if len(msg) > width:
            msg = msg[: width - 1] + "…"
        lines.append(f"  [{ex.insert_id}] {ex.timestamp} {msg}")
    return lines


class EvidencePack(BaseModel):
    """The text the model reads, and what it holds."""

    text: str
    tokens: int
    token_budget: int
    templates_included: list[str]
    templates_omitted: int
    error_templates: int
    insert_ids: list[str]


def _must_list(r: Ranked) -> bool:
    """Listed whatever the budget: ERROR-or-worse templates and every failure template."""
    return SEVERITY_RANK.get(r.stats.severity, 0) >= ERROR_RANK or r.failure


def build_pack(
    result: MiningResult,
    ranked: list[Ranked],
    hits: list[SignatureHit],
    *,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    source: str = "",
) -> EvidencePack:
    """Assemble the evidence pack within ``token_budget`` (estimated tokens), root cause first: filled
    by characters, then refilled smaller while the token estimate is over the budget."""
    budget_chars = int(token_budget * CHARS_PER_TOKEN) - 80  # room for the 'omitted' line
    pack = _fill_pack(result, ranked, hits, token_budget, budget_chars, source)
    for _ in range(6):
        if pack.tokens <= token_budget:
            break
        budget_chars = int(budget_chars * token_budget / pack.tokens * 0.97)
        pack = _fill_pack(result, ranked, hits, token_budget, budget_chars, source)
    return pack


def _fill_pack(
    result: MiningResult,
    ranked: list[Ranked],
    hits: list[SignatureHit],
    token_budget: int,
    budget_chars: int,
    source: str,
) -> EvidencePack:
    sev = ", ".join(f"{s} {result.severities[s]}" for s in reversed(SEVERITIES) if result.severities.get(s))
    minutes = f" ({result.window_s / 60:.1f} min)" if result.window_s else ""
    head = [
        f"SOURCE {source}".rstrip(),
        f"WINDOW {result.first_seen or '?'} .. {result.last_seen or '?'}{minutes}; {result.total} entries: {sev}",
    ]
    root = root_of(ranked)
    if root is not None:
        what = root.reading.title if root.reading else root.stats.template[:100]
        head.append(f"TOP CANDIDATE {root.stats.id} ({what})")
    if hits:
        head.append("KNOWN SIGNATURES (strongest first)")
        for h in hits[:6]:
            if h.kind == "noise":
                continue
            head.append(
                f"- {h.id}: {h.title}; cause: {h.cause}; fix: {h.fix}; templates {','.join(h.templates[:5])}; "
                f"entries {','.join(h.insert_ids[:3])}"
            )
    unknown = [r for r in ranked if r.failure and r.signature is None]
    if unknown:
        head.append("UNRECOGNISED FAILURES (no rule explains them; read them)")
        for r in unknown[:6]:
            state = " (recovered: later progress)" if r.recovered else ""
            head.append(f"- {r.stats.id}{state}: {neutralize((r.reading.title if r.reading else '')[:200])}")
    noise = [h for h in hits if h.kind == "noise"]
    if noise:
        head.append(
            "KNOWN HARMLESS (never a root cause): "
            + ", ".join(f"{h.id} {','.join(h.templates[:3])}" for h in noise)
        )
    head.append("TEMPLATES (root cause first; [insertId] exemplars)")
    used = sum(len(x) + 1 for x in head)
    errors = [r for r in ranked if _must_list(r)]
    width = 160
    compact_cost = sum(len(_template_line(r.stats, result, width)) + 1 for r in errors)
    while used + compact_cost > budget_chars and width > 30:
        width -= 20
        compact_cost = sum(len(_template_line(r.stats, result, width)) + 1 for r in errors)
    reserved = compact_cost
    body: list[str] = []
    included: list[str] = []
    ids: list[str] = []
    omitted = 0
    for r in ranked:
        t = r.stats
        is_error = _must_list(r)
        line = _template_line(t, result, width if is_error else min(width, 140))
        ex_lines = [] if r.weight in (FURNITURE_WEIGHT, TRACEBACK_WEIGHT) else _exemplar_lines(t, 220)
        full = len(line) + 1 + sum(len(x) + 1 for x in ex_lines)
        if is_error:
            reserved -= len(line) + 1
        if used + full + reserved <= budget_chars:
            body.append(line)
            body.extend(ex_lines)
            used += full
            ids.extend(ex.insert_id for ex in t.exemplars if ex_lines)
        elif is_error or used + len(line) + 1 + reserved <= budget_chars:
            body.append(line)
            used += len(line) + 1
        else:
            omitted += 1
            continue
        included.append(t.id)
    if omitted:
        body.append(f"({omitted} lower-ranked templates omitted for the token budget)")
    text = "\n".join(head + body)
    return EvidencePack(
        text=text,
        tokens=estimate_tokens(text),
        token_budget=token_budget,
        templates_included=included,
        templates_omitted=omitted,
        error_templates=len(errors),
        insert_ids=ids,
    )


class RootCause(BaseModel):
    """The root-cause template and what it means: a rule's reading, or an unrecognised failure."""

    template_id: str
    template: str
    severity: str
    count: int
    first_seen: str
    insert_ids: list[str]
    signature: str | None = None
    kind: str | None = None
    scope: str | None = None
    title: str | None = None
    cause: str | None = None
    fix: str | None = None
    details: dict[str, str] = {}
    exception_type: str | None = None
    line: str | None = None


class FailureView(BaseModel):
    """A failure template no rule explains (listed, never dropped)."""

    template_id: str
    severity: str
    count: int
    first_seen: str
    line: str
    exception_type: str | None = None
    recovered: bool = False
    insert_ids: list[str] = []


class SummaryResult(UntrustedContent, ToolResult):
    """Template summary of a log source: root cause first, signatures, ranked templates, evidence. Templates,
    exemplars, failure lines and the evidence text are log text: untrusted data, fenced in the text
    rendering."""

    untrusted: UntrustedData = untrusted_data(
        "logs",
        "root_cause.template",
        "root_cause.line",
        "root_cause.details",
        "signatures[].details",
        "unrecognised[].line",
        "templates[].template",
        "templates[].exemplars",
        "evidence",
    )

    source: str
    entries: int
    templates_total: int
    first_seen: str
    last_seen: str
    severities: dict[str, int]
    root_cause: RootCause | None = None
    signatures: list[SignatureHit] = []
    unrecognised: list[FailureView] = []
    noise: dict[str, int] = {}
    templates: Table[TemplateView] = []
    evidence_tokens: int = 0
    suspected_injection: list[str] = Field(
        default=[], description="template ids whose text reads like instructions to an AI agent"
    )
    notices: list[str] = []
    # False when the read stopped before the end of the source: ``not_read`` says what it left out and
    # ``read_how`` how to read it; a summary without a failure is then not a clean bill of health.
    read_complete: bool = True
    not_read: str | None = None
    read_how: str | None = None
    # the readable evidence pack: the text form shows it; the structured form has templates and signatures
    evidence: str = Field(default="", exclude=True)

    def headline(self) -> str:
        if self.root_cause is None:
            recovered = sum(u.recovered for u in self.unrecognised)
            tail = (
                f"; {recovered} earlier failure template(s) did not stop later progress" if recovered else ""
            )
            if not self.read_complete:
                return (
                    f"No failure in the {self.entries:,} entries read, but the read stopped early: "
                    f"{self.not_read or 'part of the source'} not read ({self.read_how}); a failure there "
                    "would not show here" + tail
                )
            return (
                f"No failure after the last milestone in {self.entries} entries ({self.templates_total} templates)"
                + tail
            )
        rc = self.root_cause
        # A template without a reading is only log text: quoted inside the delimiters.
        what = rc.title or inline(rc.template[:100])
        return f"Root cause candidate {rc.template_id}: {what} (x{rc.count}, first {rc.first_seen or '?'})"

    def render_text(self) -> str:
        lines = [self.headline()]
        if self.root_cause and self.root_cause.fix:
            lines.append(f"Fix: {self.root_cause.fix}")
        if self.root_cause:
            rc = self.root_cause
            tags = ", ".join(x for x in (rc.signature, rc.kind, rc.scope) if x)
            lines.append(f"root cause: {rc.template_id} {rc.severity} x{rc.count} [{tags}]")
        if self.signatures:
            lines.append(
                "signatures: "
                + "; ".join(
                    f"{h.id} ({', '.join(x for x in (h.category, getattr(h, 'kind', None), getattr(h, 'scope', None)) if x)}) x{h.count}"
                    for h in self.signatures
                )
            )
        lines.append(
            f"{self.entries:,} entries, {self.templates_total} templates, {self.first_seen} .. {self.last_seen}; "
            f"evidence {self.evidence_tokens:,} tokens"
        )
        lines += [f"note: {n}" for n in self.notices]
        lines.append(fence(self.evidence))
        return "\n".join(lines)


@dataclass
class Summary:
    """Everything a summary produced (the analyst reuses the mining result and ranking)."""

    mining: MiningResult
    ranked: list[Ranked]
    hits: list[SignatureHit]
    pack: EvidencePack


def summarize_mining(
    result: MiningResult,
    *,
    source: str,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    context: sg.Context | None = None,
) -> Summary:
    """Rank, match rules and pack an already-mined result (``context``: the logged arguments, else read
    from the exemplars)."""
    ranked = rank(result, context)
    hits = signature_hits(ranked)
    pack = build_pack(result, ranked, hits, token_budget=token_budget, source=source)
    return Summary(result, ranked, hits, pack)


def to_result(
    summary: Summary, *, source: str, notices: list[str], top: int = 15, read: ReadState | None = None
) -> SummaryResult:
    """The `SummaryResult` tools return; ``read``: what the read covered (`logs.sources.read_state`)."""
    read = read or ReadState(True)
    result = summary.mining
    root = None
    r = root_of(summary.ranked)
    if r is not None and r.reading is not None:
        first = r.stats.exemplars[0].message.splitlines()[0] if r.stats.exemplars else r.stats.template
        root = RootCause(
            template_id=r.stats.id,
            template=r.stats.template,
            severity=r.stats.severity,
            count=r.stats.count,
            first_seen=r.stats.first_seen,
            insert_ids=[e.insert_id for e in r.stats.exemplars],
            signature=r.reading.id if r.signature else None,
            kind=r.reading.kind,
            scope=r.reading.scope,
            title=r.reading.title,
            cause=r.reading.cause,
            fix=r.reading.fix,
            details=r.reading.details,
            exception_type=r.reading.details.get("exception_type"),
            line=first[:500],
        )
    unknown = [
        FailureView(
            template_id=x.stats.id,
            severity=x.stats.severity,
            count=x.stats.count,
            first_seen=x.stats.first_seen,
            line=(x.stats.exemplars[0].message.splitlines()[0] if x.stats.exemplars else x.stats.template)[
                :500
            ],
            exception_type=x.reading.details.get("exception_type") if x.reading else None,
            recovered=x.recovered,
            insert_ids=[e.insert_id for e in x.stats.exemplars],
        )
        for x in summary.ranked
        if x.failure and x.signature is None
    ]
    suspected = [x.stats.id for x in summary.ranked if x.injection]
    if suspected:
        notices = [*notices, injection_notice(suspected, "templates")]
    return SummaryResult(
        source=source,
        entries=result.total,
        templates_total=len(result.templates),
        first_seen=result.first_seen,
        last_seen=result.last_seen,
        severities=result.severities,
        root_cause=root,
        signatures=[h for h in summary.hits if h.kind != "noise"],
        unrecognised=unknown,
        noise={h.id: h.count for h in summary.hits if h.kind == "noise"},
        templates=[result.view(x.stats) for x in summary.ranked[:top]],
        evidence_tokens=summary.pack.tokens,
        suspected_injection=suspected,
        notices=notices,
        read_complete=read.complete,
        not_read=read.not_read,
        read_how=read.how,
        evidence=summary.pack.text,
    )


def _observe(pages: Iterable[list[LogRecord]], lines: list[str]) -> Iterator[list[LogRecord]]:
    """Pass pages through, keeping the lines that give the context (arguments, quantization, the vLLM
    version)."""
    args = version = False
    for page in pages:
        for record in page:
            msg = record.message
            logged = "non-default args:" in msg or "args: Namespace(" in msg
            if (logged and not args) or ("Qwix" in msg and len(lines) < 20):
                lines.append(msg)
                args = args or logged
            elif not version and "version " in msg and sg.VERSION_LINE.search(msg):
                lines.append(msg)
                version = True
        yield page


def summarize_source(source: LogSource, *, token_budget: int = DEFAULT_TOKEN_BUDGET) -> SummaryResult:
    """Mine a whole source (streaming its pages) and return the ranked summary.

    Raises whatever the source raises (InputError for unreadable files, cloud errors).
    """
    context_lines: list[str] = []
    result = mine(_observe(source.pages(), context_lines))
    name = source.describe()
    context = sg.context_from_lines(context_lines) if context_lines else None
    summary = summarize_mining(result, source=name, token_budget=token_budget, context=context)
    notices = []
    if stopped := truncation_notice(source, "summary"):
        notices.append(stopped)
    if notice := source.redactor.notice():
        notices.append(notice)
    return to_result(summary, source=name, notices=notices, read=read_state(source))


def summarize_logs(
    settings: Any, *, token_budget: int = DEFAULT_TOKEN_BUDGET, **source_args: Any
) -> SummaryResult:
    """`summarize_source` over `tpu_devops.logs.sources.open_source` (file path or Cloud Logging query).

    Raises:
        InputError: token_budget outside 500..MAX_EVIDENCE_TOKENS, or bad source arguments.
    """
    from tpu_devops.logs.sources import open_source

    budget = check_token_budget(token_budget)
    return summarize_source(open_source(settings, **source_args), token_budget=budget)
