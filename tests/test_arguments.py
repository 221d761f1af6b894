"""Argument rules (`tpu_devops.host.arguments`): unknown keys, types without coercion, one rule for empty
strings, bounds, NUL, and errors that name field, expectation and fix without echoing secrets."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from pydantic import Field, create_model

from tpu_devops.errors import ConfigError, InputError
from tpu_devops.host.arguments import ArgumentChecker
from tpu_devops.host.schemas import validation_schema

Args = create_model(
    "Args",
    max_tokens=(Annotated[int, Field(ge=1, le=32_768, description="output cap in tokens")], 512),
    temperature=(Annotated[float | None, Field(ge=0, le=2)], None),
    zone=(str | None, None),
    token=(Annotated[str, Field(description="a Hugging Face read token")], ...),
    zones=(list[Annotated[int, Field(ge=1, le=9)]] | None, None),
    __config__={"extra": "forbid"},
)
CHECK = ArgumentChecker("demo_tool", validation_schema(Args.model_json_schema()))


def refused(args: dict) -> str:
    with pytest.raises(InputError) as raised:
        CHECK.check(args)
    return str(raised.value)


def test_good_arguments_pass_and_null_means_the_default() -> None:
    assert CHECK.check({"token": "hf_x", "zone": None, "max_tokens": 8}) == {"token": "hf_x", "max_tokens": 8}


@pytest.mark.parametrize(
    "args, must_say",
    [
        (
            {"token": "t", "max_tokns": 5},
            ["unknown argument max_tokns", "did you mean max_tokns -> max_tokens"],
        ),
        (
            {"token": "t", "max_tokens": True},
            ["max_tokens = True", "expected a whole number", "got a boolean"],
        ),
        ({"token": "t", "max_tokens": "5"}, ["expected a whole number", "got a string"]),
        ({"token": "t", "temperature": 1e-300 * 1e300 * 3}, ["temperature = 3.0", "between 0 and 2"]),
        ({"token": "t", "max_tokens": 10**12}, ["between 1 and 32,768"]),
        ({"token": "t", "zone": ""}, ["zone = ''", "is empty", "leave zone out"]),
        ({"token": "  "}, ["token", "is empty", "pass a non-empty token"]),
        ({"token": "t", "zone": "us\x00west"}, ["zone", "NUL"]),
        ({"token": "t", "zone": "x" * 5000}, ["zone", "5,000 characters", "at most 1,000"]),
        ({"token": "t", "zones": [1, 99]}, ["zones.1 = 99", "between 1 and 9"]),
        ({}, ["token", "is required", "a Hugging Face read token"]),
    ],
)
def test_each_refusal_names_the_field_the_expectation_and_the_fix(args: dict, must_say: list[str]) -> None:
    text = refused(args)
    for words in must_say:
        assert words in text, text
    assert "Fix:" in text


def test_a_secret_in_the_wrong_shape_is_never_echoed() -> None:
    secret = "hf_PlantedSecretTokenDoNotLeak4242abcd"
    for shape in ([secret], {"t": secret}, 42.5):
        text = refused({"token": shape})
        assert secret not in text and "PlantedSecret" not in text
        assert "token" in text and "expected a string" in text
    assert secret not in refused({"token": secret, "zone": secret * 100})


def test_several_faults_are_listed_together() -> None:
    text = refused({"token": "t", "max_tokens": 0, "temperature": 9})
    assert text.startswith("2 arguments of demo_tool are invalid")
    assert "max_tokens = 0" in text and "temperature = 9" in text


SHARED_BAD = {
    "zone": ["../../etc/passwd", "us-west4"],
    "zones": [["us-west4-a", "Europe"]],
    "since": ["yesterday"],
    "until": ["99999999d"],
    "queued_resource_id": ["Gemma_4"],
    "node": ["x; rm -rf /"],
    "provisioning_model": ["cheapest"],
}
SHARED_GOOD = {
    "zones": ["us-west4-a", "europe-west4-b"],
    "since": "6h",
    "until": "2026-08-07T23:00:00Z",
    "queued_resource_id": "gemma4-e2b",
    "node": "gemma4-e2b-node",
    "provisioning_model": "FLEX_START",
}


def _every_tool() -> dict[str, Any]:
    """Every tool of every toolset, built as the server builds it (argument model and checker)."""
    from server import TOOLSETS
    from tpu_devops.host.registration import build_tool

    return {
        name: build_tool(d.fn, name=name, title=None, description=d.description, annotations=d.annotations)
        for ts in TOOLSETS
        for name, d in ts.tools.items()
    }


def _validate(tool: Any, args: dict[str, Any]) -> None:
    """Both checks a call goes through before the body: the schema checker, then the argument model (the
    parameter groups' and argument types' own rules). Required text arguments not given are filled in."""
    required = tool.parameters.get("required", [])
    args = {**{name: "x" for name in required}, **args}
    checked = tool._checker.check(args)
    tool.fn_metadata.arg_model.model_validate(checked)


def test_an_argument_of_a_shared_form_is_refused_when_malformed_by_every_tool_that_takes_it() -> None:
    """The form of zone, since, ids and provisioning model is checked by every tool that takes it, with the
    argument named, the value shown and the fix: the rule lives on the argument's type, once."""
    seen = set()
    for name, tool in _every_tool().items():
        props = tool.parameters.get("properties", {})
        for arg, values in SHARED_BAD.items():
            if arg not in props:
                continue
            for value in values:
                with pytest.raises(ConfigError) as info:
                    _validate(tool, {arg: value})
                assert info.value.field == arg and info.value.fix, (name, arg, str(info.value))
                seen.add(arg)
    assert seen == set(SHARED_BAD)  # every shared form is taken by some tool


