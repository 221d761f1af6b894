"""One pass over a whole log text: which lines are failures, which belong together, which are harmless.

`scan_text` returns the `Event`s of a log: a rule match, an exception with its traceback and the lines
that continue its message, or an ERROR/CRITICAL line, a traceback or a failure worded at INFO that no
rule explains. Every ERROR-level line, exception line and traceback ends up in exactly one of: an event
(explained by a rule, or unrecognised), a known-noise match, or the furniture of a traceback whose
exception is an event. `logs.boot` turns events into findings and a verdict.

Grouping follows how Python and vLLM write failures:

- a traceback (``Traceback (most recent call last):``, ``File "...", line N`` frames, code lines, ``^^^``
  markers) belongs to the next exception line of the same process;
- the lines right after an exception line from the same logging call (same process tag and source
  ``[core.py:1184]``, or both unprefixed) continue its message: XLA's ``Program vmem requirement ...``
  after ``Ran out of memory in memory space vmem``, ``429 Client Error ...`` after ``OSError: There was a
  specific connection error``. A rule matching any line of an event explains the whole event.

Speed: one Aho-Corasick pass (pyahocorasick, C) finds every line holding an anchor of a rule, of the
fallback or of a milestone; only those lines are split and classified, so the work stays linear in the
log size and does not grow with the number of rules (``scripts/bench_planning.py``).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tpu_devops.logs import failure_lines as fl
from tpu_devops.logs import signatures as sg
from tpu_devops.logs.rules import MILESTONES, SIGNATURES, Signature


class Text:
    """A log with fast offset -> line lookups (1-based line numbers, as ``grep -n``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._newlines: list[int] | None = None

    @property
    def newlines(self) -> list[int]:
        if self._newlines is None:
            self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        return self._newlines

    def line_no(self, pos: int) -> int:
        return bisect.bisect_right(self.newlines, pos - 1) + 1 if pos else 1

    def line_at(self, pos: int) -> str:
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        return self.text[start : end if end >= 0 else len(self.text)]


@dataclass
class RuleHit:
    """A line a rule matched, with the named groups it captured."""

    sig: Signature
    line: int
    groups: dict[str, str | None]


@dataclass
class Event:
    """A failure in the log: its lines, the line it is about, and the rule matches inside it.

    ``kind``: ``rule`` (a rule matched its first line), or the fallback class of that line
    (``exception``, ``error``, ``failure_words``, ``traceback``).
    """

    kind: str
    key_line: int
    proc: str | None
    src: str | None
    lines: list[int] = field(default_factory=list)
    hits: list[RuleHit] = field(default_factory=list)
    traceback_line: int | None = None
    exception: str | None = None

    @property
    def last(self) -> int:
        return self.lines[-1]

    def best_hit(self) -> RuleHit | None:
        """The highest-weight rule match of the event (the first on ties)."""
        best: RuleHit | None = None
        for h in self.hits:
            if best is None or h.sig.weight > best.sig.weight:
                best = h
        return best

    def groups(self, sig: Signature) -> dict[str, str | None]:
        """Named groups of every match of ``sig`` in the event merged (first value wins)."""
        out: dict[str, str | None] = {}
        for h in self.hits:
            if h.sig is sig:
                for k, v in h.groups.items():
                    if v and not out.get(k):
                        out[k] = v
        return out


@dataclass
class Scan:
    """What `scan_text` found (line numbers are 1-based)."""

    log: Text
    events: list[Event]
    noise: dict[str, list[int]]
    notes: list[RuleHit]  # info / warning rule matches (not failures)
    milestones: dict[str, int]  # phase -> line of its last occurrence
    last_ok_line: int | None
    started_line: int | None

    def line(self, number: int) -> str:
        """The text of line ``number``."""
        newlines = self.log.newlines
        start = newlines[number - 2] + 1 if number >= 2 else 0
        end = newlines[number - 1] if number - 1 < len(newlines) else len(self.log.text)
        return self.log.text[start:end]


@lru_cache(maxsize=1)
def _automaton() -> Any:
    """One automaton over every anchor: of the rules, of the fallback and of the milestones."""
    import ahocorasick

    words: set[str] = set(sg.FALLBACK_ANCHORS) | {m.anchor for m in MILESTONES}
    words |= {a for sig in SIGNATURES for a in sig.anchors}
    automaton = ahocorasick.Automaton()
    for word in words:
        automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


def anchored_lines(text: str) -> list[tuple[int, int, int, frozenset[str]]]:
    """``(line number, start, end, anchors found)`` of every line that holds an anchor, in order (one C
    pass over the text, whatever the number of rules)."""
    out: list[tuple[int, int, int, frozenset[str]]] = []
    line_end = -1
    line_no, counted_to = 1, 0
    words: set[str] = set()
    start = 0
    if text.startswith(fl.GLOG_LINE_STARTS):  # the first line has no newline before its glog level
        line_end = text.find("\n")
        line_end = len(text) if line_end < 0 else line_end
        words = {"\n" + text[:2]}
    for end, word in _automaton().iter(text):
        if end < line_end:
            words.add(word)  # another anchor on the same line
            continue
        if words:
            out.append((line_no, start, line_end, frozenset(words)))
        # (a glog anchor "\nE0" starts with the newline before its line: rfind finds that one)
        start = text.rfind("\n", 0, end) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        line_no += text.count("\n", counted_to, start)
        counted_to = start
        words = {word}
    if words:
        out.append((line_no, start, line_end, frozenset(words)))
    return out


def candidate_lines(text: str) -> list[tuple[int, int, int]]:
    """``(line number, start, end)`` of every line that holds an anchor (`anchored_lines`)."""
    return [(n, a, b) for n, a, b, _ in anchored_lines(text)]


def _rule_of(line: str, anchors: frozenset[str] | None = None) -> tuple[Signature, re.Match[str]] | None:
    """The rule that explains ``line``: known noise first (it is exact by design), else the heaviest
    (``anchors``: those found on the line, so only the rules holding one are tried)."""
    found = sg.match_line(line, anchors)
    for sig in sorted(found, key=lambda s: s.kind != "noise"):
        m = sig.search(line)
        if m is not None:
            return sig, m
    return None


def scan_text(text: str) -> Scan:
    """Scan a whole log (see the module docstring). Never raises on odd input."""
    log = Text(text)
    events: list[Event] = []
    noise: dict[str, list[int]] = {}
    notes: list[RuleHit] = []
    open_event: dict[str | None, Event] = {}
    tb_open: dict[str | None, int] = {}
    prev_line: dict[str | None, int] = {}  # last candidate line seen per process
    milestones: dict[str, int] = {}
    for line_no, start, end, anchors in anchored_lines(text):
        line = text[start:end]
        for m in MILESTONES:
            if m.anchor in line and m.pattern.search(line):
                milestones[m.phase] = line_no
        parts = sg.split_line(line)
        proc = parts.proc
        rule = _rule_of(line, anchors)
        cls = sg.classify(parts)
        event = open_event.get(proc)
        contiguous = (
            event is not None
            and prev_line.get(proc) == line_no - 1
            and event.last == line_no - 1
            and event.src == parts.src
            # Unprefixed lines continue only an exception's message ("OSError: ...:" then "429 Client
            # Error ..."); a prefixed line continues the same logging call (same process and source).
            and (event.src is not None or event.exception is not None)
        )
        prev_line[proc] = line_no
        if rule is not None and rule[0].kind == "noise":
            noise.setdefault(rule[0].id, []).append(line_no)
            open_event.pop(proc, None)
            continue
        if rule is not None and rule[0].kind in ("info", "warning"):
            notes.append(RuleHit(rule[0], line_no, rule[1].groupdict()))
            continue
        if cls == "traceback":
            tb_open[proc] = line_no
            open_event.pop(proc, None)
            continue
        if rule is None and (cls == "furniture" or (cls == "indented" and proc in tb_open)):
            if contiguous and event is not None:
                event.lines.append(line_no)  # "-----" or code under an exception: the event goes on
            elif cls == "furniture" and sg.is_frame(parts.body):
                tb_open.setdefault(proc, line_no)  # frames without a "Traceback" header still lead somewhere
            continue
        if contiguous and event is not None and cls != "exception":
            event.lines.append(line_no)  # the same logging call continues the message
            if rule is not None:
                event.hits.append(RuleHit(rule[0], line_no, rule[1].groupdict()))
            continue
        if rule is None and cls not in ("exception", "error", "failure_words", "indented"):
            continue
        if rule is None and cls == "indented" and parts.level not in ("ERROR", "CRITICAL"):
            continue
        kind = "rule" if rule is not None else ("error" if cls == "indented" else str(cls))
        new = Event(kind=kind, key_line=line_no, proc=proc, src=parts.src, lines=[line_no])
        if cls == "exception":
            new.exception = sg.exception_type(parts.body)
        if rule is not None:
            new.hits.append(RuleHit(rule[0], line_no, rule[1].groupdict()))
        if proc in tb_open:
            new.traceback_line = tb_open.pop(proc)
        events.append(new)
        open_event[proc] = new
    for proc, tb_line in tb_open.items():
        events.append(Event(kind="traceback", key_line=tb_line, proc=proc, src=None, lines=[tb_line]))
    events.sort(key=lambda e: e.key_line)
    return Scan(
        log=log,
        events=events,
        noise=noise,
        notes=notes,
        milestones=milestones,
        last_ok_line=max(milestones.values()) if milestones else None,
        started_line=milestones.get("application startup complete"),
    )
