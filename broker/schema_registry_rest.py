"""Confluent's schema registry REST API as calls of kanal's SchemaRegistry service (schema_registry.proto):
the pure part of the REST listener (schema_registry_http.py is its I/O shell).

`route(method, path, query, body)` turns an HTTP request into a `Routed`: the SchemaRegistry method, its
request message, and how to render the reply as Confluent's JSON. Whatever the API refuses before any call
(an unknown path, a method a path does not take, a body that is not JSON or lacks `schema`, a version that
is not a number or `latest`) is a `RestError` with Confluent's status and error code. A reply's kanal error
becomes Confluent's status and code by `rest_error` (the same table for every call; the two codes that
depend on what was asked, 40405/40407 and 42203/42204, are told apart by the call).

| path | methods | call |
|---|---|---|
| `/schemas/types` | GET | none: the three types |
| `/schemas/ids/{id}` (`?subject=`), `/schemas/ids/{id}/schema` | GET | GetSchema |
| `/schemas/ids/{id}/subjects`, `/schemas/ids/{id}/versions` (`?deleted=`) | GET | GetSchema |
| `/subjects` (`?deleted=&subjectPrefix=`) | GET | ListSubjects |
| `/subjects/{s}` (`?normalize=&deleted=`) | POST (lookup), DELETE (`?permanent=`) | LookupSchema, DeleteSubject |
| `/subjects/{s}/versions` (`?normalize=`) | GET (`?deleted=`), POST | ListVersions, Register |
| `/subjects/{s}/versions/{v}` (`latest`, -1, 1..) | GET (`?deleted=`), DELETE (`?permanent=`) | GetVersion, DeleteVersion |
| `/subjects/{s}/versions/{v}/schema` | GET | GetVersion |
| `/subjects/{s}/versions/{v}/referencedby` | GET | GetReferencedBy |
| `/compatibility/subjects/{s}/versions[/{v}]` (`?verbose=&normalize=`) | POST | CheckCompatibility |
| `/config`, `/config/{s}` (`?defaultToGlobal=`) | GET, PUT, DELETE (subject only) | Get/SetConfig |
| `/mode`, `/mode/{s}` (`?defaultToGlobal=`, `?force=`) | GET, PUT, DELETE (subject only) | Get/SetMode |
| `/` | GET | none: `{}` (a health probe's answer) |
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1.error import ErrorCode

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SCHEMA_TYPES = ["JSON", "PROTOBUF", "AVRO"]  # Confluent's order
VERSION_MAX = (1 << 31) - 1
LATEST = -1
REQUEST_BODY_BYTES_MAX = 16 * 1024 * 1024  # a schema is text: far larger than any real one


@dataclass(frozen=True)
class RestError(Exception):
    """Refused before or after the call: Confluent's HTTP status, error code and message."""

    status: int
    error_code: int
    message: str

    def body(self) -> dict[str, Any]:
        return {"error_code": self.error_code, "message": self.message}


@dataclass(frozen=True)
class Routed:
    """One REST request as a SchemaRegistry call: `method` None for what the API answers alone."""

    method: str | None
    request: Any
    render: Callable[[Any], Any]  # the reply (NONE error) -> the JSON body
    # Which of two Confluent codes a NOT_SOFT_DELETED or INVALID_CONFIG reply is, for this call.
    not_soft_deleted_code: int = 40405
    invalid_config_code: int = 42203
    # SUBJECT_NOT_FOUND from GetConfig / GetMode means "no setting of its own" (40408 / 40409).
    subject_not_found_code: int = 40401
    status: int = 200
    raw_schema: bool = False  # the body is the schema text itself (…/schema paths)


