"""Base of every typed tool result, and the two forms a host receives: text and structured content.

Hosts read one form each: Gemini CLI gives its model only the text content, Claude Code only
the ``structuredContent`` when a tool declares an output schema. So each form must stand on its own:

- both lead with the same human summary (`ToolResult.summary_text`: the headline, or more where a
  subclass adds root cause and fix); the structured form carries it as its first key, ``summary``;
- the structured form is the model's JSON without what carries nothing: ``None``, empty lists and
  mappings (`prune`; ``false`` and ``0`` stay: they are answers). A list of uniform records declared
  `Table` is sent as ``{"columns": [...], "rows": [[...], ...]}``: each key once, not on every row
  (`as_table`; `table_records` reads it back). Fields declared with
  ``Field(exclude=True)`` (internal or text-only data) never reach it. The published output schema says
  the same (`tpu_devops.host.schemas.wire_output_schema`): such fields are not required;
- every answer fits every host (`fit_forms`): the text at most `HOST_TEXT_LIMIT` characters, text plus
  structured JSON at most `HOST_COMBINED_LIMIT`. What a cut leaves out is named in the answer, with how to
  get it (`ToolResult.more_hint`); a long text keeps its start and its end. When the server keeps
  artifacts (`tpu_devops.host.artifacts.configure`), the whole answer is written there first and the cut
  names its path and URI, so nothing is lost;
- files a result points at (`tpu_devops.host.artifacts.Artifact` fields: the full startup script, a
  chart) become ``resource_link`` content blocks, and a PNG of at most `MAX_IMAGE_BYTES` also an
  ``image`` block, beside the text (`HostAnswer`).

The limits are the hosts' own (measured with the real CLIs against scripted model APIs): Qwen Code sends
text and structure together and moves a result over 25,000 characters to a file, showing its model a
2 KB preview; Claude Code does the same over 50,000; Codex CLI cuts a result to about 10 KB unless
``tool_output_token_limit`` is raised (README); Gemini CLI and Claude Code read one form each. A text of
20,000 characters leaves the structured form at least 5,000 of Qwen Code's 25,000.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Annotated, Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler
from pydantic.fields import FieldInfo
from pydantic_core import CoreSchema

from tpu_devops.host import artifacts
from tpu_devops.host.artifacts import Artifact
from tpu_devops.host.schemas import TABLE_KEYS, table_schema

HOST_TEXT_LIMIT = 20_000  # characters of the text form
HOST_COMBINED_LIMIT = 25_000  # characters of the text and the structured JSON together (Qwen Code's limit)
MAX_RESULT_CHARS = HOST_COMBINED_LIMIT  # no form is ever longer
MAX_IMAGE_BYTES = 100_000  # a PNG sent inline as image content; larger ones go as a link only
# The largest log-evidence budget a tool accepts, in tokens (the bundled evidence packs measure about 1.6
# characters per estimated token, English prose about 4 per real token: `tpu_devops.serving.tokens`): up
# to ~19,000 characters of evidence at the measured rate. An answer that then exceeds the host limits is
# cut to fit (`fit_forms`), its whole text kept as an artifact.
MAX_EVIDENCE_TOKENS = 12_000
log = logging.getLogger("tpu_devops.results")
RESERVED_FIELDS = ("summary", "omitted")  # keys the structured form adds; no result model may declare them


RowT = TypeVar("RowT", bound=BaseModel)


class _AsTable:
    """`Table`'s marker: the field's published schema is the table's (`tpu_devops.host.schemas.table_schema`)."""

    def __get_pydantic_json_schema__(self, core: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        listed = handler(core)
        return table_schema(handler.resolve_ref_schema(listed.get("items", {})))


# A result field holding rows of one model: a list in Python and in the text form, a table in the structured
# form (`as_table`), e.g. ``zones: Table[ZoneQuota]``. For lists of uniform records, where JSON objects
# would repeat every key on every row (44 zones of eight fields were 2.4x the text's size).
Table = Annotated[list[RowT], _AsTable()]


def as_table(records: list[dict[str, Any]]) -> dict[str, Any]:
    """``records`` (JSON objects) as ``{"columns": [keys in first-seen order], "rows": [[values], ...]}``;
    a key a record lacks is ``null`` in its row."""
    columns: list[str] = []
    for record in records:
        columns.extend(k for k in record if k not in columns)
    return {"columns": columns, "rows": [[record.get(c) for c in columns] for record in records]}


def table_records(table: Any) -> list[dict[str, Any]]:
    """A structured form's table (`as_table`) back as one object per row, without its ``null`` cells.

    Raises:
        ValueError: ``table`` is not a table.
    """
    if not (isinstance(table, dict) and tuple(table) == TABLE_KEYS):
        raise ValueError(f"not a table (an object with {TABLE_KEYS}): {str(table)[:80]}")
    columns = table["columns"]
    return [{c: v for c, v in zip(columns, row, strict=True) if v is not None} for row in table["rows"]]


def _render_value(value: Any, indent: int, lines: list[str], key: str | None) -> None:
    pad = "  " * indent
    label = f"{key}: " if key is not None else "- "
    if isinstance(value, dict):
        if not value:
            lines.append(f"{pad}{label}{{}}")
            return
        lines.append(f"{pad}{label.rstrip()}" if key is not None else f"{pad}-")
        for k, v in value.items():
            _render_value(v, indent + 1, lines, str(k))
    elif isinstance(value, list):
        if not value:
            lines.append(f"{pad}{label}[]")
            return
        if all(not isinstance(v, dict | list) for v in value) and sum(len(str(v)) for v in value) < 100:
            lines.append(f"{pad}{label}{', '.join(str(v) for v in value)}")
            return
        lines.append(f"{pad}{label.rstrip()}" if key is not None else f"{pad}-")
        for v in value:
            _render_value(v, indent + 1, lines, None)
    elif value is None:
        return
    elif isinstance(value, float):
        # ,.4g switches to 1.437e+04 from 10,000 up: whole-number formatting reads better there
        lines.append(f"{pad}{label}{value:,.4g}" if abs(value) < 1e4 else f"{pad}{label}{value:,.0f}")
    elif isinstance(value, str) and "\n" in value:
        lines.append(f"{pad}{label}|")
        lines.extend(f"{pad}  {line}" for line in value.splitlines())
    else:
        lines.append(f"{pad}{label}{value}")


def render_mapping(data: dict[str, Any], title: str | None = None) -> str:
    """Indented ``key: value`` text of a JSON-like mapping; ``None`` fields are left out."""
    lines: list[str] = [title] if title else []
    for k, v in data.items():
        _render_value(v, 0, lines, k)
    return "\n".join(lines)


def json_chars(data: Any) -> int:
    """Characters of ``data`` as compact JSON, the way a host serialises structured content."""
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))


