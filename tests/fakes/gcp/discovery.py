"""Every request to the fake Google APIs is checked against Google's published discovery documents.

`DiscoveryValidator` is ASGI middleware in front of every fake surface (`FakeGcp` installs it), so a
surface added later (Compute, Cloud Storage, ...) is validated with no code of its own. For each request
it finds the discovery method by HTTP method and path (``servicePath`` + ``flatPath`` / ``path``, media
upload paths too) across all loaded documents, and checks:

- the path parameters against their ``pattern``;
- the query: every name is a parameter of the method or one of Google's system parameters (``alt``,
  ``fields``, ``key``, ``prettyPrint``, ``quotaUser``, ``$.xgafv``, ... and their ``$``-prefixed forms,
  as Google's client libraries send ``$alt=json;enum-encoding=int``), required ones are present, values
  have the parameter's type / format / enum, and only ``repeated`` ones repeat;
- the JSON body against the method's request schema, recursively through ``$ref``: unknown fields,
  types, enum values, 64-bit integers as strings, ``google-duration`` / ``google-datetime`` /
  ``google-fieldmask`` / ``byte`` formats.

Rejections answer ``400 INVALID_ARGUMENT`` in Google's error JSON shape with Google's wording
(``Invalid JSON payload received. Unknown name "x" at 'queued_resource.tpu': Cannot find field.``,
``Invalid value at 'a.b' (TYPE_ENUM), "X"``) and a ``google.rpc.BadRequest`` detail listing each field
violation; a path or method no document defines answers ``404 NOT_FOUND``, as Google's front end does.

Proto3 JSON rules that real clients rely on are accepted (https://protobuf.dev/programming-guides/json/):
a field may be named by its JSON name or its proto (snake_case) name, enums may be sent as their numbers
(``enum-encoding=int``), 64-bit and 32-bit integers as numbers or strings, ``null`` for any field.

Documents (`DOCUMENTS`): google-api-python-client's bundled discovery cache; Cloud Quotas v1 is not in
that cache (2.202.0), so it is derived from google-cloud-quotas' own protos (`gapic_discovery`). The
revision of each is recorded in tests/fakes/gcp/README.md and checked by tests/test_fake_discovery.py.
When two documents define the same path (``v2/projects/{p}/locations`` is both TPU's and Logging's),
the request passes if any of them accepts it.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

# (api, version) in google-api-python-client's discovery cache: every surface the product talks to,
# plus Cloud Storage and GKE for the surfaces other issues add.
BUNDLED: tuple[tuple[str, str], ...] = (
    ("tpu", "v2"),
    ("tpu", "v2alpha1"),
    ("secretmanager", "v1"),
    ("logging", "v2"),
    ("cloudbilling", "v1"),
    ("compute", "v1"),
    ("storage", "v1"),
    ("container", "v1"),
)
# (api, version) derived from a GAPIC library because the cache lacks them: gapic_discovery.derive args.
DERIVED: dict[tuple[str, str], tuple[str, str, str, str]] = {
    ("cloudquotas", "v1"): (
        "google-cloud-quotas",
        "google.cloud.cloudquotas_v1.types",
        "google.cloud.cloudquotas_v1.services.cloud_quotas.transports.rest_base",
        "_BaseCloudQuotasRestTransport",
    ),
}
DOCUMENTS: tuple[tuple[str, str], ...] = BUNDLED + tuple(DERIVED)

# Google's system parameters (every discovery document's top-level ``parameters``); a client may also
# send them with a ``$`` prefix (the REST transports of google-cloud-* libraries send ``$alt``).
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")
_INT = re.compile(r"^-?\d+$")
_UINT = re.compile(r"^\d+$")
_BOOL_TEXT = {"true": True, "false": False}


def cache_dir() -> Path:
    """google-api-python-client's bundled discovery documents.

    Raises:
        ModuleNotFoundError: the dev extra is not installed (run ``make setup``).
    """
    try:
        import googleapiclient
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "the fake Google APIs validate requests against google-api-python-client's discovery documents: "
            "run `make setup` (it installs the dev extra)",
            name=exc.name,
        ) from None

    return Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@functools.cache
def load(api: str, version: str) -> dict[str, Any]:
    """One discovery document (bundled, or derived for `DERIVED`). Raises FileNotFoundError if absent."""
    if (api, version) in DERIVED:
        from tests.fakes.gcp.gapic_discovery import derive

        return derive(api, version, *DERIVED[(api, version)])
    return json.loads((cache_dir() / f"{api}.{version}.json").read_text())


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


# ---- matching a request to a discovery method ------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """One discovery method reachable at one path template."""

    doc: dict[str, Any] = field(repr=False, hash=False, compare=False)
    api: str
    method_id: str
    http_method: str
    regex: re.Pattern[str]
    literal_chars: int
    path_regex: re.Pattern[str] | None
    spec: dict[str, Any] = field(repr=False, hash=False, compare=False)
    media_upload: bool = False


def _template_regex(template: str, *, reserved_multi: bool) -> tuple[re.Pattern[str], int, list[str]]:
    names: list[str] = []
    out, literal, pos = "", 0, 0
    for m in re.finditer(r"\{(\+?)([^}]+)\}", template):
        text = template[pos : m.start()]
        out += re.escape(text)
        literal += len(text)
        names.append(m.group(2))
        out += "(.+)" if (m.group(1) and reserved_multi) else "([^/]+)"
        pos = m.end()
    out += re.escape(template[pos:])
    literal += len(template) - pos
    return re.compile(f"^{out}$"), literal, names


def _walk_methods(resources: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for res in resources.values():
        out.extend(res.get("methods", {}).values())
        out.extend(_walk_methods(res.get("resources", {})))
    return out


@functools.cache
def _methods() -> tuple[Method, ...]:
    out: list[Method] = []
    for api, version in DOCUMENTS:
        doc = load(api, version)
        base = "/" + doc.get("servicePath", "")
        for spec in _walk_methods(doc.get("resources", {})):
            path_regex, _, _ = _template_regex(base + spec["path"], reserved_multi=True)
            templates = [(base + (spec.get("flatPath") or spec["path"]), False)]
            for proto in (spec.get("mediaUpload", {}).get("protocols") or {}).values():
                templates.append(
                    (proto["path"] if proto["path"].startswith("/") else base + proto["path"], True)
                )
            for template, media in templates:
                regex, literal, _ = _template_regex(template, reserved_multi=True)
                out.append(
                    Method(
                        doc,
                        api,
                        spec["id"],
                        spec["httpMethod"],
                        regex,
                        literal,
                        None if media else path_regex,
                        spec,
                        media,
                    )  # fmt: skip
                )
    return tuple(out)


def candidates(http_method: str, raw_path: str) -> tuple[list[Method], bool]:
    """(methods matching ``raw_path`` with ``http_method``, most literal first; whether the path exists
    for some other HTTP method)."""
    on_path = [m for m in _methods() if m.regex.match(raw_path)]
    same = [m for m in on_path if m.http_method == http_method]
    same.sort(key=lambda m: -m.literal_chars)
    return same, bool(on_path)


# ---- validation --------------------------------------------------------------------------------


@dataclass
class Violation:
    """One field violation: ``field`` in Google's snake_case dotted form, ``description`` its message."""

    field: str
    description: str


