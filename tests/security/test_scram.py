"""kanal.security.scram against the RFCs' worked examples: RFC 5802 section 5 (SCRAM-SHA-1) and RFC 7677
section 3
(SCRAM-SHA-256). Both use user "user", password "pencil" and 4096 iterations; the proofs and signatures
below are the RFCs' values, so the salted password, ClientKey, StoredKey and ServerKey derivations (what
UserScramCredentialRecord stores) are checked end to end."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kanal.security.scram import (
    MECHANISMS,
    check_iterations,
    check_mechanism,
    check_user_name,
    client_proof,
    credential_from_salted,
    derive,
    salted_password,
    server_signature,
    verify_password,
)
from kanal.v1.error import ErrorCode, KanalError

RFC_VECTORS = [
    # (hash, client nonce, server nonce suffix, salt, client proof, server signature)
    ("sha1", "fyko+d2lbbFgONRv9qkxdawL", "3rfcNHYJY1ZVvWVs7j", "QSXCR+Q6sek8bf92",
     "v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=", "rmF9pqV8S7suAoZWja4dJRkFsKQ="),
    ("sha256", "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "W22ZaJ0SNY7soEsUEjb6gQ==",
     "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
]


@pytest.mark.parametrize(("hash_name", "cnonce", "snonce", "salt", "proof", "signature"), RFC_VECTORS)
def test_rfc_worked_examples(hash_name, cnonce, snonce, salt, proof, signature):
    nonce = cnonce + snonce
    auth_message = (f"n=user,r={cnonce},r={nonce},s={salt},i=4096,c=biws,r={nonce}").encode()
    salted = salted_password(hash_name, "pencil", base64.b64decode(salt), 4096)
    assert base64.b64encode(client_proof(hash_name, salted, auth_message)).decode() == proof
    if hash_name == "sha256":  # a kanal mechanism: the stored credential's ServerKey signs as the RFC's does
        credential = credential_from_salted("SCRAM-SHA-256", base64.b64decode(salt), 4096, salted)
        server_key = credential.server_key
        assert verify_password(credential, "pencil")
        assert not verify_password(credential, "pencil!")
    else:  # SCRAM-SHA-1 is no kanal mechanism; its example still checks the derivation's shape
        server_key = hmac.new(salted, b"Server Key", "sha1").digest()
    assert base64.b64encode(server_signature(hash_name, server_key, auth_message)).decode() == signature


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_stored_key_is_the_hash_of_the_client_key_and_the_password_is_not_kept(mechanism):
    credential = derive(mechanism, "hunter2", b"s" * 32, 4096)
    assert verify_password(credential, "hunter2")
    assert not verify_password(credential, "hunter3")
    assert (
        len(credential.stored_key)
        == len(credential.server_key)
        == hashlib.new(MECHANISMS[mechanism]).digest_size
    )
    assert b"hunter2" not in credential.stored_key + credential.server_key + credential.salt
    assert "hunter2" not in repr(credential) and credential.stored_key.hex() not in repr(credential)


def test_unicode_passwords_are_utf8():
    credential = derive("SCRAM-SHA-512", "pässwörd ✓", b"x" * 16, 4096)
    assert verify_password(credential, "pässwörd ✓")
    assert not verify_password(credential, "passwort ✓")


def test_bounds_are_kafkas():
    check_iterations(4096)
    check_iterations(16384)
    for bad in (4095, 16385):
        with pytest.raises(KanalError) as err:
            check_iterations(bad)
        assert err.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KanalError):
        check_mechanism("SCRAM-SHA-1")
    for bad in ("", "a\nb", "x" * 256):
        with pytest.raises(KanalError):
            check_user_name(bad)
    check_user_name("alice@example.com")