# kanal's error -> (HTTP status, Confluent error code). Codes not listed are 500 / 50001 (a store error).
_CONFLUENT: dict[int, tuple[int, int]] = {
    ErrorCode.INVALID_SCHEMA: (422, 42201),
    ErrorCode.INCOMPATIBLE_SCHEMA: (409, 409),
    ErrorCode.SCHEMA_NOT_FOUND: (404, 40403),
    ErrorCode.SUBJECT_NOT_FOUND: (404, 40401),
    ErrorCode.SCHEMA_VERSION_NOT_FOUND: (404, 40402),
    ErrorCode.SCHEMA_REFERENCED: (422, 42206),
    ErrorCode.REGISTRY_MODE_FORBIDS: (422, 42205),
    ErrorCode.INVALID_REQUEST: (422, 42202),
    ErrorCode.AUTHENTICATION_FAILED: (401, 40101),
    ErrorCode.AUTHORIZATION_FAILED: (403, 40301),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (403, 40301),
    ErrorCode.REQUEST_TIMED_OUT: (500, 50002),
    ErrorCode.CONTROLLER_NOT_AVAILABLE: (500, 50003),
    ErrorCode.BROKER_NOT_AVAILABLE: (500, 50003),
    ErrorCode.NOT_CONTROLLER: (500, 50003),
}


def rest_error(routed: Routed | None, code: int, message: str) -> RestError:
    """A kanal error as Confluent's status and code (module docstring)."""
    if code == ErrorCode.NOT_SOFT_DELETED:
        return RestError(404, routed.not_soft_deleted_code if routed else 40405, message)
    if code == ErrorCode.INVALID_CONFIG:
        return RestError(422, routed.invalid_config_code if routed else 42203, message)
    if code == ErrorCode.SUBJECT_NOT_FOUND:
        return RestError(404, routed.subject_not_found_code if routed else 40401, message)
    status, error_code = _CONFLUENT.get(code, (500, 50001))
    return RestError(status, error_code, message)


def _flag(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name, "false").lower()
    if value not in ("true", "false"):
        raise RestError(400, 400, f"query parameter {name}={value!r} is not true or false")
    return value == "true"


def _version(text: str) -> int:
    """`latest`, -1 or 1..2^31-1 (Confluent's 42202 otherwise)."""
    if text == "latest":
        return LATEST
    try:
        version = int(text)
    except ValueError:
        version = 0
    if version == LATEST or 1 <= version <= VERSION_MAX:
        return version
    raise RestError(422, 42202, f"The specified version '{text}' is not a valid version id. Allowed "
                                f"values are between [1, {VERSION_MAX}] and the string \"latest\"")


def _schema_id(text: str) -> int:
    try:
        schema_id = int(text)
    except ValueError:
        raise RestError(404, 404, f"HTTP 404 Not Found: {text!r} is not a schema id") from None
    return schema_id


