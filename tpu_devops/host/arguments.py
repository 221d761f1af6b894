"""One set of rules for tool arguments, checked before any tool runs.

- An optional argument given as ``null`` means "not given": its default applies. A string argument given
  as ``""`` or only blanks is refused, required or not (leave an optional one out instead): an empty
  value is more often a mistake than a wish for the default, and a tool must not silently do something
  else than asked (e.g. read Cloud Logging when the path is empty).
- Arguments are checked against the tool's validation schema (`tpu_devops.host.schemas.validation_schema`)
  with jsonschema: unknown keys are refused, ``true`` is not a number, numbers and strings stay inside
  their declared bounds, lists inside their item counts.
- No string may contain a NUL character (operating-system calls refuse it with a bare ``ValueError``).
- What an argument means (a zone, a resource id, a time) is checked by its type where the toolsets declare
  it (`tpu_devops.tools.args`), after these checks; this module knows no domain rule.

Every refusal names the argument, what was expected and the fix. A rejected value is echoed only when
it is a number, a boolean or a short string of an argument that is not a secret; otherwise only its
kind is named ("a list"), so a secret passed in the wrong shape never comes back.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tpu_devops.errors import InputError

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError as SchemaError

# Argument names whose values are secrets (never echoed).
_SECRET_NAME = re.compile(r"token|key|secret|password|credential", re.I)
ECHO_MAX = 40  # characters of a rejected string value shown back

_JSON_KIND = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def kind_of(value: Any) -> str:
    """The JSON kind of ``value`` in words ("a string", "true or false", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def shown(name: str, value: Any) -> Any:
    """``value`` as an error may echo it: numbers and booleans as they are, short strings of non-secret
    arguments, else None (the message then names only the kind)."""
    if isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, str) and not _SECRET_NAME.search(name) and len(value) <= ECHO_MAX:
        return value
    return None


