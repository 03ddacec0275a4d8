"""kanal's client of a schema registry's REST API (Confluent's: kanal's brokers serve it, and so does
Confluent's registry): registrations, lookups, subjects and versions, deletes, compatibility checks and
levels, with schemas by id cached.

    registry = SchemaRegistryClient("http://127.0.0.1:8081", security=None)
    schema_id = registry.register("orders-value", Schema(avro_text))           # AVRO unless schema_type says
    registry.schema(schema_id).text                                            # cached
    registry.check_compatibility("orders-value", Schema(next_text))            # [] when compatible

The standard library's http.client, one connection per request (registry calls are rare: serializers
cache what they learn). `urls`: one or more base URLs (comma-separated, as confluent-kafka's `url`);
every broker's registry answers the same, so a request that cannot reach one, or is refused with a
retriable code (the controller moving: 50003), goes to the next, after `retry_backoff_ms`, until
`request_timeout_ms` has passed (error_boundary.retrying). A retried delete whose first try was applied
answers as a delete of what is already gone would.

Security, as the other clients take it (`ClientSecurity`, from --command-config and the TLS flags): an
https URL is verified against `ca_file` (the system's CAs without one), presents `cert_file` + `key_file`
when given (mTLS), and checks `server_name` instead of the host when given; `user` + `password` go as HTTP
basic credentials, over https only (INVALID_CONFIG for an http URL, before anything is sent). A TLS
handshake that fails (an unknown CA, a name mismatch, plaintext to a TLS listener) looks like a registry
that cannot be reached, as it does to the gRPC clients: BROKER_NOT_AVAILABLE after the request timeout,
its message naming the TLS error.

Errors: a refusal is `RegistryError`, a KanalError whose code is the registry's (errors.proto 90-97:
INVALID_SCHEMA for 42201, INCOMPATIBLE_SCHEMA for 409, SCHEMA_NOT_FOUND for 40403, SUBJECT_NOT_FOUND for
40401, ...; the table is `CONFLUENT_CODES`), with Confluent's `error_code` and `http_status` kept. A
registry that cannot be reached is BROKER_NOT_AVAILABLE.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from kanal.clients.config_checks import check_int
from kanal.clients.error_boundary import retrying
from kanal.schemas.schema_types import Reference
from kanal.security.channel_security import ClientSecurity
from kanal.v1.error import ErrorCode, KanalError

CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
REQUEST_TIMEOUT_MS_DEFAULT: Final = 30_000
RETRY_BACKOFF_MS_DEFAULT: Final = 100
SCHEMAS_CACHED_MAX_DEFAULT: Final = 1000
RESPONSE_BYTES_MAX: Final = 64 * 1024 * 1024  # a reply holds schemas (text): far above any real one
REFERENCE_DEPTH_MAX: Final = 32  # references of references...: deeper is a cycle or a mistake
LATEST: Final = "latest"

# Confluent's error codes -> kanal's. Codes not here go by HTTP status (_BY_STATUS).
CONFLUENT_CODES: Final[dict[int, int]] = {
    40101: ErrorCode.AUTHENTICATION_FAILED,
    40301: ErrorCode.AUTHORIZATION_FAILED,
    40401: ErrorCode.SUBJECT_NOT_FOUND,
    40402: ErrorCode.SCHEMA_VERSION_NOT_FOUND,
    40403: ErrorCode.SCHEMA_NOT_FOUND,
    40404: ErrorCode.SUBJECT_NOT_FOUND,  # the subject was soft-deleted
    40405: ErrorCode.NOT_SOFT_DELETED,  # a hard delete of a subject not soft-deleted first
    40406: ErrorCode.SCHEMA_VERSION_NOT_FOUND,  # the version was soft-deleted
    40407: ErrorCode.NOT_SOFT_DELETED,  # ... of a version not soft-deleted first
    40408: ErrorCode.SUBJECT_NOT_FOUND,  # the subject has no compatibility level of its own
    40409: ErrorCode.SUBJECT_NOT_FOUND,  # ... no mode of its own
    409: ErrorCode.INCOMPATIBLE_SCHEMA,
    42201: ErrorCode.INVALID_SCHEMA,
    42202: ErrorCode.INVALID_REQUEST,  # not a version number
    42203: ErrorCode.INVALID_CONFIG,  # not a compatibility level
    42204: ErrorCode.INVALID_CONFIG,  # not a mode
    42205: ErrorCode.REGISTRY_MODE_FORBIDS,
    42206: ErrorCode.SCHEMA_REFERENCED,
    50001: ErrorCode.UNKNOWN_SERVER_ERROR,  # the store failed
    50002: ErrorCode.REQUEST_TIMED_OUT,
    50003: ErrorCode.CONTROLLER_NOT_AVAILABLE,  # the call could not be forwarded (Confluent: to the leader)
}
_BY_STATUS: Final[dict[int, int]] = {
    401: ErrorCode.AUTHENTICATION_FAILED,
    403: ErrorCode.AUTHORIZATION_FAILED,
    409: ErrorCode.INCOMPATIBLE_SCHEMA,
    413: ErrorCode.MESSAGE_TOO_LARGE,
}


class RegistryError(KanalError):
    """The registry refused a request: kanal's code, and Confluent's `error_code` and `http_status`."""

    def __init__(self, code: int, message: str, *, http_status: int, error_code: int) -> None:
        super().__init__(code, message)
        self.http_status = http_status
        self.error_code = error_code


def registry_error(http_status: int, body: bytes, what: str) -> RegistryError:
    """A refusal's reply as a RegistryError: Confluent's `{"error_code": N, "message": ...}` when the body
    is one, else the HTTP status alone."""
    error_code, message = http_status, body.decode("utf-8", "replace").strip()[:500]
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("error_code"), int):
            error_code, message = parsed["error_code"], str(parsed.get("message", ""))
    except ValueError:
        pass
    code = CONFLUENT_CODES.get(error_code) or _BY_STATUS.get(http_status) or (
        ErrorCode.UNKNOWN_SERVER_ERROR if http_status >= 500 else ErrorCode.INVALID_REQUEST)
    return RegistryError(code, f"{what}: {message or 'no message'} (HTTP {http_status}, error code "
                               f"{error_code})", http_status=http_status, error_code=error_code)


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema as one registers it: its text, its type (AVRO, JSON or PROTOBUF) and its references."""

    text: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()

    def body(self) -> dict[str, Any]:
        """The request body Confluent's API takes for it."""
        out: dict[str, Any] = {"schema": self.text}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                                 for r in self.references]
        return out


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """A subject's version: the subject, the version number, the schema's id and the schema."""

    subject: str
    version: int
    schema_id: int
    schema: Schema