def _type_label(schema: dict[str, Any]) -> str:
    fmt, typ = schema.get("format"), schema.get("type")
    if "enum" in schema:
        return "TYPE_ENUM"
    if fmt in ("int64", "uint64", "int32", "uint32", "double", "float"):
        return f"TYPE_{fmt.upper()}"
    return {
        "boolean": "TYPE_BOOL",
        "string": "TYPE_STRING",
        "integer": "TYPE_INT32",
        "number": "TYPE_DOUBLE",
    }.get(typ or "", "TYPE_MESSAGE")


def _scalar_error(value: Any, schema: dict[str, Any], where: str, json_name: str) -> str | None:
    """Google's message for a scalar ``value`` that does not fit ``schema``, or None when it fits."""
    typ, fmt = schema.get("type"), schema.get("format")
    shown = json.dumps(value) if not isinstance(value, str) else f'"{value}"'
    bad = f"Invalid value at '{where}' ({_type_label(schema)}), {shown}"
    if typ == "any":
        return None
    if "enum" in schema:
        if isinstance(value, bool) or not isinstance(value, str | int):
            return bad
        return None if (isinstance(value, int) or value in schema["enum"]) else bad
    if typ == "boolean":
        return None if isinstance(value, bool) else bad
    if typ == "integer" or fmt in ("int64", "uint64", "int32", "uint32"):
        if isinstance(value, bool):
            return bad
        if isinstance(value, int):
            return None if (value >= 0 or fmt not in ("uint64", "uint32")) else bad
        if isinstance(value, float) and value.is_integer():
            return None
        pattern = _UINT if fmt in ("uint64", "uint32") else _INT
        return None if (isinstance(value, str) and pattern.match(value)) else bad
    if typ == "number":
        if isinstance(value, bool):
            return bad
        if isinstance(value, int | float):
            return None
        if isinstance(value, str):
            try:
                float(value)
                return None
            except ValueError:
                return bad
        return bad
    if typ == "string":
        if not isinstance(value, str):
            return bad
        if fmt == "google-duration" and not _DURATION.match(value):
            return (
                f"Invalid value at '{where}' (type.googleapis.com/google.protobuf.Duration), "
                f"Field '{json_name}', Illegal duration format; duration must end with 's'"
            )
        if fmt == "google-datetime" and not _DATETIME.match(value):
            return (
                f"Invalid value at '{where}' (type.googleapis.com/google.protobuf.Timestamp), "
                f"Field '{json_name}', Invalid time format: Failed to parse input"
            )
        if fmt == "byte":
            padded = value + "=" * (-len(value) % 4)
            try:
                base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
            except ValueError:
                return bad
        return None
    return None


