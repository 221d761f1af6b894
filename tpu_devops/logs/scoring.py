"""Does an answer state a thing, or only contain its letters? Phrase matching for scoring answers.

A rubric names a cause or a fix by a few phrases (``"KV cache"``, ``"0.92"``, ``"quantiz"``). Counting
a substring as a claim is how wrong answers scored: ``success`` inside ``unsuccessful``, ``KV cache``
inside "the KV cache is not the problem". `states` counts a phrase only when:

- it stands as its own word(s): no letter or digit right before it, and right after it either none or
  one of the common endings in `SUFFIXES` (``quantiz`` -> quantized / quantization, ``preempt`` ->
  preempted, ``token`` -> tokens but not tokenizer); a number is not part of a longer number (``0.92``
  is not in ``0.925``); a space in a phrase also matches a hyphen (``KV cache`` = ``KV-cache``);
- it is not denied in its clause: no negation (`NEGATIONS`: not, no, never, without, isn't, rather
  than, ruled out, nothing to do with, ...) followed by only a few filler words (`FILLER`: the, a,
  sign of, caused by, related to, ...) and then the phrase ("no sign of a KV cache problem", "not
  caused by HBM"), and no denial right after it (`DENIALS`: "... is not the cause", "... was fine",
  "... is unrelated"). A denial reaches across "or" / "nor" from a short noun phrase ("not a 429 or a
  rate limit", "nothing to do with HBM or out of memory"). A negation that describes the failure itself
  is not a denial: "does not fit in HBM" (a verb between), "not enough room for the KV cache", "is not
  divisible", "is not supported" (`SHORTAGE`).

`values_after` reads the numbers an answer gives right after a phrase ("--gpu-memory-utilization to
0.925"), so a scorer can tell the right flag with a wrong value from the fix.

A clause ends at ``. ; : ! ?`` before a space, a line break, or "but" / "however". The rules are English and plain: they
are meant to refuse wrong answers; a right answer in unusual words may lose a point.
"""

from __future__ import annotations

import re
from functools import lru_cache

SUFFIXES = (
    "s|es|ed|d|ing|ion|ions|ation|ations|ated|ate|e|er|ers|or|ors|ly|ful|fully|ible|able|ive|ment|ments"
)
NEGATIONS = (
    r"not|no|never|none|nor|neither|without|cannot|can't|isn't|wasn't|aren't|weren't|doesn't|didn't|don't|"
    r"hasn't|haven't|hadn't|won't|wouldn't|shouldn't|couldn't|n't|rather than|instead of|other than|"
    r"apart from|ruled out|rules out|rule out|unrelated to|nothing to do with|free of|absence of|lack of|"
    r"unlikely|neither|nor"
)
# Words that may stand between a negation and what it denies ("not the", "no sign of a", "not caused by").
FILLER = frozenset(
    "the a an any this that these those its their some real actual true root main sign signs evidence "
    "indication indications trace hint of with by to from about be is was are were been being really "
    "necessarily just simply only even also caused due because related problem problems issue issues "
    "error errors fault faults".split()
)
# After a negation, words that say something is short or refused: the failure itself, not a denial.
SHORTAGE = (
    r"enough|room|space|memory|free|more|longer|larger|bigger|big|large|capacity|sufficient|sufficiently|"
    r"available|left|divisible|supported|found|recognized|recognised|compatible|allowed|valid|reachable|"
    r"accessible|authorized|authorised|authenticated|enabled|installed|present|set|given|able|permitted"
)
DENIALS = (
    r"(?:is|was|are|were|'s)\s+(?:not|never)\b(?!\s+(?:" + SHORTAGE + r")\b)|"
    r"(?:isn't|wasn't|aren't|weren't)\b(?!\s+(?:" + SHORTAGE + r")\b)|"
    r"not\s+(?:the\s+)?(?:root\s+)?(?:cause|problem|issue|culprit|reason)|"
    r"not\s+(?:responsible|related|involved|relevant|to blame)|"
    r"(?:is|was|are|were|looks?|seems?|looked|seemed)\s+(?:fine|ok|okay|healthy|normal|irrelevant|"
    r"unrelated|harmless|benign)|unrelated|irrelevant|ruled out|a red herring|can be ignored|"
    r"played no (?:part|role)|had no (?:effect|part|role)"
)
MAX_FILLER = 6
DETERMINERS = frozenset("the a an any this that these those its their some".split())
_OR = frozenset({"or", "nor"})
# A stop ends a clause only before a space: "0.92" and "core.py:1349" do not.
_CLAUSE_END = re.compile(r"[.;:!?](?=\s|$)|\n|\bbut\b|\bhowever\b", re.I)
_NEGATION = re.compile(r"(?<![\w-])(?:" + NEGATIONS + r")(?![\w-])(?!\s+(?:" + SHORTAGE + r")\b)", re.I)
_DENIAL = re.compile(r"^[\s\-]*(?:[\w'-]+[\s,]+){0,2}?(?:" + DENIALS + r")", re.I)
_WORD = re.compile(r"[\w'-]+")


