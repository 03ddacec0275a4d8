"""SCRAM credentials (RFC 5802, RFC 7677; Kafka's SCRAM-SHA-256 and SCRAM-SHA-512): pure derivations.

What is stored for a user and mechanism (UserScramCredentialRecord in the metadata log), never the
password:

    SaltedPassword = PBKDF2-HMAC-H(password as UTF-8, salt, iterations)   (Hi() of RFC 5802)
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)                                         stored
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")                 stored
    salt, iterations                                                       stored

kanal does not run the SASL challenge/response over gRPC: a client sends its user name and password as
call credentials, and only over TLS (kanal.security.channel_security refuses otherwise, and listeners refuse a
password on a plaintext connection). The server checks the password by recomputing StoredKey from it
(`verify_password`): the same check a SCRAM exchange makes through the client proof, and the same stored
record, so the credentials are exactly Kafka's. `client_proof` and `server_signature` are the exchange's
two proofs, kept here so the derivation can be checked against the RFCs' test vectors.

Creating a credential, the client salts and iterates the password itself (`salted_password`) and sends
the salted password to the controller (AlterUserScramCredentials), which keeps only the two keys
(`credential_from_salted`). Bounds are Kafka's: 4096 .. 16384 iterations.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from kanal.v1.error import ErrorCode, KanalError

# mechanism name -> hashlib name of H
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384
ITERATIONS_DEFAULT = 4096
SALT_BYTES_MIN = 16
SALT_BYTES_MAX = 64
SALT_BYTES_DEFAULT = 32
USER_NAME_CHARS_MAX = 255


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the metadata log holds for one user and mechanism."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys stay out of logs
        return f"<ScramCredential {self.mechanism} iterations={self.iterations}>"


def check_mechanism(mechanism: str) -> str:
    """The hashlib name of the mechanism's hash; INVALID_REQUEST for anything but the two SCRAM-SHA ones."""
    hash_name = MECHANISMS.get(mechanism)
    if hash_name is None:
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"unknown SCRAM mechanism {mechanism!r}; use one of {', '.join(MECHANISMS)}")
    return hash_name


def check_iterations(iterations: int) -> None:
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"SCRAM iterations must be in [{ITERATIONS_MIN}, {ITERATIONS_MAX}], got {iterations}",
        )


def check_user_name(name: str) -> None:
    """Kafka takes any user name; kanal refuses the empty name, control characters and names over
    USER_NAME_CHARS_MAX characters (names end up in logs and in principals)."""
    if not name or len(name) > USER_NAME_CHARS_MAX or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"user name {name!r} must be 1..{USER_NAME_CHARS_MAX} characters, no control characters",
        )


def new_salt(salt_bytes: int = SALT_BYTES_DEFAULT) -> bytes:
    return os.urandom(salt_bytes)


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC-H, one hash length of output."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def client_key(hash_name: str, salted: bytes) -> bytes:
    return _hmac(hash_name, salted, b"Client Key")


def credential_from_salted(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """The stored credential made from a salted password (what the controller does with an upsertion)."""
    hash_name = check_mechanism(mechanism)
    stored = hashlib.new(hash_name, client_key(hash_name, salted)).digest()
    return ScramCredential(
        mechanism, bytes(salt), iterations, stored, _hmac(hash_name, salted, b"Server Key")
    )


def derive(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
    """The stored credential of `password` (tests and the dev tooling; clients send salted passwords)."""
    return credential_from_salted(mechanism, salt, iterations,
                                  salted_password(check_mechanism(mechanism), password, salt, iterations))


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from: H(ClientKey) == StoredKey, compared in
    constant time. Costs one PBKDF2 of `iterations` rounds (milliseconds): callers cache the outcome."""
    hash_name = check_mechanism(credential.mechanism)
    salted = salted_password(hash_name, password, credential.salt, credential.iterations)
    stored = hashlib.new(hash_name, client_key(hash_name, salted)).digest()
    return hmac.compare_digest(stored, credential.stored_key)


def client_proof(hash_name: str, salted: bytes, auth_message: bytes) -> bytes:
    """ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage) (RFC 5802 section 3)."""
    key = client_key(hash_name, salted)
    signature = _hmac(hash_name, hashlib.new(hash_name, key).digest(), auth_message)
    return bytes(a ^ b for a, b in zip(key, signature, strict=True))


def server_signature(hash_name: str, server_key: bytes, auth_message: bytes) -> bytes:
    """ServerSignature = HMAC(ServerKey, AuthMessage) (RFC 5802 section 3)."""
    return _hmac(hash_name, server_key, auth_message)
