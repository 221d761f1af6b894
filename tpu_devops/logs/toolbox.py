"""The log analyst's read-only tools over a bounded index of one read, and the check of its citations.

The source is read once (redacted as read) into a `LogIndex` of at most `MAX_INDEX` records, mined into
templates; the model may call three tools over it (`TOOLS`):

- ``search_logs(text?, severity?, template?, since?, until?, limit?)``: matching entries;
- ``get_entry(insert_id)``: one entry;
- ``count_by(field)``: counts by severity / template / log / minute / container / instance_name.

`Toolbox` runs them: results wrapped in ``<untrusted-log-data nonce=...>`` delimiters (`wrap`) and
capped, an identical call refused, any other name answered "unknown tool". Nothing a call does can
change anything. Every citation in an answer (``[insertId]`` or ``[T<n>]``) is checked against the
index (`verify_citations`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tpu_devops.errors import InputError, TpuDevopsError
from tpu_devops.host.untrusted import inline, looks_like_instruction, neutralize
from tpu_devops.logs.evidence import DEFAULT_TOKEN_BUDGET, Summary, summarize_mining
from tpu_devops.logs.filters import SEVERITY_RANK, normalize_severity
from tpu_devops.logs.mining import LogMiner, TemplateStats
from tpu_devops.logs.sources import LogRecord, LogSource, parse_epoch
from tpu_devops.serving.tokens import cut_to_tokens, estimate_tokens

MAX_INDEX = 50_000
COUNT_FIELDS = ("severity", "template", "log", "minute", "container", "instance_name")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search_logs",
            "description": "Find log entries. All filters optional; returns at most `limit` entries.",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "substring to find (case-insensitive)"},
                    "severity": {"type": "string", "description": "minimum severity, e.g. ERROR"},
                    "template": {"type": "string", "description": "template id, e.g. T3"},
                    "since": {"type": "string", "description": "RFC 3339 start"},
                    "until": {"type": "string", "description": "RFC 3339 end"},
                    "limit": {"type": "integer", "description": "1-20, default 10"},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_entry",
            "description": "Get one log entry by its insertId.",
            "parameters": {
                "type": "object",
                "properties": {"insert_id": {"type": "string"}},
                "required": ["insert_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "count_by",
            "description": "Count entries grouped by a field.",
            "parameters": {
                "type": "object",
                "properties": {"field": {"type": "string", "enum": list(COUNT_FIELDS)}},
                "required": ["field"],
            },
        },
    },
]
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOLS)


# ---------------------------------------------------------------------------------------------
# The index the tools read
# ---------------------------------------------------------------------------------------------


@dataclass
class LogIndex:
    """Records (redacted) with their template ids, searchable by the analyst's tools."""

    records: list[LogRecord] = field(default_factory=list)
    template_of: list[str] = field(default_factory=list)
    by_insert_id: dict[str, int] = field(default_factory=dict)
    templates: dict[str, TemplateStats] = field(default_factory=dict)
    dropped: int = 0

    def add(self, record: LogRecord, template_id: str) -> None:
        if len(self.records) >= MAX_INDEX:
            self.dropped += 1
            return
        self.by_insert_id.setdefault(record.insert_id, len(self.records))
        self.records.append(record)
        self.template_of.append(template_id)

    def get(self, insert_id: str) -> tuple[LogRecord, str] | None:
        i = self.by_insert_id.get(insert_id)
        return None if i is None else (self.records[i], self.template_of[i])

    def has_insert_id(self, insert_id: str) -> bool:
        if insert_id in self.by_insert_id:
            return True
        return any(e.insert_id == insert_id for t in self.templates.values() for e in t.exemplars)

    def search(
        self,
        *,
        text: str | None = None,
        severity: str | None = None,
        template: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 10,
    ) -> tuple[list[tuple[LogRecord, str]], int]:
        """(first ``limit`` matches in time order, total matches)."""
        needle = text.lower() if text else None
        min_rank = SEVERITY_RANK[normalize_severity(severity)] if severity else None
        lo = parse_epoch(since) if since else None
        hi = parse_epoch(until) if until else None
        if since and lo is None:
            raise InputError(
                "not an RFC 3339 time", field="since", value=since, fix="e.g. 2026-08-07T23:00:00Z"
            )
        if until and hi is None:
            raise InputError(
                "not an RFC 3339 time", field="until", value=until, fix="e.g. 2026-08-07T23:30:00Z"
            )
        hits: list[tuple[LogRecord, str]] = []
        total = 0
        for record, tid in zip(self.records, self.template_of, strict=True):
            if template and tid != template:
                continue
            if min_rank is not None and SEVERITY_RANK.get(record.severity, 0) < min_rank:
                continue
            if needle and needle not in record.message.lower():
                continue
            if lo is not None or hi is not None:
                epoch = record.epoch()
                if epoch is None or (lo is not None and epoch < lo) or (hi is not None and epoch > hi):
                    continue
            total += 1
            hits.append((record, tid))
        hits.sort(key=lambda h: h[0].epoch() or 0.0)
        return hits[:limit], total

    def count_by(self, field_name: str) -> Counter[str]:
        counts: Counter[str] = Counter()
        for record, tid in zip(self.records, self.template_of, strict=True):
            if field_name == "severity":
                key = record.severity
            elif field_name == "template":
                key = tid
            elif field_name == "log":
                key = record.log
            elif field_name == "minute":
                key = record.timestamp[:16] or "?"
            else:
                key = record.labels.get(field_name, "?")
            counts[key] += 1
        return counts