class ToolResult(BaseModel):
    """A tool's typed result.

    Override `headline` (one line that answers the question), and `summary_text` where the answer needs a
    root cause and a fix next to it; `render_text` for a better human view (it must start with the
    summary and carry every key fact: some hosts read nothing else); `more_hint` to say how to get what a
    size cap left out. Mark fields the structured form must not carry with ``Field(exclude=True)``.
    """

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        clash = [name for name in RESERVED_FIELDS if name in cls.model_fields]
        if clash:
            raise TypeError(
                f"{cls.__name__} declares {clash}: those keys are reserved for the structured form "
                "(tpu_devops.host.results.RESERVED_FIELDS); rename the field"
            )

    def headline(self) -> str | None:
        """One line that answers the question the tool was asked (None: no headline)."""
        return None

    def summary_text(self) -> str:
        """The human summary both forms lead with: the headline by default, else the text's first line."""
        headline = self.headline()
        if headline:
            return headline
        text = self.render_text().strip()
        return text.splitlines()[0] if text else type(self).__name__

    def render_text(self) -> str:
        """Readable text shown by chat clients: the headline, then the fields."""
        return render_mapping(self.model_dump(mode="json"), self.headline())

    def more_hint(self) -> str:
        """How to get what a size cap left out (shown with the cut)."""
        return "ask for less: a narrower filter, a shorter time window or a smaller limit"

    def structured(self) -> dict[str, Any]:
        """The structured content: ``summary`` first, then the pruned model (see the module docstring)."""
        return {"summary": self.summary_text(), **prune(self.model_dump(mode="json", by_alias=True), self)}

    def full_text(self) -> str:
        """`render_text`, plus the untrusted-content notice when the result carries one (an ``untrusted``
        marker with a ``notice``, `tpu_devops.host.untrusted.UntrustedContent`): a host that reads only the
        text must get the same warning as one that reads only the structure."""
        text = self.render_text()
        notice = getattr(getattr(self, "untrusted", None), "notice", None)
        if isinstance(notice, str) and notice not in text:
            text = f"{text}\nuntrusted: {notice}"
        return text

    def host_forms(self) -> tuple[str, dict[str, Any]]:
        """(text, structured content), fitted to the host limits (`fit_forms`)."""
        answer = self.host_answer()
        return answer.text, answer.structured

    def host_answer(self) -> HostAnswer:
        """Both forms fitted to the host limits, and the files the answer offers: the result's own
        `Artifact` fields, and, when the answer had to be cut and the server keeps artifacts, the whole
        text as one (the cut then says where it is)."""
        text, structured = self.full_text(), self.structured()
        files = artifacts_of(self)
        hint = self.more_hint()
        if not fits(text, structured):
            whole = _keep_whole(type(self).__name__, text)
            if whole is not None:
                files.append(whole)
                hint = f"read the whole answer in {whole.describe()}, or {hint}"
        text, structured = fit_forms(text, structured, hint)
        return HostAnswer(text=text, structured=structured, files=files)


