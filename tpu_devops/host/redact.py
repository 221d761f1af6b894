"""Redaction of secrets and personal data from log text, with stable placeholders per answer.

Every log message is redacted when it is read (`tpu_devops.logs.sources`), before mining, before any
tool output and before any prompt, so nothing below this point sees the original value. The same value
reads the same within one answer (one `Redactor`): the second time ``alice@example.com`` appears it is
``<EMAIL_1>`` again, so a reader (or the model) can still tell "the same address failed twice".

Secrets are found by their shape, wherever they sit: in any field, in a command line, in an
environment assignment, and across a boundary. A secret cut in two (two JSON fields of one entry, in
whatever order the fields come: Cloud Logging returns a ``jsonPayload``'s keys sorted, so the rest of a
token may come first; two lines of a stream: `redact_fields`, `redact_message`) is found in the joined
text and replaced in both parts; a PEM private key logged one line per entry (``docker logs`` of a
process that printed it) is replaced from its BEGIN line to its END line, in either order (Cloud Logging
lists newest first).

Then by value: a secret found once (whole, or the parts of one cut in two, at least `MIN_KNOWN_CHARS`
characters) is replaced wherever the same characters appear again in the same answer, in any field and
any later text, whether or not its shape is recognisable there (the rest of a cut token alone, a key
value printed without its name).

What is replaced (token formats as their issuers publish them):

- private keys: PEM blocks ``-----BEGIN [RSA|EC|OPENSSH|ENCRYPTED ]PRIVATE KEY-----`` (RFC 7468 §10-11;
  also a lone BEGIN or END line and the body lines between), JSON ``"private_key": "..."`` and
  ``private_key_id`` (a Google service-account key file), and any line that is only 40+ base64
  characters of mixed case and digits (key material);
- HTTP credentials: ``Authorization:`` header values of any scheme (``Bearer``, ``Basic`` RFC 7617,
  ``token``), bare ``Bearer <token>``, and ``user:password@`` in URLs (RFC 3986 §3.2.1);
- tokens by prefix: Hugging Face ``hf_`` user and ``api_org_`` tokens (huggingface.co/docs/hub/
  security-tokens), Google OAuth access tokens ``ya29.`` and refresh tokens ``1//``, Google API keys
  ``AIza`` (cloud.google.com/docs/authentication/api-keys), OpenAI / Anthropic ``sk-``, GitHub ``ghp_``
  ``gho_`` ``ghu_`` ``ghs_`` ``ghr_`` ``github_pat_`` (github.blog 2021-04-05 token format), GitLab
  ``glpat-``, Slack ``xox?-`` / ``xapp-``, Stripe ``sk_live_``, AWS access key ids ``AKIA``/``ASIA``...,
  Google OAuth client secrets ``GOCSPX-``, npm ``npm_``, PyPI ``pypi-AgE``, Docker Hub ``dckr_pat_``,
  SendGrid ``SG.x.y``, JSON Web Tokens ``eyJ...eyJ...`` (RFC 7519); a prefix with 8+ characters is enough
  (a cut token is still secret);
- webhook URLs whose path is the secret (Slack ``hooks.slack.com/services/...``, Discord), and
  ``Cookie`` / ``Set-Cookie`` header values (RFC 6265);
- ``key=value``, ``key: value``, ``"key": ["value"]`` (vLLM's ``non-default args``) and command-line
  flags ``--api-key VALUE`` / ``--api-key=VALUE`` whose name ends in a secret word (``token``,
  ``api_key``, ``access_key``, ``secret``, ``password``, ``AccountKey``,
  ``client-key-data``...), also behind a prefix (``VLLM_API_KEY=``,
  ``HF_TOKEN=``, ``aws_secret_access_key =``);
- email addresses (including service accounts ``N-compute@developer.gserviceaccount.com``);
- IPv4 addresses except ``0.0.0.0`` and loopback ``127.*`` (bind addresses, not identities);
- project numbers in resource paths (``projects/123456789012``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_PEM_LABEL = r"(?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?"
_PEM_BEGIN = re.compile(rf"-----BEGIN {_PEM_LABEL}-----")
_PEM_END = re.compile(rf"-----END {_PEM_LABEL}-----")
# One body line of a PEM block in a stream of messages (base64; JSON-escaped newlines allowed).
_PEM_BODY = re.compile(r"(?:\\n|[A-Za-z0-9+/=])+")
_NL = r"(?:\r?\n|\\r?\\n)"  # a newline, real or JSON-escaped
# Body lines after a BEGIN line (RFC 7468: at most 64 base64 characters each, the last one shorter), or
# base64 words on the BEGIN line itself; and the body lines before an END line (16+ characters each, so
# an ordinary word on the line before is not taken for key material).
_BODY_AFTER = rf"(?:[ \t]+[A-Za-z0-9+/=]{{16,}})*(?:{_NL}[ \t]*[A-Za-z0-9+/]{{1,100}}={{0,2}}[ \t]*(?={_NL}|$|[\"'\\]))*"
_BODY_BEFORE = rf"(?<![A-Za-z0-9+/=])(?:[A-Za-z0-9+/]{{16,100}}={{0,2}}[ \t]*{_NL})*"
# Names whose value is a secret: the end of an identifier (HF_TOKEN, VLLM_API_KEY, aws_secret_access_key).
_SECRET_NAME = (
    r"(?:access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|bearer[_-]?token|hf[_-]?token"
    r"|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key(?:[_-]?id)?|client[_-]?secret"
    r"|account[_-]?key|client[_-]?key[_-]?data|signing[_-]?key|encryption[_-]?key"
    r"|token|password|passwd|secret)"
)
# Values that are not secrets even behind a secret name (Python / JSON / YAML literals, masks).
_NOT_A_VALUE = r"(?!(?:None|null|true|false|True|False|\*+|x+|<[A-Z_]+_\d+>)(?![\w-]))"

# (kind, compiled pattern, group holding the sensitive part; 0 = whole match). Order matters: the
# broadest secrets (key blocks, credentials in URLs, headers) are replaced before the patterns they contain.
_RULES: list[tuple[str, re.Pattern[str], int]] = [
    (
        "PRIVATE_KEY",
        re.compile(rf"{_PEM_BEGIN.pattern}(?:.*?{_PEM_END.pattern}|{_BODY_AFTER})", re.S),
        0,
    ),
    # The end of a block whose BEGIN line is in an earlier line or entry.
    ("PRIVATE_KEY", re.compile(rf"{_BODY_BEFORE}{_PEM_END.pattern}"), 0),
    ("PRIVATE_KEY", re.compile(r"""\\?["']private_key\\?["']\s*:\s*\\?["']([^"']+)\\?["']"""), 1),
    ("URL_CREDENTIALS", re.compile(r"(?i)\b[a-z][a-z0-9+.-]{1,15}://([^\s/?#@\"'<>]{2,})@"), 1),
    ("BEARER_TOKEN", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})"), 1),
    (
        "BASIC_AUTH",
        re.compile(r"(?i)\bauthorization\\?[\"']?\s*[=:]\s*\\?[\"']?basic\s+([A-Za-z0-9+/=]{4,})"),
        1,
    ),
    (
        "AUTH_HEADER",
        re.compile(
            r"(?i)\b(?:proxy-)?authorization\\?[\"']?\s*[=:]\s*\\?[\"']?(?:(?:token|digest|negotiate|apikey)\s+)?"
            r"(?!(?:bearer|basic)\s)([A-Za-z0-9._~+/=:-]{6,})"
        ),
        1,
    ),
    ("HF_TOKEN", re.compile(r"(?<![A-Za-z0-9])hf_(?=[a-z]*[A-Z0-9])[A-Za-z0-9]{8,}[A-Za-z0-9_-]*"), 0),
    ("HF_TOKEN", re.compile(r"(?<![A-Za-z0-9])api_org_[A-Za-z0-9]{8,}[A-Za-z0-9_-]*"), 0),
    ("GOOGLE_OAUTH_TOKEN", re.compile(r"(?<![A-Za-z0-9])ya29\.[0-9A-Za-z_\-.]{8,}"), 0),
    ("GOOGLE_OAUTH_TOKEN", re.compile(r"(?<![A-Za-z0-9/])1//0[0-9A-Za-z_-]{16,}"), 0),
    ("GOOGLE_API_KEY", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{12,}"), 0),
    (
        "API_KEY",
        re.compile(
            r"(?<![A-Za-z0-9])(?:sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}|[rs]k_(?:live|test)_[A-Za-z0-9]{12,}"
            r"|glpat-[A-Za-z0-9_-]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
            r"|GOCSPX-[A-Za-z0-9_-]{10,}|npm_[A-Za-z0-9]{20,}|pypi-AgE[A-Za-z0-9_-]{20,}|dckr_pat_[A-Za-z0-9_-]{16,}"
            r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})"
        ),
        0,
    ),
    (
        "GITHUB_TOKEN",
        re.compile(
            r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{16,}[A-Za-z0-9_]*|github_pat_[A-Za-z0-9_]{16,})"
        ),
        0,
    ),
    (
        "AWS_ACCESS_KEY",
        re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
        0,
    ),
    ("JWT", re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), 0),
    (
        "SECRET",
        re.compile(
            rf"""(?i)(?<![A-Za-z0-9]){_SECRET_NAME}\\?["']?\s*[=:]\s*\[?\s*\\?["']?{_NOT_A_VALUE}"""
            r"""([^\s"',;&}\]<>\\]{4,})"""
        ),
        1,
    ),
    (
        "SECRET",
        re.compile(
            rf"""(?i)(?<![\w-])--?(?:[a-z0-9]+[-_])*{_SECRET_NAME}(?:=|\s+)["']?{_NOT_A_VALUE}([^\s"']{{4,}})"""
        ),
        1,
    ),
    (
        "PRIVATE_KEY",
        re.compile(
            r"(?m)^[ \t]*((?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[0-9])[A-Za-z0-9+/]{40,}={0,2})[ \t]*$"
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
    # Webhook URLs carry their secret in the path (Slack: api.slack.com/messaging/webhooks; Discord).
    (
        "WEBHOOK",
        re.compile(
            r"(?i)\b(?:hooks\.slack\.com/(?:services|workflows|triggers)/|discord(?:app)?\.com/api/webhooks/)"
            r"([A-Za-z0-9/_-]{16,})"
        ),
        1,
    ),
    # Cookie and Set-Cookie header values are session credentials (RFC 6265).
    ("COOKIE", re.compile(r"""(?i)\b(?:set-)?cookie\\?["']?\s*[=:]\s*\\?["']?([^\r\n"'\\]{8,})"""), 1),
]

# Cheap necessary conditions (substring tests on the text ``t`` or its lower case ``lo``), each for the
# `_RULES` it guards (by index), so a typical log line runs few regexes.
_IP_HINT = re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")
_SECRET_WORDS = ("token", "key", "passw", "secret")
_GUARDS: list[tuple[Callable[[str, str], bool], tuple[int, ...]]] = [
    (lambda t, lo: "-----" in t, (0, 1)),
    (lambda t, lo: "private_key" in lo, (2,)),
    (lambda t, lo: "://" in t, (3,)),
    (lambda t, lo: "bearer" in lo, (4,)),
    (lambda t, lo: "authorization" in lo, (5, 6)),
    (lambda t, lo: "hf_" in t or "api_org_" in t, (7, 8)),
    (lambda t, lo: "ya29." in t or "1//" in t, (9, 10)),
    (lambda t, lo: "AIza" in t, (11,)),
    (
        lambda t, lo: (
            "sk-" in t
            or "k_live_" in t
            or "k_test_" in t
            or "glpat-" in t
            or "xox" in t
            or "xapp-" in t
            or "GOCSPX-" in t
            or "npm_" in t
            or "pypi-" in t
            or "dckr_pat_" in t
            or "SG." in t
        ),
        (12,),
    ),
    (
        lambda t, lo: (
            "gh" in t
            and (
                "ghp_" in t or "gho_" in t or "ghu_" in t or "ghs_" in t or "ghr_" in t or "github_pat_" in t
            )
        ),
        (13,),
    ),
    (lambda t, lo: "AKIA" in t or "ASIA" in t, (14,)),
    (lambda t, lo: "eyJ" in t, (15,)),
    (lambda t, lo: "token" in lo or "key" in lo or "passw" in lo or "secret" in lo, (16, 17)),
    # a line of base64 only: in a multi-line text, or a long text without spaces
    (lambda t, lo: len(t) >= 40 and ("\n" in t or " " not in t), (18,)),
    (lambda t, lo: "@" in t, (19,)),
    (lambda t, lo: "." in t and _IP_HINT.search(t) is not None, (20,)),
    (lambda t, lo: "projects/" in t, (21,)),
    (lambda t, lo: "hooks.slack.com" in lo or "/api/webhooks/" in lo, (22,)),
    (lambda t, lo: "cookie" in lo, (23,)),
]
assert sorted(i for _, rules in _GUARDS for i in rules) == list(range(len(_RULES)))


def rule_candidates(text: str) -> list[int]:
    """Indexes of the `_RULES` that may match ``text``, in order."""
    lower = text.lower()
    return [i for guard, rules in _GUARDS if guard(text, lower) for i in rules]


_PLACEHOLDER = re.compile(r"<[A-Z_]+_\d+>")
MIN_KNOWN_CHARS = 8  # a secret value (or part) replaced by value elsewhere: shorter ones are too common
_KNOWN_LIMIT = 10_000  # values remembered per Redactor (beyond: the patterns alone)
_ALL_PAIRS_LIMIT = 64  # fields of one entry paired in any order (beyond: adjacent pairs, both orders)
# Kinds that are secrets (replaced by value once seen): not personal data or resource numbers.
_BY_VALUE_KINDS = frozenset(kind for kind, _, _ in _RULES) - {"EMAIL", "IP", "PROJECT_NUMBER"}
_SHORT = 80  # short values (labels) are cached per Redactor: they repeat on every entry
_MEMO_LIMIT = 10_000  # cached results per Redactor (short texts and `Redactor.memo` keys)
_WINDOW = 256  # characters either side of a boundary searched for a secret cut in two
_TOKEN_START = re.compile(r"[A-Za-z0-9_-]+")  # the rest of a cut token at the start of the next part
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~+/=-")
_TOKEN_HEAD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DANGLING_WORDS = ("token", "key", "passw", "secret", "bearer", "authorization", "-----")
# The end of a part that waits for a secret in the next one: a secret's name (``--api-key``, ``token:``),
# an Authorization or Bearer header, a PEM marker or base64 body line.
_DANGLING = re.compile(
    rf"""(?i)(?:{_SECRET_NAME}\\?["']?\s*[=:]?|bearer|authorization\\?["']?\s*[=:]\s*(?:\w+)?"""
    r"""|-----(?:BEGIN|END) [A-Z0-9 ]*-----|[A-Za-z0-9+/]{16,}={0,2})\s*\[?\s*\\?["']?\s*$"""
)

# Kinds looked for across a boundary: secrets (personal data cut in two is not worth the false matches).
_STRADDLING = frozenset(kind for kind, _, _ in _RULES) - {"EMAIL", "IP", "PROJECT_NUMBER", "URL_CREDENTIALS"}


def _trie_pattern(words: Iterable[str]) -> str:
    """A regex matching any of ``words`` (strings of the same length, so no word is a prefix of another),
    built as a trie: one branch per distinct character at each depth, chains of one child collapsed."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})

    def emit(node: dict[str, Any]) -> str:
        chain: list[str] = []
        while len(node) == 1:
            ((ch, node),) = node.items()
            chain.append(re.escape(ch))
        if node:
            chain.append("(?:" + "|".join(re.escape(ch) + emit(child) for ch, child in node.items()) + ")")
        return "".join(chain)

    return emit(trie)


_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"[A-Z]?[a-z]+(?:[A-Z][a-z]+)*|[A-Z]+[a-z]*")  # words, CamelCase names, acronyms


def _may_dangle(a: str, b: str) -> bool:
    """Cheap test: ``a`` ends near a secret's name, a header or a PEM marker, or ``b`` starts a PEM END."""
    end = a[-40:].lower()
    return any(w in end for w in _DANGLING_WORDS) or "-----" in b[:40]


_TAIL_TOKEN = re.compile(r"[A-Za-z0-9_.~+/=-]{1,120}$")


def _may_head(a: str) -> bool:
    """Cheap test: ``a`` may end in the first part of a secret cut in two: a random-looking or prefixed
    token (``hf_Spl``, ``sk-pr``, ``token=ab``), or a secret's name, a header or a PEM marker."""
    tail = _TAIL_TOKEN.search(a)
    if tail is not None and not _WORD.fullmatch(tail.group(0)) and not tail.group(0).isdigit():
        return True
    return _may_dangle(a, "") and _DANGLING.search(a[-80:]) is not None


def _may_continue(b: str) -> bool:
    """Cheap test: ``b`` may be the rest of a secret begun elsewhere (a random-looking start, a PEM END)."""
    if b[0] in _TOKEN_HEAD:
        rest = _TOKEN_START.match(b, 0, _WINDOW)
        if rest and _looks_random(rest.group(0)):
            return True
    return "-----" in b[:40]


def _looks_random(text: str) -> bool:
    """True for the rest of a cut token: 4+ digits, or 4+ characters mixing two of lower case, upper case
    and digits, not a word (``INFO``, ``compute``, ``Traceback`` or ``RuntimeError`` at the start of the next line)."""
    if len(text) < 4 or _WORD.fullmatch(text):
        return False
    if text.isdigit():  # the digits that end a token (a number with separators is not one)
        return True
    lower, upper = text != text.upper(), text != text.lower()
    return (lower and upper) or ((lower or upper) and _DIGIT.search(text) is not None)


Mask = tuple[int, int, str, str]  # (start, end, kind, whole secret value) within one text
_NO_MASKS: list[Mask] = []


class Redactor:
    """Replaces sensitive values with ``<KIND_N>`` placeholders, stable within this instance.

    Use one instance per answer (tool call): the numbering restarts for the next answer, so a
    placeholder never links values across answers. Feed the messages of one stream (the lines of a
    file, the entries of a read) through `redact_message` in order, so secrets across two messages and
    PEM blocks across many are found.

    Attributes:
        counts: how many replacements were made per kind (for the "redacted N values" notice).
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], str] = {}
        self._next: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        # key -> (result, kinds replaced while computing it); replayed into `counts` on a hit.
        self._memo: dict[Hashable, tuple[Any, tuple[str, ...]]] = {}
        self._previous = ""  # the last raw message given to `redact_message`
        self._pairs: dict[tuple[str, str], tuple[list[Mask], list[Mask]]] = {}  # short field pairs
        self._pem_block: str | None = None  # the marker text of the PEM block the stream is inside
        self._known: dict[str, tuple[str, str]] = {}  # secret characters -> (kind, whole secret value)
        # the known parts by their first `MIN_KNOWN_CHARS` characters, longest first
        self._known_by_head: dict[str, list[str]] = {}
        self._known_re: re.Pattern[str] | None = None  # matches any of those heads

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

    def remember(self, kind: str, value: str, part: str | None = None) -> None:
        """Replace ``part`` (default: ``value``) by ``value``'s placeholder wherever it appears from now on
        (redaction by value; parts shorter than `MIN_KNOWN_CHARS` are left to the patterns)."""
        part = (value if part is None else part).strip()
        if kind not in _BY_VALUE_KINDS or len(part) < MIN_KNOWN_CHARS or part in self._known:
            return
        if _PLACEHOLDER.search(part) or len(self._known) >= _KNOWN_LIMIT:
            return
        self._known[part] = (kind, value)
        same_head = self._known_by_head.setdefault(part[:MIN_KNOWN_CHARS], [])
        same_head.append(part)
        same_head.sort(key=len, reverse=True)
        self._known_re = None
        if kind == "URL_CREDENTIALS" and ":" in part:  # user:password: the password alone too
            self.remember(kind, value, part.split(":", 1)[1])
        # Results computed before this value was known may hold it: forget them.
        self._memo.clear()
        self._pairs.clear()

    def _by_value(self, text: str) -> str:
        """``text`` with every remembered secret (or part) replaced by its placeholder, longest first.

        One regex finds the heads (the first `MIN_KNOWN_CHARS` characters) of the known parts, as a trie
        of at most that depth (an alternation of hundreds of literals would be tried one by one at every
        character); the parts sharing a head are then compared at the match."""
        if not self._known:
            return text
        if self._known_re is None:
            self._known_re = re.compile(_trie_pattern(self._known_by_head))
        search = self._known_re.search
        out: list[str] = []
        pos = 0
        m = search(text)
        while m is not None:
            start = m.start()
            part = next((p for p in self._known_by_head[m.group(0)] if text.startswith(p, start)), None)
            if part is None:
                m = search(text, start + 1)
                continue
            kind, whole = self._known[part]
            out += (text[pos:start], self.placeholder(kind, whole))
            pos = start + len(part)
            m = search(text, pos)
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)

    def _replacer(self, kind: str, group: int) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            value = m.group(group)
            if _PLACEHOLDER.fullmatch(value.strip()):  # already replaced by an earlier rule
                return m.group(0)
            self.remember(kind, value)
            if group == 0:
                return self.placeholder(kind, value)
            start, end = m.span(group)
            whole = m.group(0)
            base = m.start(0)
            return whole[: start - base] + self.placeholder(kind, value) + whole[end - base :]

        return replace

    def redact(self, text: str, candidates: Sequence[int] | None = None) -> str:
        """``text`` with every sensitive value replaced (see the module docstring for the list).
        ``candidates``: the `_RULES` to try when already known for a text that holds this one."""
        if not text:
            return text
        if len(text) <= _SHORT:  # short texts (label values, repeated lines) recur: memoized
            return self.memo(text, self._apply, text, candidates)
        return self._apply(text, candidates)

    def _apply(self, text: str, candidates: Sequence[int] | None = None) -> str:
        out = self._by_value(text)
        for i in rule_candidates(text) if candidates is None else candidates:
            kind, pattern, group = _RULES[i]
            out = pattern.sub(self._replacer(kind, group), out)
        return out

    # ---- secrets across a boundary ------------------------------------------------------------------

    def _straddles(self, a: str, b: str) -> tuple[list[Mask], list[Mask]]:
        """Secrets that start in ``a`` and end in ``b`` (read as ``a + b`` and as ``a + newline + b``):
        the masks of their parts in ``a`` and in ``b``."""
        in_a: list[Mask] = []
        in_b: list[Mask] = []
        if not a or not b:
            return in_a, in_b
        # Cheap necessary conditions first (most boundaries pass neither): a token cut mid-way has
        # token characters on both sides and a random-looking rest; a pair on two lines ends ``a`` with
        # a secret's name, a header or a PEM line, or starts ``b`` with a PEM END line.
        joiners: list[str] = []
        if a[-1] in _TOKEN_CHARS and b[0] in _TOKEN_HEAD:
            rest = _TOKEN_START.match(b, 0, _WINDOW)
            if rest and _looks_random(rest.group(0)):
                joiners.append("")
        if _may_dangle(a, b) and (_DANGLING.search(a[-80:]) or b.lstrip().startswith("-----END")):
            joiners.append("\n")
        if not joiners:
            return in_a, in_b
        tail, head = a[-_WINDOW:], b[:_WINDOW]
        offset = len(a) - len(tail)
        for joiner in joiners:
            joined = tail + joiner + head
            cut_a, cut_b = len(tail), len(tail) + len(joiner)
            for i in rule_candidates(joined):
                kind, pattern, group = _RULES[i]
                if kind not in _STRADDLING:
                    continue
                for m in pattern.finditer(joined):
                    if m.start() >= cut_a or m.end() <= cut_b:
                        continue  # wholly on one side: each side's own redaction finds it
                    start, end = m.span(group)
                    if not joiner and not _looks_random(joined[cut_b:end]):
                        continue  # a secret that ends here, followed by an ordinary word
                    value = m.group(group)
                    if start < cut_a:
                        in_a.append((offset + start, offset + min(end, cut_a), kind, value))
                    if end > cut_b:
                        in_b.append((max(start, cut_b) - cut_b, end - cut_b, kind, value))
        return in_a, in_b

    def redact_masked(self, text: str, masks: Sequence[Mask], candidates: Sequence[int] | None = None) -> str:
        """``text`` with ``masks`` replaced by their placeholders and the rest redacted as usual."""
        if not masks:
            return self.redact(text, candidates)
        for start, end, kind, value in masks:
            self.remember(kind, value)
            self.remember(kind, value, text[start:end])
        out: list[str] = []
        pos = 0
        for start, end, kind, value in sorted(masks):
            if end <= pos:
                continue
            if start > pos:
                out.append(self.redact(text[pos:start], candidates))
            out.append(self.placeholder(kind, value))
            pos = end
        out.append(self.redact(text[pos:], candidates))
        return "".join(out)

    def field_masks(self, values: Sequence[str], candidates: Sequence[int] | None = None) -> list[list[Mask]]:
        """Per value, the masks of secrets it shares with another value of the same entry, whatever their
        order (a secret's head in one field, its rest in any other, before or after it). ``candidates``:
        `rule_candidates` of the joined values, when known (no secret's hint there: no pair to look at).
        Up to `_ALL_PAIRS_LIMIT` fields every (head, rest) pair is tried; beyond, adjacent pairs in both
        orders."""
        masks: list[list[Mask]] = [_NO_MASKS] * len(values)  # shared empty list: never extended
        if candidates is not None and not any(_RULES[i][0] in _STRADDLING for i in candidates):
            return masks
        n = len(values)
        # Adjacent fields in document order, as before; then any other (head, rest) pair whose head ends in
        # something a cut secret could end in (not a plain word or number) or in a secret's name.
        pairs_to_try = [(i, i + 1) for i in range(n - 1)]
        heads = [i for i, v in enumerate(values) if v and _may_head(v)]
        if heads:
            if n <= _ALL_PAIRS_LIMIT:
                rests = [j for j, v in enumerate(values) if v and _may_continue(v)]
                every = range(n)
                pairs_to_try += [
                    (i, j)
                    for i in heads
                    for j in (every if _DANGLING.search(values[i][-80:]) else rests)
                    if j != i and j != i + 1
                ]
            else:
                pairs_to_try += [(i, i - 1) for i in heads if i > 0]
        pairs = self._pairs
        for i, j in pairs_to_try:
            a, b = values[i], values[j]
            short = len(a) <= _SHORT and len(b) <= _SHORT  # label and name pairs repeat on every entry
            found = pairs.get((a, b)) if short else None
            if found is None:
                found = self._straddles(a, b)
                if short and len(pairs) < _MEMO_LIMIT:
                    pairs[(a, b)] = found
            if found[0] or found[1]:
                masks[i] = [*masks[i], *found[0]]
                masks[j] = [*masks[j], *found[1]]
        return masks

    def redact_fields(self, values: Sequence[str]) -> list[str]:
        """Adjacent fields of one entry (in document order), each redacted, including a secret cut
        across two of them (both parts are replaced)."""
        return [self.redact_masked(v, m) for v, m in zip(values, self.field_masks(values), strict=True)]

    def redact_message(
        self, text: str, masks: Sequence[Mask] = (), candidates: Sequence[int] | None = None
    ) -> str:
        """The next message of a stream (a line of a file, an entry of a read, in reading order),
        redacted like `redact` plus: the part of a secret begun in the previous message, and PEM
        private-key body lines between a BEGIN and an END line seen in other messages (either order).
        ``masks``: more parts to replace (from `field_masks`); ``candidates`` as in `redact`."""
        if self._previous:
            masks = [*masks, *self._straddles(self._previous, text)[1]]
        else:
            masks = list(masks)
        self._previous = text
        begin = end = None
        if "-----" in text:
            begin, end = _PEM_BEGIN.search(text), _PEM_END.search(text)
        if begin or end:
            if not (begin and end and begin.start() < end.start()):
                # A block opens here (or closes, newest first) and goes on in other messages: its body
                # lines share the placeholder this marker line gets.
                marker = (_RULES[0][1].search(text) if begin else None) or _RULES[1][1].search(text)
                if marker is not None and self._pem_block is not None:  # the block ends here
                    masks.append((marker.start(), marker.end(), "PRIVATE_KEY", self._pem_block))
                    self._pem_block = None
                elif marker is not None:
                    self._pem_block = marker.group(0)
        elif self._pem_block is not None:
            body = text.strip()
            if _PEM_BODY.fullmatch(body):
                start = text.index(body)
                return (
                    text[:start]
                    + self.placeholder("PRIVATE_KEY", self._pem_block)
                    + text[start + len(body) :]
                )
            self._pem_block = None
        return self.redact_masked(text, masks, candidates)

    # ---- bookkeeping -----------------------------------------------------------------------------

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
        if not any(self.counts.values()):
            return None
        parts = ", ".join(f"{k} x{v}" for k, v in sorted(self.counts.items()) if v)
        return f"redacted {self.total} value(s) before output ({parts})"


def redact_text(text: str) -> str:
    """One-off redaction with a fresh `Redactor` (placeholders numbered from 1)."""
    return Redactor().redact(text)