def read_into_index(
    source: LogSource, *, token_budget: int = DEFAULT_TOKEN_BUDGET
) -> tuple[LogIndex, Summary]:
    """Read ``source`` once: mine every record and keep up to 50,000 in a `LogIndex`."""
    miner = LogMiner()
    index = LogIndex()
    for page in source.pages():
        for record in page:
            index.add(record, miner.add(record))
    result = miner.result()
    index.templates = {t.id: t for t in result.templates}
    return index, summarize_mining(result, source=source.describe(), token_budget=token_budget)


# ---------------------------------------------------------------------------------------------
# Tools executed for the model
# ---------------------------------------------------------------------------------------------


def wrap(nonce: str, text: str) -> str:
    """``text`` as log data between nonce-tagged delimiters (a forged delimiter inside is defused)."""
    return f'<untrusted-log-data nonce="{nonce}">\n{neutralize(text)}\n</untrusted-log-data nonce="{nonce}">'


def _cap(text: str, cap_tokens: int) -> str:
    cut = cut_to_tokens(text, cap_tokens)
    return text if cut == text else cut + f"\n... (cut at {cap_tokens} tokens)"


def _entry_line(record: LogRecord, tid: str, width: int = 300) -> str:
    msg = record.message if len(record.message) <= width else record.message[: width - 1] + "…"
    return f"[{record.insert_id}] {record.timestamp} {record.severity} {tid}: {msg}"


def _arguments(arguments: Any) -> dict[str, Any] | None:
    """A tool call's arguments (a JSON object, as text or parsed) as a dict; None when not an object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return None
    return arguments if isinstance(arguments, dict) else None


class AnalysisStep(BaseModel):
    """A tool call the model made (executed, or refused with the reason), as reported to the user.

    ``used``: whether a later model round read the result (None for a refused call); ``unused`` says
    why not when it was gathered but never read (the round after it failed or ran out of time, or the
    result was left out to fit the context)."""

    tool: str
    arguments: dict[str, Any]
    result_tokens: int
    refused: str | None = None
    raw_syntax: bool = False
    used: bool | None = None
    unused: str | None = None

    def describe(self) -> str:
        """``search_logs({"text": "OOM"})`` as shown to the user."""
        return f"{self.tool}({inline(json.dumps(self.arguments, sort_keys=True))})"


class Toolbox:
    """Executes the analyst's read-only tools against a `LogIndex` with the session's limits."""

    def __init__(self, index: LogIndex, *, nonce: str, result_token_cap: int) -> None:
        self.index = index
        self.nonce = nonce
        self.cap = result_token_cap
        self.seen: set[str] = set()
        self.steps: list[AnalysisStep] = []

    def run(self, name: str, arguments: Any, *, raw: bool = False) -> str:
        """The tool's result text (wrapped and capped), or a refusal the model can read."""
        arguments = _arguments(arguments)
        if arguments is None:
            return self._refuse(name, {}, "arguments must be a JSON object", raw)
        key = json.dumps([name, arguments], sort_keys=True, default=str)
        if name not in TOOL_NAMES:
            return self._refuse(
                name, arguments, f"unknown tool; the only tools are {', '.join(TOOL_NAMES)} (read-only)", raw
            )
        if key in self.seen:
            return self._refuse(name, arguments, "identical call already made; use its result", raw)
        self.seen.add(key)
        try:
            text = getattr(self, f"_t_{name}")(**arguments)
        except (TypeError, ValueError) as exc:  # wrong names or types from the model
            return self._refuse(name, arguments, f"bad arguments: {exc}", raw)
        except TpuDevopsError as exc:
            return self._refuse(name, arguments, str(exc), raw)
        out = wrap(self.nonce, _cap(text, self.cap))
        self.steps.append(
            AnalysisStep(tool=name, arguments=arguments, result_tokens=estimate_tokens(out), raw_syntax=raw)
        )
        return out

    def refuse(self, name: str, arguments: Any, reason: str, raw: bool = False) -> str:
        """Record a refused call and return the refusal text the model reads."""
        return self._refuse(name, _arguments(arguments) or {}, reason, raw)

    def _refuse(self, name: str, arguments: dict[str, Any], reason: str, raw: bool) -> str:
        self.steps.append(
            AnalysisStep(tool=name, arguments=arguments, result_tokens=0, refused=reason, raw_syntax=raw)
        )
        return f"refused: {reason}"

    def _t_search_logs(self, limit: Any = 10, **filters: Any) -> str:
        # filters: text, severity, template, since, until (`LogIndex.search`; others: TypeError).
        limit = max(1, min(int(limit or 10), 20))
        hits, total = self.index.search(limit=limit, **filters)
        lines = [f"{total} matching entries; first {len(hits)}:"]
        lines += [_entry_line(r, t) for r, t in hits]
        return "\n".join(lines)

    def _t_get_entry(self, insert_id: str) -> str:
        found = self.index.get(str(insert_id))
        if found is None:
            return f"no entry with insertId {insert_id!r}"
        record, tid = found
        labels = ", ".join(f"{k}={v}" for k, v in record.labels.items())
        return f"{_entry_line(record, tid, width=2000)}\nlog={record.log} resource={record.resource_type} {labels}"

    def _t_count_by(self, field: str) -> str:
        if field not in COUNT_FIELDS:
            raise InputError(
                "not a countable field",
                field="field",
                value=field,
                fix=f"use one of {', '.join(COUNT_FIELDS)}",
            )
        counts = self.index.count_by(field)
        return "\n".join(f"{k}: {v}" for k, v in counts.most_common(25))