class HostAnswer(BaseModel):
    """What `tpu_devops.host.registration.to_call_result` sends: the two forms and the offered files."""

    text: str
    structured: dict[str, Any]
    files: list[Artifact] = []


def fits(text: str, structured: dict[str, Any]) -> bool:
    """True when both forms fit every host as they are (`HOST_TEXT_LIMIT`, `HOST_COMBINED_LIMIT`)."""
    return len(text) <= HOST_TEXT_LIMIT and len(text) + json_chars(structured) <= HOST_COMBINED_LIMIT


def fit_forms(
    text: str, structured: dict[str, Any], hint: str = "ask for less"
) -> tuple[str, dict[str, Any]]:
    """(text, structured) cut to fit every host: the text to `HOST_TEXT_LIMIT`, both together to
    `HOST_COMBINED_LIMIT`. When both are large each gets half of the combined room (a host that reads
    only one form still gets the most of it), and a form smaller than its half leaves the rest to the
    other."""
    if fits(text, structured):
        return text, structured
    half = HOST_COMBINED_LIMIT // 2
    text_room = min(HOST_TEXT_LIMIT, HOST_COMBINED_LIMIT - min(json_chars(structured), half))
    text = cap_text(text, text_room, hint)
    return text, cap_structured(structured, HOST_COMBINED_LIMIT - len(text), hint)


def artifacts_of(result: BaseModel) -> list[Artifact]:
    """The `Artifact` values among ``result``'s fields (also inside nested models and lists), in order."""
    found: list[Artifact] = []

    def visit(value: Any) -> None:
        if isinstance(value, Artifact):
            if value not in found:
                found.append(value)
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                visit(getattr(value, name, None))
        elif isinstance(value, list | tuple):
            for item in value:
                visit(item)

    visit(result)
    return found


def _keep_whole(kind: str, text: str) -> Artifact | None:
    """The whole text of an answer too large for the hosts, as an artifact (None when the server keeps
    none, or it cannot be written: the cut answer still says how to ask for less)."""
    if artifacts.configured() is None:
        return None
    stem = re.sub(r"(?<!^)(?=[A-Z])", "-", kind).lower()
    try:
        return artifacts.write(f"{stem}-answer", text, suffix=".txt", mime_type="text/plain")
    except (OSError, ValueError) as exc:
        log.warning("cannot keep the whole %s answer as a file: %s", kind, exc)
        return None


def _droppable(value: Any, is_model: bool) -> bool:
    return value is None or (value in ([], {}) and not is_model)


def prune(dumped: dict[str, Any], model: BaseModel) -> dict[str, Any]:
    """``dumped`` (``model.model_dump(mode="json", by_alias=True)``) without the values that carry nothing.

    Walks the model alongside its dump so that the field declarations decide: a key goes when its value is
    ``None`` or an empty list or mapping (not an empty nested model). Keys the dump has that are not fields
    (computed fields, custom serialisers) stay as dumped.
    Free-form mappings lose their ``None`` values. Lists keep their positions; a `Table` field becomes a
    table (`as_table`) of its pruned records. A whole float is written as the integer it is (``4``, not
    ``4.0``: the same JSON number).
    """
    out = dict(dumped)
    for name, field in type(model).model_fields.items():
        key = field.serialization_alias or field.alias or name
        if key not in out:
            continue
        value = getattr(model, name, None)
        if _droppable(out[key], isinstance(value, BaseModel)):
            del out[key]
            continue
        out[key] = _prune_value(out[key], value)
        if isinstance(out[key], list) and _declares_table(field):
            out[key] = as_table(out[key])
    return out


def _declares_table(field: FieldInfo) -> bool:
    """True for a `Table` field, also one declared ``Table[Row] | None`` (its schema is a table then too)."""
    markers = [
        *field.metadata,
        *(m for arg in get_args(field.annotation) for m in getattr(arg, "__metadata__", ())),
    ]
    return any(isinstance(m, _AsTable) for m in markers)


