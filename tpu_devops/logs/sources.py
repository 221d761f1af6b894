"""Log sources behind one interface: Cloud Logging reads and exported files, as redacted `LogRecord`s.

A source yields pages (lists) of `LogRecord` so consumers stream: nothing here holds a whole export
as dicts and records at the same time. Every text field a record shows (message, insertId, timestamp,
log name, resource type, label keys and values) is redacted (`tpu_devops.host.redact`) as the record is
made, so everything downstream (mining, tool output, prompts) only sees placeholders.

Inputs understood:

- Cloud Logging ``entries.list`` pages (`CloudLoggingSource`), filter built by `logs.filters`;
- ``gcloud logging read --format=json`` exports: one JSON array of LogEntry objects (newest first),
  read incrementally with ``json.JSONDecoder.raw_decode``;
- JSON lines (one LogEntry per line) and ``{"entries": [...]}`` API responses;
- Kubernetes events (`logs.kube_events`): GKE's export of the ``events`` log, ``kubectl get events -o
  json`` and bare Event objects, each read as a line ``<type> <reason> <Kind> <ns>/<name>: <message>``;
- plain text such as ``docker logs [--timestamps]`` output: one record per line, ``insertId``
  ``line-N`` (1-based), severity from vLLM's ``LEVEL MM-DD HH:MM:SS [file:line]`` prefix.

When a file holds more entries than ``max_entries``, the newest are read, whatever the format: the
failure that ended a log is at its end. A text file (always oldest first) is read from the line where
its last ``max_entries`` lines start (found by reading backwards, `tail_start`), so the older part is
not even parsed; a JSON export (array, lines or ``{"entries"}``) whose timestamps show it is oldest
first keeps its last ``max_entries`` entries in a window as it streams. gcloud's exports are newest
first: their first entries are the newest. What was not read is said (`truncation_notice`), with how
to read it.

LogEntry fields used (cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry): ``insertId``,
``timestamp``, ``severity``, ``logName``, ``resource.type``, ``resource.labels``, ``labels``, and the
payload: ``textPayload``, ``jsonPayload.message`` (the Docker ``gcplogs`` driver), or
``protoPayload`` (audit logs: ``methodName``, ``resourceName``, ``status.message``).
"""

from __future__ import annotations

import io
import json
import os
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from pydantic import BaseModel, Field

from tpu_devops import types
from tpu_devops.config import Settings, require_project
from tpu_devops.errors import ConfigError, InputError, NotFoundError
from tpu_devops.host import deadline, files
from tpu_devops.host.redact import Redactor, rule_candidates
from tpu_devops.host.results import Table, ToolResult
from tpu_devops.host.untrusted import (
    UntrustedContent,
    UntrustedData,
    fence,
    injection_notice,
    looks_like_instruction,
    untrusted_data,
)
from tpu_devops.logs.failure_lines import looks_failed
from tpu_devops.logs.filters import SEVERITY_ALIASES, SEVERITY_RANK, FilterSpec, build_filter, quote_value
from tpu_devops.logs.kube_events import entry_from_event, event_text, is_event, is_event_list, severity_of
from tpu_devops.logs.timestamps import leading_timestamp

PAGE_SIZE = 1000
MAX_EMPTY_PAGES = 5  # empty entries.list pages in a row before a read stops (see CloudLoggingSource)
# One JSON array element; Cloud Logging caps a LogEntry at 256 KiB, an audit entry at 512 KiB
# (cloud.google.com/logging/quotas).
MAX_ENTRY_CHARS = 8 << 20
MAX_LINE_CHARS = 1 << 20  # one line of a text or JSON-lines file; the rest of a longer line is skipped
MAX_OBJECT_BYTES = 64 << 20  # a ``{"entries": [...]}`` file, which is parsed whole
MAX_LOG_FILE_BYTES = 512 << 20  # a log file tools read (reading more would not finish within a tool call)
MAX_MESSAGE_CHARS = 4000  # longer payloads are cut (a log line, not a document)
DOCKER_LOG_ID = "gcplogs-docker-driver"  # Docker gcplogs driver default log name
STARTUP_LOG_ID = "google_metadata_script_runner"  # GCE guest agent: startup-script output
SYSTEM_LOG_IDS = (
    STARTUP_LOG_ID,
    "syslog",
    "cloudaudit.googleapis.com/activity",
    "cloudaudit.googleapis.com/system_event",
)

# vLLM's logger prefix, optionally behind a process tag: "(EngineCore pid=187) ERROR 08-07 23:27:17 [core.py:1349] "
VLLM_PREFIX = re.compile(
    r"^(?:\((?P<proc>[A-Za-z_]+)(?: pid=\d+)?\)\s+)?"
    r"(?:(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)? \[(?P<src>[^\]]{1,80})\] ?)?"
)


@dataclass(slots=True)
class LogRecord:
    """One log entry, compact and redacted.

    Attributes:
        insert_id: the entry's ``insertId`` (``line-N`` for plain text lines).
        timestamp: RFC 3339 string as given ('' when unknown).
        severity: a ``LogSeverity`` name.
        log: short log name (``gcplogs-docker-driver``), URL-decoded.
        resource_type: monitored resource type ('' when none).
        labels: resource labels plus entry labels plus the Docker driver's instance/container names.
        message: the redacted message text (at most 4,000 characters).
        body: ``message`` without vLLM's ``(Proc pid=N) LEVEL MM-DD HH:MM:SS [file:line]`` prefix.
    """

    insert_id: str
    timestamp: str
    severity: str
    log: str
    resource_type: str
    labels: dict[str, str]
    message: str
    body: str

    def epoch(self) -> float | None:
        """``timestamp`` as Unix seconds, or None when absent or unparseable."""
        return parse_epoch(self.timestamp)

    def view(self, max_chars: int = 500) -> LogView:
        """The compact view tools return."""
        msg = self.message if len(self.message) <= max_chars else self.message[: max_chars - 1] + "…"
        return LogView(
            insert_id=self.insert_id,
            timestamp=self.timestamp,
            severity=self.severity,
            log=self.log,
            labels={k: v for k, v in self.labels.items() if k in _VIEW_LABELS},
            message=msg,
        )


