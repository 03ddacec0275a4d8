"""Throwaway certificates for `kanal dev --tls` and the tests: a CA, node and client certificates, CRLs.

Everything is PEM, keys are ECDSA P-256 and unencrypted (0600). A directory made by `make_dev_tls(dir)`:

    ca.pem, ca-key.pem                     the CA (valid DAYS days)
    broker-<id>.pem, broker-<id>-key.pem   subject CN=broker-<id>, SAN localhost and 127.0.0.1
    controller-<id>.pem, ...-key.pem       subject CN=controller-<id>, same SAN
    client.pem, client-key.pem             subject CN=<client name> (the dev user's certificate)

Node certificates serve both ways (serverAuth and clientAuth): a node presents its certificate when it
listens and when it dials another node. With the mapping rule NODE_MAPPING_RULES the subject CN=broker-1
is the principal User:broker-1.

Not for production: there the CA is the organisation's, keys never leave the machines they belong to.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAYS = 30
# The principal of a certificate is its CN (then the whole subject when it has none).
NODE_MAPPING_RULES = "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    serial: int


@dataclass(frozen=True)
class CertificateAuthority:
    cert: Path
    key: Path

    def _load(self):
        key = serialization.load_pem_private_key(self.key.read_bytes(), password=None)
        return x509.load_pem_x509_certificate(self.cert.read_bytes()), key

    def issue(
        self,
        directory: Path,
        name: str,
        common_name: str,
        *,
        days: int = DAYS,
        not_before: datetime.datetime | None = None,
        hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
    ) -> Issued:
        """A certificate for CN=`common_name` signed by this CA, good for TLS servers and clients, written
        as `name`.pem and `name`-key.pem."""
        ca_cert, ca_key = self._load()
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or _now() - datetime.timedelta(minutes=5)
        serial = x509.random_serial_number()
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                   .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(serial)
                   .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return Issued(*_write(directory, name, cert, key), serial)

    def crl(self, path: Path, revoked_serials: list[int]) -> Path:
        """A CRL signed by this CA revoking `revoked_serials`, written to `path` (PEM)."""
        ca_cert, ca_key = self._load()
        now = _now()
        builder = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(ca_cert.subject)
            .last_update(now - datetime.timedelta(minutes=5))
            .next_update(now + datetime.timedelta(days=1))
        )
        for serial in revoked_serials:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build())
        path.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        return path


def make_ca(directory: Path, name: str = "ca", common_name: str = "kanal dev CA") -> CertificateAuthority:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = _now() - datetime.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(*_write(directory, name, cert, key))


@dataclass(frozen=True)
class DevTls:
    """The files of a secured local cluster."""

    directory: Path
    ca: CertificateAuthority
    nodes: dict[str, Issued]  # "broker-1", "controller-0", ...
    client: Issued


def make_dev_tls(directory: Path, *, broker_ids, controller_ids, client_name: str = "admin") -> DevTls:
    ca = make_ca(directory)
    nodes = {f"{kind}-{i}": ca.issue(directory, f"{kind}-{i}", f"{kind}-{i}")
             for kind, ids in (("broker", broker_ids), ("controller", controller_ids)) for i in ids}
    return DevTls(directory, ca, nodes, ca.issue(directory, "client", client_name))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(directory: Path, name: str, cert: x509.Certificate, key) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path
