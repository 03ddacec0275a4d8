"""The fault proxy the `remote` chaos fault and the tiered storage fault tests put in front of an S3 server:
it forwards, refuses, answers 503, or stalls and names who it holds in the middle of an upload. Against a
real HTTP server on loopback, through real sockets."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from kanal.deploy.chaos.fault_proxy import TcpFaultProxy
from tests.harness.waiting import wait_until


class _Store(http.server.BaseHTTPRequestHandler):
    """GET answers `hello`; PUT stores its body (answers 200). HTTP/1.1: connections are kept open."""

    protocol_version = "HTTP/1.1"
    bodies: ClassVar[list[bytes]] = []

    def do_GET(self) -> None:
        self._answer(b"hello")

    def do_PUT(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer(b"")

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[TcpFaultProxy]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Store.bodies = []
    proxy = TcpFaultProxy("127.0.0.1", server.server_address[1])
    try:
        yield proxy
    finally:
        proxy.close()
        server.shutdown()
        server.server_close()
        thread.join(10)


def _connection(proxy: TcpFaultProxy) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)


def _get(connection: http.client.HTTPConnection) -> tuple[int, bytes]:
    connection.request("GET", "/object")
    response = connection.getresponse()
    return response.status, response.read()


def test_it_forwards_then_answers_503_on_new_and_open_connections_then_forwards_again(proxy):
    pooled = _connection(proxy)
    assert _get(pooled) == (200, b"hello")
    proxy.set_mode("unavailable")
    assert _get(pooled)[0] == 503  # a connection a client kept open across the change
    fresh = _connection(proxy)
    status, body = _get(fresh)
    assert status == 503 and b"<Code>ServiceUnavailable</Code>" in body
    fresh.close()
    pooled.close()
    proxy.set_mode("pass")
    again = _connection(proxy)
    assert _get(again) == (200, b"hello")
    again.close()


def test_refuse_cuts_connections_as_a_stopped_server_would(proxy):
    connection = _connection(proxy)
    assert _get(connection) == (200, b"hello")
    proxy.set_mode("refuse")
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        _get(connection)
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        _get(_connection(proxy))


def test_stall_holds_an_upload_names_its_client_and_lets_it_through_after(proxy):
    proxy.set_mode("stall")
    reply: dict[str, int] = {}

    def upload() -> None:
        connection = _connection(proxy)
        connection.request("PUT", "/object", body=b"x" * 1000)
        reply["status"] = connection.getresponse().status
        connection.close()

    uploader = threading.Thread(target=upload)
    uploader.start()
    assert wait_until(proxy.stalled_uploads, 10, "the upload to be held") == {"127.0.0.1"}
    assert _Store.bodies == [] and "status" not in reply  # nothing reached the server
    proxy.set_mode("pass")
    uploader.join(10)
    assert reply == {"status": 200} and _Store.bodies == [b"x" * 1000]
    assert proxy.stalled_uploads() == set()


def test_a_stalled_read_is_not_taken_for_an_upload(proxy):
    proxy.set_mode("stall")
    done = threading.Event()

    def read() -> None:
        connection = _connection(proxy)
        _get(connection)
        connection.close()
        done.set()

    reader = threading.Thread(target=read)
    reader.start()
    wait_until(lambda: proxy.stalled > 0, 10, "the read to be held")
    assert proxy.stalled_uploads() == set()
    proxy.set_mode("pass")
    reader.join(10)
    assert done.is_set()
