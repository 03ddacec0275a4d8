"""`kanal node-zone` against a real HTTPS server on 127.0.0.1 playing the Kubernetes API server (its own
self-signed certificate as the service account's CA, a bearer token it checks), and the broker's --rack-file
reading what it wrote."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kanal.broker.broker_main import parse_args
from kanal.deploy import node_zone
from kanal.server.flags import ServerFlagError

TOKEN = "sa-token-abc"


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "ca.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class FakeApiServer:
    """Node objects by name; every request's path and Authorization header is recorded."""

    nodes: dict[str, dict]
    port: int = 0
    seen: list[tuple[str, str]] = field(default_factory=list)


@pytest.fixture
def api(tmp_path) -> Iterator[tuple[FakeApiServer, Path]]:
    state = FakeApiServer(
        nodes={
            "node-a": {
                "kind": "Node",
                "metadata": {
                    "name": "node-a",
                    "labels": {
                        "kubernetes.io/hostname": "node-a",
                        "topology.kubernetes.io/zone": "eu-west-1b",
                    },
                },
            },
            "node-old": {
                "kind": "Node",
                "metadata": {
                    "name": "node-old",
                    "labels": {"failure-domain.beta.kubernetes.io/zone": "us-east-1a"},
                },
            },
            "node-bare": {
                "kind": "Node",
                "metadata": {"name": "node-bare", "labels": {"kubernetes.io/hostname": "x"}},
            },
        }
    )

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append((self.path, self.headers.get("Authorization", "")))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._answer(401, {"kind": "Status", "reason": "Unauthorized"})
            prefix = "/api/v1/nodes/"
            name = self.path[len(prefix):] if self.path.startswith(prefix) else ""
            if name == "forbidden":
                return self._answer(403, {"kind": "Status", "reason": "Forbidden",
                                          "message": 'nodes "forbidden" is forbidden'})
            if name not in state.nodes:
                return self._answer(404, {"kind": "Status", "reason": "NotFound"})
            return self._answer(200, state.nodes[name])

        def _answer(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    ca, key = self_signed(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(ca, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="fake-api-server", daemon=True)
    thread.start()
    try:
        yield state, ca
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def run(tmp_path: Path, state: FakeApiServer, ca: Path, node: str, token: str = TOKEN) -> tuple[int, Path]:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    output = tmp_path / "shared" / "rack"
    # As in a pod: the API server from the service environment, the node name from the downward API.
    environ = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(state.port),
        "NODE_NAME": node,
    }
    code = node_zone.main(
        ["--output", str(output), "--token-file", str(token_file), "--ca-file", str(ca)], environ
    )
    return code, output


def test_the_zone_label_of_the_pods_node_is_written_for_the_broker(api, tmp_path):
    state, ca = api
    code, output = run(tmp_path, state, ca, "node-a")
    assert code == 0 and output.read_text() == "eu-west-1b\n"
    assert state.seen == [("/api/v1/nodes/node-a", f"Bearer {TOKEN}")]
    environ = {"KANAL_RACK_FILE": str(output)}
    config = parse_args(["--id", "1", "--listen", "127.0.0.1:9092", "--controllers", "127.0.0.1:9091",
                         "--data-dir", str(tmp_path / "data")], environ)
    assert config.rack == "eu-west-1b"


def test_the_deprecated_label_and_a_node_without_zone(api, tmp_path):
    state, ca = api
    assert run(tmp_path, state, ca, "node-old")[1].read_text() == "us-east-1a\n"
    code, output = run(tmp_path, state, ca, "node-bare")
    assert code == 0 and output.read_text() == "\n"
    config = parse_args(["--id", "1", "--listen", "127.0.0.1:9092", "--controllers", "127.0.0.1:9091",
                         "--data-dir", str(tmp_path / "data"), "--rack-file", str(output)], {})
    assert config.rack == ""


@pytest.mark.parametrize(("node", "token", "expected"), [
    ("forbidden", TOKEN, "HTTP 403"),   # the ClusterRoleBinding is missing
    ("node-z", TOKEN, "HTTP 404"),      # no such node
    ("node-a", "wrong", "HTTP 401"),    # a token the API server does not accept
])
def test_a_refusal_is_one_line_and_no_file(api, tmp_path, capsys, node, token, expected):
    state, ca = api
    code, output = run(tmp_path, state, ca, node, token)
    err = capsys.readouterr().err
    assert code == node_zone.EXIT_FAILED and expected in err and err.count("\n") == 1
    assert not output.exists()


def test_an_api_server_whose_certificate_the_ca_file_does_not_sign_is_refused(api, tmp_path, capsys):
    state, _ = api
    (tmp_path / "other").mkdir()
    other_ca, _ = self_signed(tmp_path / "other")
    code, output = run(tmp_path, state, other_ca, "node-a")
    assert code == node_zone.EXIT_FAILED and "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err
    assert not output.exists() and state.seen == []


def test_without_a_node_name_it_stops_at_once(tmp_path, capsys):
    assert node_zone.main(["--output", str(tmp_path / "rack")], {}) == node_zone.EXIT_USAGE
    assert "NODE_NAME" in capsys.readouterr().err


def test_the_broker_refuses_a_missing_rack_file_or_both_rack_flags(tmp_path):
    base = ["--id", "1", "--listen", "127.0.0.1:9092", "--controllers", "127.0.0.1:9091",
            "--data-dir", str(tmp_path / "data")]
    with pytest.raises(ServerFlagError, match="--rack-file .*cannot read it"):
        parse_args([*base, "--rack-file", str(tmp_path / "missing")], {})
    (tmp_path / "rack").write_text("zone-a\n")
    with pytest.raises(ServerFlagError, match="not both"):
        parse_args([*base, "--rack-file", str(tmp_path / "rack"), "--rack", "zone-b"], {})
    (tmp_path / "rack").write_text("two words\n")
    with pytest.raises(ServerFlagError, match="not a rack name"):
        parse_args([*base, "--rack-file", str(tmp_path / "rack")], {})
