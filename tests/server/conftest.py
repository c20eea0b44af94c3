"""Certificates made by the tests themselves (a CA, a server certificate for localhost, client certificates)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    certificate: Path
    key: Path


class Authority:
    """A throwaway CA writing the certificates it issues into `folder`."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._certificate = self._build(self._name, self._key.public_key(), ca=True, dns=())
        self.certificate = self._write(f"{name}.pem", self._certificate.public_bytes(serialization.Encoding.PEM))

    def _build(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey, ca: bool, dns: tuple[str, ...]
    ) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if dns:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
        return builder.sign(self._key, hashes.SHA256())

    def _write(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        path.write_bytes(data)
        return path

    def issue(self, common_name: str, dns: tuple[str, ...] = ()) -> Issued:
        """A certificate for `common_name` (and DNS names `dns`) signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        certificate = self._build(subject, key.public_key(), ca=False, dns=dns)
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return Issued(
            self._write(f"{common_name}.crt", certificate.public_bytes(serialization.Encoding.PEM)),
            self._write(f"{common_name}.key", private),
        )


@pytest.fixture(scope="session")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki"), "envhub-test-ca")


@pytest.fixture(scope="session")
def foreign_authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """A CA the servers do not trust."""
    return Authority(tmp_path_factory.mktemp("foreign-pki"), "someone-else-ca")
