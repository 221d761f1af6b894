"""The JSON schemas a host receives for each tool: compact input schemas, honest output schemas.

Input schemas (``inputSchema``) are sent to the model on every turn (Gemini CLI passes them unchanged as
``parametersJsonSchema``), so `input_schema` derives them from the tool's argument
model and:

- drops what repeats or says nothing: ``title`` keywords, ``default: null`` (and ``false`` for a flag),
  and ``anyOf: [X, null]``
  where "not required" already says the argument may be left out (a ``null`` argument is read as left
  out, `tpu_devops.host.arguments`);
- keeps to the schema subset Gemini function declarations document (`GEMINI_SCHEMA_KEYS`): no ``$ref``
  (definitions are inlined), no ``additionalProperties``, no exclusive bounds (turned into inclusive ones;
  the argument model still enforces the strict bound), enums of strings only;
- bounds every input: a string without its own ``maxLength`` is held to `DEFAULT_MAX_STRING`, an array
  without ``maxItems`` to `DEFAULT_MAX_ITEMS`, and a required string needs at least one character. These
  defaults are checked (`validation_schema`) and stated once in `get_help`, not repeated on every argument
  (hosts send the schemas on every turn); bounds a tool declares are published, except sanity limits
  marked `SANITY` (checked, but telling a model nothing it would choose by);
- states bounds and defaults in words at the end of the description, ``entries per page (1-500; default
  50)``, instead of as keywords (`_in_words`): some hosts strip the keywords (Codex CLI drops ``default``,
  ``minimum``/``maximum`` and length limits), none strips the description, and the words cost fewer bytes.

`validation_schema` is the same schema plus what the published one leaves out for Gemini's sake
(``additionalProperties: false``, exclusive bounds): arguments are checked against it before the tool
runs, so unknown keys and ``true`` for a number are refused, never silently coerced.

Output schemas (``outputSchema``) describe the structured form of `tpu_devops.host.results.ToolResult`:
`wire_output_schema` adds the leading ``summary`` (and ``omitted``, present when a size cap cut the
answer) and stops requiring what the structured form leaves out when it carries nothing (nulls, empty
lists and mappings). A list of uniform records declared `tpu_devops.host.results.Table` is described as the
table it is sent as (`table_schema`): ``columns`` and ``rows``, not an array of objects repeating every key.

Sources: the Gemini API ``Schema`` object (ai.google.dev/api/caching#Schema; the same field list is in
@google-ai/generativelanguage's ``protos.google.ai.generativelanguage.v1beta.ISchema``); Gemini CLI
0.61.0 ``DiscoveredMCPTool.getSchema`` (bundle/chunk-*.js) sends ``inputSchema`` as
``parametersJsonSchema``.
"""

from __future__ import annotations

import copy
from typing import Any

# Keywords of the Gemini API Schema object (function declarations); anything else is outside the subset.
GEMINI_SCHEMA_KEYS = frozenset(
    {
        "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems", "properties",
        "required", "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "example",
        "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum",
    }
)  # fmt: skip
GEMINI_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})

DEFAULT_MAX_STRING = 1_000  # characters, for a string argument that declares no bound of its own
DEFAULT_MAX_ITEMS = 100  # items, for an array argument that declares no bound of its own


def _resolve(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with every local ``$ref`` replaced by a copy of its definition."""
    if isinstance(schema, list):
        return [_resolve(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        merged = {**copy.deepcopy(defs[name]), **{k: v for k, v in schema.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return {
        k: (v if k in ("enum", "default", "const", "example") else _resolve(v, defs))
        for k, v in schema.items()
    }


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, null]`` collapsed into X (the outer keywords win); other schemas unchanged."""
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return schema
    rest = [o for o in options if o.get("type") != "null"]
    if len(rest) == len(options):
        return schema
    outer = {k: v for k, v in schema.items() if k != "anyOf"}
    if len(rest) == 1:
        return {**rest[0], **outer}
    return {**outer, "anyOf": rest}


# Marks an argument whose bounds are sanity limits (a path of 4,096 characters, 256 chips): checked before
# the tool runs like any bound, but not published, since they tell a model nothing it would choose by and
# hosts send every schema on every turn. Set with `sanity_bounds`.
SANITY = "x-sanity-bounds"
BOUND_KEYS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
)


