"""Safe construction of Cloud Logging query-language filters from tool parameters.

Every clause is built from a validated parameter; values are always double-quoted with ``\\`` and
``"`` escaped, field paths are checked against a conservative character set, and clauses are joined
with ``AND`` (Logging query language: cloud.google.com/logging/docs/view/logging-query-language).
A user-supplied raw filter is accepted only when its parentheses and quotes balance and it holds no
``--`` comment (the language ignores the rest of a line after two dashes: see "Comments" in that
reference), and is added as one bracketed clause ``( ... )``: it can narrow the result, never escape
the time window or the resource restriction built here.

Times are RFC 3339 in UTC (``timestamp>="2026-08-07T23:00:00Z"``), the form the API compares on.
Severity names and their order are the ``LogSeverity`` enum of the Logging API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from tpu_devops.errors import InputError

# google.logging.type.LogSeverity, in order (DEFAULT=0 ... EMERGENCY=800).
SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")
SEVERITY_RANK = {name: i for i, name in enumerate(SEVERITIES)}
# Common spellings seen in exports and application logs.
SEVERITY_ALIASES = {
    "WARN": "WARNING",
    "ERR": "ERROR",
    "FATAL": "CRITICAL",
    "CRIT": "CRITICAL",
    "TRACE": "DEBUG",
}

# The entries.list filter field is limited to 20,000 characters (LogEntries.list reference).
MAX_FILTER_CHARS = 20_000
_FIELD_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_\-/]*)*$")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,62}$")
_LOG_ID = re.compile(r"^[A-Za-z0-9_.\-/]{1,512}$")
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.I)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def normalize_severity(value: str, *, field_name: str = "severity") -> str:
    """``"warn"`` -> ``"WARNING"``; raises InputError naming the field for anything else unknown."""
    name = str(value).strip().upper()
    name = SEVERITY_ALIASES.get(name, name)
    if name not in SEVERITY_RANK:
        raise InputError(
            "not a Cloud Logging severity",
            field=field_name,
            value=value,
            fix=f"use one of {', '.join(SEVERITIES)}",
        )
    return name


def quote_value(value: str) -> str:
    """A double-quoted filter string literal with backslashes and quotes escaped."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_time(value: str, *, field_name: str, now: datetime | None = None) -> datetime:
    """A point in time from ``"30m"`` / ``"6h"`` / ``"2d"`` (that long ago) or an RFC 3339 timestamp.

    Returns an aware UTC datetime. Raises InputError (field named) for anything else.
    """
    now = now or datetime.now(UTC)
    text = str(value).strip()
    m = _RELATIVE.match(text)
    try:
        if m:
            return now - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2).lower()])
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except OverflowError:  # "99999999d" reaches before year 1
        raise InputError(
            "the time is out of range",
            field=field_name,
            value=value,
            fix='use e.g. "30d" or an RFC 3339 date',
        ) from None
    except ValueError:
        raise InputError(
            "not a time: use a duration ago (30m, 6h, 2d) or an RFC 3339 timestamp",
            field=field_name,
            value=value,
            fix='e.g. "6h" or "2026-08-07T23:00:00Z"',
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def rfc3339(moment: datetime) -> str:
    """``2026-08-07T23:00:00Z`` (microseconds kept when present)."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}"
    return text + "Z"


def check_raw_filter(raw: str) -> str:
    """Validate a user's raw filter so it can be bracketed safely; returns it stripped.

    Raises InputError when quotes or parentheses do not balance (outside string literals), when it
    holds a ``--`` comment (the query language ignores the rest of that line, so a comment can hide a
    parenthesis from this check and close our bracket), or when it is longer than half the API's
    20,000-character limit: such a filter could widen the query.
    """
    text = raw.strip()
    if len(text) > MAX_FILTER_CHARS // 2:
        raise InputError("filter is too long", field="filter", value=text[:60] + "...", fix="shorten it")
    depth = 0
    in_string = False
    escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == "-" and text.startswith("--", i):
            raise InputError(
                "comments (--) are not accepted in a filter",
                field="filter",
                value=text,
                fix="remove the -- comment (to negate, use NOT or a single -)",
            )
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                break
    if in_string or depth != 0:
        raise InputError(
            "unbalanced quotes or parentheses",
            field="filter",
            value=text,
            fix='close every "(" and every double quote, e.g. severity>=ERROR AND textPayload:"OOM"',
        )
    return text


@dataclass
class FilterSpec:
    """Parameters of a Cloud Logging query. Every field is optional; see `build_filter`.

    Attributes:
        since, until: window ends (``"6h"`` ago or RFC 3339).
        severity: minimum severity (``severity>=X``).
        resource_type: ``resource.type="..."`` (e.g. ``gce_instance``, ``tpu_worker``).
        resource_labels: ``resource.labels.K="V"`` clauses.
        labels: entry ``labels.K="V"`` clauses.
        log_ids: short log names (``gcplogs-docker-driver``), OR-ed, expanded to full ``logName``.
        text: a free-text search (a quoted global restriction, matches any field).
        raw: a user filter, added as one bracketed clause after validation.
        extra: clauses built by this package (already safe), each bracketed.
    """

    since: str | None = None
    until: str | None = None
    severity: str | None = None
    resource_type: str | None = None
    resource_labels: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    log_ids: list[str] = field(default_factory=list)
    text: str | None = None
    raw: str | None = None
    extra: list[str] = field(default_factory=list)


def _label_clauses(prefix: str, mapping: dict[str, str], field_name: str) -> list[str]:
    clauses = []
    for key, value in mapping.items():
        if not _LABEL_KEY.match(str(key)):
            raise InputError(
                "not a label key",
                field=f"{field_name}.{key}",
                value=key,
                fix="use letters, digits, _ . - / only",
            )
        clauses.append(f"{prefix}.{key}={quote_value(value)}")
    return clauses


def log_name(project: str, log_id: str) -> str:
    """``projects/P/logs/<url-encoded log id>`` (a ``/`` in the id is sent as ``%2F``)."""
    if not _LOG_ID.match(log_id):
        raise InputError("not a log id", field="log_id", value=log_id, fix="e.g. gcplogs-docker-driver")
    return f"projects/{project}/logs/{quote(log_id, safe='')}"


def build_filter(spec: FilterSpec, *, project: str, now: datetime | None = None) -> str:
    """The filter string for ``entries.list``: clauses AND-ed, the raw filter bracketed last.

    A lower time bound is always present (default: 24 h ago) so a query never scans all history.

    Raises:
        InputError: a bad time, severity, label key, log id or raw filter (field named).
    """
    now = now or datetime.now(UTC)
    clauses: list[str] = []
    start = parse_time(spec.since or "24h", field_name="since", now=now)
    clauses.append(f'timestamp>="{rfc3339(start)}"')
    if spec.until:
        end = parse_time(spec.until, field_name="until", now=now)
        if end <= start:
            raise InputError(
                "the window ends before it starts",
                field="until",
                value=spec.until,
                fix="make until later than since",
            )
        clauses.append(f'timestamp<="{rfc3339(end)}"')
    if spec.severity:
        clauses.append(f"severity>={normalize_severity(spec.severity)}")
    if spec.resource_type:
        if not _FIELD_PATH.match(spec.resource_type):
            raise InputError(
                "not a monitored resource type",
                field="resource_type",
                value=spec.resource_type,
                fix="e.g. gce_instance",
            )
        clauses.append(f"resource.type={quote_value(spec.resource_type)}")
    clauses.extend(_label_clauses("resource.labels", spec.resource_labels, "resource_labels"))
    clauses.extend(_label_clauses("labels", spec.labels, "labels"))
    if spec.log_ids:
        names = [f"logName={quote_value(log_name(project, log_id))}" for log_id in spec.log_ids]
        clauses.append(names[0] if len(names) == 1 else "(" + " OR ".join(names) + ")")
    if spec.text:
        clauses.append(quote_value(spec.text))
    clauses.extend(f"({c})" for c in spec.extra)
    if spec.raw and spec.raw.strip():
        clauses.append(f"({check_raw_filter(spec.raw)})")
    text = " AND ".join(clauses)
    if len(text) > MAX_FILTER_CHARS:
        raise InputError("filter is too long", field="filter", value=len(text), fix="narrow the parameters")
    return text
