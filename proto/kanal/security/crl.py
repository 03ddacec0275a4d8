"""The certificate revocation list of `--tls-crl-file`: its revoked serial numbers, once its signature checks.

gRPC Python has no CRL option, so kanal checks client certificates against the list itself:
listener_security.py loads it once at start so a bad file is one line before anything starts, and the
door (authentication.py) loads it again whenever the file changes. `cryptography` is imported only when a
list is loaded: a node without --tls-crl-file never imports it here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from cryptography import x509


def _signed_by(crl: x509.CertificateRevocationList, ca: x509.Certificate) -> bool:
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

    key = ca.public_key()
    if not isinstance(
        key,
        (
            dsa.DSAPublicKey,
            rsa.RSAPublicKey,
            ec.EllipticCurvePublicKey,
            ed25519.Ed25519PublicKey,
            ed448.Ed448PublicKey,
        ),
    ):
        return False  # a key-agreement key (X25519, X448) signs nothing
    return crl.is_signature_valid(key)


def load_crl(path: Path, ca_pem: bytes | None) -> frozenset[int]:
    """The revoked serial numbers of a CRL (PEM or DER) whose signature checks against one of the CA
    certificates; INVALID_CONFIG (one line) otherwise."""
    from cryptography import x509

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KanalError(
            ErrorCode.INVALID_CONFIG, f"--tls-crl-file {path}: cannot read it: {exc.strerror}"
        ) from None
    try:
        crl = x509.load_pem_x509_crl(data) if b"-----BEGIN" in data else x509.load_der_x509_crl(data)
    except ValueError as exc:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"--tls-crl-file {path}: not a CRL: {exc}") from None
    cas = x509.load_pem_x509_certificates(ca_pem) if ca_pem else []
    if not any(ca.subject == crl.issuer and _signed_by(crl, ca) for ca in cas):
        raise KanalError(
            ErrorCode.INVALID_CONFIG,
            f"--tls-crl-file {path}: not signed by a CA of --tls-ca-file (issuer "
            f"{crl.issuer.rfc4514_string()})",
        )
    return frozenset(entry.serial_number for entry in crl)