def sanity_bounds() -> dict[str, Any]:
    """The ``json_schema_extra`` of an argument whose bounds are checked but not published (`SANITY`)."""
    return {SANITY: True}


def _unpublished(schema: Any) -> Any:
    """``schema`` without its bounds (and their items' bounds) when marked `SANITY`; the marker removed."""
    if isinstance(schema, dict):
        marked = schema.pop(SANITY, False)
        for key in ("items", "anyOf"):
            if key in schema:
                schema[key] = _unpublished(schema[key]) if not marked else _strip_bounds(schema[key])
        return _strip_bounds(schema) if marked else schema
    if isinstance(schema, list):
        return [_unpublished(s) for s in schema]
    return schema


def _strip_bounds(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strip_bounds(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k not in BOUND_KEYS}
    for key in ("items", "anyOf"):
        if key in out:
            out[key] = _strip_bounds(out[key])
    return out


def _argument(schema: dict[str, Any], *, required: bool, strict: bool) -> dict[str, Any]:
    """One argument's schema, compacted and bounded (see the module docstring)."""
    out = _without_null(schema)
    # null, and false for a flag, say nothing "optional" does not already say
    if out.get("default", 0) is None or (out.get("type") == "boolean" and out.get("default") is False):
        del out["default"]
    if strict:
        out.pop(SANITY, None)
        return _bound(_clean(out, strict=True), required=required, strict=True)
    return _bound(_clean(_in_words(_unpublished(out)), strict=False), required=required, strict=False)


# What `_in_words` moves from an argument's keywords into its description.
STATED_KEYS = (*BOUND_KEYS, "default")
MAX_STATED_DEFAULT = 40  # characters; a longer default keeps its keyword instead


def _number(value: Any) -> str:
    """``500``, ``0.92``, ``10000000``: no exponent, no thousands separator (a comma reads as a list)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:f}".rstrip("0").rstrip(".")


def _range(schema: dict[str, Any], low: str, high: str, unit: str = "") -> tuple[str | None, list[str]]:
    """``1-500`` / ``>= 1`` / ``<= 500`` (``> 0`` for an exclusive bound) from a schema's bounds, with the
    numbers written; (None, []) when it has none."""
    lo = schema.get(low, schema.get(f"exclusive{low[:1].upper()}{low[1:]}"))
    hi = schema.get(high, schema.get(f"exclusive{high[:1].upper()}{high[1:]}"))
    lo_strict = low not in schema and lo is not None
    hi_strict = high not in schema and hi is not None
    suffix = f" {unit}" if unit else ""
    if lo is not None and hi is not None and not (lo_strict or hi_strict):
        sep = "-" if lo >= 0 else " to "
        return f"{_number(lo)}{sep}{_number(hi)}{suffix}", [_number(lo), _number(hi)]
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_strict else '>='} {_number(lo)}")
    if hi is not None:
        parts.append(f"{'<' if hi_strict else '<='} {_number(hi)}")
    if not parts:
        return None, []
    return ", ".join(parts) + suffix, [_number(v) for v in (lo, hi) if v is not None]


def _bounds_phrase(schema: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The schema's own bounds in words (its items' too, for an array), and the numbers they name."""
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return _range(schema, "minimum", "maximum")
    if kind == "string":
        return _range(schema, "minLength", "maxLength", "chars")
    if kind == "array":
        own, numbers = _range(schema, "minItems", "maxItems", "items")
        items = schema.get("items")
        each, more = _bounds_phrase(items) if isinstance(items, dict) else (None, [])
        phrase = "; ".join(p for p in (own, f"each {each}" if each else None) if p)
        return phrase or None, numbers + more
    return None, []


def _default_phrase(value: Any) -> str | None:
    if isinstance(value, bool):
        return f"default {str(value).lower()}"
    if isinstance(value, int | float):
        return f"default {_number(value)}"
    if isinstance(value, str) and value and len(value) <= MAX_STATED_DEFAULT:
        return f"default {value}"
    return None


def _in_words(schema: Any) -> Any:
    """``schema`` with its bounds and default stated at the end of its description, ``(1-500; default
    50)``, and their keywords dropped (recursively through object properties).

    Hosts drop keywords they do not take (Codex CLI 0.171 sends no ``default``, ``minimum``/``maximum`` or
    length limits to its model; OpenAI's strict function schemas refuse several), but every host sends the
    description: stated there, a bound means the same on every host, in fewer bytes than the keywords
    (``"minimum":1,"maximum":500`` is 26 bytes, `` (1-500)`` 8). The validation schema keeps the keywords, so
    an argument out of bounds is still refused before the tool runs, with the field, the value and the fix.
    A description that already names the bounds (or a default) is left as it is; a schema without a
    description, or a default too long to state (`MAX_STATED_DEFAULT`), keeps the keywords.
    """
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: _in_words(sub) for name, sub in out["properties"].items()}
    description = out.get("description")
    if not isinstance(description, str) or not description:
        return out
    said = description.lower()
    phrases = []
    bounds, numbers = _bounds_phrase(out)
    if bounds and not all(n in description for n in numbers):
        phrases.append(bounds)
    stated_default = "default" in out and ("default" in said or _default_phrase(out["default"]))
    if "default" in out and "default" not in said and (default := _default_phrase(out["default"])):
        phrases.append(default)
    if phrases:
        said_in = "; ".join(phrases)
        # "x (a, b)" reads as one more parenthesis; "x (a, b); default y" does not
        out["description"] = (
            f"{description}; {said_in}" if description.endswith(")") else f"{description} ({said_in})"
        )
    for key in BOUND_KEYS:
        out.pop(key, None)
    if isinstance(out.get("items"), dict):
        out["items"] = {k: v for k, v in out["items"].items() if k not in BOUND_KEYS}
    if stated_default:
        out.pop("default", None)
    return out


