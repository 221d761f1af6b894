"""Gemma 4's own tool-call syntax, for when the server's tool parser is not active (or fails).

Then Gemma's native syntax arrives in ``content``: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42}<tool_call|>``
(vLLM docs, ``vllm.tool_parsers.gemma4_tool_parser``; vllm-project/vllm#39468). `parse_raw_tool_calls`
turns it into calls instead of showing it; `clean_content` drops it, reasoning blocks
``<|channel>thought ... <channel|>`` and control tokens from the text.
"""

from __future__ import annotations

import json
import re
from typing import Any

GEMMA_STR = '<|"|>'
_RAW_CALL = re.compile(r"<\|tool_call\>\s*call:([A-Za-z_][\w.\-]*)\s*(\{.*?\})\s*<tool_call\|>", re.S)
_RAW_CALL_OPEN = re.compile(r"<\|tool_call\>\s*call:([A-Za-z_][\w.\-]*)\s*(\{.*)$", re.S)
# With special tokens stripped (skip_special_tokens) only ``call:name{...}`` is left; accept our names.
_BARE_CALL = re.compile(r"(?<![\w:])call:(search_logs|get_entry|count_by)\s*(\{[^\n]*\})")
_REASONING = re.compile(r"<\|channel\>.*?(?:<channel\|>|$)", re.S)
_SPECIAL = re.compile(r"<\|?(?:turn|tool_call|tool_response|channel)\|?>|<turn\|>|<eos>")


class _GemmaArgs:
    """Parser for Gemma 4's argument syntax: bare keys, ``<|"|>`` string delimiters, JSON-like rest."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self) -> Any:
        self.ws()
        s = self.s
        if s.startswith(GEMMA_STR, self.i):
            end = s.find(GEMMA_STR, self.i + len(GEMMA_STR))
            if end < 0:
                raise ValueError("unterminated string")
            out = s[self.i + len(GEMMA_STR) : end]
            self.i = end + len(GEMMA_STR)
            return out
        ch = s[self.i] if self.i < len(s) else ""
        if ch == "{":
            return self.obj()
        if ch == "[":
            self.i += 1
            items: list[Any] = []
            self.ws()
            if s.startswith("]", self.i):
                self.i += 1
                return items
            while True:
                items.append(self.value())
                self.ws()
                if s.startswith(",", self.i):
                    self.i += 1
                    continue
                if s.startswith("]", self.i):
                    self.i += 1
                    return items
                raise ValueError("bad list")
        if ch == '"':
            decoded, end = json.JSONDecoder().raw_decode(s, self.i)
            self.i = end
            return decoded
        m = re.compile(r"[^,}\]]*").match(s, self.i)
        raw = m.group(0).strip() if m else ""
        self.i = m.end() if m else self.i
        if raw in ("true", "false"):
            return raw == "true"
        if raw in ("null", "None"):
            return None
        try:
            return int(raw)
        except ValueError:
            try:
                return float(raw)
            except ValueError:
                return raw

    def obj(self) -> dict[str, Any]:
        s = self.s
        if not s.startswith("{", self.i):
            raise ValueError("expected {")
        self.i += 1
        out: dict[str, Any] = {}
        while True:
            self.ws()
            if s.startswith("}", self.i):
                self.i += 1
                return out
            m = re.compile(r'(?:<\|"\|>)?"?([A-Za-z_][\w\-]*)"?(?:<\|"\|>)?\s*:').match(s, self.i)
            if not m:
                raise ValueError(f"bad key at {self.i}")
            self.i = m.end()
            out[m.group(1)] = self.value()
            self.ws()
            if s.startswith(",", self.i):
                self.i += 1


def parse_raw_tool_calls(content: str | None) -> list[dict[str, Any]]:
    """Tool calls written in Gemma 4's native syntax inside ``content``.

    Returns ``[{"name": str, "arguments": dict}]`` (empty when there are none or they do not parse).
    """
    if not content or "call:" not in content:
        return []
    calls = []
    found = list(_RAW_CALL.finditer(content))
    if not found:
        m = _RAW_CALL_OPEN.search(content)  # truncated: no closing token
        found = [m] if m else list(_BARE_CALL.finditer(content))
    for m in found:
        try:
            args = _GemmaArgs(m.group(2)).obj()
        except (ValueError, IndexError, json.JSONDecodeError):
            continue
        calls.append({"name": m.group(1), "arguments": args})
    return calls


def clean_content(content: str | None) -> str:
    """Assistant text without reasoning blocks, raw tool calls or Gemma control tokens."""
    text = _REASONING.sub("", content or "")
    text = _RAW_CALL.sub("", text)
    text = _RAW_CALL_OPEN.sub("", text)
    text = _BARE_CALL.sub("", text)
    return _SPECIAL.sub("", text).strip()
