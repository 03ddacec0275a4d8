"""The one place gRPC channels to kanal servers are made: plaintext, TLS, TLS with a client certificate
(mTLS), and a user name and password in the call metadata over TLS.

Used by clients (kanal.clients.cluster_metadata), brokers (replica fetchers, the controller client, the
group coordinator) and controllers (forwarding to the active controller): `open_channel(endpoint,
options, security)`; a follower's ReplicaFetch stream uses `open_aio_channel` (grpc.aio). A node dials
its peers with its own listener's certificate, so brokers and controllers authenticate to each other as
the principal their certificate maps to (`User:broker-1`).

Credentials: the user name and password travel in the metadata keys `kanal-user-bin` and
`kanal-password-bin` (UTF-8), on every call, added by a client interceptor on a TLS channel only:
ClientSecurity refuses a password without TLS before anything is sent, and a listener refuses a password on
a plaintext connection as well (kanal.security.authentication). Not gRPC's metadata call credentials:
grpcio runs
their plugin on a new thread for every call, which cost a producer or consumer process about a quarter more
CPU per record (benchmarks/cluster_bench.py --tls); the interceptor adds two metadata entries in the
calling thread. On a grpc.aio channel the same two entries go in each call's metadata
(`credentials_metadata`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import grpc

from kanal.v1.error import ErrorCode, KanalError

USER_METADATA_KEY = "kanal-user-bin"
PASSWORD_METADATA_KEY = "kanal-password-bin"


def read_pem(flag: str, path: Path | str | None) -> bytes | None:
    """The bytes of a PEM file named by `flag`; INVALID_CONFIG (one line) when it cannot be read or holds
    no PEM block."""
    if path is None or path == "":
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"{flag} {path}: cannot read it: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"{flag} {path}: not a PEM file")
    return data


@dataclass(frozen=True)
class ClientSecurity:
    """How a client (or a node, for its outbound calls) connects: TLS files and credentials.

    ca_file: PEM of the CA(s) that signed the servers' certificates; set means TLS (None: plaintext).
    cert_file + key_file: a client certificate and its key, for listeners that require one (mTLS).
    user + password: sent in every call's metadata; TLS only.
    server_name: the name the servers' certificates carry when it is not the host dialled (tests, tunnels).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    server_name: str | None = None
    _credentials: list = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise KanalError(ErrorCode.INVALID_CONFIG, "--tls-cert-file and --tls-key-file go together")
        if self.cert_file and not self.ca_file:
            raise KanalError(ErrorCode.INVALID_CONFIG, "a client certificate needs TLS: give --tls-ca-file")
        if bool(self.user) != (self.password is not None):
            raise KanalError(ErrorCode.INVALID_CONFIG, "--user and --password go together")
        if self.user and not self.ca_file:
            raise KanalError(ErrorCode.INVALID_CONFIG,
                             "a password is only ever sent over TLS: give --tls-ca-file as well as --user")

    @property
    def tls(self) -> bool:
        return bool(self.ca_file)

    def __reduce__(self):
        # Pickled by its settings alone (to a worker process, say): gRPC credentials do not pickle, and the
        # other process reads the files itself.
        return (ClientSecurity, (self.ca_file, self.cert_file, self.key_file, self.user, self.password,
                                 self.server_name))

    def describe(self) -> str:
        """One line for logs and the CLI: what this connects with (never the password)."""
        if not self.tls:
            return "plaintext"
        parts = ["TLS"]
        if self.cert_file:
            parts.append(f"client certificate {self.cert_file}")
        if self.user:
            parts.append(f"user {self.user}")
        return ", ".join(parts)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials, files read once (INVALID_CONFIG when one cannot be read)."""
        if not self.tls:
            raise KanalError(ErrorCode.INVALID_CONFIG, "plaintext security has no channel credentials")
        if not self._credentials:
            self._credentials.append(grpc.ssl_channel_credentials(
                root_certificates=read_pem("--tls-ca-file", self.ca_file),
                private_key=read_pem("--tls-key-file", self.key_file),
                certificate_chain=read_pem("--tls-cert-file", self.cert_file),
            ))
        return self._credentials[0]


PLAINTEXT = ClientSecurity()


def open_channel(endpoint: str, options: Sequence[tuple[str, object]] = (),
                 security: ClientSecurity | None = None) -> grpc.Channel:
    """A channel to a kanal server: plaintext when `security` is None or has no TLS, else TLS with the
    certificate and credentials it holds."""
    if security is None or not security.tls:
        return grpc.insecure_channel(endpoint, options=list(options))
    channel = grpc.secure_channel(endpoint, security.channel_credentials(),
                                  options=_tls_options(options, security))
    metadata = credentials_metadata(security)
    if metadata:
        return grpc.intercept_channel(channel, _CredentialsInterceptor(metadata))
    return channel


def open_aio_channel(endpoint: str, options: Sequence[tuple[str, object]] = (),
                     security: ClientSecurity | None = None) -> grpc.aio.Channel:
    """open_channel for grpc.aio, made on the running event loop's thread. It adds no credentials: pass
    `credentials_metadata(security)` as each call's metadata (a user and password are per call)."""
    if security is None or not security.tls:
        return grpc.aio.insecure_channel(endpoint, options=list(options))
    return grpc.aio.secure_channel(endpoint, security.channel_credentials(),
                                   options=_tls_options(options, security))


def credentials_metadata(security: ClientSecurity | None) -> tuple[tuple[str, bytes], ...]:
    """The call metadata that carries `security`'s user name and password (empty without them)."""
    if security is None or not security.user or security.password is None:
        return ()
    return ((USER_METADATA_KEY, security.user.encode("utf-8")),
            (PASSWORD_METADATA_KEY, security.password.encode("utf-8")))


def _tls_options(options: Sequence[tuple[str, object]], security: ClientSecurity) -> list[tuple[str, object]]:
    out = list(options)
    if security.server_name:
        out.append(("grpc.ssl_target_name_override", security.server_name))
    return out


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: tuple | None
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: object


class _CredentialsInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the user name and password to every call's metadata (open_channel uses it on TLS channels
    only)."""

    def __init__(self, metadata: tuple[tuple[str, bytes], ...]) -> None:
        self._metadata = metadata

    def _details(self, details) -> grpc.ClientCallDetails:
        return _ClientCallDetails(
            details.method,
            details.timeout,
            (*(details.metadata or ()), *self._metadata),
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


class _ClientCallDetails(_CallDetails, grpc.ClientCallDetails):
    """grpc.ClientCallDetails with fields (grpc's own class has none)."""