def _clean(schema: Any, *, strict: bool) -> Any:
    """Drop ``title``; keep to the Gemini subset unless ``strict`` (the validation schema)."""
    if isinstance(schema, list):
        return [_clean(s, strict=strict) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key == "properties":
            out[key] = {name: _clean(sub, strict=strict) for name, sub in value.items()}
        elif key in ("items", "anyOf", "additionalProperties"):
            out[key] = _clean(value, strict=strict)
        else:
            out[key] = value
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if not strict:
        out.pop("additionalProperties", None)
        for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if exclusive in out:
                out[inclusive] = out.pop(exclusive)
        out.pop("examples", None)
    return out


def _bound(schema: dict[str, Any], *, required: bool, strict: bool) -> dict[str, Any]:
    kind = schema.get("type")
    # The default bounds are checked (strict) but published only where a tool declares its own: repeated on
    # every argument of every tool they would cost hosts about 2 KB per model request and tell nothing new.
    if kind == "string" and strict:
        schema.setdefault("maxLength", DEFAULT_MAX_STRING)
        if required:
            schema.setdefault("minLength", 1)
    elif kind == "array":
        if strict:
            schema.setdefault("maxItems", DEFAULT_MAX_ITEMS)
        items = schema.get("items")
        if isinstance(items, dict):
            schema["items"] = _bound(items, required=False, strict=strict)
    for option in schema.get("anyOf", []):
        _bound(option, required=required, strict=strict)
    return schema


def _input(arg_schema: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    resolved = _resolve(arg_schema, arg_schema.get("$defs", {}))
    required = list(resolved.get("required", []))
    properties = {
        name: _argument(sub, required=name in required, strict=strict)
        for name, sub in resolved.get("properties", {}).items()
    }
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    if strict:
        out["additionalProperties"] = False
    return out


def input_schema(arg_schema: dict[str, Any]) -> dict[str, Any]:
    """The published ``inputSchema`` for an argument model's JSON schema (``model_json_schema()``)."""
    return _input(arg_schema, strict=False)


def validation_schema(arg_schema: dict[str, Any]) -> dict[str, Any]:
    """The schema arguments are checked against before a call: `input_schema` plus unknown keys refused
    (``additionalProperties: false``) and the argument model's exclusive bounds."""
    return _input(arg_schema, strict=True)


TABLE_KEYS = ("columns", "rows")
TABLE_NOTE = (
    "a table: `columns` names the fields, each item of `rows` holds their values in that order (a field "
    "empty in every row is not a column)"
)


def table_schema(row: dict[str, Any]) -> dict[str, Any]:
    """The schema of a list of ``row`` objects sent as a table (`tpu_devops.host.results.Table`): ``columns``, the
    names of ``row``'s properties in use, and ``rows``, one array of cell values per row, each cell one of
    the properties' value schemas (``null`` where a row has no value). The properties' descriptions move
    to the table's description, one ``name: description`` each, so the schema still says what a column
    means."""
    properties: dict[str, Any] = row.get("properties", {})
    cells: list[dict[str, Any]] = []
    for sub in properties.values():
        for option in sub.get("anyOf", [sub]):
            cell = {k: v for k, v in option.items() if k not in ("title", "default", "description")}
            if cell not in cells:
                cells.append(cell)
    if {"type": "null"} not in cells:
        cells.append({"type": "null"})
    meanings = [f"{name}: {sub['description']}" for name, sub in properties.items() if sub.get("description")]
    return {
        "type": "object",
        "description": "; ".join([TABLE_NOTE, *meanings]),
        "properties": {
            "columns": {"type": "array", "items": {"type": "string", "enum": list(properties)}},
            "rows": {"type": "array", "items": {"type": "array", "items": {"anyOf": cells}}},
        },
        "required": list(TABLE_KEYS),
    }


def is_table(schema: dict[str, Any]) -> bool:
    """True for a `table_schema`."""
    return schema.get("type") == "object" and tuple(schema.get("properties", {})) == TABLE_KEYS


def _may_be_left_out(schema: dict[str, Any]) -> bool:
    """True when the structured form may omit a property with this schema (null, list, mapping or table)."""
    options = schema.get("anyOf", [schema])
    if any(o.get("type") == "null" for o in options):
        return True
    return (
        schema.get("type") == "array"
        or (schema.get("type") == "object" and "properties" not in schema)
        or is_table(schema)
    )


def _wire_object(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_wire_object(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: _wire_object(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf", "additionalProperties", "allOf", "oneOf"):
            out[key] = _wire_object(value)
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if "properties" in out and "required" in out and not is_table(out):  # a table has both keys, always
        props = out["properties"]
        kept = [p for p in out["required"] if p in props and not _may_be_left_out(props[p])]
        if kept:
            out["required"] = kept
        else:
            del out["required"]
    if "properties" in out:
        out["properties"] = {name: _without_null(sub) for name, sub in out["properties"].items()}
    return out


SUMMARY_SCHEMA = {
    "type": "string",
    "description": "the answer in a sentence or three (the text form starts with the same words)",
}
OMITTED_SCHEMA = {
    "type": "array",
    "items": {"type": "string"},
    "description": "present when the answer was cut to the host's size limit: what was left out, how to get it",
}


def wire_output_schema(output_schema: dict[str, Any]) -> dict[str, Any]:
    """The published ``outputSchema`` for a `ToolResult`'s JSON schema: ``summary`` first and required,
    ``omitted`` optional, no titles, and only never-empty fields required (`tpu_devops.host.results.prune`)."""
    wired = _wire_object(output_schema)
    properties = {"summary": SUMMARY_SCHEMA, **wired.get("properties", {}), "omitted": OMITTED_SCHEMA}
    out = {k: v for k, v in wired.items() if k not in ("properties", "required")}
    out["type"] = "object"
    out["properties"] = properties
    out["required"] = ["summary", *wired.get("required", [])]
    return out
