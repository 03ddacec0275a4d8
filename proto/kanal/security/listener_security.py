"""ListenerSecurity: how a broker's or controller's gRPC listener is secured, and the flags that set it.

Flags (shared by `kanal broker` and `kanal controller`, so also KANAL_<FLAG> and keys of --config):

    --tls-cert-file FILE        the server certificate chain (PEM); with --tls-key-file turns TLS on
    --tls-key-file FILE         its private key (PEM, unencrypted)
    --tls-ca-file FILE          CA certificate(s) (PEM) that client certificates must chain to, and that this
                                node trusts when it dials other nodes (which must then serve TLS too);
                                required with TLS
    --tls-client-auth MODE      none | required: whether the TLS handshake demands a client certificate
                                signed by --tls-ca-file (mTLS). gRPC Python offers no "request but do not
                                require" (Kafka's ssl.client.auth=requested): its server credentials either
                                require a certificate or never ask for one.
    --tls-crl-file FILE         a certificate revocation list (PEM or DER) signed by the CA: a client
                                certificate whose serial is on it is refused at the door. gRPC Python has no
                                CRL option, so kanal checks it itself after the handshake (crl.py,
                                authentication.py) and reads the file again when it changes.
    --authentication MODES      none, or a comma-separated subset of mtls,password: how a call gets its
                                principal. none: every call is User:ANONYMOUS. mtls: from the client
                                certificate (needs --tls-client-auth required). password: a user name and
                                password checked against SCRAM credentials in the metadata log (needs TLS).
                                With any mode set, a call that authenticates by none of them is refused
                                with AUTHENTICATION_FAILED.
    --principal-mapping-rules R Kafka's ssl.principal.mapping.rules (principal_mapping.py), default DEFAULT.

A broker may also serve a second listener for the other nodes (`kanal broker --inter-node-listen`,
`node_listener` here): it always requires client certificates signed by --tls-ca-file, so mtls
authenticates the nodes there while --tls-client-auth none lets password clients reach the client
listener without a certificate (Kafka separates these as listeners; gRPC Python has no "request a
certificate but do not require one" that would let one listener serve both).

The node's own outbound calls (to controllers, leaders, the active controller) use --tls-ca-file to
check the servers and --tls-cert-file/--tls-key-file as their client certificate: one TLS setting per
node, so a cluster is secured all at once. A listener bound to a non-loopback address without TLS gets a
warning at start (`warn_if_exposed`).

Every file is read and parsed when the config is made: a missing, unreadable or malformed one is one
line (ListenerSecurityError) before anything starts.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from kanal.security.channel_security import ClientSecurity, read_pem
from kanal.security.crl import load_crl
from kanal.security.principal_mapping import DEFAULT_RULES, PrincipalMapper, parse_rules
from kanal.v1.error import ConfigError, KanalError

CLIENT_AUTH_MODES = ("none", "required")
AUTHENTICATION_MODES = ("mtls", "password")


# A security setting is wrong or a file cannot be used: the one ConfigError, one line naming the flag.
ListenerSecurityError = ConfigError


@dataclass(frozen=True)
class ListenerSecurity:
    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    client_auth: str = "none"
    crl_file: str | None = None
    # Empty: none (ANONYMOUS); else a subset of AUTHENTICATION_MODES.
    authentication: frozenset[str] = frozenset()
    principal_mapping_rules: str = DEFAULT_RULES
    # The node also serves a listener for other nodes that requires client certificates (see above).
    node_listener: bool = False
    # Read and checked in __post_init__.
    cert_pem: bytes | None = field(default=None, init=False, repr=False, compare=False)
    key_pem: bytes | None = field(default=None, init=False, repr=False, compare=False)
    ca_pem: bytes | None = field(default=None, init=False, repr=False, compare=False)
    mapper: PrincipalMapper | None = field(default=None, init=False, repr=False, compare=False)
    # How this node dials other nodes (see outbound()); made once so its files are read once.
    _outbound: ClientSecurity | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ListenerSecurityError("--tls-cert-file and --tls-key-file go together")
        if self.client_auth not in CLIENT_AUTH_MODES:
            raise ListenerSecurityError(f"--tls-client-auth must be one of {', '.join(CLIENT_AUTH_MODES)}, "
                                        f"got {self.client_auth!r}")
        unknown = set(self.authentication) - set(AUTHENTICATION_MODES)
        if unknown:
            raise ListenerSecurityError(f"--authentication: unknown mode(s) {sorted(unknown)}; use none or a "
                                        f"subset of {','.join(AUTHENTICATION_MODES)}")
        if not self.tls:
            for flag, value in (("--tls-ca-file", self.ca_file), ("--tls-crl-file", self.crl_file)):
                if value:
                    raise ListenerSecurityError(f"{flag} needs TLS: give --tls-cert-file and --tls-key-file")
            if self.client_auth != "none":
                raise ListenerSecurityError("--tls-client-auth required needs TLS: give --tls-cert-file and "
                                            "--tls-key-file")
            if self.authentication:
                raise ListenerSecurityError(
                    "--authentication needs TLS (a certificate or a password is never "
                    "taken over plaintext): give --tls-cert-file and --tls-key-file"
                )
        if self.client_auth == "required" and not self.ca_file:
            raise ListenerSecurityError("--tls-client-auth required needs --tls-ca-file (the CA client "
                                        "certificates must chain to)")
        if self.node_listener and not (self.tls and self.ca_file):
            raise ListenerSecurityError("--inter-node-listen needs TLS with --tls-ca-file: the other nodes "
                                        "authenticate there by certificate")
        if "mtls" in self.authentication and self.client_auth != "required" and not self.node_listener:
            raise ListenerSecurityError("--authentication mtls needs --tls-client-auth required (or "
                                        "--inter-node-listen, whose listener always requires certificates)")
        try:
            mapper = parse_rules(self.principal_mapping_rules)
        except ValueError as exc:
            raise ListenerSecurityError(f"--principal-mapping-rules: {exc}") from None
        object.__setattr__(self, "mapper", mapper)
        if not self.tls:
            return
        try:
            object.__setattr__(self, "cert_pem", read_pem("--tls-cert-file", self.cert_file))
            object.__setattr__(self, "key_pem", read_pem("--tls-key-file", self.key_file))
            object.__setattr__(self, "ca_pem", read_pem("--tls-ca-file", self.ca_file))
        except KanalError as exc:
            raise ListenerSecurityError(exc.message) from None
        _check_pem_parses(self)
        if not self.ca_file:
            raise ListenerSecurityError("--tls-ca-file is needed with TLS: this node checks the other nodes' "
                                        "certificates with it when it dials them")
        object.__setattr__(self, "_outbound", ClientSecurity(ca_file=self.ca_file, cert_file=self.cert_file,
                                                             key_file=self.key_file))
        if self.crl_file:
            try:
                load_crl(Path(self.crl_file), self.ca_pem)
            except KanalError as exc:
                raise ListenerSecurityError(exc.message) from None

    @property
    def tls(self) -> bool:
        return bool(self.cert_file)

    def describe(self) -> str:
        """One line for the start-up log."""
        if not self.tls:
            return "plaintext, no authentication (every call is User:ANONYMOUS)"
        modes = ",".join(sorted(self.authentication)) or "none (User:ANONYMOUS)"
        crl = f", CRL {self.crl_file}" if self.crl_file else ""
        return f"TLS, client certificates {self.client_auth}, authentication {modes}{crl}"

    def server_credentials(self, *, for_nodes: bool = False) -> grpc.ServerCredentials:
        """The listener's TLS credentials; `for_nodes`: the listener for other nodes, which requires
        client certificates whatever --tls-client-auth says."""
        if not self.tls or self.key_pem is None or self.cert_pem is None:
            raise ListenerSecurityError("a plaintext listener has no server credentials")
        required = self.client_auth == "required" or for_nodes
        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)],
                                           root_certificates=self.ca_pem if required else None,
                                           require_client_auth=required)

    def outbound(self) -> ClientSecurity | None:
        """How this node dials other nodes: TLS with its own certificate as client certificate when its
        listener has TLS (None: plaintext)."""
        return self._outbound


def _check_pem_parses(security: ListenerSecurity) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    for flag, path, data in (("--tls-cert-file", security.cert_file, security.cert_pem),
                             ("--tls-ca-file", security.ca_file, security.ca_pem)):
        if data is None:
            continue
        try:
            x509.load_pem_x509_certificates(data)
        except ValueError as exc:
            raise ListenerSecurityError(f"{flag} {path}: not a PEM certificate: {exc}") from None
    try:
        load_pem_private_key(security.key_pem or b"", password=None)
    except (ValueError, TypeError) as exc:
        raise ListenerSecurityError(
            f"--tls-key-file {security.key_file}: not an unencrypted PEM private key: {exc}"
        ) from None


def parse_authentication(text: str) -> frozenset[str]:
    """`none` or `mtls,password` -> the set of modes (empty for none)."""
    modes = {m.strip() for m in text.split(",") if m.strip()}
    if modes == {"none"}:
        return frozenset()
    if "none" in modes:
        raise ListenerSecurityError("--authentication: none cannot be combined with other modes")
    return frozenset(modes)


def add_listener_security_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-cert-file", default="", help="server certificate chain (PEM); turns TLS on")
    parser.add_argument("--tls-key-file", default="", help="the server certificate's private key (PEM)")
    parser.add_argument("--tls-ca-file", default="",
                        help="CA certificate(s) (PEM) for client certificates and for dialling other nodes")
    parser.add_argument("--tls-client-auth", default="none", choices=CLIENT_AUTH_MODES,
                        help="none or required: demand a client certificate in the TLS handshake (mTLS)")
    parser.add_argument("--tls-crl-file", default="",
                        help="certificate revocation list (PEM or DER) signed by the CA; revoked client "
                             "certificates are refused")
    parser.add_argument(
        "--authentication",
        default="none",
        help="none, or a comma-separated subset of mtls,password (default none: User:ANONYMOUS)",
    )
    parser.add_argument("--principal-mapping-rules", default=DEFAULT_RULES,
                        help="certificate subject -> principal name, Kafka's ssl.principal.mapping.rules "
                             "(default DEFAULT: the whole subject)")


def listener_security_from_args(args: argparse.Namespace, *, node_listener: bool = False) -> ListenerSecurity:
    return ListenerSecurity(
        node_listener=node_listener,
        cert_file=args.tls_cert_file or None,
        key_file=args.tls_key_file or None,
        ca_file=args.tls_ca_file or None,
        client_auth=args.tls_client_auth,
        crl_file=args.tls_crl_file or None,
        authentication=parse_authentication(args.authentication),
        principal_mapping_rules=args.principal_mapping_rules,
    )


def is_loopback_bind(host: str) -> bool:
    """Whether a bind host only accepts connections from this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, or a wildcard spelled as a name: assume it is reachable from outside


def warn_if_exposed(listen_host: str, security: ListenerSecurity, log: logging.Logger, what: str) -> None:
    """The start-up warnings: a listener others can reach without TLS; a listener that authenticates calls
    but not by certificate, which the other nodes' calls cannot pass (nodes authenticate by certificate)."""
    if not security.tls and not is_loopback_bind(listen_host):
        log.warning("%s listens on %s without TLS: anyone who reaches it can read and change everything as "
                    "User:ANONYMOUS; set --tls-cert-file/--tls-key-file (see 'Securing kanal' in the README)",
                    what, listen_host)
    if security.authentication and "mtls" not in security.authentication:
        log.warning(
            "%s authenticates calls by %s only: other brokers and controllers present certificates, "
            "so their calls to it (replication, forwarding) are refused; add mtls to --authentication "
            "with --tls-client-auth required unless no other node calls it",
            what,
            ",".join(sorted(security.authentication)),
        )
