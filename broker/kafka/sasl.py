"""SASL on the Kafka listener: SaslHandshake (v1) and SaslAuthenticate, with SCRAM-SHA-256/512 (RFC 5802,
RFC 7677) against the SCRAM credentials in the metadata log, and PLAIN over TLS.

Which connections authenticate how follows the broker's listener security (--authentication):
- no authentication: every connection is User:ANONYMOUS, and SASL is refused (ILLEGAL_SASL_STATE);
- `mtls`: a connection whose TLS client certificate maps to a principal is that principal at once;
- `password`: a connection without one must complete SaslHandshake and SaslAuthenticate before any other
  request but ApiVersions; anything else first closes the connection, as Kafka's brokers do. Passwords
  never cross plaintext: on a listener without TLS, `password` is refused at start (listener_security.py),
  and PLAIN is offered only over TLS.

`ScramExchange` is the server side of one SCRAM exchange, pure (nonces come from the caller):

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
    client-final   c=<gs2 header, base64>,r=<nonce>,p=<proof, base64>
    server-final   v=<server signature, base64>

The client proves it knows the salted password: ClientKey = proof XOR HMAC(StoredKey, AuthMessage) must
hash to the stored StoredKey. An unknown user gets a server-first built from a salt derived from the name
and fails at the proof, as a wrong password does, so the exchange does not tell which names exist."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from kanal.security.scram import MECHANISMS, ScramCredential

SCRAM_MECHANISMS = tuple(MECHANISMS)
PLAIN = "PLAIN"


class SaslFailed(Exception):
    """The exchange failed: the client is told so, and the connection closes."""


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8", "strict")
    except UnicodeDecodeError as exc:
        raise SaslFailed("SASL message is not UTF-8") from exc


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslFailed(f"malformed SCRAM attribute {part[:40]!r}")
        out.setdefault(key, value)
    return out


def _user_name(escaped: str) -> str:
    """RFC 5802 saslname: ',' is sent as =2C and '=' as =3D; any other '=' is malformed."""
    if "=" in escaped.replace("=2C", "").replace("=3D", ""):
        raise SaslFailed("malformed SCRAM user name")
    return escaped.replace("=2C", ",").replace("=3D", "=")


@dataclass(slots=True)
class ScramExchange:
    mechanism: str
    server_nonce: str
    user: str = ""
    _client_first_bare: str = ""
    _server_first: str = ""
    _credential: ScramCredential | None = None
    _gs2_header: str = ""

    def first(
        self, client_first: bytes, credentials_of: Callable[[str], dict[str, ScramCredential]]
    ) -> bytes:
        """The server-first message for `client_first`; `credentials_of(user)` gives a user's credentials by
        mechanism (empty when the user is unknown)."""
        text = _text(client_first)
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise SaslFailed("malformed SCRAM client-first message (channel binding is not supported)")
        self._gs2_header = f"{parts[0]},{parts[1]},"
        self._client_first_bare = parts[2]
        attributes = _attributes(parts[2])
        if "n" not in attributes or "r" not in attributes:
            raise SaslFailed("SCRAM client-first message without user name or nonce")
        self.user = _user_name(attributes["n"])
        if parts[1] and _user_name(parts[1][2:]) != self.user:
            raise SaslFailed("SCRAM authorization id must be empty or the user name")
        self._credential = credentials_of(self.user).get(self.mechanism)
        if self._credential is not None:
            salt, iterations = self._credential.salt, self._credential.iterations
        else:  # an unknown user: a stable salt, so a second try looks the same
            salt, iterations = hashlib.sha256(b"kanal-unknown-user:" + self.user.encode()).digest(), 4096
        self._server_first = (
            f"r={attributes['r']}{self.server_nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        )
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """The server-final message once the proof checks out; SaslFailed otherwise."""
        text = _text(client_final)
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise SaslFailed("SCRAM client-final message without a proof")
        attributes = _attributes(without_proof)
        expected_nonce = self._server_first.split(",", 1)[0][2:]
        if attributes.get("r") != expected_nonce:
            raise SaslFailed("SCRAM nonce does not match")
        if attributes.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise SaslFailed("SCRAM channel binding does not match the client-first message")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as exc:
            raise SaslFailed("SCRAM proof is not base64") from exc
        credential = self._credential
        hash_name = MECHANISMS[self.mechanism]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        if credential is None:
            raise SaslFailed(f"authentication failed for {self.user!r}")
        signature = hmac.new(credential.stored_key, auth_message, hash_name).digest()
        if len(proof) != len(signature):
            raise SaslFailed(f"authentication failed for {self.user!r}")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), credential.stored_key):
            raise SaslFailed(f"authentication failed for {self.user!r}")
        server_signature = hmac.new(credential.server_key, auth_message, hash_name).digest()
        return b"v=" + base64.b64encode(server_signature)


def parse_plain(token: bytes) -> tuple[str, str]:
    """PLAIN (RFC 4616): `authzid NUL user NUL password`; an authzid other than the user is refused."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise SaslFailed("malformed PLAIN message")
    authzid, user, password = (_text(p) for p in parts)
    if authzid and authzid != user:
        raise SaslFailed("PLAIN authorization id must be empty or the user name")
    return user, password