def _json_body(body: bytes) -> dict[str, Any]:
    if len(body) > REQUEST_BODY_BYTES_MAX:
        raise RestError(413, 413, f"the body is larger than {REQUEST_BODY_BYTES_MAX} bytes")
    try:
        value = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise RestError(400, 400, f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RestError(422, 422, "the body must be a JSON object")
    return value


def _references(body: Mapping[str, Any]) -> list[pb.SchemaReference]:
    refs = body.get("references") or []
    if not isinstance(refs, list):
        raise RestError(422, 42201, "references must be a list")
    out = []
    for ref in refs:
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not isinstance(
                ref.get("subject"), str) or not isinstance(ref.get("version"), int):
            raise RestError(422, 42201, f"a reference needs name, subject and version: {ref!r}")
        out.append(pb.SchemaReference(name=ref["name"], subject=ref["subject"], version=ref["version"]))
    return out


def _schema_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The schema a register, lookup or compatibility body carries."""
    schema = body.get("schema")
    if not isinstance(schema, str):
        raise RestError(422, 42201, "the body needs a schema (a string)")
    schema_type = body.get("schemaType", "")
    if not isinstance(schema_type, str):
        raise RestError(422, 42201, "schemaType must be a string")
    return {"schema_type": schema_type, "schema": schema, "references": _references(body)}


def _schema_json(schema: pb.RegisteredSchema) -> dict[str, Any]:
    """A schema as Confluent shows it: schemaType and references only when they say something."""
    out: dict[str, Any] = {}
    if schema.schema_type and schema.schema_type != "AVRO":
        out["schemaType"] = schema.schema_type
    if schema.references:
        out["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                             for r in schema.references]
    out["schema"] = schema.schema
    return out


def _version_json(v: pb.SubjectVersion) -> dict[str, Any]:
    return {"subject": v.subject, "version": v.version, "id": v.schema.id, **_schema_json(v.schema)}


def route(method: str, path: str, query: Mapping[str, str], body: bytes) -> Routed:
    """The SchemaRegistry call for one REST request (module docstring); RestError when there is none."""
    parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
    shapes = [pattern for _, pattern in _ROUTES if _matches(pattern, parts)]
    if not shapes:
        raise RestError(404, 404, f"HTTP 404 Not Found: {path}")
    for pattern in shapes:
        handler = _ROUTES.get((method, pattern))
        if handler is not None:
            return handler(parts, query, body)
    raise RestError(405, 405, f"HTTP 405 Method Not Allowed: {method} {path}")


def _matches(pattern: tuple[str, ...], parts: list[str]) -> bool:
    """`*` stands for any one segment (a subject, an id, a version); anything else must be equal, so a
    subject may be called `versions` or `schema`."""
    return len(pattern) == len(parts) and all(p in ("*", part) for p, part in zip(pattern, parts))


# -- handlers: (path parts, query, body) -> Routed ------------------------------------------------


def _types(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    return Routed(None, None, lambda _: SCHEMA_TYPES)


def _root(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    return Routed(None, None, lambda _: {})


def _schema_by_id(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.GetSchemaRequest(id=_schema_id(parts[2]), deleted=_flag(query, "deleted"),
                                  format=query.get("format", ""))
    if len(parts) == 3:
        return Routed("GetSchema", request, lambda r: _schema_json(r.schema))
    what = parts[3]
    if what == "schema":
        return Routed("GetSchema", request, lambda r: r.schema.schema, raw_schema=True)
    if what == "subjects":
        return Routed("GetSchema", request, lambda r: sorted({v.subject for v in r.versions}))
    return Routed("GetSchema", request,
                  lambda r: [{"subject": v.subject, "version": v.version} for v in r.versions])


def _subjects(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.ListSubjectsRequest(deleted=_flag(query, "deleted"), prefix=query.get("subjectPrefix", ""))
    return Routed("ListSubjects", request, lambda r: list(r.subjects))


def _lookup(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.LookupSchemaRequest(subject=parts[1], normalize=_flag(query, "normalize"),
                                     deleted=_flag(query, "deleted"), **_schema_fields(_json_body(body)))
    return Routed("LookupSchema", request, lambda r: _version_json(r.version))


def _delete_subject(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.DeleteSubjectRequest(subject=parts[1], permanent=_flag(query, "permanent"))
    return Routed("DeleteSubject", request, lambda r: list(r.versions), not_soft_deleted_code=40405)


def _list_versions(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.ListVersionsRequest(subject=parts[1], deleted=_flag(query, "deleted"))
    return Routed("ListVersions", request, lambda r: list(r.versions))


def _register(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    fields = _json_body(body)
    schema_id, version = fields.get("id", 0), fields.get("version", 0)
    if not isinstance(schema_id, int) or not isinstance(version, int) or schema_id < 0 or version < 0:
        raise RestError(422, 42201, "id and version must be non-negative integers")
    request = pb.RegisterSchemaRequest(subject=parts[1], normalize=_flag(query, "normalize"), id=schema_id,
                                       version=version, **_schema_fields(fields))
    return Routed("Register", request, lambda r: {"id": r.id})


def _get_version(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.GetVersionRequest(subject=parts[1], version=_version(parts[3]),
                                   deleted=_flag(query, "deleted"))
    if len(parts) == 5 and parts[4] == "schema":
        return Routed("GetVersion", request, lambda r: r.version.schema.schema, raw_schema=True)
    return Routed("GetVersion", request, lambda r: _version_json(r.version))


def _delete_version(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.DeleteVersionRequest(subject=parts[1], version=_version(parts[3]),
                                      permanent=_flag(query, "permanent"))
    return Routed("DeleteVersion", request, lambda r: r.version, not_soft_deleted_code=40407)


def _referenced_by(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.GetReferencedByRequest(subject=parts[1], version=_version(parts[3]))
    return Routed("GetReferencedBy", request, lambda r: list(r.ids))


def _compatibility(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    version = _version(parts[4]) if len(parts) == 5 else 0
    verbose = _flag(query, "verbose")
    request = pb.CheckCompatibilityRequest(subject=parts[2], version=version,
                                           normalize=_flag(query, "normalize"),
                                           **_schema_fields(_json_body(body)))

    def render(r: pb.CheckCompatibilityResponse) -> dict[str, Any]:
        out: dict[str, Any] = {"is_compatible": r.compatible}
        if verbose:
            out["messages"] = list(r.messages)
        return out

    return Routed("CheckCompatibility", request, render)


def _subject_of(parts: list[str]) -> str:
    return parts[1] if len(parts) > 1 else ""


def _get_config(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.GetRegistryConfigRequest(subject=_subject_of(parts),
                                          default_to_global=_flag(query, "defaultToGlobal"))
    return Routed("GetConfig", request, lambda r: {"compatibilityLevel": r.compatibility,
                                                   "normalize": r.normalize}, subject_not_found_code=40408)


def _set_config(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    fields = _json_body(body)
    level, normalize = fields.get("compatibility"), fields.get("normalize", False)
    if not isinstance(level, str) or not isinstance(normalize, bool):
        raise RestError(422, 42203, "the body needs compatibility (a level name) and, optionally, normalize")
    request = pb.SetRegistryConfigRequest(subject=_subject_of(parts), compatibility=level,
                                          normalize=normalize)
    return Routed("SetConfig", request,
                  lambda r: {"compatibility": r.compatibility, "normalize": r.normalize})


def _delete_config(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.SetRegistryConfigRequest(subject=_subject_of(parts), delete=True)
    return Routed("SetConfig", request, lambda r: {"compatibilityLevel": r.compatibility})


def _get_mode(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.GetRegistryModeRequest(subject=_subject_of(parts),
                                        default_to_global=_flag(query, "defaultToGlobal"))
    return Routed("GetMode", request, lambda r: {"mode": r.mode}, invalid_config_code=42204,
                  subject_not_found_code=40409)


def _set_mode(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    mode = _json_body(body).get("mode")
    if not isinstance(mode, str):
        raise RestError(422, 42204, "the body needs mode: READWRITE, READONLY or IMPORT")
    request = pb.SetRegistryModeRequest(subject=_subject_of(parts), mode=mode, force=_flag(query, "force"))
    return Routed("SetMode", request, lambda r: {"mode": r.mode}, invalid_config_code=42204)


def _delete_mode(parts: list[str], query: Mapping[str, str], body: bytes) -> Routed:
    request = pb.SetRegistryModeRequest(subject=_subject_of(parts), delete=True)
    return Routed("SetMode", request, lambda r: {"mode": r.mode}, invalid_config_code=42204)


_Handler = Callable[[list[str], Mapping[str, str], bytes], Routed]
_ROUTES: dict[tuple[str, tuple[str, ...]], _Handler] = {
    ("GET", ()): _root,
    ("GET", ("schemas", "types")): _types,
    ("GET", ("schemas", "ids", "*")): _schema_by_id,
    ("GET", ("schemas", "ids", "*", "schema")): _schema_by_id,
    ("GET", ("schemas", "ids", "*", "subjects")): _schema_by_id,
    ("GET", ("schemas", "ids", "*", "versions")): _schema_by_id,
    ("GET", ("subjects",)): _subjects,
    ("POST", ("subjects", "*")): _lookup,
    ("DELETE", ("subjects", "*")): _delete_subject,
    ("GET", ("subjects", "*", "versions")): _list_versions,
    ("POST", ("subjects", "*", "versions")): _register,
    ("GET", ("subjects", "*", "versions", "*")): _get_version,
    ("DELETE", ("subjects", "*", "versions", "*")): _delete_version,
    ("GET", ("subjects", "*", "versions", "*", "schema")): _get_version,
    ("GET", ("subjects", "*", "versions", "*", "referencedby")): _referenced_by,
    ("POST", ("compatibility", "subjects", "*", "versions")): _compatibility,
    ("POST", ("compatibility", "subjects", "*", "versions", "*")): _compatibility,
    ("GET", ("config",)): _get_config,
    ("PUT", ("config",)): _set_config,
    ("GET", ("config", "*")): _get_config,
    ("PUT", ("config", "*")): _set_config,
    ("DELETE", ("config", "*")): _delete_config,
    ("GET", ("mode",)): _get_mode,
    ("PUT", ("mode",)): _set_mode,
    ("GET", ("mode", "*")): _get_mode,
    ("PUT", ("mode", "*")): _set_mode,
    ("DELETE", ("mode", "*")): _delete_mode,
}