def _schema_of(reply: Any) -> Schema:
    if not isinstance(reply, dict) or not isinstance(reply.get("schema"), str):
        raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the registry's reply holds no schema: {reply!r}")
    references = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                       for r in reply.get("references") or ())
    return Schema(reply["schema"], str(reply.get("schemaType") or "AVRO"), references)


def _registered(reply: Any) -> RegisteredSchema:
    schema = _schema_of(reply)
    return RegisteredSchema(str(reply["subject"]), int(reply["version"]), int(reply["id"]), schema)


def _path(*segments: str | int) -> str:
    """A path of segments, each percent-encoded whole (a subject may hold `/` or `%`)."""
    return "/" + "/".join(quote(str(s), safe="") for s in segments)


def _flags(**flags: bool | str) -> dict[str, str]:
    """Query parameters: true booleans as "true", non-empty strings as they are; the rest left out."""
    return {k: ("true" if v is True else v) for k, v in flags.items() if v and isinstance(v, str | bool)}


class _Endpoint:
    """One registry URL: where to connect, and how (TLS context, credentials)."""

    def __init__(self, url: str, security: ClientSecurity | None) -> None:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KanalError(ErrorCode.INVALID_CONFIG,
                             f"schema registry URL {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self.tls: ssl.SSLContext | None = None
        self.server_name: str | None = None
        self.authorization: str | None = None
        if parts.scheme == "https":
            self.tls = ssl.create_default_context(cafile=security.ca_file if security else None)
            if security is not None and security.cert_file:
                self.tls.load_cert_chain(security.cert_file, security.key_file)
            self.server_name = security.server_name if security else None
        if security is not None and security.user:
            if self.tls is None:
                raise KanalError(ErrorCode.INVALID_CONFIG, f"schema registry URL {url}: a password is only "
                                                           f"ever sent over TLS: use https")
            token = base64.b64encode(f"{security.user}:{security.password}".encode()).decode("ascii")
            self.authorization = f"Basic {token}"

    def connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.tls is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        return _HTTPSConnection(self.host, self.port, timeout_s, self.tls, self.server_name)


class _HTTPSConnection(http.client.HTTPSConnection):
    """http.client's HTTPS connection, checking the certificate for `server_name` when given (the name
    the registry's certificate carries when it is not the host dialled), as the gRPC clients do."""

    def __init__(self, host: str, port: int, timeout_s: float, context: ssl.SSLContext,
                 server_name: str | None) -> None:
        super().__init__(host, port, timeout=timeout_s, context=context)
        self._tls_context = context
        self._server_name = server_name or host

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._tls_context.wrap_socket(sock, server_hostname=self._server_name)


class SchemaRegistryClient:
    """A schema registry's REST API (module docstring). Thread-safe: requests share nothing but the
    cache of schemas by id (at most `schemas_cached_max`, the least recently used go first)."""

    def __init__(self, urls: str | Sequence[str], *, security: ClientSecurity | None = None,
                 request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
                 retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
                 schemas_cached_max: int = SCHEMAS_CACHED_MAX_DEFAULT) -> None:
        listed = [u for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not listed:
            raise KanalError(ErrorCode.INVALID_CONFIG, "no schema registry URL")
        check_int("request_timeout_ms", request_timeout_ms, 1, 600_000)
        check_int("retry_backoff_ms", retry_backoff_ms, 0, 60_000)
        check_int("schemas_cached_max", schemas_cached_max, 1, 1_000_000)
        self._endpoints = [_Endpoint(u, security) for u in listed]
        self._next = 0  # the endpoint to ask first: the last one that answered
        self._timeout_s = request_timeout_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._schemas: OrderedDict[int, Schema] = OrderedDict()
        self._schemas_max = schemas_cached_max
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"<SchemaRegistryClient {','.join(e.url for e in self._endpoints)} "
                f"cached={len(self._schemas)}/{self._schemas_max}>")

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self._endpoints]

    # ---- schemas ----

    def schema_types(self) -> list[str]:
        return [str(t) for t in self._request("GET", "/schemas/types", what="schema types")]

    def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        """The id of `schema` under `subject`: registered as the subject's next version when it is new
        there (compatibility checked), the existing id when the subject has it already."""
        reply = self._request("POST", _path("subjects", subject, "versions"), schema.body(),
                              query=_flags(normalize=normalize), what=f"register under {subject}")
        return int(reply["id"])

    def schema(self, schema_id: int) -> Schema:
        """The schema of an id (cached: an id never changes its schema)."""
        with self._lock:
            found = self._schemas.get(schema_id)
            if found is not None:
                self._schemas.move_to_end(schema_id)
                return found
        schema = _schema_of(self._request("GET", _path("schemas", "ids", schema_id),
                                          what=f"schema id {schema_id}"))
        with self._lock:
            self._schemas[schema_id] = schema
            while len(self._schemas) > self._schemas_max:
                self._schemas.popitem(last=False)
        return schema

    def schema_versions(self, schema_id: int) -> list[tuple[str, int]]:
        """Every (subject, version) that holds the id."""
        reply = self._request("GET", _path("schemas", "ids", schema_id, "versions"),
                              what=f"subjects of schema id {schema_id}")
        return [(str(v["subject"]), int(v["version"])) for v in reply]

    def references_of(self, schema: Schema) -> dict[str, str]:
        """The text of every schema `schema` references, directly or through others, by the name it is
        imported by: what kanal.schemas' parsers take."""
        out: dict[str, str] = {}
        pending = [(r, 1) for r in schema.references]
        while pending:
            reference, depth = pending.pop()
            if reference.name in out:
                continue
            if depth > REFERENCE_DEPTH_MAX:
                raise KanalError(ErrorCode.INVALID_SCHEMA,
                                 f"references nest deeper than {REFERENCE_DEPTH_MAX}")
            found = self.version(reference.subject, reference.version)
            out[reference.name] = found.schema.text
            pending += [(r, depth + 1) for r in found.schema.references]
        return out

    # ---- subjects ----

    def subjects(self, *, prefix: str = "", deleted: bool = False) -> list[str]:
        reply = self._request("GET", "/subjects", query=_flags(subjectPrefix=prefix, deleted=deleted),
                              what="subjects")
        return [str(s) for s in reply]

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        reply = self._request("GET", _path("subjects", subject, "versions"), query=_flags(deleted=deleted),
                              what=f"versions of {subject}")
        return [int(v) for v in reply]

    def version(self, subject: str, version: int | str = LATEST, *,
                deleted: bool = False) -> RegisteredSchema:
        """A subject's version (a number, or "latest")."""
        return _registered(self._request("GET", _path("subjects", subject, "versions", version),
                                         query=_flags(deleted=deleted), what=f"{subject} version {version}"))

    def lookup(self, subject: str, schema: Schema, *, normalize: bool = False,
               deleted: bool = False) -> RegisteredSchema:
        """The subject's version that holds `schema`; SCHEMA_NOT_FOUND when none does."""
        return _registered(self._request("POST", _path("subjects", subject), schema.body(),
                                         query=_flags(normalize=normalize, deleted=deleted),
                                         what=f"look up in {subject}"))

    def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        """Soft-delete the subject's versions (permanent: remove those soft-deleted before); the versions."""
        reply = self._request("DELETE", _path("subjects", subject), query=_flags(permanent=permanent),
                              what=f"delete {subject}")
        return [int(v) for v in reply]

    def delete_version(self, subject: str, version: int | str, *, permanent: bool = False) -> int:
        reply = self._request("DELETE", _path("subjects", subject, "versions", version),
                              query=_flags(permanent=permanent), what=f"delete {subject} version {version}")
        return int(reply)

    # ---- compatibility ----

    def check_compatibility(self, subject: str, schema: Schema, *, version: int | str | None = None,
                            normalize: bool = False) -> list[str]:
        """Why `schema` may not be registered under `subject` under its compatibility level, against
        `version` (None: every version the level compares with); [] when it may."""
        path = _path("compatibility", "subjects", subject, "versions") if version is None else \
            _path("compatibility", "subjects", subject, "versions", version)
        reply = self._request("POST", path, schema.body(), query=_flags(verbose=True, normalize=normalize),
                              what=f"compatibility with {subject}")
        if reply.get("is_compatible"):
            return []
        return [str(m) for m in reply.get("messages") or ["incompatible"]]

    def compatibility_level(self, subject: str = "", *, default_to_global: bool = True) -> str:
        """The subject's compatibility level (the global one for ""); without `default_to_global`,
        SUBJECT_NOT_FOUND when the subject has none of its own."""
        path = _path("config", subject) if subject else "/config"
        reply = self._request("GET", path, query=_flags(defaultToGlobal=default_to_global and bool(subject)),
                              what=f"compatibility level of {subject or 'the registry'}")
        return str(reply["compatibilityLevel"])

    def set_compatibility_level(self, level: str, subject: str = "") -> str:
        path = _path("config", subject) if subject else "/config"
        reply = self._request("PUT", path, {"compatibility": level},
                              what=f"set the compatibility level of {subject or 'the registry'}")
        return str(reply["compatibility"])

    def delete_compatibility_level(self, subject: str) -> str:
        """Remove the subject's own level (the global one applies again); the level it had."""
        reply = self._request("DELETE", _path("config", subject),
                              what=f"delete the compatibility level of {subject}")
        return str(reply.get("compatibilityLevel", ""))

    # ---- requests ----

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                 query: dict[str, str] | None = None, what: str) -> Any:
        """One request's JSON reply, tried at each URL in turn while it fails retriably (module
        docstring)."""
        payload = json.dumps(body).encode() if body is not None else None
        target = path + (f"?{urlencode(query)}" if query else "")

        def attempt(remaining_s: float) -> Any:
            with self._lock:
                index = self._next
            endpoint = self._endpoints[index]
            try:
                reply = self._send(endpoint, method, target, payload, max(0.001, min(self._timeout_s,
                                                                                     remaining_s)), what)
            except KanalError as exc:
                if exc.retriable:
                    with self._lock:  # the next URL, unless another thread moved on already
                        if self._next == index:
                            self._next = (index + 1) % len(self._endpoints)
                raise
            return reply

        return retrying(attempt, timeout_s=self._timeout_s, backoff_s=self._backoff_s)

    @staticmethod
    def _send(endpoint: _Endpoint, method: str, target: str, payload: bytes | None, timeout_s: float,
              what: str) -> Any:
        headers = {"Accept": CONTENT_TYPE}
        if payload is not None:
            headers["Content-Type"] = CONTENT_TYPE
        if endpoint.authorization is not None:
            headers["Authorization"] = endpoint.authorization
        connection = endpoint.connection(timeout_s)
        try:
            connection.request(method, endpoint.base_path + target, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read(RESPONSE_BYTES_MAX + 1)
        except ssl.SSLError as exc:
            raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE,
                             f"{what}: TLS with {endpoint.url} failed: {exc}") from None
        except (OSError, http.client.HTTPException) as exc:
            raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE,
                             f"{what}: the schema registry at {endpoint.url} did not answer: "
                             f"{type(exc).__name__}: {exc}") from None
        finally:
            connection.close()
        if len(data) > RESPONSE_BYTES_MAX:
            raise KanalError(ErrorCode.MESSAGE_TOO_LARGE, f"{what}: a reply over {RESPONSE_BYTES_MAX} bytes")
        if response.status >= 300:
            raise registry_error(response.status, data, f"{what} at {endpoint.url}")
        try:
            return json.loads(data)
        except ValueError:
            raise KanalError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"{what}: {endpoint.url} answered with no JSON: {data[:200]!r}") from None