class BodyChecker:
    """Validates a JSON value against a discovery schema of one document."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.schemas: dict[str, Any] = doc.get("schemas", {})
        self.violations: list[Violation] = []

    def check(self, value: Any, schema: dict[str, Any], where: str, json_name: str) -> None:
        if value is None:
            return  # proto3 JSON: null means the default
        if "$ref" in schema:
            schema = self.schemas.get(schema["$ref"], {"type": "any"})
        typ = schema.get("type")
        if typ == "array":
            if not isinstance(value, list):
                self._bad(
                    where,
                    f"Invalid value at '{where}' ({_type_label(schema.get('items', {}))}), {json.dumps(value)}",
                )
                return
            for i, item in enumerate(value):
                self.check(item, schema.get("items", {"type": "any"}), f"{where}[{i}]", json_name)
            return
        if typ == "object":
            if not isinstance(value, dict):
                name = schema.get("id", "object")
                self._bad(
                    where, f"Invalid value at '{where}' (type.googleapis.com/{name}), {json.dumps(value)}"
                )
                return
            props = schema.get("properties")
            extra = schema.get("additionalProperties")
            if props is None and extra is not None:
                for key, item in value.items():
                    self.check(item, extra, f"{where}[{key}]", key)
                return
            by_name = dict(props or {})
            by_name.update({_snake(k): v for k, v in (props or {}).items() if _snake(k) not in by_name})
            for key, item in value.items():
                if key not in by_name:
                    self._bad(
                        f"{where}.{key}",
                        f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field.",
                    )
                    continue
                self.check(item, by_name[key], f"{where}.{_snake(key)}", key)
            return
        if (message := _scalar_error(value, schema, where, json_name)) is not None:
            self._bad(where, message)

    def _bad(self, where: str, description: str) -> None:
        self.violations.append(Violation(where, description))


def _query_param_schemas(doc: dict[str, Any], spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    allowed: dict[str, dict[str, Any]] = {}
    system = dict(load("tpu", "v2").get("parameters", {}))  # Google's standard set, as every document has
    system.update(doc.get("parameters", {}))
    for name, param in system.items():
        allowed[name] = param
        allowed["$" + name.lstrip("$")] = param
    for name, param in spec.get("parameters", {}).items():
        if param.get("location") == "query":
            allowed[name] = param
            allowed.setdefault(_snake(name), param)
    return allowed


def _check_query(method: Method, pairs: list[tuple[str, str]]) -> list[Violation]:
    allowed = _query_param_schemas(method.doc, method.spec)
    out: list[Violation] = []
    seen: dict[str, int] = {}
    for name, value in pairs:
        param = allowed.get(name)
        if param is None and "." in name:
            continue  # a nested message field bound to the query (``a.b=``): not described by discovery
        if param is None:
            out.append(
                Violation(
                    name,
                    f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query parameter. '
                    f"Field '{name}' could not be found in request message.",
                )
            )
            continue
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1 and not param.get("repeated"):
            out.append(
                Violation(
                    name,
                    f"Invalid value at '{_snake(name.lstrip('$'))}': repeated, but the field is not repeated",
                )
            )
        if name.lstrip("$") == "alt":
            fmt = value.split(";", 1)[0]
            extras = value.split(";")[1:]
            if fmt not in (param.get("enum") or ["json", "media", "proto"]) or any(
                e not in ("enum-encoding=int",) for e in extras
            ):
                out.append(Violation(name, f"Invalid value at 'alt', \"{value}\""))
            continue
        typed: Any = value
        if param.get("type") == "boolean":
            typed = _BOOL_TEXT.get(value.lower(), value)
        elif param.get("type") == "integer":
            typed = int(value) if _INT.match(value) else value
        message = _scalar_error(typed, param, _snake(name.lstrip("$")), name)
        if message is not None:
            out.append(Violation(name, message))
    for name, param in method.spec.get("parameters", {}).items():
        if (
            param.get("location") == "query"
            and param.get("required")
            and name not in seen
            and _snake(name) not in seen
        ):
            out.append(Violation(name, f"Missing required parameter '{name}'."))
    return out


def _check_path(method: Method, raw_path: str) -> list[Violation] | None:
    """Path parameter violations, or None when the ``path`` template itself does not fit."""
    if method.path_regex is None:
        return []
    m = method.path_regex.match(raw_path)
    if m is None:
        return None
    names = re.findall(r"\{\+?([^}]+)\}", method.spec["path"])
    out: list[Violation] = []
    for name, raw in zip(names, m.groups(), strict=False):
        param = method.spec.get("parameters", {}).get(name, {})
        value = unquote(raw)
        if not value:
            out.append(Violation(name, f"Missing required parameter '{name}'."))
        elif (pattern := param.get("pattern")) and not re.match(pattern, value):
            return None  # another method's resource path: not this method
    return out


def _check_body(method: Method, body: bytes, content_type: str) -> list[Violation]:
    if method.media_upload or not body.strip():
        return []
    if "json" not in content_type and content_type:
        return []  # multipart / media uploads are not JSON bodies
    try:
        value = json.loads(body)
    except ValueError:
        return [Violation("", "Invalid JSON payload received. Unexpected token.")]
    request = method.spec.get("request")
    if request is None:
        return [
            Violation("", "Invalid JSON payload received. Unknown name: this method takes no request body.")
        ]
    # Google names body fields from the request's body field, e.g. ``queued_resource.tpu.node_spec[0]``.
    root = _snake(request.get("$ref", "")) or "body"
    checker = BodyChecker(method.doc)
    checker.check(value, request, root, root)
    return checker.violations


@dataclass
class Verdict:
    """The outcome for one request: ``status`` 0 (accepted), 400 or 404; the matched method ids."""

    status: int
    method_ids: list[str]
    violations: list[Violation]

    def error_body(self, path: str) -> dict[str, Any]:
        """Google's error JSON for a rejection."""
        if self.status == 404:
            return {
                "error": {
                    "code": 404,
                    "message": f"The requested URL {path} was not found on this server.",
                    "status": "NOT_FOUND",
                    "details": [],
                }
            }
        return {
            "error": {
                "code": 400,
                "message": "\n".join(v.description for v in self.violations),
                "status": "INVALID_ARGUMENT",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.BadRequest",
                        "fieldViolations": [
                            {"field": v.field, "description": v.description} for v in self.violations
                        ],
                    }
                ],
            }
        }


