"""What a failure line looks like when no rule explains it: the one definition behind the fallback.

`diagnose_vllm_boot` finds candidate lines with an Aho-Corasick pass over literal anchors (`logs.scan`),
then classifies them; `summarize_logs` classifies every template (`logs.evidence`); the plain-text
reader gives a line its severity (`logs.sources`). All three read the words below, so a line one of
them calls a failure the others cannot skip (``KeyboardInterrupt: terminated`` was once an exception to
the classifier and invisible to the anchors).

- an exception header: ``[module.]TypeName: message`` where the type name ends in one of
  `EXCEPTION_SUFFIXES` (``ValueError``, ``KeyboardInterrupt``, ``SystemExit``, ``OperatorNotFound``,
  ``RuntimeProgramAllocationFailure`` ...);
- a traceback header (``Traceback (most recent call last):``);
- failure words in a line without a logger level (`FAILURE_WORDS`, in lower, Capitalized and UPPER
  case: a startup-script or container line is not triaged by the runner's severity);
- an ERROR / CRITICAL / FATAL logger level (vLLM, Python logging, uvicorn) or a glog ``E0807`` /
  ``F0807`` prefix at the start of a line (`GLOG_ANCHORS`).

Python's own exception message that continues on the next lines (pydantic's ``N validation error for
ModelConfig`` then ``  Value error, ...``; ``OSError: ... when trying to load X:`` then the HTTP error)
is read by `continued` and `continuation`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

EXCEPTION_SUFFIXES = (
    "Error",
    "Exception",
    "Failure",
    "Exit",
    "Interrupt",
    "NotFound",
    "Aborted",
    "Abort",
    "Timeout",
    "Fault",
)
FAILURE_WORDS = ("errors", "error", "failed", "failure", "fatal", "panic", "denied")
ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")


def _cases(words: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for w in words:
        for v in (w, w.capitalize(), w.upper()):
            if v not in out:
                out.append(v)
    return tuple(out)


_WORD_FORMS = _cases(FAILURE_WORDS)
_PHRASE_FORMS = _cases(("exit status", "exited with code"))

EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*?(?:" + "|".join(EXCEPTION_SUFFIXES) + r"))(?::\s|:$|$)"
)
TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):?\s*$")
FAILURE_WORDS_RE = re.compile(
    r"\b(?:"
    + "|".join(map(re.escape, _WORD_FORMS))
    + "|"
    + "|".join(re.escape(p) + r" [1-9]\d*" for p in _PHRASE_FORMS)
    + r")\b"
)
# glog / absl failure lines ("E0807 12:00:01.123456  123 file.cc:42] msg", month 01-12) have no failure
# word: they are found by their level letter and month at the start of a line, or after a docker
# --timestamps stamp ("...Z E0807"). A glog line behind a process tag is not found by these.
GLOG_ANCHORS = tuple(f"{lead}{level}{digit}" for lead in ("\n", "Z ") for level in "EF" for digit in "01")
GLOG_LINE_STARTS = tuple(f"{level}{digit}" for level in "EF" for digit in "01")  # the first line has no "\n"

# Literal anchors: a line the fallback would call a failure holds at least one of them.
ANCHORS: tuple[str, ...] = (
    *ERROR_LEVELS,
    "Traceback",
    *EXCEPTION_SUFFIXES,
    *_WORD_FORMS,
    *_PHRASE_FORMS,
    *GLOG_ANCHORS,
)


def exception_header(body: str) -> str | None:
    """The exception type of an exception header line (``jax.errors.JaxRuntimeError: ...``), else None.
    ``...Warning`` types are not failures."""
    m = EXCEPTION.match(body.strip())
    if not m or m.group("type").endswith("Warning"):
        return None
    return m.group("type")


def has_failure_words(body: str) -> bool:
    """True when ``body`` holds a failure word (``error``, ``Failed``, ``DENIED``, ``exit status 2`` ...)."""
    return bool(FAILURE_WORDS_RE.search(body))


def looks_failed(body: str) -> bool:
    """A traceback header or an exception header: an ERROR line whatever its logger said (plain text)."""
    return bool(TRACEBACK.match(body)) or exception_header(body) is not None


# An exception message that announces its reason on the following lines.
_CONTINUED = re.compile(r"(?:\b\d+ validation errors? for [\w.]+|:)\s*$")
_FIELD_NAME = re.compile(r"^[\w.\[\]-]+$")  # pydantic's field line before the reason ("max_model_len")
_PYDANTIC_TAIL = re.compile(r"\s*\[type=[^\]\n]*\]?\s*$")
_NOT_A_REASON = re.compile(r"^(?:For further information visit\b|https?://|\^+$|~+$|-{3,}$|=+$)")


def continued(body: str) -> bool:
    """True when an exception header's message continues on the next lines (it ends with ``:`` or is
    pydantic's ``N validation error(s) for Model``)."""
    return exception_header(body) is not None and bool(_CONTINUED.search(body.strip()))


def continuation(bodies: Iterable[str], limit: int = 3) -> str | None:
    """The reason an exception header announces, from the message bodies that follow it (at most
    ``limit`` looked at), or None.

    pydantic v2 (``ValidationError.__str__``): an optional field-name line (kept as ``field: reason``),
    then the reason, indented, with ``[type=..., input_value=...]`` at its end; ``Value error, `` /
    ``Assertion failed, `` prefixes are dropped. A new exception or traceback header ends the search.
    """
    field = ""
    for i, raw in enumerate(bodies):
        if i >= limit:
            break
        text = raw.strip()
        if not text or _NOT_A_REASON.match(text):
            continue
        if _FIELD_NAME.match(text):
            field = text
            continue
        if TRACEBACK.match(text) or (exception_header(text) and not raw[:1].isspace()):
            return None
        text = _PYDANTIC_TAIL.sub("", text)
        for prefix in ("Value error, ", "Assertion failed, "):
            if text.startswith(prefix):
                text = text[len(prefix) :]
        if not text:
            return None
        return (f"{field}: {text}" if field else text)[:300]
    return None