def test_well_formed_shared_arguments_pass_every_tool() -> None:
    for tool in _every_tool().values():
        props = tool.parameters.get("properties", {})
        args = {k: v for k, v in SHARED_GOOD.items() if k in props}
        if "zone" in props:
            args["zone"] = "us-west4-a"
        if "log" in props and "node" in args:
            args["log"] = "container"
        _validate(tool, args)  # raises on a refusal


def test_every_number_list_and_object_argument_is_bounded_where_it_is_checked() -> None:
    """Bounds are checked for every tool (published too unless they are sanity limits, `SANITY`)."""
    for name, tool in _every_tool().items():
        for arg, prop in tool._checker.properties.items():
            options = prop.get("anyOf", [prop])
            for option in options:
                kind = option.get("type")
                where = f"{name}.{arg}"
                if kind in ("integer", "number"):
                    assert "minimum" in option and "maximum" in option, (
                        f"{where}: declare Field(ge=..., le=...)"
                    )
                elif kind == "array":
                    assert "maxItems" in option, where
                    items = option.get("items", {})
                    if items.get("type") in ("integer", "number"):
                        assert "minimum" in items and "maximum" in items, where
                elif kind == "object":
                    assert "maxProperties" in option, f"{where}: bound it with Field(max_length=...)"


def test_every_published_bound_and_default_is_stated_in_words() -> None:
    """Codex CLI drops ``default``, ``minimum``/``maximum`` and length limits before its model sees a schema;
    every host sends the description. So a published argument carries no such keyword, and each bound that
    is checked and not a sanity limit (`tpu_devops.host.schemas.SANITY`) is written in its description."""
    from tpu_devops.host.schemas import SANITY, STATED_KEYS

    for name, tool in _every_tool().items():
        model = tool.fn_metadata.arg_model.model_json_schema()
        for arg, prop in tool.parameters.get("properties", {}).items():
            where = f"{name}.{arg}"
            assert not set(prop) & set(STATED_KEYS), f"{where}: {prop}"
            assert not set(prop.get("items", {})) & set(STATED_KEYS), f"{where}: {prop}"
            checked = tool._checker.properties[arg]
            raw = model["properties"][arg]
            if SANITY in json.dumps(raw):
                continue
            for option in checked.get("anyOf", [checked]):
                for key in ("minimum", "maximum"):
                    if key in option:
                        value = option[key]
                        number = str(int(value)) if float(value).is_integer() else str(value)
                        assert number in prop["description"], f"{where}: {key} {option[key]} not stated"
