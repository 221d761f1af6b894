"""Redaction of secrets and personal data from log text, with stable placeholders per answer.

Every log message is redacted when it is read (`tpu_devops.logs.sources`), before mining, before any
tool output and before any prompt, so nothing below this point sees the original value. The same value
reads the same within one answer (one `Redactor`): the second time ``alice@example.com`` appears it is
``<EMAIL_1>`` again, so a reader (or the model) can still tell "the same address failed twice".

What is replaced (patterns follow the published token formats):

- private key blocks ``-----BEGIN ... PRIVATE KEY-----`` (PEM; also a lone BEGIN line, since a log line
  often holds only part of a block) and JSON ``"private_key": "..."`` values;
- ``Authorization: Bearer <token>`` and bare ``Bearer <token>`` headers, and ``Authorization: Basic
  <base64 user:password>`` (RFC 7617);
- Hugging Face user access tokens ``hf_`` + 30 or more letters/digits
  (huggingface.co/docs/hub/security-tokens);
- Google OAuth 2.0 access tokens ``ya29.`` ... and Google API keys ``AIza`` + 35 characters
  (cloud.google.com/docs/authentication/api-keys);
- ``key=value`` pairs whose key names a secret (``token``, ``api_key``, ``password``, ``secret``),
  also behind a prefix (``VLLM_API_KEY=``, ``DB_PASSWORD:``);
- email addresses (including service accounts ``N-compute@developer.gserviceaccount.com``);
- IPv4 addresses except ``0.0.0.0`` and loopback ``127.*`` (bind addresses, not identities);
- project numbers in resource paths (``projects/123456789012``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

# (kind, compiled pattern, group holding the sensitive part; 0 = whole match). Order matters: the
# broadest secrets (key blocks, headers) are replaced before the patterns they contain.
_RULES: list[tuple[str, re.Pattern[str], int]] = [
    (
        "PRIVATE_KEY",
        re.compile(
            r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----(?:.*?-----END (?:[A-Z]+ )*PRIVATE KEY-----|[A-Za-z0-9+/=\\\s]*)",
            re.S,
        ),
        0,
    ),
    ("PRIVATE_KEY", re.compile(r"""["']private_key["']\s*:\s*["']([^"']+)["']"""), 1),
    ("BEARER_TOKEN", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})"), 1),
    ("BASIC_AUTH", re.compile(r"(?i)\bauthorization[\"']?\s*[=:]\s*[\"']?basic\s+([A-Za-z0-9+/=]{4,})"), 1),
    ("HF_TOKEN", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), 0),
    ("GOOGLE_OAUTH_TOKEN", re.compile(r"\bya29\.[0-9A-Za-z_\-.]{10,}"), 0),
    ("GOOGLE_API_KEY", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), 0),
    (
        "SECRET",
        re.compile(
            r"""(?i)(?<![A-Za-z0-9])(?:access_token|api[_-]?key|auth[_-]?token|hf[_-]?token|token|password|passwd|secret)"""
            r"""["']?\s*[=:]\s*["']?(?!<[A-Z_]+_\d+>)([^\s"',;&}<]{6,})"""
        ),
        1,
    ),
    ("EMAIL", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"), 0),
    (
        "IP",
        re.compile(
            r"(?<![\d.])(?!0\.0\.0\.0(?![\d.]))(?!127\.)(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?![\d.])"
        ),
        0,
    ),
    ("PROJECT_NUMBER", re.compile(r"\bprojects/(\d{6,})\b"), 1),
]

