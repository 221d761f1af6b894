"""Parsing input nested deeper than the parser recurses, as a malformed-input error instead of a crash.

CPython's ``json`` scanner and PyYAML's composer recurse once per level of nesting, so a file of a few
hundred kilobytes of ``[[[[...`` (or ``{"a":{"a":...``) ends the parse with ``RecursionError`` after
about `sys.getrecursionlimit` levels (1,000 by default): not a ``JSONDecodeError``, so no handler that
turns bad input into "not JSON, here is the fix" sees it, and the caller gets "an error it does not
handle". `loads` / `raw_decode` / `guard` raise `TooDeep` instead: a ``json.JSONDecodeError`` (itself a
``ValueError``), so every existing handler of malformed JSON (or YAML read by a library that catches
``ValueError``) reports it with its own field and fix. No real input of this server (results files, log
exports, config.json, kubeconfigs) nests more than a few dozen levels.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["TooDeep", "guard", "loads", "raw_decode"]


class TooDeep(json.JSONDecodeError):
    """The document nests deeper than the parser can follow (see the module docstring)."""

    def __init__(self, doc: str = "") -> None:
        super().__init__(
            f"nested more than about {sys.getrecursionlimit():,} levels deep, past what a parser follows "
            "(real files nest a few dozen at most)",
            doc if isinstance(doc, str) else "",
            0,
        )

    def __str__(self) -> str:  # no "line 1 column 1": the depth, not a place, is the problem
        return self.msg


@contextlib.contextmanager
def guard(doc: Any = "") -> Iterator[None]:
    """Turn a ``RecursionError`` raised by a parser inside the block into `TooDeep`."""
    try:
        yield
    except RecursionError:
        raise TooDeep(doc if isinstance(doc, str) else "") from None


def loads(text: str | bytes | bytearray) -> Any:
    """``json.loads(text)``; raises `TooDeep` (a ``json.JSONDecodeError``) for too deep a nesting."""
    with guard(text):
        return json.loads(text)


def raw_decode(decoder: json.JSONDecoder, text: str, pos: int = 0) -> tuple[Any, int]:
    """``decoder.raw_decode(text, pos)``; raises `TooDeep` for too deep a nesting."""
    with guard(text):
        return decoder.raw_decode(text, pos)