def normalize(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` without optional ones given as ``null`` (their defaults apply)."""
    required = set(schema.get("required", []))
    return {name: value for name, value in arguments.items() if value is not None or name in required}


def _find_nul(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path if "\x00" in value else None
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        found = _find_nul(v, f"{path}.{k}" if isinstance(k, str) else f"{path}[{k}]")
        if found:
            return found
    return None


class ArgumentChecker:
    """Checks one tool's arguments against its validation schema (compiled once).

    Args:
        tool: the tool's name (for messages).
        schema: `tpu_devops.host.schemas.validation_schema` of its argument model.
    """

    def __init__(self, tool: str, schema: dict[str, Any]) -> None:
        self.tool = tool
        self.schema = schema
        self.properties: dict[str, Any] = schema.get("properties", {})
        from jsonschema import Draft202012Validator  # built at a tool's first call, not at startup

        self._validator = Draft202012Validator(schema)

    def check(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The normalized arguments (see `normalize`).

        Raises:
            InputError: the first argument at fault (field, what was expected, the fix); several faults
                are listed in one message.
        """
        args = normalize(arguments, self.schema)
        problems: list[InputError] = []
        unknown = sorted(set(args) - set(self.properties))
        if unknown:
            problems.append(self._unknown(unknown))
        for name in sorted(args):
            value = args[name]
            if name in self.properties and isinstance(value, str) and not value.strip():
                optional = name not in self.schema.get("required", [])
                problems.append(
                    InputError(
                        "is empty",
                        field=name,
                        value=value,
                        fix=f"leave {name} out to use its default, or pass a value"
                        if optional
                        else f"pass a non-empty {name}",
                    )
                )
            elif name in self.properties and (at := _find_nul(value, name)):
                problems.append(
                    InputError(
                        "contains a NUL character (\\x00), which no path, id or text argument may hold",
                        field=at,
                        fix=f"send {name} without the NUL character",
                    )
                )
        if not problems:
            errors = sorted(self._validator.iter_errors(args), key=lambda e: list(e.absolute_path))
            problems = [self._explain(e, args) for e in errors if e.validator != "additionalProperties"]
        if problems:
            raise combine(self.tool, problems)
        return args

    def _unknown(self, unknown: list[str]) -> InputError:
        names = list(self.properties)
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, names, n=1)
            if close:
                hints.append(f"{key} -> {close[0]}?")
        accepted = ", ".join(names) or "none (call it with {})"
        fix = f"use only the arguments {self.tool} takes: {accepted}"
        if hints:
            fix += f" (did you mean {'; '.join(hints)})"
        return InputError(f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}", fix=fix)

    def _explain(self, error: SchemaError, args: dict[str, Any]) -> InputError:
        path = [str(p) for p in error.absolute_path]
        name = path[0] if path else ""
        field = ".".join(path) if path else None
        prop = self.properties.get(name, {})
        value = error.instance
        echo = shown(name, value)
        schema = error.schema if isinstance(error.schema, dict) else prop
        expected = _expected(schema)
        about = f" ({prop['description']})" if prop.get("description") else ""
        v = error.validator
        if v == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            missing_name = missing[0] if missing else name
            desc = self.properties.get(missing_name, {}).get("description", "")
            return InputError(
                "is required",
                field=missing_name,
                fix=f"pass {missing_name} ({_expected(self.properties.get(missing_name, {}))})"
                + (f": {desc}" if desc else ""),
            )
        if v == "type":
            return InputError(
                f"expected {expected}, got {kind_of(value)}",
                field=field,
                value=echo,
                fix=f"pass {field} as {expected}{about}",
            )
        if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            return InputError(
                f"out of range ({_range(schema)})",
                field=field,
                value=echo,
                fix=f"use a value {_range(schema)}",
            )
        if v in ("maxLength", "minLength"):
            size = len(value) if isinstance(value, str) else 0
            if v == "minLength":
                return InputError("is empty", field=field, fix=f"pass a non-empty {field}")
            return InputError(
                f"is {size:,} characters long; at most {error.validator_value:,} are accepted",
                field=field,
                fix=f"send a shorter {field} (at most {error.validator_value:,} characters)",
            )
        if v in ("maxItems", "minItems"):
            count = len(value) if isinstance(value, list) else 0
            bound = "at most" if v == "maxItems" else "at least"
            return InputError(
                f"has {count} items; {bound} {error.validator_value} are accepted",
                field=field,
                fix=f"send {bound} {error.validator_value} items in {field}",
            )
        if v == "enum" and isinstance(error.validator_value, list):
            options = ", ".join(str(o) for o in error.validator_value)
            return InputError(
                f"is not one of {options}", field=field, value=echo, fix=f"use one of {options}"
            )
        if v == "pattern":
            return InputError(
                "does not have the expected form",
                field=field,
                value=echo,
                fix=f"write {field} to match {error.validator_value}{about}",
            )
        return InputError(
            f"is not valid ({v})", field=field, value=echo, fix=f"pass {field} as {expected}{about}"
        )


def _expected(schema: dict[str, Any]) -> str:
    options = schema.get("anyOf")
    if options:
        return " or ".join(_expected(o) for o in options)
    kind = schema.get("type")
    words = _JSON_KIND.get(kind, "a value") if isinstance(kind, str) else "a value"
    if kind == "array" and isinstance(schema.get("items"), dict) and schema["items"].get("type"):
        words = f"a list of {_plural(_JSON_KIND.get(schema['items']['type'], 'values'))}"
    if "enum" in schema:
        words = "one of " + ", ".join(json.dumps(o) for o in schema["enum"])
    bounds = _range(schema)
    return f"{words} {bounds}" if bounds else words


def _plural(words: str) -> str:
    return {
        "a string": "strings",
        "a whole number": "whole numbers",
        "a number": "numbers",
        "true or false": "booleans",
        "an object": "objects",
        "a list": "lists",
    }.get(words, words)


def _range(schema: dict[str, Any]) -> str:
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    lo_op = ">" if "exclusiveMinimum" in schema else ">="
    hi_op = "<" if "exclusiveMaximum" in schema else "<="
    if lo is not None and hi is not None:
        if lo_op == ">" or hi_op == "<":
            return f"{lo_op} {_num(lo)} and {hi_op} {_num(hi)}"
        return f"between {_num(lo)} and {_num(hi)}"
    if lo is not None:
        return f"{lo_op} {_num(lo)}"
    if hi is not None:
        return f"{hi_op} {_num(hi)}"
    return ""


def _num(x: float) -> str:
    """1048576 -> 1,048,576; 0.01 -> 0.01 (no exponent in a bound people type back)."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.6g}"


def combine(tool: str, problems: list[InputError]) -> InputError:
    """One `InputError` for one or several faults (several: one line each, each with its own fix)."""
    if len(problems) == 1:
        return problems[0]
    lines = "\n".join(f"- {p}" for p in problems)
    return InputError(f"{len(problems)} arguments of {tool} are invalid:\n{lines}")


def from_pydantic(tool: str, exc: ValidationError) -> InputError:
    """An `InputError` for a pydantic ``ValidationError`` on the arguments (a fault the schema check did
    not catch): the field, pydantic's message without the rejected value, and the fix."""
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        field = ".".join(str(p) for p in err.get("loc", ())) or None
        problems.append(
            InputError(
                err.get("msg", "is invalid"),
                field=field,
                fix=f"correct {field or 'the arguments'} as the message says (get_help lists every argument)",
            )
        )
    return combine(tool, problems or [InputError("invalid arguments", fix="see get_help")])