def _prune_value(dumped: Any, value: Any) -> Any:
    if isinstance(dumped, float) and dumped.is_integer() and abs(dumped) < 1e15:
        return int(dumped)  # the same JSON number: 14400, not 14400.0
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        return prune(dumped, value)
    if isinstance(value, list | tuple) and isinstance(dumped, list) and len(value) == len(dumped):
        return [_prune_value(d, v) for d, v in zip(dumped, value, strict=True)]
    if isinstance(value, dict) and isinstance(dumped, dict):
        return {k: _prune_value(d, value.get(k)) for k, d in dumped.items() if d is not None}
    return dumped


def _cut_note(left_out: str, hint: str) -> str:
    return (
        f"[{left_out} left out to fit hosts' tool-result limits ({HOST_TEXT_LIMIT:,} characters of text, "
        f"{HOST_COMBINED_LIMIT:,} with the structured form); to see it, {hint}]"
    )


HEAD_SHARE = 0.6  # of a cut text's room, kept from its start; the rest from its end
KEEP_STRING = 1_000  # characters a long string of the structured form keeps while other parts can give
LINE_SLACK = 2_000  # characters a cut may move back to end at a line


def cap_text(text: str, limit: int = HOST_TEXT_LIMIT, hint: str = "ask for less") -> str:
    """``text`` if it fits in ``limit`` characters, else its start and its end (cut at line ends where
    there are any) around a note saying which characters and lines were left out and how to get them:
    a long answer's conclusion is at its end, a listing's first rows at its start."""
    if len(text) <= limit:
        return text
    # The note's length depends on the numbers it states; size it for the worst case first.
    worst = f"characters {len(text):,}-{len(text):,} ({len(text):,} characters, lines {len(text):,}-{len(text):,})"
    room = max(0, limit - len(_cut_note(worst, hint)) - 2)
    head = text[: int(room * HEAD_SHARE)]
    # At a line end when one is near (a long line is cut inside rather than dropped whole).
    if (nl := head.rfind("\n")) >= len(head) - LINE_SLACK:
        head = head[:nl]
    tail = text[len(text) - (room - len(head)) :] if room > len(head) else ""
    if 0 <= (nl := tail.find("\n")) < LINE_SLACK:
        tail = tail[nl + 1 :]
    first, last = len(head) + 1, len(text) - len(tail)
    lines = ""
    if "\n" in text:  # the whole lines left out, between the head's last line and the tail's first
        after_head = head.count("\n") + 2 if head else 1
        before_tail = text.count("\n") + 1 - (tail.count("\n") + 1 if tail else 0)
        if before_tail >= after_head:
            lines = f", lines {after_head:,}-{before_tail:,}"
    what = f"characters {first:,}-{last:,} ({last - first + 1:,} characters{lines})"
    return "\n".join(x for x in (head, _cut_note(what, hint), tail) if x)


def cap_structured(
    data: dict[str, Any], limit: int = MAX_RESULT_CHARS, hint: str = "ask for less"
) -> dict[str, Any]:
    """``data`` if its compact JSON fits in ``limit`` characters; else a copy whose largest lists lose their
    tail items (and, failing that, whose longest strings are cut) until it fits, with ``omitted`` naming what
    was left out and how to get it. ``summary`` is never cut."""
    if json_chars(data) <= limit:
        return data
    data = json.loads(json.dumps(data))  # a deep copy we may cut
    omitted: list[str] = []
    budget = limit - 600  # room for the omitted notes themselves
    while json_chars(data) > budget:
        over = json_chars(data) - budget
        # A long string (a script, a log, a model's answer) loses its middle first, down to `KEEP_STRING`
        # characters; then the largest list loses tail items (a listing's first rows matter most); then
        # whatever string is longest is cut.
        longest = _largest(data, lists=False)
        if longest is not None and len(longest[3]) >= 2 * KEEP_STRING:
            target: tuple[str, Any, Any, Any] | None = longest
        else:
            target = _largest(data, lists=True) or longest
        if target is None:
            break
        path, container, key, value = target
        if isinstance(value, list):
            total = len(value)
            size = json_chars(value)
            # the most items whose removal of the rest saves at least ``over`` characters (binary search)
            low, high = 0, total - 1
            while low < high:
                mid = (low + high + 1) // 2
                if size - json_chars(value[:mid]) >= over:
                    low = mid
                else:
                    high = mid - 1
            keep = low
            container[key] = value[:keep]
            omitted.append(f"{path}: {total - keep} of {total} items")
        else:  # a string keeps its start and its end
            keep = max(0, len(value) - over - 60)
            if len(value) >= 2 * KEEP_STRING:
                keep = max(keep, KEEP_STRING)
            head = int(keep * HEAD_SHARE)
            cut = len(value) - keep
            container[key] = (
                f"{value[:head]} [... {cut:,} characters cut ...] {value[len(value) - (keep - head) :]}"
            )
            omitted.append(f"{path}: {cut:,} of {len(value):,} characters (the middle)")
    data["omitted"] = [*data.get("omitted", []), *_merge(omitted), f"to see it, {hint}"]
    return data


