"""RegistryClient: the few reads `kanal-log` makes of a schema registry's REST API (Confluent's, which
kanal's brokers serve), with the standard library's HTTP client.

    GET /schemas/ids/{id}                  a writer's schema, by the id a record carries
    GET /subjects/{subject}/versions/{v}   a reader schema (v = latest), and the schemas references name

Each answer is a `RegistrySchema` (type, text, references); `avro(schema)` resolves its references (each
one's own first, a name's first resolution standing, as the registry's) into a standalone Avro schema.
The URLs are tried in order: a refused connection or a 5xx moves on to the next; any other answer is the
registry's. A schema the registry does not have (404) is None; every other failure raises RegistryError,
which fails the read: it is not about one record.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from kanal.schemas.avro_schema import AvroSchema, parse
from kanal.schemas.schema_types import SchemaInvalid
from kanal.spark.decoding_options import RegistryEndpoint

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
REQUEST_TIMEOUT_S = 30
REFERENCE_DEPTH_MAX = 32  # as the registry's own bound on nesting (schema_registry_rules)
HTTP_NOT_FOUND = 404
HTTP_SERVER_ERROR = 500


class RegistryError(Exception):
    """The registry could not be asked, or refused (other than "not found")."""


@dataclass(frozen=True, slots=True)
class RegistrySchema:
    schema_id: int
    schema_type: str  # AVRO, JSON, PROTOBUF
    text: str
    references: tuple[tuple[str, str, int], ...]  # (name, subject, version)


class RegistryClient:
    def __init__(self, endpoint: RegistryEndpoint) -> None:
        self.endpoint = endpoint
        self._context = ssl.create_default_context(cafile=endpoint.ca_file or None)
        self._auth = ("Basic " + base64.b64encode(f"{endpoint.user}:{endpoint.password}".encode()).decode()
                      if endpoint.user else "")

    def __repr__(self) -> str:
        return f"<RegistryClient {self.endpoint!r}>"

    def schema_by_id(self, schema_id: int) -> RegistrySchema | None:
        body = self._get(f"/schemas/ids/{schema_id}")
        return None if body is None else _schema(schema_id, body)

    def version(self, subject: str, version: int | str = "latest") -> RegistrySchema | None:
        """A subject's version (`latest`: the latest live one); None when the registry has no such
        subject or version."""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}"
        body = self._get(path)
        return None if body is None else _schema(int(body.get("id", 0)), body)

    def avro(self, schema: RegistrySchema) -> AvroSchema:
        """The schema parsed with its references resolved; SchemaInvalid when it is not one."""
        texts: dict[str, str] = {}
        self._resolve(schema.references, texts, set(), 0)
        return parse(schema.text, texts)

    def _resolve(self, references: tuple[tuple[str, str, int], ...], texts: dict[str, str], seen: set[str],
                 depth: int) -> None:
        if depth > REFERENCE_DEPTH_MAX:
            raise SchemaInvalid(f"references nest deeper than {REFERENCE_DEPTH_MAX} levels")
        for name, subject, version in references:
            if name in seen:
                continue
            seen.add(name)
            found = self.version(subject, version)
            if found is None:
                raise SchemaInvalid(f"reference {name!r}: the registry has no version {version} of subject "
                                    f"{subject!r}")
            self._resolve(found.references, texts, seen, depth + 1)
            texts[name] = found.text

    def _get(self, path: str) -> dict[str, Any] | None:
        failures = []
        for url in self.endpoint.urls:
            request = urllib.request.Request(url + path, headers={"Accept": CONTENT_TYPE})
            if self._auth:
                request.add_header("Authorization", self._auth)
            try:
                with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S,
                                            context=self._context) as reply:
                    body: dict[str, Any] = json.loads(reply.read())
                    return body
            except urllib.error.HTTPError as exc:
                if exc.code == HTTP_NOT_FOUND:
                    return None
                failures.append(f"{url}: HTTP {exc.code} {_message(exc)}")
                if exc.code < HTTP_SERVER_ERROR:
                    break  # the registry's answer (401, 403, 422): another node gives the same
            except (urllib.error.URLError, OSError, ValueError) as exc:
                failures.append(f"{url}: {getattr(exc, 'reason', exc)}")
        raise RegistryError(f"schema registry GET {path} failed: {'; '.join(failures)}")


def _schema(schema_id: int, body: dict[str, Any]) -> RegistrySchema:
    refs = tuple((str(r["name"]), str(r["subject"]), int(r["version"])) for r in body.get("references") or ())
    return RegistrySchema(schema_id, str(body.get("schemaType") or "AVRO"), str(body["schema"]), refs)


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("message", ""))
    except (ValueError, OSError, AttributeError):
        return ""