_VIEW_LABELS = ("zone", "instance_name", "node_id", "container", "instance_id")


def parse_epoch(timestamp: str) -> float | None:
    """RFC 3339 -> Unix seconds (None when unparseable). Nanosecond digits beyond 6 are dropped."""
    if not timestamp:
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        text = timestamp
        if "." in text:
            head, _, frac = text.partition(".")
            digits = re.match(r"\d*", frac).group(0)  # type: ignore[union-attr]
            text = f"{head}.{digits[:6]}{frac[len(digits) :]}"
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def split_prefix(message: str) -> tuple[str | None, str]:
    """(vLLM level or None, message body without the vLLM / process prefix)."""
    m = VLLM_PREFIX.match(message)
    if not m or m.end() == 0:
        return None, message
    level = m.group("level")
    if level:
        level = SEVERITY_ALIASES.get(level, level)
    return level, message[m.end() :]


def _message_of(entry: dict[str, Any]) -> str:
    if "textPayload" in entry:
        return str(entry["textPayload"])
    proto = entry.get("protoPayload")
    if isinstance(proto, dict):
        status = proto.get("status") or {}
        parts = [str(proto.get("methodName") or ""), str(proto.get("resourceName") or "")]
        text = " ".join(p for p in parts if p)
        if status.get("message"):
            text += f": {status['message']}"
        return text or json.dumps(proto, separators=(",", ":"), sort_keys=True)
    return ""


def short_log_name(log_name: str) -> str:
    """``projects/p/logs/cloudaudit.googleapis.com%2Factivity`` -> ``cloudaudit.googleapis.com/activity``."""
    _, sep, tail = log_name.partition("/logs/")
    return unquote(tail if sep else log_name)


# An insertId or resource type of up to 32 lower-case hex digits and "-", or an RFC 3339 timestamp:
# no pattern in `logs.redact` matches such text (each needs other letters, upper case, "@", "/" or
# "."), so such a value is used without running the patterns.
_PLAIN_ID = re.compile(r"[0-9a-f-]{0,32}")
_PLAIN_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)")


def _plain(value: Any, plain: re.Pattern[str], redactor: Redactor) -> str:
    """``str(value)`` ('' for None), redacted unless ``plain`` matches all of it."""
    text = "" if value is None else str(value)
    return text if plain.fullmatch(text) else redactor.redact(text)


def _context(
    log_name: Any,
    resource_type: Any,
    label_sets: tuple[Any, Any],
    instance: str | None,
    container: str | None,
    redactor: Redactor,
) -> tuple[dict[str, str], str, str]:
    """(labels, short log name, resource type), all redacted: resource labels, then entry labels (as
    adjacent fields), plus the Docker driver's instance and container names (already redacted)."""
    pairs = [(k, v) for source in label_sets if isinstance(source, dict) for k, v in source.items()]
    values = redactor.redact_fields([str(v) for _, v in pairs])
    labels = {redactor.redact(str(k)): v for (k, _), v in zip(pairs, values, strict=True)}
    if instance:
        labels.setdefault("instance_name", instance)
    if container:
        labels["container"] = container.lstrip("/")
    return (
        labels,
        redactor.redact(short_log_name(str(log_name or ""))),
        _plain(resource_type, _PLAIN_ID, redactor),
    )


def _items(labels: Any) -> Any:
    return tuple(labels.items()) if isinstance(labels, dict) else None


_MESSAGE_KEYS = ("message", "MESSAGE", "msg", "log", "textPayload")
MAX_PAYLOAD_LEAVES = 256  # string fields of one jsonPayload taken into account


def _leaves(value: Any, path: tuple[Any, ...] = (), out: list[tuple[tuple[Any, ...], str]] | None = None):
    """The string fields of a JSON object or array in document order, as ``(path, text)`` (at most
    `MAX_PAYLOAD_LEAVES`, 8 levels deep). Two levels are walked inline: the Docker driver's payload
    (message, container, instance) is read for every entry."""
    out = [] if out is None else out
    for k, v in value.items() if type(value) is dict else enumerate(value):
        kind = type(v)
        if kind is str:
            out.append(((*path, k), v))
        elif kind is dict and len(path) < 7:
            for k2, v2 in v.items():
                if type(v2) is str:
                    out.append(((*path, k, k2), v2))
                elif isinstance(v2, dict | list):
                    _leaves(v2, (*path, k, k2), out)
        elif (kind is dict or kind is list) and len(path) < 8:
            _leaves(v, (*path, k), out)
        if len(out) >= MAX_PAYLOAD_LEAVES:
            del out[MAX_PAYLOAD_LEAVES:]
            break
    return out


_DEEPER = "<nested deeper than 9 levels: not shown>"


