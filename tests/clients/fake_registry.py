"""A stand-in schema registry for client tests: Confluent's REST API over HTTP(S) on 127.0.0.1 (a free port),
in memory, for what kanal's SchemaRegistryClient and record serializers need to meet.

It registers (one id per distinct schema, one version per subject), answers schemas by id, subjects,
versions and lookups, and deletes subjects; compatibility is not checked (every registration succeeds: the
cluster tests check the real registry's rules). A test scripts refusals (`refuse_next(status, error_code)`)
and sees every request (`requests`: method, path, headers).
"""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


class FakeRegistry:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.schemas: dict[int, dict[str, Any]] = {}  # id -> {"schema", "schemaType", "references"}
        self.subjects: dict[str, list[int]] = {}  # subject -> schema ids by version (version = index + 1)
        self._refusals: list[tuple[int, dict[str, Any] | str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def refuse_next(self, status: int, error_code: int | None = None, message: str = "refused") -> None:
        """Answer the next request with `status` and Confluent's error body (a plain text body without an
        error code)."""
        with self._lock:
            body: dict[str, Any] | str = message if error_code is None else {
                "error_code": error_code, "message": message}
            self._refusals.append((status, body))

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.requests if (m, p) == (method, path))

    # ---- the registry ----

    def serve(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        with self._lock:
            if self._refusals:
                return self._refusals.pop(0)
            parts = [unquote(p) for p in urlsplit(path).path.strip("/").split("/")]
            if method == "POST" and len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                return 200, {"id": self._register(parts[1], json.loads(body))}
            if method == "POST" and len(parts) == 2 and parts[0] == "subjects":
                return self._lookup(parts[1], json.loads(body))
            if method == "GET" and parts[:2] == ["schemas", "ids"]:
                found = self.schemas.get(int(parts[2]))
                if found is None:
                    return 404, {"error_code": 40403, "message": f"Schema {parts[2]} not found"}
                if len(parts) == 4:
                    return 200, [{"subject": s, "version": i + 1} for s, ids in self.subjects.items()
                                 for i, x in enumerate(ids) if x == int(parts[2])]
                return 200, found
            if method == "GET" and parts == ["subjects"]:
                return 200, sorted(self.subjects)
            if parts[0] == "subjects" and parts[1] not in self.subjects:
                return 404, {"error_code": 40401, "message": f"Subject '{parts[1]}' not found."}
            if method == "GET" and len(parts) == 3:
                return 200, list(range(1, len(self.subjects[parts[1]]) + 1))
            if method == "GET" and len(parts) == 4:
                return self._version(parts[1], parts[3])
            if method == "DELETE" and len(parts) == 2:
                return 200, list(range(1, len(self.subjects.pop(parts[1])) + 1))
            return 404, {"error_code": 404, "message": f"HTTP 404 Not Found: {path}"}

    def _register(self, subject: str, body: dict[str, Any]) -> int:
        schema = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"),
                  "references": body.get("references", [])}
        schema_id = next((i for i, s in self.schemas.items() if s == schema), None)
        if schema_id is None:
            schema_id = len(self.schemas) + 1
            self.schemas[schema_id] = schema
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def _lookup(self, subject: str, body: dict[str, Any]) -> tuple[int, Any]:
        for version, schema_id in enumerate(self.subjects.get(subject, []), 1):
            if self.schemas[schema_id]["schema"] == body["schema"]:
                return 200, {"subject": subject, "version": version, "id": schema_id,
                             **self.schemas[schema_id]}
        return 404, {"error_code": 40403, "message": "Schema not found"}

    def _version(self, subject: str, version: str) -> tuple[int, Any]:
        ids = self.subjects[subject]
        index = len(ids) - 1 if version in ("latest", "-1") else int(version) - 1
        if not 0 <= index < len(ids):
            return 404, {"error_code": 40402, "message": f"Version {version} not found."}
        return 200, {"subject": subject, "version": index + 1, "id": ids[index], **self.schemas[ids[index]]}


def _handler(registry: FakeRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def _serve(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            registry.requests.append((method, urlsplit(self.path).path, dict(self.headers)))
            status, reply = registry.serve(method, self.path, body)
            data = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PUT(self) -> None:
            self._serve("PUT")

    return Handler
