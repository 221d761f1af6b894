"""Parameter groups: arguments that travel together (an endpoint reference, a log query, a confirmation),
declared and described once and taken by every tool that needs them.

A tool names a group as one parameter (``endpoint: EndpointRef``); hosts see the group's fields as the
tool's own top-level arguments (MCP tool arguments are flat JSON objects, and hosts such as Gemini CLI and
Codex send nested objects poorly), and the tool body receives the group, validated, as one object. So a
field's description, bounds and rules (its type's validators, the group's model validators) live in one
place, the group's class, and a fix there covers every tool that takes it.

`flatten` turns a tool function with group parameters into one with the groups' fields as keyword
parameters (its ``__signature__``, which the MCP SDK reads to build the argument model) and rebuilds the
groups on each call. It runs when a tool is built (at its first call when the schemas come from the cache),
so declaring tools imports nothing more than the groups themselves.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo


class ParamGroup(BaseModel):
    """Base of a parameter group: its fields become top-level tool arguments (module docstring).

    Every field must carry a ``description`` (hosts show the model nothing else to choose by) and a
    default unless the group is always required. Subclasses may add validators: they run on every call of
    every tool that takes the group, after the argument checks of `tpu_devops.host.arguments`.
    """

    # Built at a tool's first call, not when the toolsets are declared (the start must stay near a bare server).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def values(self, *, exclude_none: bool = False) -> dict[str, Any]:
        """The fields as keyword arguments for a domain call (``None`` ones left out when asked)."""
        return {k: v for k, v in self if not (exclude_none and v is None)}


def _field_annotation(field: FieldInfo) -> Any:
    """``field`` as an ``Annotated`` parameter type without its default (the parameter carries that)."""
    metadata = [m for m in field.metadata]
    extra: dict[str, Any] = {}
    if field.description:
        extra["description"] = field.description
    if field.json_schema_extra is not None:
        extra["json_schema_extra"] = field.json_schema_extra
    if field.examples:
        extra["examples"] = field.examples
    return Annotated[(field.annotation, *metadata, Field(**extra))]


def group_parameters(fn: Callable[..., Any]) -> dict[str, type[ParamGroup]]:
    """The parameters of ``fn`` that are parameter groups, by parameter name (annotations evaluated)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    return {
        name: hint
        for name, hint in hints.items()
        if isinstance(hint, type) and issubclass(hint, ParamGroup) and name != "return"
    }


def flatten(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with each `ParamGroup` parameter replaced by the group's fields (module docstring).

    The returned function takes the fields as keyword arguments, validates each group (its validators
    run) and calls ``fn`` with the group objects. Its ``__signature__`` has every annotation evaluated.
    A function without groups is returned unchanged.

    Raises:
        TypeError: two groups (or a group and a plain parameter) declare the same argument name.
    """
    groups = group_parameters(fn)
    if not groups:
        return fn
    hints = typing.get_type_hints(fn, include_extras=True)
    signature = inspect.signature(fn)
    params: list[inspect.Parameter] = []
    members: dict[str, list[str]] = {}
    for name, param in signature.parameters.items():
        annotation = hints.get(name, param.annotation)
        if name not in groups:
            params.append(param.replace(annotation=annotation, kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        members[name] = []
        for field_name, field in groups[name].model_fields.items():
            default = (
                inspect.Parameter.empty
                if field.is_required()
                else field.get_default(call_default_factory=True)
            )
            params.append(
                inspect.Parameter(
                    field_name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=default,
                    annotation=_field_annotation(field),
                )
            )
            members[name].append(field_name)
    names = [p.name for p in params]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise TypeError(f"tool {fn.__name__}: argument(s) {', '.join(duplicated)} declared twice")
    # required ones first, as Python signatures need (keyword-only parameters may interleave, but keep order)
    params.sort(key=lambda p: p.default is not inspect.Parameter.empty)
    flat_signature = signature.replace(
        parameters=params, return_annotation=hints.get("return", signature.return_annotation)
    )

    def regroup(kwargs: dict[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        for name, fields in members.items():
            given = {f: out.pop(f) for f in fields if f in out}
            out[name] = groups[name].model_validate(given)
        return out

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def flat_async(**kwargs: Any) -> Any:
            return await fn(**regroup(kwargs))

        flat: Callable[..., Any] = flat_async
    else:

        @functools.wraps(fn)
        def flat_sync(**kwargs: Any) -> Any:
            return fn(**regroup(kwargs))

        flat = flat_sync
    flat.__signature__ = flat_signature  # type: ignore[attr-defined]
    flat.__annotations__ = {p.name: p.annotation for p in params} | {
        "return": flat_signature.return_annotation
    }
    return flat
