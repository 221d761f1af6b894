"""Root-cause ranking and the evidence pack: the summary a small model (or a person) reads first.

Ranking (highest first): a known root-cause signature (`logs.signatures`, weight x 10), severity
(rank x 20), an exception header line (``SomethingError: ...``, +200); traceback furniture (frames,
``^^^`` markers, code lines, separators) -400, and wrapper lines ("See root cause above") carry a
negative signature weight. Ties go to the earliest template: the first exception of a failure burst
is usually the cause and the rest are consequences.

The pack is plain text within a token budget (default 6,000; Gemma 4 E2B works best with short
prompts). Tokens are the calibrated Gemma estimate of `tpu_devops.tokens` (log text runs 1.6-2.0
characters per token: every digit and most punctuation is a token). Every distinct ERROR-or-worse
template is always listed (compact form if needed); exemplars and lower-severity templates fill the
rest of the budget in rank order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.errors import InputError
from tpu_devops.logs.filters import SEVERITIES, SEVERITY_RANK
from tpu_devops.logs.mining import MiningResult, TemplateStats, TemplateView, mine
from tpu_devops.logs.signatures import Signature, SignatureHit, match
from tpu_devops.logs.sources import LogSource
from tpu_devops.results import ToolResult
from tpu_devops.tokens import estimate_tokens
from tpu_devops.untrusted import (
    UntrustedContent,
    UntrustedData,
    fence,
    injection_notice,
    inline,
    looks_like_instruction,
    neutralize,
    untrusted_data,
)

# First guess of characters per token when filling a budget; the pack is then checked with the
# estimate and refilled smaller until it fits (bundled packs measure 1.88-2.03 characters per token).
CHARS_PER_TOKEN = 1.9
DEFAULT_TOKEN_BUDGET = 6000
ERROR_RANK = SEVERITY_RANK["ERROR"]

_NOISE = re.compile(
    r"""^(?:[\^~\s]+$|File\s|Traceback \(most recent call last\)|-{3,}\s*$|For simplicity, JAX has removed"""
    r"""|(?:return|raise|yield|await|async with|with|del|assert)\b|self\.|[\w.\[\]]+\s*(?::\s*[\w\[\], .]+)?\s*=\s*[\w.]+\("""
    r"""|.*\($|[\w.]+(?:\(\))?(?:\.[\w]+)*\(.*\)$)"""
)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Failure|Exit|Interrupt)\b(?::|$)")
# An injected instruction ranks below everything and is never a root cause (`tpu_devops.untrusted`).
INJECTION_PENALTY = 10_000


def is_noise(template: str) -> bool:
    """True for traceback furniture: frames, ``^^^`` markers, separators, code lines."""
    text = template.strip()
    return not text or (bool(_NOISE.match(text)) and not _EXCEPTION.match(text))


@dataclass
class Ranked:
    """A template with its score and the signature it matched (if any)."""

    stats: TemplateStats
    score: float
    signature: Signature | None
    injection: bool = False  # reads like an instruction to an AI agent: data, never a finding


def is_root_cause(r: Ranked) -> bool:
    """True when ``r`` may be reported as a root cause: ERROR or worse, or a root-cause signature
    (weight >= 50)."""
    if r.injection:
        return False
    return SEVERITY_RANK.get(r.stats.severity, 0) >= ERROR_RANK or (
        r.signature is not None and r.signature.weight >= 50
    )


def check_token_budget(token_budget: int) -> int:
    """``token_budget`` as an int; raises InputError (field ``token_budget``) outside 500..32,000."""
    if not 500 <= int(token_budget) <= 32_000:
        raise InputError(
            "token_budget out of range", field="token_budget", value=token_budget, fix="use 500 to 32000"
        )
    return int(token_budget)


def _signature_of(t: TemplateStats) -> Signature | None:
    found = [match(t.template)] + [match(e.message) for e in t.exemplars[:1]]
    hits = [s for s in found if s is not None]
    return max(hits, key=lambda s: s.weight) if hits else None


def rank(result: MiningResult) -> list[Ranked]:
    """Templates ordered root cause first (see the module docstring for the score)."""
    ranked: list[Ranked] = []
    for t in result.templates:
        sig = _signature_of(t)
        score = SEVERITY_RANK.get(t.severity, 0) * 20.0
        if sig is not None:
            score += sig.weight * 10
        body = t.template.strip()
        if _EXCEPTION.match(body):
            score += 200
        elif is_noise(body):
            score -= 400
        injection = looks_like_instruction(t.template) or any(
            looks_like_instruction(e.message) for e in t.exemplars
        )
        if injection:
            score -= INJECTION_PENALTY
        ranked.append(Ranked(t, score, sig, injection))
    ranked.sort(
        key=lambda r: (
            -r.score,
            r.stats.first_epoch if r.stats.first_epoch is not None else math.inf,
            r.stats.order,
        )
    )
    return ranked


def signature_hits(ranked: list[Ranked]) -> list[SignatureHit]:
    """Matched signatures (highest weight first), each with its templates and example insertIds."""
    hits: dict[str, SignatureHit] = {}
    for r in ranked:
        sig = r.signature
        if sig is None:
            continue
        hit = hits.get(sig.id)
        if hit is None:
            hit = SignatureHit(
                id=sig.id,
                category=sig.category,
                title=sig.title,
                weight=sig.weight,
                cause=sig.cause,
                fix=sig.fix,
                source=sig.source,
            )
            hits[sig.id] = hit
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
    if ranked and is_root_cause(ranked[0]):
        top = ranked[0]
        head.append(f"TOP CANDIDATE {top.stats.id}" + (f" ({top.signature.title})" if top.signature else ""))
    if hits:
        head.append("KNOWN SIGNATURES (strongest first)")
        for h in hits[:6]:
            head.append(
                f"- {h.id}: {h.title}; cause: {h.cause}; fix: {h.fix}; templates {','.join(h.templates[:5])}; "
                f"entries {','.join(h.insert_ids[:3])}"
            )
    head.append("TEMPLATES (root cause first; [insertId] exemplars)")
    used = sum(len(x) + 1 for x in head)
    errors = [r for r in ranked if SEVERITY_RANK.get(r.stats.severity, 0) >= ERROR_RANK]
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
        is_error = SEVERITY_RANK.get(t.severity, 0) >= ERROR_RANK
        line = _template_line(t, result, width if is_error else min(width, 140))
        ex_lines = [] if is_noise(t.template) and not r.signature else _exemplar_lines(t, 220)
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
    """The top-ranked template and what it means (when a signature matched)."""

    template_id: str
    template: str
    severity: str
    count: int
    first_seen: str
    insert_ids: list[str]
    signature: str | None = None
    title: str | None = None
    cause: str | None = None
    fix: str | None = None


class SummaryResult(UntrustedContent, ToolResult):
    """Template summary of a log source: root cause first, signatures, ranked templates, evidence. Templates,
    exemplars and the evidence text are log text: untrusted data, fenced in the text rendering."""

    untrusted: UntrustedData = untrusted_data(
        "logs", "root_cause.template", "templates[].template", "templates[].exemplars", "evidence"
    )
    source: str
    entries: int
    templates_total: int
    first_seen: str
    last_seen: str
    severities: dict[str, int]
    root_cause: RootCause | None = None
    signatures: list[SignatureHit] = []
    templates: list[TemplateView] = []
    evidence_tokens: int = 0
    suspected_injection: list[str] = Field(
        default=[], description="template ids whose text reads like instructions to an AI agent"
    )
    notices: list[str] = []
    evidence: str = ""

    def headline(self) -> str:
        if self.root_cause is None:
            return f"No errors or known failure signatures in {self.entries} entries ({self.templates_total} templates)"
        rc = self.root_cause
        # A template without a signature is only log text: quoted inside the delimiters.
        what = rc.title or inline(rc.template[:100])
        return f"Root cause candidate {rc.template_id}: {what} (x{rc.count}, first {rc.first_seen or '?'})"

    def render_text(self) -> str:
        lines = [self.headline()]
        if self.root_cause and self.root_cause.fix:
            lines.append(f"Fix: {self.root_cause.fix}")
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
    result: MiningResult, *, source: str, token_budget: int = DEFAULT_TOKEN_BUDGET
) -> Summary:
    """Rank, match signatures and pack an already-mined result."""
    ranked = rank(result)
    hits = signature_hits(ranked)
    pack = build_pack(result, ranked, hits, token_budget=token_budget, source=source)
    return Summary(result, ranked, hits, pack)


def to_result(summary: Summary, *, source: str, notices: list[str], top: int = 15) -> SummaryResult:
    """The `SummaryResult` tools return."""
    result = summary.mining
    root = None
    if summary.ranked and is_root_cause(summary.ranked[0]):
        r = summary.ranked[0]
        root = RootCause(
            template_id=r.stats.id,
            template=r.stats.template,
            severity=r.stats.severity,
            count=r.stats.count,
            first_seen=r.stats.first_seen,
            insert_ids=[e.insert_id for e in r.stats.exemplars],
            signature=r.signature.id if r.signature else None,
            title=r.signature.title if r.signature else None,
            cause=r.signature.cause if r.signature else None,
            fix=r.signature.fix if r.signature else None,
        )
    suspected = [r.stats.id for r in summary.ranked if r.injection]
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
        signatures=summary.hits,
        templates=[result.view(r.stats) for r in summary.ranked[:top]],
        evidence_tokens=summary.pack.tokens,
        suspected_injection=suspected,
        notices=notices,
        evidence=summary.pack.text,
    )


def summarize_source(source: LogSource, *, token_budget: int = DEFAULT_TOKEN_BUDGET) -> SummaryResult:
    """Mine a whole source (streaming its pages) and return the ranked summary.

    Raises whatever the source raises (InputError for unreadable files, cloud errors).
    """
    result = mine(source.pages())
    name = source.describe()
    summary = summarize_mining(result, source=name, token_budget=token_budget)
    notices = []
    if source.truncated:
        notices.append("stopped at max_entries; the summary covers the newest entries read")
    if notice := source.redactor.notice():
        notices.append(notice)
    return to_result(summary, source=name, notices=notices)


def summarize_logs(
    settings: Any, *, token_budget: int = DEFAULT_TOKEN_BUDGET, **source_args: Any
) -> SummaryResult:
    """`summarize_source` over `tpu_devops.logs.sources.open_source` (file path or Cloud Logging query).

    Raises:
        InputError: token_budget outside 500..32000, or bad source arguments.
    """
    from tpu_devops.logs.sources import open_source

    budget = check_token_budget(token_budget)
    return summarize_source(open_source(settings, **source_args), token_budget=budget)
