"""Throwaway PKI for a local API server: a CA, a serving certificate for 127.0.0.1/localhost, an
admin client certificate in ``system:masters`` and a service-account signing key pair.

Private keys are written with mode 0600 and never logged.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "modelplane-admin"
ADMIN_GROUPS = ("system:masters",)
SERVING_HOSTS = ("127.0.0.1", "localhost")
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate (or public key) and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes = b""

    def __repr__(self) -> str:  # keep key material out of logs and tracebacks
        return f"KeyPair(cert_pem=<{len(self.cert_pem)} bytes>, key_pem=<redacted>)"


@dataclass(frozen=True)
class PKIPaths:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_private_key: Path

    @classmethod
    def under(cls, directory: Path) -> PKIPaths:
        """The one file layout of a PKI directory."""
        return cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            serving_cert=directory / "apiserver.crt",
            serving_key=directory / "apiserver.key",
            admin_cert=directory / "admin.crt",
            admin_key=directory / "admin.key",
            sa_public_key=directory / "sa.pub",
            sa_private_key=directory / "sa.key",
        )


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + VALIDITY


_UNUSED = ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement")


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signing only; a CA also signs certificates and revocation lists."""
    unused = dict.fromkeys((*_UNUSED, "encipher_only", "decipher_only"), False)
    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca, **unused)


def generate_ca(common_name: str = "modelplane-dev-ca") -> KeyPair:
    key = _new_key()
    not_before, not_after = _validity()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _leaf(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: Sequence[x509.GeneralName] = (),
) -> KeyPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key must be an EC key")
    key = _new_key()
    not_before, not_after = _validity()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def generate_serving_cert(
    ca: KeyPair,
    hosts: Sequence[str] = SERVING_HOSTS,
    common_name: str = "kube-apiserver",
) -> KeyPair:
    """A TLS server certificate whose SANs are ``hosts`` (IP addresses become IP SANs)."""
    return _leaf(ca, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, [_san(h) for h in hosts])


def generate_client_cert(
    ca: KeyPair, user: str = ADMIN_USER, groups: Sequence[str] = ADMIN_GROUPS
) -> KeyPair:
    """A client certificate: kube-apiserver maps CN to the user name and O to its groups."""
    return _leaf(ca, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)


def generate_service_account_keys() -> KeyPair:
    """The service-account token signing key (``cert_pem`` holds the PEM public key)."""
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))


def write_secret(path: Path, data: str | bytes) -> None:
    """Write a file only its owner can read (mode 0600, also when it already existed)."""
    _write(path, data.encode() if isinstance(data, str) else data, secret=True)


def _write(path: Path, data: bytes, *, secret: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o600 if secret else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)


def write_pki(directory: Path, hosts: Sequence[str] = SERVING_HOSTS) -> PKIPaths:
    """Generate a fresh PKI into ``directory`` (mode 0700) and return the file paths."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = generate_ca()
    serving = generate_serving_cert(ca, hosts)
    admin = generate_client_cert(ca)
    sa = generate_service_account_keys()
    paths = PKIPaths.under(directory)
    _write(paths.ca_cert, ca.cert_pem, secret=False)
    _write(paths.ca_key, ca.key_pem, secret=True)
    _write(paths.serving_cert, serving.cert_pem, secret=False)
    _write(paths.serving_key, serving.key_pem, secret=True)
    _write(paths.admin_cert, admin.cert_pem, secret=False)
    _write(paths.admin_key, admin.key_pem, secret=True)
    _write(paths.sa_public_key, sa.cert_pem, secret=False)
    _write(paths.sa_private_key, sa.key_pem, secret=True)
    return paths
