"""Fake Cloud Logging: ``POST /v2/entries:list`` with a working subset of the query language.

Supported filter subset (cloud.google.com/logging/docs/view/logging-query-language): comparisons
``field OP value`` with ``= != : > >= < <= =~ !~`` on dotted paths (quoted segments such as
``labels."compute.googleapis.com/resource_name"`` allowed), ``AND`` / ``OR`` / ``NOT`` / ``-``,
implicit AND, parentheses, and bare or quoted values as a global text search over every string
field. ``severity`` compares by the LogSeverity order, ``timestamp`` by time. Requests also honour
``resourceNames``, ``orderBy`` (``timestamp asc|desc``), ``pageSize`` (max 1000, default 50) and
``pageToken`` (opaque, bound to the filter and order, as the real API requires). Invalid filters
answer 400 ``INVALID_ARGUMENT`` in Google's error shape. ``empty_pages = N`` makes the next N answers
pages with no entries and a ``nextPageToken`` that resumes at the same place, as the real API may
answer while it scans a long window.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")
RANK = {s: i for i, s in enumerate(SEVERITIES)}

_TOKEN = re.compile(
    r"""\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<op>=~|!~|>=|<=|!=|=|:|>|<)|(?P<str>"(?:[^"\\]|\\.)*")|(?P<dot>\.)|(?P<word>[^\s()"=:<>!.]+|!))"""
)


class FilterError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise FilterError(f"Unparseable filter near {text[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        if kind == "str":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out.append((kind, value))
        pos = m.end()
    return out


def _time(value: str) -> float:
    text = value.replace("Z", "+00:00")
    if "." in text:
        head, _, frac = text.partition(".")
        digits = re.match(r"\d*", frac).group(0)  # type: ignore[union-attr]
        text = f"{head}.{digits[:6]}{frac[len(digits) :]}"
    return datetime.fromisoformat(text).timestamp()


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, offset: int = 0) -> tuple[str, str] | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise FilterError("Unexpected end of filter")
        self.i += 1
        return tok

    def parse(self) -> Any:
        node = self.or_()
        if self.peek() is not None:
            raise FilterError(f"Unexpected token {self.peek()[1]!r}")  # type: ignore[index]
        return node

    def or_(self) -> Any:
        left = self.and_()
        while self.peek() == ("word", "OR"):
            self.take()
            left = ("or", left, self.and_())
        return left

    def and_(self) -> Any:
        left = self.unary()
        while True:
            tok = self.peek()
            if tok is None or tok[0] == "rp" or tok == ("word", "OR"):
                return left
            if tok == ("word", "AND"):
                self.take()
            left = ("and", left, self.unary())

    def unary(self) -> Any:
        tok = self.peek()
        if tok in (("word", "NOT"), ("word", "-")):
            self.take()
            return ("not", self.unary())
        if tok is not None and tok[0] == "word" and tok[1].startswith("-") and len(tok[1]) > 1:
            self.toks[self.i] = ("word", tok[1][1:])
            return ("not", self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, value = self.take()
        if kind == "lp":
            node = self.or_()
            if self.take()[0] != "rp":
                raise FilterError("Missing )")
            return node
        if kind not in ("word", "str"):
            raise FilterError(f"Unexpected {value!r}")
        path = [value]
        while self.peek() is not None and self.peek()[0] == "dot":  # type: ignore[index]
            self.take()
            k, v = self.take()
            if k not in ("word", "str"):
                raise FilterError("Bad field path")
            path.append(v)
        nxt = self.peek()
        if nxt is not None and nxt[0] == "op":
            op = self.take()[1]
            k, v = self.take()
            if k not in ("word", "str"):
                raise FilterError(f"Expected a value after {op}")
            while k == "word" and self.peek() is not None and self.peek()[0] == "dot":  # type: ignore[index]
                self.take()
                v += "." + self.take()[1]
            return ("cmp", path, op, v)
        if len(path) > 1:
            raise FilterError("A field path needs an operator")
        return ("text", value)


def _get(entry: dict[str, Any], path: list[str]) -> Any:
    cur: Any = entry
    for seg in path:
        if not isinstance(cur, dict) or seg not in cur:
            return None
        cur = cur[seg]
    return cur


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [str(value)]


def _compare(actual: Any, op: str, expected: str, path: list[str]) -> bool:
    if actual is None:
        return op == "!="
    if path == ["severity"]:
        a, e = RANK.get(str(actual).upper(), 0), RANK.get(expected.upper())
        if e is None:
            raise FilterError(f"Unknown severity {expected}")
    elif path in (["timestamp"], ["receiveTimestamp"]):
        try:
            a, e = _time(str(actual)), _time(expected)
        except ValueError as exc:
            raise FilterError(f"Invalid timestamp {expected!r}") from exc
    else:
        if op == ":":
            return any(expected.lower() in s.lower() for s in _strings(actual))
        if op in ("=~", "!~"):
            hit = any(re.search(expected, s) for s in _strings(actual))
            return hit if op == "=~" else not hit
        a, e = str(actual), expected
    if op in ("=", ":"):
        return a == e
    if op == "!=":
        return a != e
    return {">": a > e, ">=": a >= e, "<": a < e, "<=": a <= e}[op]  # type: ignore[operator]


def _match(node: Any, entry: dict[str, Any]) -> bool:
    kind = node[0]
    if kind == "and":
        return _match(node[1], entry) and _match(node[2], entry)
    if kind == "or":
        return _match(node[1], entry) or _match(node[2], entry)
    if kind == "not":
        return not _match(node[1], entry)
    if kind == "text":
        needle = node[1].lower()
        return any(needle in s.lower() for s in _strings(entry))
    _, path, op, value = node
    return _compare(_get(entry, path), op, value, path)


def parse_filter(text: str) -> Any:
    """The parsed filter tree (``None`` for an empty filter). Raises FilterError."""
    return _Parser(text).parse() if text.strip() else None


def _error(code: int, status: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "status": status}}, status_code=code)


class FakeLogging:
    """In-memory Cloud Logging. ``entries`` are LogEntry dicts; ``requests`` records each list body."""

    def __init__(self, entries: list[dict[str, Any]] | None = None) -> None:
        self.entries: list[dict[str, Any]] = list(entries or [])
        self.requests: list[dict[str, Any]] = []
        self.fail_next: tuple[int, str, str] | None = None
        self.empty_pages = 0

    def add(self, entries: list[dict[str, Any]]) -> None:
        self.entries.extend(entries)

    def load_export(self, path: str | Path) -> int:
        """Add every entry of a ``gcloud logging read --format=json`` export; returns the count."""
        data = json.loads(Path(path).read_text())
        self.entries.extend(data)
        return len(data)

    def routes(self) -> list[Route]:
        return [Route("/v2/entries:list", self.list_entries, methods=["POST"])]

    async def list_entries(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        if self.fail_next:
            code, status, message = self.fail_next
            self.fail_next = None
            return _error(code, status, message)
        names = body.get("resourceNames") or []
        if not names:
            return _error(400, "INVALID_ARGUMENT", "resourceNames is required")
        projects = {n.split("/", 1)[1] for n in names if n.startswith("projects/")}
        filter_text = body.get("filter", "")
        try:
            tree = parse_filter(filter_text)
        except FilterError as exc:
            return _error(400, "INVALID_ARGUMENT", f"Invalid filter: {exc}")
        order = (body.get("orderBy") or "timestamp asc").strip().lower()
        if order not in ("timestamp asc", "timestamp desc"):
            return _error(400, "INVALID_ARGUMENT", f"Invalid orderBy: {order}")
        size = int(body.get("pageSize") or 50)
        if not 1 <= size <= 1000:
            return _error(400, "INVALID_ARGUMENT", "pageSize must be between 1 and 1000")
        try:
            matched = [
                e
                for e in self.entries
                if (not projects or (e.get("logName", "").split("/")[1:2] or [""])[0] in projects)
                and (tree is None or _match(tree, e))
            ]
        except FilterError as exc:
            return _error(400, "INVALID_ARGUMENT", f"Invalid filter: {exc}")
        matched.sort(
            key=lambda e: (_time(e["timestamp"]), e.get("insertId", "")), reverse=order.endswith("desc")
        )
        binding = hashlib.sha256(f"{filter_text}|{order}|{sorted(names)}".encode()).hexdigest()[:12]
        offset = 0
        if body.get("pageToken"):
            try:
                bound, raw = base64.urlsafe_b64decode(body["pageToken"].encode()).decode().split(":", 1)
                offset = int(raw)
            except Exception:
                return _error(400, "INVALID_ARGUMENT", "Invalid page token")
            if bound != binding:
                return _error(
                    400, "INVALID_ARGUMENT", "page token does not match the request's filter or order"
                )

        def token(at: int) -> str:
            return base64.urlsafe_b64encode(f"{binding}:{at}".encode()).decode()

        if self.empty_pages > 0:
            self.empty_pages -= 1
            return JSONResponse({"nextPageToken": token(offset)})
        page = matched[offset : offset + size]
        out: dict[str, Any] = {"entries": page} if page else {}
        if offset + size < len(matched):
            out["nextPageToken"] = token(offset + size)
        return JSONResponse(out)