def _rebuilt(value: Any, replaced: dict[tuple[Any, ...], str], path: tuple[Any, ...] = ()) -> Any:
    """``value`` with the string fields at the paths in ``replaced`` swapped for their new text; an object
    or array below the levels `_leaves` reads is shown as `_DEEPER` (a payload nested thousands of levels
    deep would end the read with a RecursionError here or in ``json.dumps``)."""
    if len(path) > 9 and isinstance(value, dict | list):
        return _DEEPER
    if isinstance(value, dict):
        return {k: _rebuilt(v, replaced, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebuilt(v, replaced, (*path, i)) for i, v in enumerate(value)]
    return replaced.get(path, value) if isinstance(value, str) else value


def _payload_texts(entry: dict[str, Any], redactor: Redactor) -> tuple[str, str | None, str | None]:
    """(message, Docker instance name, container name) of an entry, redacted. The fields of a
    ``jsonPayload`` are redacted as adjacent fields, so a secret cut across two of them is replaced in both;
    the message is the next message of the stream (`Redactor.redact_message`)."""
    payload = entry.get("jsonPayload")
    if "textPayload" in entry or not isinstance(payload, dict):
        return redactor.redact_message(_message_of(entry)), None, None
    leaves = _leaves(payload)
    values = [text for _, text in leaves]
    # One look for the hints of every rule over all the fields serves both the cut-secret check and
    # the message's own redaction.
    candidates = rule_candidates("".join(values))
    masks = redactor.field_masks(values, candidates)

    def field(*path: Any) -> str | None:
        for (where, text), found in zip(leaves, masks, strict=True):
            if where == path:
                return redactor.redact_masked(text, found, candidates)
        return None

    key = next((k for k in _MESSAGE_KEYS if isinstance(payload.get(k), str)), None)
    if key is not None:
        i = next(i for i, (where, _) in enumerate(leaves) if where == (key,))
        message = redactor.redact_message(leaves[i][1], masks[i], candidates)
    else:
        replaced = {
            path: redactor.redact_masked(text, m) for (path, text), m in zip(leaves, masks, strict=True)
        }
        # Whole, not cut: redacted first and cut after, so no secret is cut into a prefix that its
        # pattern no longer matches.
        message = redactor.redact_message(
            json.dumps(_rebuilt(payload, replaced), separators=(",", ":"), sort_keys=True)
        )
    return message, field("instance", "name"), field("container", "name")


def record_from_entry(entry: dict[str, Any], redactor: Redactor) -> LogRecord:
    """A `LogRecord` from one LogEntry JSON object. Every text field a tool or prompt can show
    (message, insertId, timestamp, log name, resource type, label keys and values) is redacted with
    ``redactor``; call it for the entries of one read in order (see `Redactor.redact_message`)."""
    if is_event(entry.get("jsonPayload")):  # GKE's export of Kubernetes events: reason and object in the text
        event = entry["jsonPayload"]
        entry = {**entry, "jsonPayload": {"message": event_text(event)}}
        entry.setdefault("severity", severity_of(event))
    message, instance, container = _payload_texts(entry, redactor)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS]
    level, body = split_prefix(message)
    severity = str(entry.get("severity") or "DEFAULT").upper()
    severity = SEVERITY_ALIASES.get(severity, severity)
    if severity not in SEVERITY_RANK:
        severity = "DEFAULT"
    if severity == "DEFAULT" and level:
        severity = level
    resource = entry.get("resource") or {}
    args = (entry.get("logName"), resource.get("type"), (resource.get("labels"), entry.get("labels")))
    # The node's labels and names repeat on every entry: memoized per distinct combination.
    key = ("context", args[0], args[1], _items(args[2][0]), _items(args[2][1]), instance, container)
    try:
        labels, log, resource_type = redactor.memo(key, _context, *args, instance, container, redactor)
    except TypeError:  # a label value that is not a string (a list, an object): not hashable
        labels, log, resource_type = _context(*args, instance, container, redactor)
    return LogRecord(
        insert_id=_plain(entry.get("insertId"), _PLAIN_ID, redactor),
        timestamp=_plain(entry.get("timestamp") or entry.get("receiveTimestamp"), _PLAIN_TS, redactor),
        severity=severity,
        log=log,
        resource_type=resource_type,
        labels=dict(labels),
        message=message,
        body=body,
    )


def record_from_line(
    line: str, number: int, redactor: Redactor, *, reference: datetime, last_ts: str
) -> LogRecord:
    """A `LogRecord` from one plain-text line (``docker logs``, syslog, journalctl); ``insertId`` is ``line-N``.

    The timestamp comes from a leading stamp (`logs.timestamps.leading_timestamp`: RFC 3339 as in
    ``docker logs --timestamps``, RFC 5424 or BSD syslog; a syslog stamp has no year: the most recent
    occurrence at or before ``reference``, the file's mtime), else from vLLM's ``MM-DD HH:MM:SS`` in
    ``reference``'s year, else the previous line's (``last_ts``).
    """
    text = line.rstrip("\r\n")
    timestamp = last_ts
    m = leading_timestamp(text, reference)
    if m:
        timestamp, text = m
    message = redactor.redact_message(text)[:MAX_MESSAGE_CHARS]
    pm = VLLM_PREFIX.match(message)
    level = None
    body = message
    if pm and pm.end():
        level = pm.group("level")
        body = message[pm.end() :]
        if pm.group("md") and not m:
            timestamp = f"{reference.year}-{pm.group('md')}T{pm.group('hms')}Z"
    if level:
        severity = SEVERITY_ALIASES.get(level, level)
    elif looks_failed(body):  # the classifier's own definition (`logs.failure_lines`)
        severity = "ERROR"
    else:
        severity = "DEFAULT"
    return LogRecord(
        insert_id=f"line-{number}",
        timestamp=timestamp,
        severity=severity,
        log="text",
        resource_type="",
        labels={},
        message=message,
        body=body,
    )


class LogSource(Protocol):
    """Anything that yields pages of redacted `LogRecord`s."""

    redactor: Redactor
    truncated: bool  # True once `pages` stopped at max_entries (or a read bound) with more to read
    time_limited: bool  # True when it stopped to answer within the tool call's time budget

    def pages(self) -> Iterator[list[LogRecord]]:
        """Pages (lists) of records, in source order."""
        ...

    def describe(self) -> str:
        """One line naming what was read (file path or filter)."""
        ...


READ_RESERVE_S = 8.0  # of a tool call's budget kept for mining and answering after the last page read


def _time_is_short() -> bool:
    """True when the tool call has less than `READ_RESERVE_S` left (`tpu_devops.host.deadline`)."""
    left = deadline.remaining()
    return left is not None and left < READ_RESERVE_S


@dataclass(frozen=True)
class ReadState:
    """Whether a read covered its whole source: ``complete``, else what was not read (``not_read``) and
    how to read it (``how``)."""

    complete: bool
    not_read: str | None = None
    how: str | None = None

    def clause(self) -> str:
        """``"; lines 1-1,171 (the oldest) were not read: pass max_entries=..."``, or "" when complete."""
        if self.complete:
            return ""
        return f"; {self.not_read or 'part of the source'} not read: {self.how}"