# Cheap pre-checks per rule (substring tests on the text or its lower-case form), so a typical log
# line runs no regex at all: (kind -> predicate over (text, lower)).
_IP_HINT = re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")
_NEEDS: dict[str, Callable[[str, str], bool]] = {
    "PRIVATE_KEY": lambda t, lo: "private" in lo,
    "BEARER_TOKEN": lambda t, lo: "bearer" in lo,
    "BASIC_AUTH": lambda t, lo: "authorization" in lo and "basic" in lo,
    "HF_TOKEN": lambda t, lo: "hf_" in t,
    "GOOGLE_OAUTH_TOKEN": lambda t, lo: "ya29." in t,
    "GOOGLE_API_KEY": lambda t, lo: "AIza" in t,
    "SECRET": lambda t, lo: (
        ("token" in lo or "key" in lo or "passw" in lo or "secret" in lo) and ("=" in t or ":" in t)
    ),
    "EMAIL": lambda t, lo: "@" in t,
    "IP": lambda t, lo: _IP_HINT.search(t) is not None,
    "PROJECT_NUMBER": lambda t, lo: "projects/" in t,
}
_SHORT = 80  # short values (labels) are cached per Redactor: they repeat on every entry
_MEMO_LIMIT = 10_000  # cached results per Redactor (short texts and `Redactor.memo` keys)


class Redactor:
    """Replaces sensitive values with ``<KIND_N>`` placeholders, stable within this instance.

    Use one instance per answer (tool call): the numbering restarts for the next answer, so a
    placeholder never links values across answers.

    Attributes:
        counts: how many replacements were made per kind (for the "redacted N values" notice).
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], str] = {}
        self._next: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        # key -> (result, kinds replaced while computing it); replayed into `counts` on a hit.
        self._memo: dict[Hashable, tuple[Any, tuple[str, ...]]] = {}

    def placeholder(self, kind: str, value: str) -> str:
        """The stable placeholder for ``value`` of ``kind`` (allocates ``<KIND_N>`` on first sight)."""
        key = (kind, value)
        found = self._seen.get(key)
        if found is None:
            n = self._next.get(kind, 0) + 1
            self._next[kind] = n
            found = f"<{kind}_{n}>"
            self._seen[key] = found
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return found

    def _replacer(self, kind: str, group: int) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            if group == 0:
                return self.placeholder(kind, m.group(0))
            start, end = m.span(group)
            whole = m.group(0)
            base = m.start(0)
            return whole[: start - base] + self.placeholder(kind, m.group(group)) + whole[end - base :]

        return replace

    def redact(self, text: str) -> str:
        """``text`` with every sensitive value replaced (see the module docstring for the list)."""
        if not text:
            return text
        if len(text) <= _SHORT:  # short texts (label values, repeated lines) recur: memoized
            return self.memo(text, self._apply, text)
        return self._apply(text)

    def _apply(self, text: str) -> str:
        lower = text.lower()
        out = text
        for kind, pattern, group in _RULES:
            if _NEEDS[kind](out, lower):
                out = pattern.sub(self._replacer(kind, group), out)
        return out

    def memo(self, key: Hashable, compute: Callable[..., T], *args: Any) -> T:
        """``compute(*args)`` (which redacts with this instance) once per ``key``: a later call with the same
        key returns the same value and counts its replacements again, as redacting the same text again
        would. For values built from text that repeats on every entry (resource labels, log names).
        The value is shared between calls: do not mutate it. Raises TypeError for an unhashable key."""
        hit = self._memo.get(key)
        if hit is not None:
            for kind in hit[1]:
                self.counts[kind] = self.counts.get(kind, 0) + 1
            return hit[0]
        before = dict(self.counts)
        value = compute(*args)
        if len(self._memo) < _MEMO_LIMIT:
            kinds = tuple(k for k, v in self.counts.items() for _ in range(v - before.get(k, 0)))
            self._memo[key] = (value, kinds)
        return value

    @property
    def total(self) -> int:
        """Number of values replaced so far."""
        return sum(self.counts.values())

    def notice(self) -> str | None:
        """``"redacted 3 values (EMAIL x2, HF_TOKEN x1)"`` or None when nothing was replaced."""
        if not self.counts:
            return None
        parts = ", ".join(f"{k} x{v}" for k, v in sorted(self.counts.items()))
        return f"redacted {self.total} value(s) before output ({parts})"


def redact_text(text: str) -> str:
    """One-off redaction with a fresh `Redactor` (placeholders numbered from 1)."""
    return Redactor().redact(text)
