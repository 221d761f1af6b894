"""The fuzz plan: malformed calls for every tool the server lists, built from its input schema.

Tools are enumerated from ``tools/list``, so a tool another change adds is fuzzed too. Per property the
plan sends values of the wrong JSON type, out-of-range and absurd numbers, empty / NUL / huge / hostile
strings (paths outside the allowed roots, devices, shell and template syntax, link-local URLs written
but never dialled: the audit's fakes are loopback only), and per tool an unknown key, every required
argument missing, and all properties wrong at once.
"""

from __future__ import annotations

from typing import Any

HUGE = "x" * 1_000_000  # the 1 MB model_name / command
STRINGS: tuple[Any, ...] = (
    123,
    True,
    [],
    {},
    "",
    "   ",
    "a\x00b",
    HUGE,
    "../../../../etc/passwd",
    "/dev/zero",
    "~/.ssh/id_rsa",
    "$(touch /tmp/pwned) `id` ${HOME} {0} %s {{7*7}}",
    "\u202eevil\u202c \U0001f600 \ufffd",
)
INTEGERS: tuple[Any, ...] = ("1", 1.5, True, -1, 0, 2**63, -(2**63), 10**300, [], None)
NUMBERS: tuple[Any, ...] = ("x", True, -1.0, 0.0, 1e308, -1e308, 1e-300, 10**400, [])
BOOLEANS: tuple[Any, ...] = (1, 0, "true", "yes", None, [])
ARRAYS: tuple[Any, ...] = ("x", {}, [None], [[[]]], list(range(100_000)), [HUGE])
OBJECTS: tuple[Any, ...] = (
    [],
    "x",
    1,
    {"a": {"b": {"c": {"d": {"e": {}}}}}},
    {f"k{i}": i for i in range(10_000)},
)


def _types(prop: dict[str, Any]) -> set[str]:
    kinds: set[str] = set()
    if "type" in prop:
        t = prop["type"]
        kinds.update(t if isinstance(t, list) else [t])
    for key in ("anyOf", "oneOf"):
        for sub in prop.get(key, []):
            kinds |= _types(sub)
    return kinds - {"null"}


def bad_values(prop: dict[str, Any]) -> list[Any]:
    """Malformed values for one property schema (wrong types first, then hostile values of its type)."""
    kinds = _types(prop) or {"string"}
    out: list[Any] = []
    for kind, values in (
        ("string", STRINGS),
        ("integer", INTEGERS),
        ("number", NUMBERS),
        ("boolean", BOOLEANS),
        ("array", ARRAYS),
        ("object", OBJECTS),
    ):
        if kind in kinds:
            out.extend(values)
    if "enum" in prop or any("enum" in s for s in prop.get("anyOf", [])):
        out.append("not-one-of-the-enum")
    if "maximum" in prop:
        out.append(prop["maximum"] + 1)
    if "minimum" in prop:
        out.append(prop["minimum"] - 1)
    if "maxLength" in prop:
        out.append("y" * (prop["maxLength"] + 1))
    return out


def plan(tools: list[Any], base_args: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """``(tool, arguments, what is wrong)`` for every listed tool. ``base_args``: a valid call per tool
    (the bundled inputs), so each malformed value is the only fault of its call."""
    calls: list[tuple[str, dict[str, Any], str]] = []
    for tool in tools:
        schema = tool.input_schema or {}
        props: dict[str, Any] = schema.get("properties") or {}
        required = list(schema.get("required") or [])
        base = dict(base_args.get(tool.name, {}))
        calls.append((tool.name, {**base, "zz_audit_unknown": 1}, "unknown key"))
        if required:
            calls.append((tool.name, {}, "required arguments missing"))
        everything: dict[str, Any] = {}
        for name, prop in props.items():
            values = bad_values(prop)
            for value in values:
                calls.append((tool.name, {**base, name: value}, f"{name}: {type(value).__name__}"))
            if values:
                everything[name] = values[0]
        if everything:
            calls.append((tool.name, everything, "every argument wrong"))
    return calls