def read_state(source: LogSource) -> ReadState:
    """What ``source`` read of itself (after its pages were consumed)."""
    if not (source.truncated or getattr(source, "time_limited", False)):
        return ReadState(True)
    not_read = getattr(source, "not_read", None)
    cap = getattr(source, "max_entries", 0) or 0
    if getattr(source, "time_limited", False):
        how = (
            "narrow the window (since / until) or lower max_entries for a complete read"
            if isinstance(source, CloudLoggingSource)
            else "lower max_entries (the newest entries are read first), or cut the file to the part that matters"
        )
        return ReadState(
            False,
            not_read or "the rest",
            f"the read stopped to answer within the tool call's time budget; {how}",
        )
    known = getattr(source, "known_entries", None)
    more = (
        f"max_entries={min(max(known, cap + 1), 200_000)}" if known else "a larger max_entries (up to 200000)"
    )
    if isinstance(source, CloudLoggingSource):
        how = f"pass {more} or narrow the window (since / until); next_page_token resumes the read"
    else:
        how = f"pass {more} to read them too"
    return ReadState(False, not_read or f"entries beyond max_entries={cap:,}", how)


def truncation_notice(source: LogSource, what: str) -> str | None:
    """What ``source`` did not read and how to read it (``what``: "summary", "analysis"), or None."""
    state = read_state(source)
    if state.complete:
        return None
    if getattr(source, "time_limited", False):
        return f"the {what} covers the entries read so far: {state.not_read} not read ({state.how})"
    count = getattr(source, "count", 0)
    return f"the {what} covers the {count:,} newest entries read: {state.not_read} not read ({state.how})"


# ---------------------------------------------------------------------------------------------
# Exported files
# ---------------------------------------------------------------------------------------------


def _iter_json_array(
    handle: Any, chunk_chars: int = 1 << 20, max_element_chars: int = MAX_ENTRY_CHARS
) -> Iterator[Any]:
    """Yield the elements of a top-level JSON array one at a time, reading ``handle`` in chunks.

    Raises ValueError (json.JSONDecodeError) for malformed JSON, and when one element is still not
    complete after ``max_element_chars`` characters, so a broken file is not read whole into memory.
    """
    decoder = json.JSONDecoder()
    buffer = ""
    pos = 0
    started = False
    eof = False
    while True:
        # Skip whitespace / separators.
        while True:
            while pos < len(buffer) and buffer[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buffer) or eof:
                break
            more = handle.read(chunk_chars)
            if not more:
                eof = True
            buffer = buffer[pos:] + more
            pos = 0
        if pos >= len(buffer):
            if not started:
                raise ValueError("empty file")
            raise ValueError("unterminated JSON array")
        if not started:
            if buffer[pos] != "[":
                raise ValueError("not a JSON array")
            started = True
            pos += 1
            continue
        if buffer[pos] == "]":
            return
        while True:
            try:
                value, end = decoder.raw_decode(buffer, pos)
                break
            except json.JSONDecodeError:
                more = "" if eof else handle.read(chunk_chars)
                if not more:
                    raise
                buffer = buffer[pos:] + more
                pos = 0
                if len(buffer) > max_element_chars + chunk_chars:  # malformed, or not a log entry
                    raise ValueError(
                        f"an array element is not valid JSON within {max_element_chars:,} characters"
                    ) from None
        yield value
        pos = end
        if pos > chunk_chars:
            buffer = buffer[pos:]
            pos = 0


def _entry_epoch(entry: dict[str, Any]) -> float | None:
    """A LogEntry's time as Unix seconds (``timestamp``, else ``receiveTimestamp``), or None."""
    return parse_epoch(str(entry.get("timestamp") or entry.get("receiveTimestamp") or ""))


def _lines(handle: Any, limit: int = MAX_LINE_CHARS, first: int = 1) -> Iterator[tuple[int, Any, bool]]:
    """``(number, line, whole)`` for each line of ``handle`` (text or binary) from where it stands,
    numbered from ``first``. A line longer than ``limit`` is cut there (``whole`` False) and the rest of
    it skipped, so one huge line is never held in memory."""
    newline = "\n" if isinstance(handle, io.TextIOBase) else b"\n"
    number = first - 1
    while line := handle.readline(limit):
        number += 1
        whole = len(line) < limit or line.endswith(newline)
        rest = line
        while len(rest) == limit and not rest.endswith(newline):  # skip the rest of a cut line
            rest = handle.readline(limit)
        yield number, line, whole


ORDER_PEEK = 1000  # entries looked at to tell an export's order from its timestamps
TAIL_BLOCK_BYTES = 1 << 20  # read backwards this much at a time to find where a file's tail starts
COUNT_BLOCK_BYTES = 8 << 20


def tail_start(handle: Any, keep: int) -> int | None:
    """The byte offset where the last ``keep`` non-blank lines of a binary ``handle`` start, or None when
    it has no more than ``keep`` of them (read it all). Reads backwards from the end in blocks; only
    the tail is read, whatever the file's size."""
    size = handle.seek(0, os.SEEK_END)
    pos, found, nonblank, candidate = size, 0, False, None
    while pos > 0:
        start = max(0, pos - TAIL_BLOCK_BYTES)
        handle.seek(start)
        block = handle.read(pos - start)
        i = len(block)
        while True:
            j = block.rfind(b"\n", 0, i)
            if not nonblank and block[j + 1 : i].replace(b"\r", b" ").strip():
                nonblank = True
            if j < 0:
                break  # this line goes on in the block before
            if nonblank:  # the line starting at start + j + 1 is complete
                found += 1
                if found == keep:
                    candidate = start + j + 1
                elif found > keep:
                    return candidate
            nonblank = False
            i = j
        pos = start
    if nonblank and found + 1 > keep:  # the first line of the file is one more
        return candidate
    return None