def validate(http_method: str, raw_path: str, query: str, body: bytes, content_type: str = "") -> Verdict:
    """Check one request against every loaded discovery document (see the module docstring)."""
    methods, path_known = candidates(http_method, raw_path)
    pairs = parse_qsl(query, keep_blank_values=True)
    best: Verdict | None = None
    for method in methods:
        path_violations = _check_path(method, raw_path)
        if path_violations is None:
            continue
        violations = path_violations + _check_query(method, pairs) + _check_body(method, body, content_type)
        verdict = Verdict(400 if violations else 0, [method.method_id], violations)
        if not violations:
            return verdict
        if best is None or len(violations) < len(best.violations):
            best = verdict
    if best is not None:
        return best
    return Verdict(
        404, [], [Violation("", "no discovery method for this path" + (" and method" if path_known else ""))]
    )


class DiscoveryValidator:
    """ASGI middleware: validate each HTTP request (`validate`) before the wrapped app sees it.

    ``rejections`` keeps every refused request (method, path, query, status, the error JSON) and
    ``accepted`` the discovery method id of every accepted one, so tests can assert on both.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.rejections: list[dict[str, Any]] = []
        self.accepted: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        raw_path = scope.get("raw_path", scope["path"].encode()).decode("latin-1").split("?", 1)[0]
        query = scope.get("query_string", b"").decode("latin-1")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        verdict = validate(scope["method"], raw_path, query, body, headers.get("content-type", ""))
        if verdict.status:
            payload = verdict.error_body(raw_path)
            self.rejections.append(
                {
                    "method": scope["method"],
                    "path": raw_path,
                    "query": query,
                    "status": verdict.status,
                    "error": payload,
                }
            )
            data = json.dumps(payload).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": verdict.status,
                    "headers": [
                        (b"content-type", b"application/json; charset=UTF-8"),
                        (b"content-length", str(len(data)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": data})
            return
        self.accepted.extend(verdict.method_ids)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def revisions() -> dict[str, str]:
    """``api.version`` -> revision of every loaded document."""
    return {f"{api}.{version}": str(load(api, version).get("revision")) for api, version in DOCUMENTS}