@lru_cache(maxsize=512)
def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """The compiled whole-word pattern for ``phrase`` (module docstring), case-insensitive."""
    p = phrase.strip()
    body = r"[\s\-]+".join(re.escape(w) for w in p.split())
    left = r"(?<![A-Za-z0-9_])" if re.match(r"\w", p) else ""
    right = ""
    if re.search(r"[A-Za-z]$", p):
        right = rf"(?:{SUFFIXES})?(?![A-Za-z0-9_])"
    elif re.search(r"\d$", p):
        right = r"(?![0-9])(?!\.\d)"
    return re.compile(left + body + right, re.I)


def _clause_start(text: str, start: int) -> int:
    ends = [m.end() for m in _CLAUSE_END.finditer(text, 0, start)]
    return ends[-1] if ends else 0


def _clause_after(text: str, end: int) -> str:
    m = _CLAUSE_END.search(text, end)
    return text[end : m.start() if m else len(text)]


def negated(text: str, start: int, end: int) -> bool:
    """True when the mention at ``text[start:end]`` is denied in its clause (module docstring)."""
    # Searched in the whole text (a negation's look-ahead must see what follows it), within the clause.
    for m in _NEGATION.finditer(text, _clause_start(text, start)):
        if m.end() > start:
            break
        gap = [w.lower() for w in _WORD.findall(text[m.end() : start])]
        if len(gap) <= MAX_FILLER and all(w in FILLER for w in gap):
            return True
        if _denied_across_or(gap):
            return True
    return bool(_DENIAL.search(_clause_after(text, end)))


def _denied_across_or(gap: list[str]) -> bool:
    """True for the words between a negation and a mention that coordinate it with a denied noun
    phrase: ``a 429 or a`` (from "not a 429 or a rate limit"), ``HBM or`` after "nothing to do with"."""
    if not any(w in _OR for w in gap) or len(gap) > 2 * MAX_FILLER:
        return False
    last_or = max(i for i, w in enumerate(gap) if w in _OR)
    first = gap[: next(i for i, w in enumerate(gap) if w in _OR)]
    after = gap[last_or + 1 :]
    if not all(w in FILLER for w in after):
        return False
    # The first denied phrase is short and a noun phrase: it starts with a determiner, a number, or is
    # one word right after the negation ("with HBM or").
    return len(first) <= 3 and (first[0] in DETERMINERS or first[0][0].isdigit() or len(first) == 1)


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def values_after(text: str, phrase: str, window: int = 4) -> list[str]:
    """The numbers ``text`` gives within ``window`` words after each mention of ``phrase`` (e.g.
    ``["0.925"]`` for "set --gpu-memory-utilization to 0.925"), as written."""
    out = []
    for m in phrase_pattern(phrase).finditer(text):
        tail = _clause_after(text, m.end())
        words = re.findall(r"[^\s]+", tail)[:window]
        for w in words:
            if n := _NUMBER.search(w.strip("=:()[]")):
                out.append(n.group(0))
                break
    return out


def states(text: str, phrase: str) -> bool:
    """True when ``text`` states ``phrase``: a whole-word mention that is not denied."""
    return any(not negated(text, m.start(), m.end()) for m in phrase_pattern(phrase).finditer(text))


def states_any(text: str, phrases: list[str]) -> bool:
    """True when ``text`` states any of ``phrases``."""
    return any(states(text, p) for p in phrases)


FAILURE_CLAIMS = (
    "failed to start",
    "failed to boot",
    "failed to load",
    "did not start",
    "didn't start",
    "did not boot",
    "never started",
    "could not start",
    "crash",
    "boot failed",
    "unsuccessful",
    "failure",
    "failed",
    "out of memory",
    "OOM",
    "died",
)


def claims_failure(text: str) -> bool:
    """True when ``text`` says something failed. A claim that is itself denied ("no failure", "did not
    crash") is not one; "did not start" is one (it is the claim, not a denial of a phrase)."""
    for phrase in FAILURE_CLAIMS:
        for m in phrase_pattern(phrase).finditer(text):
            if phrase.startswith(("did not", "didn't", "never", "could not")) or not negated(
                text, m.start(), m.end()
            ):
                return True
    return False