def line_number_at(handle: Any, offset: int) -> int:
    """The 1-based number of the line starting at byte ``offset`` of a binary ``handle``."""
    handle.seek(0)
    newlines, left = 0, offset
    while left > 0:
        chunk = handle.read(min(COUNT_BLOCK_BYTES, left))
        if not chunk:
            break
        newlines += chunk.count(b"\n")
        left -= len(chunk)
    return newlines + 1


_FILE_FIX = "use `gcloud logging read --format=json` output, JSON lines, or plain text"
# LogEntry fields (https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry): an object with
# none of them is not a log entry.
LOG_ENTRY_KEYS = frozenset(
    {
        "insertId",
        "timestamp",
        "receiveTimestamp",
        "severity",
        "logName",
        "textPayload",
        "jsonPayload",
        "protoPayload",
        "resource",
    }
)
_JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")


@dataclass
class FileSource:
    """An exported log file: JSON array, JSON lines, ``{"entries": [...]}``, or plain text.

    Args:
        path: the file.
        redactor: shared with the rest of the answer (stable placeholders).
        page_size: records per page.
        max_entries: read at most this many records, the newest (module docstring; 0 = no limit);
            ``truncated`` says some were not read and ``not_read`` which.
    """

    path: str
    redactor: Redactor = field(default_factory=Redactor)
    page_size: int = PAGE_SIZE
    max_entries: int = 0
    truncated: bool = False
    time_limited: bool = False  # stopped early to answer within the tool call's budget
    count: int = 0
    kind: str = ""
    order: str = ""  # "oldest first" / "newest first" when it was worked out
    not_read: str | None = None  # what was left unread, e.g. "lines 1-1,171 (the oldest)"
    last_read: str = ""  # where the read stopped: "line 15,234", "entry 4,000"
    known_entries: int | None = None  # entries the file is known to hold at most, when a cap applied

    def __post_init__(self) -> None:
        p = Path(os.path.expanduser(self.path))
        files.check_regular(p, field="path", value=self.path, max_bytes=MAX_LOG_FILE_BYTES)
        self._path = p

    def _open(self, binary: bool = False) -> Any:
        """The file opened for reading: a regular file only, never blocking (`tpu_devops.host.files`)."""
        return files.open_regular(
            self._path, field="path", value=self.path, max_bytes=MAX_LOG_FILE_BYTES, binary=binary
        )

    def describe(self) -> str:
        return f"file {self._path.name} ({self.kind or 'unread'})"

    def _bad(self, problem: str, fix: str = _FILE_FIX) -> InputError:
        return InputError(problem, field="path", value=self.path, fix=fix)

    def _detect(self) -> str:
        """The file's shape from its first 64 KiB. Raises InputError for an empty or binary file, or a
        ``.json`` / ``.jsonl`` file that does not hold JSON."""
        with self._open() as handle:
            head = handle.read(65536)
        stripped = head.lstrip()
        if not stripped:
            raise self._bad("the file is empty", "check the export command wrote entries (widen --freshness)")
        if "\x00" in head or head.count("\ufffd") > max(8, len(head) // 100):
            raise self._bad("a binary (or UTF-16) file, not a log export", "save the export as UTF-8 text")
        if stripped.startswith("["):
            return "json-array"
        if stripped.startswith("{"):
            first = stripped.split("\n", 1)[0].strip()
            try:
                json.loads(first)
                return "json-lines"
            except json.JSONDecodeError:
                return "json-object"
        if self._path.suffix.lower() in _JSON_SUFFIXES:
            raise self._bad(f"a {self._path.suffix} file that does not start with JSON")
        return "text"

    def _entry(self, value: Any, where: str) -> dict[str, Any]:
        """``value`` when it is a LogEntry object (a bare Kubernetes Event becomes one), else InputError
        naming where it sits."""
        if is_event(value):
            return entry_from_event(value)
        if isinstance(value, dict) and LOG_ENTRY_KEYS.intersection(value):
            return value
        shown = (
            json.dumps(value)[:80]
            if not isinstance(value, dict)
            else "an object with keys " + ", ".join(sorted(map(str, value))[:6])
        )
        raise self._bad(
            f"{where} is not a Cloud Logging LogEntry ({shown}): is this a log export?",
            "pass `gcloud logging read --format=json` output (objects with timestamp, severity, "
            "textPayload/jsonPayload), JSON lines of them, or a plain-text log",
        )

    def _raw_entries(self) -> Iterator[dict[str, Any]]:
        with self._open() as handle:
            if self.kind == "json-array":
                for index, value in enumerate(_iter_json_array(handle)):
                    yield self._entry(value, f"array element {index}")
            elif self.kind == "json-lines":
                for number, line, whole in _lines(handle):
                    if not line.strip():
                        continue
                    try:
                        if not whole:
                            raise ValueError
                        entry = json.loads(line)
                    except ValueError:
                        raise self._bad(
                            f"line {number} is not JSON"
                            + ("" if whole else f" within {MAX_LINE_CHARS >> 20} MiB"),
                            "export with --format=json",
                        ) from None
                    if is_event_list(entry):  # kubectl get events -o json, written on one line (jq -c)
                        for index, value in enumerate(entry["items"]):
                            yield self._entry(value, f"line {number} items[{index}]")
                        continue
                    yield self._entry(entry, f"line {number}")
            else:
                if self._path.stat().st_size > MAX_OBJECT_BYTES:
                    raise self._bad(
                        f"a single JSON object larger than {MAX_OBJECT_BYTES >> 20} MiB",
                        "export with `gcloud logging read --format=json` (a JSON array, read as a stream) or JSON lines",
                    )
                data = json.load(handle)
                if is_event_list(data):  # kubectl get events -o json
                    for index, value in enumerate(data["items"]):
                        yield self._entry(value, f"items[{index}]")
                    return
                entries = data.get("entries") if isinstance(data, dict) else None
                if not isinstance(entries, list):
                    yield self._entry(data, "the JSON value")
                    return
                for index, value in enumerate(entries):
                    yield self._entry(value, f"entries[{index}]")

    def _newest_entries(self, entries: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``entries`` in file order; when the file is oldest first and holds more than
        ``max_entries``, only its last ``max_entries`` (kept in a window as it streams)."""
        if not self.max_entries:
            yield from entries
            return
        peeked: list[dict[str, Any]] = []
        first = None
        for entry in entries:  # the order, from the first two distinct timestamps
            peeked.append(entry)
            when = _entry_epoch(entry)
            if when is None:
                continue
            if first is None:
                first = when
            elif when != first:
                self.order = "oldest first" if when > first else "newest first"
                break
            if len(peeked) >= ORDER_PEEK:
                break
        if self.order != "oldest first":  # newest first (gcloud's order), or not known: the head
            yield from peeked
            yield from entries
            return
        window: deque[dict[str, Any]] = deque(peeked, maxlen=self.max_entries)
        seen = len(peeked)
        for entry in entries:
            window.append(entry)
            seen += 1
            if seen % 1000 == 0 and _time_is_short():
                self.time_limited = True
                self.last_read = f"entry {seen:,}"
                break
        if seen > len(window):
            self.truncated = True
            self.not_read = f"entries 1-{seen - len(window):,} (the oldest)"
            self.known_entries = seen
        if self.time_limited:
            self.truncated = True
            self.not_read = ", ".join(
                x for x in (self.not_read, f"the entries after entry {seen:,} (the newest)") if x
            )
        yield from window

    def _text_records(self) -> Iterator[LogRecord]:
        """A text file's records, from the line where its last ``max_entries`` non-blank lines start."""
        reference = datetime.fromtimestamp(self._path.stat().st_mtime, UTC)
        last_ts = ""
        self.order = "oldest first"
        # Binary lines split on "\n" only, so line-N matches `grep -n` even with "\r" progress bars.
        with self._open(binary=True) as handle:
            first = 1
            start = tail_start(handle, self.max_entries) if self.max_entries else None
            if start is not None:
                first = line_number_at(handle, start)
                self.truncated = True
                self.not_read = f"lines 1-{first - 1:,} (the oldest)"
                self.known_entries = self.max_entries + first - 1
            handle.seek(start or 0)
            for number, raw, _ in _lines(handle, first=first):
                line = raw.decode("utf-8", errors="replace").replace("\r", " ")
                if not line.strip():
                    continue
                record = record_from_line(line, number, self.redactor, reference=reference, last_ts=last_ts)
                last_ts = record.timestamp
                self.last_read = f"line {number:,}"
                yield record

    def _records(self) -> Iterator[LogRecord]:
        if self.kind == "text":
            yield from self._text_records()
            return
        try:
            for n, entry in enumerate(self._newest_entries(self._raw_entries()), 1):
                if not self.time_limited:
                    self.last_read = f"entry {n:,}"
                yield record_from_entry(entry, self.redactor)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise self._bad(f"not a readable log export: {exc}") from None

    def pages(self) -> Iterator[list[LogRecord]]:
        """Pages of records. Raises InputError (field ``path``) for an unreadable, empty, binary or
        malformed file."""
        try:
            yield from self._pages()
        except OSError as exc:  # permission denied, I/O error
            raise self._bad(
                f"cannot read the file: {exc.strerror or exc}", "check the file's permissions"
            ) from None

    def _pages(self) -> Iterator[list[LogRecord]]:
        self.kind = self._detect()
        page: list[LogRecord] = []
        for record in self._records():
            if self.max_entries and self.count >= self.max_entries:
                self.truncated = True
                older = " (the oldest, in this newest-first file)" if self.order == "newest first" else ""
                self.not_read = f"the entries after the first {self.max_entries:,}{older}"
                break
            page.append(record)
            self.count += 1
            if len(page) >= self.page_size:
                yield page
                page = []
                if _time_is_short():
                    self.truncated = self.time_limited = True
                    newer = " (the newest)" if self.order == "oldest first" else ""
                    gap = f"what follows {self.last_read}{newer}"
                    self.not_read = ", ".join(x for x in (self.not_read, gap) if x)
                    break
        if page:
            yield page
        if self.count == 0:
            raise self._bad(
                "0 log entries in the file: is this a log export?",
                "check the export command wrote entries (widen --freshness), or pass another file",
            )


# ---------------------------------------------------------------------------------------------
# Cloud Logging
# ---------------------------------------------------------------------------------------------


@dataclass
class CloudLoggingSource:
    """Entries from Cloud Logging ``entries.list``, page by page (the token is passed through).

    Args:
        settings: project and endpoint.
        filter_: a filter built by `tpu_devops.logs.filters.build_filter`.
        order: ``desc`` (newest first) or ``asc``.
        page_size: entries per API page (1..1000).
        max_entries: stop after this many; ``next_page_token`` then resumes where it stopped
            (at a page boundary).
        page_token: resume a previous read.

    ``entries.list`` may answer a page with no entries and a ``nextPageToken`` while it scans (the
    LogEntries.list reference: fewer than ``pageSize`` entries, even none, does not mean the end), so
    after `MAX_EMPTY_PAGES` empty pages in a row the read stops as truncated with the token to resume:
    each page is one call against the per-minute read quota.
    """

    settings: Settings
    filter_: str
    order: str = "desc"
    page_size: int = PAGE_SIZE
    max_entries: int = 10_000
    page_token: str | None = None
    redactor: Redactor = field(default_factory=Redactor)
    next_page_token: str | None = None
    truncated: bool = False
    time_limited: bool = False  # stopped early to answer within the tool call's budget
    count: int = 0
    not_read: str | None = None  # what the read left out, when it stopped early
    last_timestamp: str = ""  # the timestamp of the last entry read (the oldest, newest first)

    def describe(self) -> str:
        return "Cloud Logging entries.list"

    def _left_out(self) -> str:
        past = "older" if self.order == "desc" else "newer"
        when = f" than {self.last_timestamp}" if self.last_timestamp else ""
        return f"the entries {past}{when} that match the filter"

    def pages(self) -> Iterator[list[LogRecord]]:
        from tpu_devops.gcp.logging import list_entries_page

        token = self.page_token
        empty = 0
        while True:
            if self.count and _time_is_short():
                self.truncated = self.time_limited = True
                self.next_page_token = token
                self.not_read = self._left_out()
                return
            size = min(self.page_size, max(1, self.max_entries - self.count))
            page = list_entries_page(
                self.settings, filter_=self.filter_, order=self.order, page_size=size, page_token=token
            )
            records = [record_from_entry(e, self.redactor) for e in page["entries"]]
            self.count += len(records)
            if records:
                self.last_timestamp = records[-1].timestamp
            token = page["nextPageToken"]
            self.next_page_token = token
            empty = 0 if records else empty + 1
            if records:
                yield records
            if not token:
                return
            if self.count >= self.max_entries or empty >= MAX_EMPTY_PAGES:
                self.truncated = True
                self.not_read = self._left_out()
                return


# ---------------------------------------------------------------------------------------------
# Our node's logs: container (Docker gcplogs driver) and system (startup script, syslog, audit)
# ---------------------------------------------------------------------------------------------


def check_node_id(node: str) -> str:
    """`tpu_devops.types.check_node_id` as a tool argument (raises InputError naming ``node``)."""
    try:
        return types.check_node_id(node)
    except ConfigError as exc:
        raise InputError(exc.message, field=exc.field, value=exc.value, fix=exc.fix) from None


def node_clause(node: str) -> str:
    """Entries about one TPU node or queued resource id (``:`` is substring match, so a queued
    resource id also finds its node ``<id>-node``): the Docker driver's ``jsonPayload.instance.name``,
    the guest agent's instance-name labels, ``tpu_worker``'s ``node_id``, audit ``resourceName``."""
    v = quote_value(check_node_id(node))
    return " OR ".join(
        [
            f"jsonPayload.instance.name:{v}",
            f"labels.instance_name:{v}",
            f'labels."compute.googleapis.com/resource_name":{v}',
            f"resource.labels.node_id:{v}",
            f"protoPayload.resourceName:{v}",
        ]
    )


# Which logs `node_filter` reads for each kind.
NODE_LOGS: dict[str, tuple[str, ...]] = {"container": (DOCKER_LOG_ID,), "system": SYSTEM_LOG_IDS}


def node_filter(
    settings: Settings,
    node: str,
    kind: str,
    *,
    since: str = "24h",
    until: str | None = None,
    severity: str | None = None,
    text: str | None = None,
) -> str:
    """Filter for one kind of ``node``'s logs: ``"container"`` (the vLLM container's Docker ``gcplogs``
    driver entries) or ``"system"`` (startup script runner, syslog, audit activity / system events:
    preemption and maintenance are system events).

    Raises:
        InputError: bad node id, window, severity (field named). ConfigError: no project.
    """
    spec = FilterSpec(
        since=since,
        until=until,
        severity=severity,
        text=text,
        log_ids=list(NODE_LOGS[kind]),
        extra=[node_clause(node)],
    )
    return build_filter(spec, project=require_project(settings))


class LogView(BaseModel):
    """One entry as tools show it."""

    insert_id: str
    timestamp: str
    severity: str
    log: str
    labels: dict[str, str] = {}
    message: str


class LogsPage(UntrustedContent, ToolResult):
    """A page of log entries, newest first unless asked otherwise. The entries are log text: untrusted
    data (`tpu_devops.host.untrusted`), fenced in the text rendering; ``suspected_injection`` lists the
    insertIds of entries that read like instructions to an AI agent."""

    untrusted: UntrustedData = untrusted_data(
        "logs",
        "entries[].message",
        "entries[].labels",
        "entries[].insert_id",
        "entries[].log",
        "common_labels",
    )
    source: str
    filter: str | None = None
    returned: int
    entries: Table[LogView]
    next_page_token: str | None = None
    suspected_injection: list[str] = []
    notices: list[str] = []
    common_labels: dict[str, str] = Field(
        default_factory=dict, description="labels every entry has (then left out of each entry's labels)"
    )

    def model_post_init(self, context: Any, /) -> None:
        """Labels shared by every entry move to ``common_labels``, so a page does not repeat them per entry."""
        if len(self.entries) > 1 and not self.common_labels:
            shared = dict(self.entries[0].labels)
            for e in self.entries[1:]:
                shared = {k: v for k, v in shared.items() if e.labels.get(k) == v}
            if shared:
                self.common_labels = shared
                for e in self.entries:
                    e.labels = {k: v for k, v in e.labels.items() if k not in shared}

    def headline(self) -> str:
        more = " (more: pass next_page_token)" if self.next_page_token else ""
        return f"{self.returned} entries from {self.source}{more}"

    def render_text(self) -> str:
        lines = [self.headline()]
        lines += [f"note: {n}" for n in self.notices]
        if self.filter:
            lines.append(f"filter: {self.filter}")
        if self.common_labels:
            lines.append("every entry: " + ", ".join(f"{k}={v}" for k, v in self.common_labels.items()))
        if self.entries:
            rows = [
                f"{e.timestamp} {e.severity:<8} [{e.insert_id}] {e.log}"
                + "".join(f" {k}={v}" for k, v in e.labels.items())
                + f": {e.message}"
                for e in self.entries
            ]
            lines.append(fence("\n".join(rows)))
        if self.next_page_token:
            lines.append(f"next_page_token: {self.next_page_token}")
        return "\n".join(lines)


HARD_LIMIT = 500


def read_page(source: CloudLoggingSource | FileSource, limit: int) -> LogsPage:
    """Read at most ``limit`` (hard cap 500) records from ``source`` into a `LogsPage`.

    For Cloud Logging one API page of ``limit`` entries is read and its ``nextPageToken`` returned.
    For a file the newest ``limit`` records are returned (`FileSource`).

    Raises:
        InputError: limit out of range; whatever the source raises.
    """
    if not 1 <= int(limit) <= HARD_LIMIT:
        raise InputError("limit out of range", field="limit", value=limit, fix=f"use 1 to {HARD_LIMIT}")
    cloud = isinstance(source, CloudLoggingSource)
    source.max_entries = limit
    if cloud:
        source.page_size = limit
    records = [r for page in source.pages() for r in page]
    views = [r.view() for r in records]
    token = source.next_page_token if isinstance(source, CloudLoggingSource) else None
    notices: list[str] = []
    suspected = [r.insert_id for r in records if looks_like_instruction(r.message)]
    if suspected:
        notices.append(injection_notice(suspected))
    if not cloud and source.truncated:
        notices.append(
            f"showing {limit} records of the file ({source.not_read or 'the rest'} not read); use summarize_logs "
            "for all of it"
        )
    if token:
        notices.append(f"truncated at {limit} entries; more match the filter (pass next_page_token)")
    if notice := source.redactor.notice():
        notices.append(notice)
    return LogsPage(
        source=source.describe(),
        filter=source.filter_ if isinstance(source, CloudLoggingSource) else None,
        returned=len(views),
        entries=views,
        next_page_token=token,
        suspected_injection=suspected,
        notices=notices,
    )


def fetch_container_log_text(
    settings: Settings, node: str, *, since: str = "24h", max_entries: int = 20_000
) -> str:
    """The vLLM container log of ``node`` from Cloud Logging as plain text, oldest line first.

    For boot diagnosis (``diagnose_vllm_boot`` with a node id): the text reads like ``docker logs``
    output, redacted. Reads up to ``max_entries`` newest entries, then reverses them.

    Raises:
        InputError (bad node), ConfigError (no project), cloud errors from `gcp.logging`.
    """
    source = CloudLoggingSource(
        settings, node_filter(settings, node, "container", since=since), max_entries=max_entries
    )
    messages: list[str] = []
    for page in source.pages():
        messages.extend(r.message for r in page)
    if not messages:
        raise NotFoundError(
            f"no vLLM container log entries for node {node!r} since {since}",
            field="node",
            value=node,
            fix="check the node / queued resource id and widen since (e.g. 3d); the Docker gcplogs driver "
            "must be on (the startup script sets it)",
        )
    messages.reverse()
    return "\n".join(messages)


# ---------------------------------------------------------------------------------------------
# Entry points for the tools (server.py calls these)
# ---------------------------------------------------------------------------------------------

DEFAULT_MAX_ENTRIES = 20_000


def open_source(
    settings: Settings,
    *,
    path: str | None = None,
    filter: str | None = None,
    since: str | None = None,
    until: str | None = None,
    severity: str | None = None,
    node: str | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    redactor: Redactor | None = None,
) -> FileSource | CloudLoggingSource:
    """A file source (``path``) or a Cloud Logging source built from the other arguments.

    ``node`` restricts to one TPU node / queued resource id (container and system logs); ``filter`` is
    a raw Logging filter added as one bracketed clause. Without ``since`` the window is 24 h.

    Raises:
        InputError: a path with query arguments (filter, node, since, until, severity: they are not
        applied to files), bad window/severity/filter, max_entries range.
    """
    redactor = redactor or Redactor()
    if path is not None and not path.strip():
        raise InputError(
            "empty path (an empty string is not 'no file')",
            field="path",
            value=path,
            fix="pass the path of a log export, or omit path (null) to query Cloud Logging",
        )
    if not 1 <= int(max_entries) <= 200_000:
        raise InputError(
            "max_entries out of range", field="max_entries", value=max_entries, fix="use 1 to 200000"
        )
    if path:
        query = {"filter": filter, "node": node, "since": since, "until": until, "severity": severity}
        if given := [name for name, value in query.items() if value]:
            raise InputError(
                f"give either a file path or a Cloud Logging query, not both ({', '.join(given)} is for a"
                " query; a file is read whole)",
                field="path",
                value=path,
                fix=f"drop path to query Cloud Logging, or drop {'/'.join(given)} to read the file",
            )
        real = files.readable_file(settings, path, field="path", max_bytes=MAX_LOG_FILE_BYTES)
        return FileSource(str(real), redactor=redactor, max_entries=int(max_entries))
    spec = FilterSpec(since=since, until=until, severity=severity, raw=filter)
    if node:
        spec.extra.append(node_clause(node))
    flt = build_filter(spec, project=require_project(settings))
    return CloudLoggingSource(settings, flt, max_entries=int(max_entries), redactor=redactor)


def get_cloud_logging_logs(
    settings: Settings,
    *,
    filter: str | None = None,
    since: str | None = None,
    until: str | None = None,
    severity: str | None = None,
    resource_type: str | None = None,
    log_id: str | None = None,
    text: str | None = None,
    limit: int = 50,
    page_token: str | None = None,
    order: str = "desc",
) -> LogsPage:
    """One page of Cloud Logging entries in compact form (see `read_page`)."""
    spec = FilterSpec(
        since=since,
        until=until,
        severity=severity,
        resource_type=resource_type,
        text=text,
        raw=filter,
        log_ids=[log_id] if log_id else [],
    )
    flt = build_filter(spec, project=require_project(settings))
    return read_page(CloudLoggingSource(settings, flt, order=order, page_token=page_token), limit)


def get_node_logs(
    settings: Settings,
    kind: str,
    *,
    node: str | None = None,
    since: str = "24h",
    until: str | None = None,
    severity: str | None = None,
    text: str | None = None,
    limit: int = 100,
    page_token: str | None = None,
    order: str = "desc",
) -> LogsPage:
    """``kind`` ``"container"`` (vLLM's Docker log) or ``"system"`` (startup script, syslog, audit)
    of ``node`` (default RESOURCE_ID), read from Cloud Logging: no SSH."""
    node = node or settings.resource_id
    flt = node_filter(settings, node, kind, since=since, until=until, severity=severity, text=text)
    return read_page(CloudLoggingSource(settings, flt, order=order, page_token=page_token), limit)
