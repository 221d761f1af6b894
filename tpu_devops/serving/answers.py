"""Judging a model's text, not only the HTTP status: empty, echoed chat templates, repetition, cut off.

A server can answer 200 with text nobody can use: a small or misconfigured model echoes its prompt
with template markers, or repeats one token until ``max_tokens`` (``finish_reason: "length"``). These
checks are shared by the health probe and the log analyst so both call such text what it is.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter

# Chat-template control text that never belongs in an answer: Gemma (<start_of_turn>, <end_of_turn>,
# Gemma 4 <|turn>/<turn|>), ChatML (<|im_start|>), Llama 3 (<|eot_id|>, <|start_header_id|>), BOS/EOS.
TEMPLATE_MARKERS = re.compile(
    r"<start_of_turn>|<end_of_turn>|<\|turn\|?>|<turn\|>|<\|im_(?:start|end)\|>|<\|eot_id\|>"
    r"|<\|start_header_id\|>|<bos>|<eos>|</s>"
)
MIN_WORDS_FOR_REPETITION = 20
REPEATED_WORD_SHARE = 0.4
MIN_CHARS_FOR_COMPRESSION = 200
COMPRESSION_FLOOR = 0.15  # prose compresses to ~0.4-0.6 of its size; a loop to a few percent


def degenerate(text: str) -> str | None:
    """Why ``text`` is not a usable answer (empty, template markers, repetition), or None."""
    t = (text or "").strip()
    if not t:
        return "the answer is empty"
    if m := TEMPLATE_MARKERS.search(t):
        return (
            f"the answer echoes chat-template markers ({m.group(0)}): the chat template is wrong or missing"
        )
    words = t.split()
    if len(words) >= MIN_WORDS_FOR_REPETITION:
        word, n = Counter(words).most_common(1)[0]
        if n / len(words) >= REPEATED_WORD_SHARE:
            return f"the answer repeats {word[:30]!r} ({n} of {len(words)} words)"
    raw = t.encode()
    if len(raw) >= MIN_CHARS_FOR_COMPRESSION and len(zlib.compress(raw)) / len(raw) < COMPRESSION_FLOOR:
        return "the answer repeats itself (it compresses to under 15% of its size)"
    lines = [line.strip() for line in t.splitlines() if line.strip()]
    if len(lines) >= 6 and len(set(lines)) * 3 <= len(lines):
        return "the answer repeats the same lines"
    return None


def cut_off(finish_reason: str | None) -> bool:
    """True when the server stopped at the token limit (``finish_reason == "length"``)."""
    return finish_reason == "length"
