"""A discovery-format document derived from a Google client library's own protos and HTTP bindings.

For an API whose published discovery document is not in google-api-python-client's bundled cache
(Cloud Quotas v1 in 2.202.0), this builds the same shape from what Google ships in the GAPIC library
the product uses: each RPC's ``google.api.http`` bindings (the REST transport's ``_get_http_options``)
and the request messages' descriptors (JSON names, scalar types, enums, well-known types). It is the
API definition the discovery document is itself generated from, so the validator can hold the fake to
it; the document records the library version as its ``revision``.

Mapping (proto3 JSON, https://protobuf.dev/programming-guides/json/): 64-bit integers are strings of
format ``int64`` / ``uint64``; ``Timestamp`` is ``google-datetime``, ``Duration`` ``google-duration``,
``FieldMask`` ``google-fieldmask``; ``Struct`` an object of anything, ``Value`` anything; maps are
objects with ``additionalProperties``; wrappers are their scalar.
"""

from __future__ import annotations

import importlib
import re
from importlib.metadata import version as dist_version
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_SCALARS: dict[int, dict[str, str]] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number", "format": "double"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number", "format": "float"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "format": "uint32"},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "format": "uint32"},
    FieldDescriptor.TYPE_INT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SINT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SFIXED64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_UINT64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_FIXED64: {"type": "string", "format": "uint64"},
}
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "google-datetime"},
    "google.protobuf.Duration": {"type": "string", "format": "google-duration"},
    "google.protobuf.FieldMask": {"type": "string", "format": "google-fieldmask"},
    "google.protobuf.Struct": {"type": "object", "additionalProperties": {"type": "any"}},
    "google.protobuf.Value": {"type": "any"},
    "google.protobuf.ListValue": {"type": "array", "items": {"type": "any"}},
    "google.protobuf.Empty": {"type": "object", "properties": {}},
    "google.protobuf.StringValue": {"type": "string"},
    "google.protobuf.BytesValue": {"type": "string", "format": "byte"},
    "google.protobuf.BoolValue": {"type": "boolean"},
    "google.protobuf.DoubleValue": {"type": "number", "format": "double"},
    "google.protobuf.FloatValue": {"type": "number", "format": "float"},
    "google.protobuf.Int32Value": {"type": "integer", "format": "int32"},
    "google.protobuf.UInt32Value": {"type": "integer", "format": "uint32"},
    "google.protobuf.Int64Value": {"type": "string", "format": "int64"},
    "google.protobuf.UInt64Value": {"type": "string", "format": "uint64"},
}


def _field_schema(field: FieldDescriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    if field.type == FieldDescriptor.TYPE_ENUM:
        one: dict[str, Any] = {"type": "string", "enum": [v.name for v in field.enum_type.values]}
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        msg = field.message_type
        if msg.GetOptions().map_entry:
            return {
                "type": "object",
                "additionalProperties": _field_schema(msg.fields_by_name["value"], schemas),
            }
        one = dict(_WELL_KNOWN.get(msg.full_name) or {"$ref": _message_schema(msg, schemas)})
    else:
        one = dict(_SCALARS[field.type])
    if field.is_repeated:
        return {"type": "array", "items": one}
    return one


def _message_schema(msg: Descriptor, schemas: dict[str, Any]) -> str:
    """Add ``msg`` (and what it refers to) to ``schemas``; returns its schema id (the message name)."""
    name = msg.name
    if name not in schemas:
        schemas[name] = {"id": name, "type": "object", "properties": {}}
        schemas[name]["properties"] = {f.json_name: _field_schema(f, schemas) for f in msg.fields}
    return name


def _template(uri: str) -> tuple[str, str, dict[str, str]]:
    """``/v1/{parent=projects/*/locations/*}/x`` -> (``v1/{+parent}/x``, flat path, {param: pattern})."""
    params: dict[str, str] = {}
    flat_parts: list[str] = []

    def path_var(m: re.Match[str]) -> str:
        name, pattern = m.group(1), m.group(2) or "*"
        segments = pattern.split("/")
        regex = "/".join("[^/]+" if s == "*" else (".*" if s == "**" else re.escape(s)) for s in segments)
        params[name] = f"^{regex}$"
        if m.group(2) is None:
            flat_parts.append("{" + name + "}")
            return "{" + name + "}"
        flat: list[str] = []
        for seg in segments:
            if seg == "*":
                flat.append("{" + (flat[-1] if flat else name) + "Id}")
            elif seg == "**":
                flat.append("{+" + name + "}")
            else:
                flat.append(seg)
        flat_parts.append("/".join(flat))
        return "{+" + name + "}"

    path = re.sub(r"\{([a-z_.]+)(?:=([^}]+))?\}", path_var, uri.lstrip("/"))
    flat_iter = iter(flat_parts)
    flat_path = re.sub(r"\{\+?[a-z_.]+\}", lambda _: next(flat_iter), path)
    return path, flat_path, params


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def derive(
    api: str, version: str, distribution: str, types_module: str, rest_base: str, base_class: str
) -> dict[str, Any]:
    """A discovery document for ``api`` ``version`` from the installed GAPIC library ``distribution``.

    ``types_module`` holds the request messages (``<Rpc>Request``); ``rest_base`` the REST transport
    base with one nested ``_Base<Rpc>`` class per RPC exposing ``_get_http_options()``.
    """
    types = importlib.import_module(types_module)
    base = getattr(importlib.import_module(rest_base), base_class)
    schemas: dict[str, Any] = {}
    methods: dict[str, Any] = {}
    for attr in sorted(vars(base)):
        rpc = attr.removeprefix("_Base")
        options = getattr(getattr(base, attr), "_get_http_options", None)
        request_cls = getattr(types, f"{rpc}Request", None)
        if not attr.startswith("_Base") or options is None or request_cls is None:
            continue
        request = request_cls.pb().DESCRIPTOR
        for n, binding in enumerate(options()):
            path, flat_path, path_params = _template(binding["uri"])
            body_field = binding.get("body")
            params: dict[str, Any] = {
                name: {"location": "path", "type": "string", "required": True, "pattern": pattern}
                for name, pattern in path_params.items()
            }
            for field in request.fields:
                if field.name in path_params or field.name == body_field or body_field == "*":
                    continue
                if (
                    field.type == FieldDescriptor.TYPE_MESSAGE
                    and field.message_type.full_name not in _WELL_KNOWN
                ):
                    continue  # nested messages are not bound to query parameters here
                schema = _field_schema(field, schemas)
                param = {
                    "location": "query",
                    **(schema.get("items", schema) if "items" in schema else schema),
                }
                if "items" in schema:
                    param["repeated"] = True
                params[field.json_name] = param
            method: dict[str, Any] = {
                "id": f"{api}.{rpc}.{n}",
                "httpMethod": binding["method"].upper(),
                "path": path,
                "flatPath": flat_path,
                "parameters": params,
            }
            if body_field == "*":
                method["request"] = {"$ref": _message_schema(request, schemas)}
            elif body_field:
                method["request"] = {
                    "$ref": _message_schema(request.fields_by_name[body_field].message_type, schemas)
                }
            methods[f"{_camel(rpc)}{n}"] = method
    return {
        "kind": "discovery#restDescription",
        "name": api,
        "version": version,
        "revision": f"derived from {distribution} {dist_version(distribution)}",
        "servicePath": "",
        "parameters": {},
        "schemas": schemas,
        "resources": {"derived": {"methods": methods}},
    }