# ---------------------------------------------------------------------------------------------
# Citations
# ---------------------------------------------------------------------------------------------

_CITE = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9_\-:.]{1,80})\]")
_INSERT_ID_WORD = re.compile(r"insertId[\s:=`'\"]+([A-Za-z0-9][A-Za-z0-9_\-]{3,80})")


class Citation(BaseModel):
    """One citation in the answer and whether it exists in the analysed logs."""

    ref: str
    kind: str  # "entry" | "template"
    verified: bool
    excerpt: str | None = None
    # the cited text reads like an instruction to an AI agent: evidence of nothing, never verified
    suspected_injection: bool = False


def verify_citations(answer: str, index: LogIndex) -> tuple[str, list[Citation]]:
    """Check every ``[ref]`` / ``insertId X`` in ``answer``; flag unknown refs in the text.

    Returns (answer with unknown refs rewritten as ``[ref (unverified)]``, citations).
    """
    cites: dict[str, Citation] = {}
    refs = [m.group(1) for m in _CITE.finditer(answer)] + [
        m.group(1) for m in _INSERT_ID_WORD.finditer(answer)
    ]
    for raw in refs:
        ref = raw[len("insertId:") :] if raw.lower().startswith("insertid:") else raw
        if ref in cites:
            continue
        known = index.get(ref) is not None
        # Quoted log furniture such as [core.py:1349] or [ERROR] is not a citation; an id-like ref
        # (letters/digits/-/_ with at least one digit) that does not exist is.
        id_like = re.fullmatch(r"T\d+|[A-Za-z0-9_-]{4,80}", ref) and re.search(r"\d", ref)
        if not known and not id_like:
            continue
        if re.fullmatch(r"T\d+", ref):
            t = index.templates.get(ref)
            order = t is not None and (
                looks_like_instruction(t.template)
                or any(looks_like_instruction(e.message) for e in t.exemplars)
            )
            cites[ref] = Citation(
                ref=ref, kind="template", verified=t is not None and not order,
                excerpt=t.template[:160] if t else None, suspected_injection=order,
            )  # fmt: skip
        else:
            found = index.get(ref)
            order = found is not None and looks_like_instruction(found[0].message)
            ok = (found is not None or index.has_insert_id(ref)) and not order
            cites[ref] = Citation(
                ref=ref, kind="entry", verified=ok, excerpt=found[0].message[:160] if found else None,
                suspected_injection=order,
            )  # fmt: skip
    bad = {c.ref: c for c in cites.values() if not c.verified}
    if bad:

        def mark(m: re.Match[str]) -> str:
            c = bad.get(m.group(1))
            if c is None:
                return m.group(0)
            return f"[{m.group(1)} ({'suspected injection' if c.suspected_injection else 'unverified'})]"

        answer = _CITE.sub(mark, answer)
    return answer, list(cites.values())