def _merge(notes: list[str]) -> list[str]:
    """The last note per path (a list cut twice reports its final count once)."""
    last: dict[str, str] = {}
    for note in notes:
        last[note.split(": ", 1)[0]] = note
    return list(last.values())


def _largest(data: Any, *, lists: bool) -> tuple[str, Any, Any, Any] | None:
    """(path, container, key, value) of the largest non-empty list (or longest string) below the root,
    never the root ``summary``."""
    best: tuple[int, tuple[str, Any, Any, Any]] | None = None

    def visit(node: Any, path: str) -> None:
        nonlocal best
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if node is data and k in ("summary", "omitted"):
                continue
            sub = f"{path}.{k}" if path else str(k)
            if isinstance(v, list) and lists and v:
                size = json_chars(v)
                if best is None or size > best[0]:
                    best = (size, (sub, node, k, v))
            elif isinstance(v, str) and not lists and len(v) > 200:
                if best is None or len(v) > best[0]:
                    best = (len(v), (sub, node, k, v))
            if isinstance(v, dict | list):
                visit(v, sub)

    visit(data, "")
    return best[1] if best else None


class ViewResult(ToolResult):
    """The answer of a tool with several views (``view="status"``): the chosen view's result, one optional
    field per view, declared by the subclass (``status: SystemStatus | None = None``).

    Both forms are the chosen result's own: the same summary, text and structured content, so a host reads
    a view's fields where it would read them from a tool of that view alone (the caller named the view).
    Its published schema (`wire_schema`) holds every view's properties, none required but ``summary``.
    """

    view: str

    def chosen(self) -> ToolResult:
        """The result of the chosen view.

        Raises:
            ValueError: the field named by ``view`` holds no result.
        """
        value = getattr(self, self.view, None)
        if not isinstance(value, ToolResult):
            raise ValueError(f"{type(self).__name__}: view {self.view!r} holds no result")
        return value

    def headline(self) -> str | None:
        return self.chosen().headline()

    def summary_text(self) -> str:
        return self.chosen().summary_text()

    def render_text(self) -> str:
        return self.chosen().render_text()

    def more_hint(self) -> str:
        return self.chosen().more_hint()

    def structured(self) -> dict[str, Any]:
        return self.chosen().structured()

    def full_text(self) -> str:
        return self.chosen().full_text()

    def host_answer(self) -> HostAnswer:
        return self.chosen().host_answer()

    @classmethod
    def views(cls) -> dict[str, type[ToolResult]]:
        """Each view's name and result type, as the subclass declares them."""
        out: dict[str, type[ToolResult]] = {}
        for name, field in cls.model_fields.items():
            for arg in (field.annotation, *get_args(field.annotation)):
                if isinstance(arg, type) and issubclass(arg, ToolResult):
                    out[name] = arg
        return out

    @classmethod
    def wire_schema(cls) -> dict[str, Any]:
        """The published output schema: ``summary``, then every view's properties (a property two views
        declare differently is either of them), none required."""
        from tpu_devops.host.schemas import wire_output_schema

        properties: dict[str, Any] = {}
        defs: dict[str, Any] = {}
        for result in cls.views().values():
            wired = wire_output_schema(result.model_json_schema(mode="serialization"))
            defs.update(wired.get("$defs", {}))
            for key, sub in wired.get("properties", {}).items():
                if key in ("summary", "omitted"):
                    continue
                if key in properties and properties[key] != sub:
                    options = properties[key].get("anyOf", [properties[key]])
                    properties[key] = {"anyOf": [*options, sub] if sub not in options else options}
                else:
                    properties[key] = sub
        schema = wire_output_schema({"type": "object", "properties": {}})
        schema["properties"] = {
            "summary": schema["properties"]["summary"],
            **properties,
            "omitted": schema["properties"]["omitted"],
        }
        schema["required"] = ["summary"]
        if defs:
            schema["$defs"] = defs
        return schema
