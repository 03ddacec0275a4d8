"""The schema registry's REST listener (`kanal broker --schema-registry-listen HOST:PORT`): the I/O shell of
schema_registry_rest.py. Standard-library HTTP/1.1, a thread per connection (keep-alive), TLS with the
broker's own certificate when its listeners have TLS.

Each request: its principal is decided by the broker's Authenticator, the same door the gRPC and Kafka
listeners have — HTTP basic credentials are a user's password (checked against the SCRAM credentials in
the metadata log, over TLS only), a client certificate is an mTLS principal, nothing is User:ANONYMOUS on a
listener without authentication — then routed (schema_registry_rest.route) and served by `call(method,
request)` with the principal bound: the broker's SchemaRegistry service, which forwards it to the active
controller, where ACLs on subjects are checked as for every other call. A refusal at the door is 401 with
Confluent's 40101 and a `WWW-Authenticate: Basic` challenge.

Bounds: a body larger than REQUEST_BODY_BYTES_MAX is refused (413) unread; a connection idle for
IDLE_TIMEOUT_S is closed; the TLS handshake runs in the connection's own thread, so a slow client never
holds the accepting one.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from kanal.broker.schema_registry_rest import (
    CONTENT_TYPE,
    REQUEST_BODY_BYTES_MAX,
    RestError,
    Routed,
    rest_error,
    route,
)
from kanal.security.channel_security import PASSWORD_METADATA_KEY, USER_METADATA_KEY
from kanal.security.principal import Principal, bind_principal
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 60.0
# What decides a request's principal: the broker's Authenticator.authenticate(auth_context, metadata).
Authenticate = Callable[[Mapping[str, Iterable[bytes]], list[tuple[str, str]]], Principal]
# Serves one SchemaRegistry call with the caller's principal bound: its reply, or KanalError.
Call = Callable[[str, Any], Any]
# Counts a served request: (method name or "none", HTTP status).
Observe = Callable[[str, int], None]


class SchemaRegistryHttp:
    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None, authenticate: Authenticate,
                 call: Call, observe: Observe = lambda method, status: None) -> None:
        self._tls = ssl_context
        handler = _handler_class(authenticate, call, observe, tls=ssl_context is not None)
        self._server = _Server((host.strip("[]"), port), handler, ssl_context)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="schema-registry-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 ssl_context: ssl.SSLContext | None) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._ssl_context = ssl_context
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's thread: the TLS handshake first (a failed one closes the connection)."""
        request.settimeout(IDLE_TIMEOUT_S)
        if self._ssl_context is not None:
            try:
                request = self._ssl_context.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                log.info("schema registry: TLS handshake with %s failed: %s", client_address, exc)
                return
        super().finish_request(request, client_address)


def _handler_class(authenticate: Authenticate, call: Call, observe: Observe, *,
                   tls: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "kanal-schema-registry"

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("schema registry %s: " + format, self.address_string(), *args)

        def _serve(self, method: str) -> None:
            routed: Routed | None = None
            try:
                body = self._body()
                principal = self._principal()
                url = urlsplit(self.path)
                routed = route(method, url.path, dict(parse_qsl(url.query)), body)
                if routed.method is None:
                    self._answer(routed.status, routed.render(None))
                    observe("none", routed.status)
                    return
                with bind_principal(principal):
                    reply = call(routed.method, routed.request)
                if reply.error != ErrorCode.NONE:
                    raise rest_error(routed, reply.error, reply.error_message)
                self._answer(routed.status, routed.render(reply), raw=routed.raw_schema)
                observe(routed.method, routed.status)
            except RestError as refused:
                self._answer(refused.status, refused.body(),
                             challenge=refused.status == 401)
                observe(routed.method if routed and routed.method else "none", refused.status)
            except KanalError as exc:
                failed = rest_error(routed, exc.code, exc.message)
                self._answer(failed.status, failed.body(), challenge=failed.status == 401)
                observe(routed.method if routed and routed.method else "none", failed.status)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if length > REQUEST_BODY_BYTES_MAX:
                self.close_connection = True  # the body stays unread: the connection cannot go on
                raise RestError(413, 413, f"the body is larger than {REQUEST_BODY_BYTES_MAX} bytes")
            return self.rfile.read(length) if length > 0 else b""

        def _principal(self) -> Principal:
            """The caller, as the broker's other listeners decide it (module docstring)."""
            auth_context: dict[str, list[bytes]] = {}
            if tls:
                auth_context["transport_security_type"] = [b"ssl"]
                certificate = self.connection.getpeercert(binary_form=True)
                if certificate:
                    auth_context["x509_pem_cert"] = [ssl.DER_cert_to_PEM_cert(certificate).encode()]
            metadata: list[tuple[str, str]] = []
            header = self.headers.get("Authorization", "")
            if header:
                scheme, _, encoded = header.partition(" ")
                try:
                    user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
                except (ValueError, UnicodeDecodeError):
                    sep = ""
                if scheme.lower() != "basic" or not sep:
                    raise RestError(401, 40101, "Authorization must be Basic credentials (user:password)")
                metadata = [(USER_METADATA_KEY, user), (PASSWORD_METADATA_KEY, password)]
            return authenticate(auth_context, metadata)

        def _answer(self, status: int, value: Any, *, raw: bool = False, challenge: bool = False) -> None:
            data = (value if raw else json.dumps(value)).encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            if challenge:
                self.send_header("WWW-Authenticate", 'Basic realm="kanal schema registry"')
            self.end_headers()
            self.wfile.write(data)

    return Handler
