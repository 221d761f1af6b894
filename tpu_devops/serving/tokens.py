"""Offline token counts: the model's own tokenizer when it is on disk, else a calibrated estimate.

The estimate models how Gemma's 262k-vocabulary tokenizer (the family Gemma 4 shares) splits log
text: every digit is its own token, so is almost every ASCII punctuation mark, a space before a
digit or symbol, a newline and a run of spaces; a run of letters is one token when it is a word and
more when it is long or flips case (identifiers, base64, API keys); a long letters-and-digits blob
(hex, base64, UUIDs) costs about one token per 1.2 characters. The sum is scaled by
`SAFETY_FACTOR`.

Calibration (`tests/data/tokens/calibration.json`, checked by `tests/test_tokens.py`): counted
with a Gemma 3 ``tokenizer.json`` (262,145 entries), the same counts that were measured through
llama.cpp's ``/tokenize`` on a Gemma GGUF:

=======================================  ======  ========  ========  ============
text                                     chars   measured  estimate  old chars/3
=======================================  ======  ========  ========  ============
evidence pack, v5e1-util095 export       17,956     9,554    11,465         5,986
evidence pack, qwix int8 abstract-fail   17,963     8,847    10,798         5,988
evidence pack, v6e1 boot-ok export       17,972     9,453    11,021         5,991
20-entry search_logs result (capped)      1,869  966-1,161  1,106-1,357        623
=======================================  ======  ========  ========  ============

Over 1,778 windows (300-4,000 characters) of the bundled vLLM logs, field reports, evidence packs
and search results (110 of them, with their counts, are in the calibration file) the estimate is never below the real count (worst real/estimate 0.96) and is
about 20% above it on average; of 480 synthetic strings (base64, API keys, hex, UUIDs, CJK, emoji,
JSON) only pure hex is under-counted, by at most 2%. An under-count is still possible on text unlike any of these, so callers
leave headroom and treat a server's context-overflow answer (which carries the real count) as the
last word.

Raises nothing; pure functions.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable

log = logging.getLogger(__name__)

SAFETY_FACTOR = 1.05
_WORD = re.compile(r"[A-Za-z]+")
_DIGIT = re.compile(r"\d")
_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_SPACE_RUN = re.compile(r" {2,}")
_LONE_SPACE = re.compile(r"(?<! ) (?![A-Za-z ])")  # a space before a digit or symbol is a token
_CASE_FLIP = re.compile(r"(?<=[a-z])[A-Z]|(?<=[A-Z])[a-z]")
_BLOB = re.compile(r"[A-Za-z0-9+/=_\-]{16,}")
_HAS_DIGIT = re.compile(r"\d")
_HAS_LETTER = re.compile(r"[A-Za-z]")
LONG_WORD = 6  # letters a common word spends in one token
LETTERS_PER_EXTRA_TOKEN = 2.5
BLOB_CHARS_PER_TOKEN = 1.2


def _structural(text: str) -> float:
    words = sum(
        max(1 + max(0, len(w) - LONG_WORD) / LETTERS_PER_EXTRA_TOKEN, 1 + len(_CASE_FLIP.findall(w)))
        for w in _WORD.findall(text)
    )
    return (
        len(_DIGIT.findall(text))
        + len(_PUNCT.findall(text))
        + len(_NON_ASCII.findall(text))
        + words
        + text.count("\n")
        + text.count("\t")
        + len(_SPACE_RUN.findall(text))
        + len(_LONE_SPACE.findall(text))
    )


def estimate_tokens(text: str) -> int:
    """Conservative Gemma token count of ``text`` without a tokenizer (module docstring), >= 0."""
    if not text:
        return 0
    total = _structural(text)
    for m in _BLOB.finditer(text):
        blob = m.group(0)
        if _HAS_DIGIT.search(blob) and _HAS_LETTER.search(blob):
            total += max(0.0, len(blob) / BLOB_CHARS_PER_TOKEN - _structural(blob))
    return math.ceil(total * SAFETY_FACTOR)


def cut_to_tokens(text: str, max_tokens: int, count: Callable[[str], int] = estimate_tokens) -> str:
    """The longest prefix of ``text`` (cut at a line end when one is near) whose count is at most
    ``max_tokens``; ``text`` itself when it fits."""
    if count(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # binary search on the prefix length
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo]
    newline = cut.rfind("\n")
    return cut[:newline] if newline > lo * 0.8 else cut


@functools.lru_cache(maxsize=8)
def local_tokenizer(model: str) -> Callable[[str], int] | None:
    """The model's own tokenizer as a counting function, when its ``tokenizer.json`` is already in
    the local Hugging Face cache (never downloaded) and the ``tokenizers`` package is installed.

    ``model``: a Hugging Face repo id (e.g. ``google/gemma-4-E2B-it``) or a local directory or
    ``tokenizer.json`` path. Returns None when neither is available. Uses
    `huggingface_hub.try_to_load_from_cache` (https://huggingface.co/docs/huggingface_hub/package_reference/cache).
    """
    from pathlib import Path

    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    path: str | None = None
    local = Path(model).expanduser()
    if model.startswith(("/", ".", "~")):  # a path: read only where tools may read (`tpu_devops.host.files`)
        from tpu_devops.config import get_settings
        from tpu_devops.errors import TpuDevopsError
        from tpu_devops.host import files

        try:
            local = files.resolve(get_settings(), model, field="model")
        except TpuDevopsError:
            return None
    if local.is_file() and local.name == "tokenizer.json":
        path = str(local)
    elif local.is_dir() and (local / "tokenizer.json").is_file():
        path = str(local / "tokenizer.json")
    elif "/" in model and not model.startswith(("/", ".", "~")):
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(repo_id=model, filename="tokenizer.json")
        except Exception:  # a malformed repo id: no cached tokenizer
            found = None
        path = found if isinstance(found, str) else None
    if path is None:
        return None
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:  # a corrupt or foreign file: estimate instead
        log.warning("cannot load tokenizer %s: %s", path, exc)
        return None
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)
