"""Published tool schemas (`tpu_devops.host.schemas`): compact, bounded, inside the schema subset Gemini function
declarations document, and output schemas that match what the structured form carries."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from tpu_devops.host.schemas import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_STRING,
    GEMINI_SCHEMA_KEYS,
    GEMINI_TYPES,
    input_schema,
    validation_schema,
    wire_output_schema,
)


def gemini_subset_problems(schema: Any, path: str = "$") -> list[str]:
    """Where ``schema`` leaves the Gemini function-declaration Schema subset (empty list: inside it)."""
    problems: list[str] = []
    if not isinstance(schema, dict):
        return [f"{path}: not an object"]
    for key, value in schema.items():
        if key not in GEMINI_SCHEMA_KEYS:
            problems.append(f"{path}: keyword {key!r} is outside the subset")
        elif key == "type" and value not in GEMINI_TYPES:
            problems.append(f"{path}: type {value!r}")
        elif key == "enum" and not all(isinstance(v, str) for v in value):
            problems.append(f"{path}: enum values must be strings")
        elif key == "properties":
            for name, sub in value.items():
                problems += gemini_subset_problems(sub, f"{path}.{name}")
        elif key == "items":
            problems += gemini_subset_problems(value, f"{path}[]")
        elif key == "anyOf":
            for i, sub in enumerate(value):
                problems += gemini_subset_problems(sub, f"{path}|{i}")
    return problems


class Inner(BaseModel):
    name: str
    size: int = Field(gt=0, le=10)


Args = create_model(
    "Args",
    zone=(Annotated[str | None, Field(description="zone")], None),
    mode=(Literal["a", "b"], "a"),
    count=(Annotated[int, Field(ge=1, le=5)], 1),
    prompt=(str, ...),
    zones=(list[str] | None, None),
    inner=(Inner | None, None),
    flags=(dict[str, Any] | None, None),
    __config__={"extra": "forbid"},
)


def test_input_schema_is_compact_bounded_and_inside_the_gemini_subset() -> None:
    schema = input_schema(Args.model_json_schema())
    props = schema["properties"]
    assert "title" not in schema and all("title" not in p for p in props.values())
    assert props["zone"] == {"type": "string", "description": "zone"}
    assert props["mode"] == {"type": "string", "enum": ["a", "b"], "default": "a"}
    assert "minLength" not in props["prompt"] and schema["required"] == ["prompt"]
    assert "maxItems" not in props["zones"]
    assert props["inner"]["properties"]["size"]["minimum"] == 0  # exclusive bound made inclusive for Gemini
    assert "$defs" not in schema and "$ref" not in str(schema)
    assert gemini_subset_problems(schema) == []


def test_validation_schema_keeps_what_gemini_cannot_take() -> None:
    schema = validation_schema(Args.model_json_schema())
    assert schema["additionalProperties"] is False
    assert schema["properties"]["zone"]["maxLength"] == DEFAULT_MAX_STRING  # checked, not published
    assert schema["properties"]["zones"]["maxItems"] == DEFAULT_MAX_ITEMS
    assert schema["properties"]["prompt"]["minLength"] == 1
    assert schema["properties"]["inner"]["properties"]["size"]["exclusiveMinimum"] == 0
    assert schema["properties"]["flags"]["additionalProperties"] is True


def test_subset_check_catches_what_gemini_rejects() -> None:
    bad = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/X"}, "b": {"type": "integer", "enum": [1]}},
    }
    assert len(gemini_subset_problems(bad)) == 2


def test_wire_output_schema_leads_with_summary_and_requires_only_never_empty_fields() -> None:
    class Out(BaseModel):
        name: str
        maybe: int | None
        rows: list[int]
        flag: bool = False

    schema = wire_output_schema(Out.model_json_schema())
    assert list(schema["properties"])[:1] == ["summary"] and "omitted" in schema["properties"]
    assert schema["required"] == ["summary", "name"]
    assert schema["properties"]["maybe"] == {"type": "integer"}
    assert "title" not in str(schema)


Stated = create_model(
    "Stated",
    limit=(Annotated[int, Field(ge=1, le=500, description="entries per page")], 50),
    share=(Annotated[float | None, Field(ge=0.1, le=0.99, description="HBM share")], None),
    ratio=(Annotated[float | None, Field(gt=0, description="a ratio")], None),
    offset=(Annotated[int | None, Field(ge=-5, le=5, description="an offset")], None),
    run=(Annotated[int | None, Field(ge=600, le=604_800, description="run time, 600 s-7 days (604800 s)")], None),
    line=(Annotated[str | None, Field(max_length=8_000, description="a serve line")], None),
    cells=(Annotated[list[Annotated[int, Field(ge=1, le=1024)]] | None, Field(max_length=16, description="clients")], None),
    view=(Annotated[Literal["a", "b"], Field(description="a or b (the first is cheaper)")], "a"),
    probe=(Annotated[bool, Field(description="also probe")], True),
    path=(Annotated[str, Field(description="file")], "x" * 60),
    bare=(Annotated[int, Field(ge=1, le=9)], 3),
    __config__={"extra": "forbid"},
)  # fmt: skip


def test_bounds_and_defaults_are_stated_in_the_description_where_every_host_sends_them() -> None:
    props = input_schema(Stated.model_json_schema())["properties"]
    said = {name: p.get("description") for name, p in props.items()}
    assert said["limit"] == "entries per page (1-500; default 50)"
    assert said["share"] == "HBM share (0.1-0.99)"
    assert said["ratio"] == "a ratio (> 0)"  # exclusive, as the check is (not the inclusive keyword)
    assert said["offset"] == "an offset (-5 to 5)"
    assert said["run"] == "run time, 600 s-7 days (604800 s)"  # already stated: not repeated
    assert said["line"] == "a serve line (<= 8000 chars)"
    assert said["cells"] == "clients (<= 16 items; each 1-1024)"
    assert said["view"] == "a or b (the first is cheaper); default a"
    assert said["probe"] == "also probe (default true)"
    # ...and the keywords a host may strip are gone, so no host reads a different schema
    for name in ("limit", "share", "ratio", "offset", "run", "line", "cells", "view", "probe"):
        assert not set(props[name]) & {"minimum", "maximum", "maxLength", "maxItems", "default"}, name
    assert props["cells"]["items"] == {"type": "integer"}
    assert props["view"]["enum"] == ["a", "b"]  # an enum is kept: hosts keep it
    # nothing to state it in, or too long to state: the keyword stays
    assert props["bare"] == {"type": "integer", "minimum": 1, "maximum": 9, "default": 3}
    assert props["path"]["default"] == "x" * 60 and props["path"]["description"] == "file"
    assert gemini_subset_problems(input_schema(Stated.model_json_schema())) == []


def test_bounds_stated_in_words_are_still_checked() -> None:
    checked = validation_schema(Stated.model_json_schema())["properties"]
    assert checked["limit"]["minimum"] == 1 and checked["limit"]["maximum"] == 500
    assert checked["ratio"]["exclusiveMinimum"] == 0
    assert checked["line"]["maxLength"] == 8_000 and checked["cells"]["maxItems"] == 16
    assert checked["cells"]["items"]["maximum"] == 1024
