"""The fleet's certificate authority for mutual TLS between the front door and the workload
gateways.

The CA key is the only secret the stacks hold (one text, certificate PEM then key PEM, stored as
a Pulumi secret). Every leaf is derived from it deterministically: its key comes from HKDF over
the CA key and (role, name, DNS names, period start), and its certificate is signed with RFC 6979
ECDSA, so the stack program re-derives byte-identical PEMs on every run inside a period and
`up` shows no diff. The first `up` of the next period rotates the leaf; the previous one stays
valid for LIFETIME - PERIOD (60 days) more and both are signed by the same CA, so the other side
needs no change. Pure: standard library and ``cryptography`` only, no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modelplane.errors import UserError

CA_LIFETIME = timedelta(days=3650)
PERIOD = timedelta(days=30)
LIFETIME = timedelta(days=90)
SKEW = timedelta(hours=1)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SERVER_NAME_SUFFIX = "gateway.modelplane.internal"
GENERATION_CONFIG = "modelplane:certificateGeneration"
"""Plain stack config of the cluster and gateway stacks: the certificates' generation."""
SECRET = ("modelplane-fleet-ca", "pem")
"""The secretRef the stacks resolve the CA from: config
`modelplane:secrets.modelplane-fleet-ca.pem`, or env
`MODELPLANE_SECRET_MODELPLANE_FLEET_CA_PEM`."""

CA_COMMON_NAME = "modelplane fleet CA"
ORGANIZATION = "modelplane"
_CA_WHAT = f"the fleet CA ({SECRET[0]}/{SECRET[1]})"
_HKDF_SALT = b"modelplane-fleet-pki"
# The order of the P-256 group: a private scalar lies in [1, n - 1].
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

_CERT_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.DOTALL)
_KEY_BLOCK = re.compile(
    r"-----BEGIN ((?:EC )?PRIVATE KEY)-----.*?-----END \1-----",
    re.DOTALL,
)


class PKIFormatError(UserError, ValueError):
    """A malformed fleet CA text (the message never holds key material)."""


@dataclass(frozen=True)
class FleetCA:
    """The fleet CA: its certificate (PEM and parsed) and its private key."""

    cert_pem: str
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey = field(repr=False)


@dataclass(frozen=True)
class Leaf:
    """A leaf certificate and its PKCS8 private key, both PEM."""

    cert_pem: str
    key_pem: str = field(repr=False)
    not_before: datetime
    not_after: datetime


def _require_aware(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("`now` must be a timezone-aware datetime")


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _key_der(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _spki(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def new_ca(now: datetime) -> str:
    """A new random P-256 CA: its certificate PEM followed by its PKCS8 private key PEM."""
    _require_aware(now)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(CA_COMMON_NAME)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode() + _key_pem(key)


def _one_block(pattern: re.Pattern[str], text: str, what: str) -> str:
    blocks = [m.group(0) for m in pattern.finditer(text)]
    if not blocks:
        raise PKIFormatError(f"{_CA_WHAT}: no {what} PEM block")
    if len(blocks) > 1:
        raise PKIFormatError(f"{_CA_WHAT}: {len(blocks)} {what} PEM blocks (expected one)")
    return blocks[0]


def parse_ca(text: str) -> FleetCA:
    """The fleet CA from its stored text (``new_ca``'s output); PKIFormatError if malformed."""
    cert_block = _one_block(_CERT_BLOCK, text, "certificate")
    key_block = _one_block(_KEY_BLOCK, text, "private key")
    try:
        cert = x509.load_pem_x509_certificate(cert_block.encode())
    except ValueError:
        raise PKIFormatError(f"{_CA_WHAT}: the certificate does not parse") from None
    try:
        key = serialization.load_pem_private_key(key_block.encode(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # `from None`: the library's message and the chained exception could quote the key.
        raise PKIFormatError(f"{_CA_WHAT}: the private key does not parse") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise PKIFormatError(f"{_CA_WHAT}: the private key is not an ECDSA P-256 key")
    if _spki(key.public_key()) != _spki(cert.public_key()):
        raise PKIFormatError(f"{_CA_WHAT}: the private key does not match the certificate")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise PKIFormatError(f"{_CA_WHAT}: the certificate is not a CA certificate")
    return FleetCA(cert.public_bytes(serialization.Encoding.PEM).decode(), cert, key)


def period_start(now: datetime) -> datetime:
    """The start of the rotation period holding ``now`` (periods tile time from EPOCH)."""
    _require_aware(now)
    return EPOCH + ((now - EPOCH) // PERIOD) * PERIOD


def next_change(now: datetime) -> datetime:
    """When the leaves derived at ``now`` are next rotated."""
    return period_start(now) + PERIOD


def server_name(cluster: str) -> str:
    """The DNS name a cluster's workload gateway presents (and the front door checks)."""
    return f"{cluster}.{SERVER_NAME_SUFFIX}"


def _derive_key(ca: FleetCA, info: bytes) -> ec.EllipticCurvePrivateKey:
    okm = HKDF(algorithm=hashes.SHA256(), length=48, salt=_HKDF_SALT, info=info).derive(
        _key_der(ca.key)
    )
    # 48 bytes reduced mod n - 1: the bias is below 2**-128.
    d = int.from_bytes(okm, "big") % (_P256_ORDER - 1) + 1
    return ec.derive_private_key(d, ec.SECP256R1())


def leaf(
    ca: FleetCA,
    *,
    name: str,
    role: Literal["server", "client"],
    dns_names: Sequence[str] = (),
    now: datetime,
    generation: int = 0,
) -> Leaf:
    """The leaf of ``name`` for the period holding ``now``: byte-identical for the same CA, name,
    role, DNS names (in any order), period and ``generation`` (`modelplane keys rotate
    --certificates` counts it up: a new leaf before the period ends)."""
    if generation < 0:
        raise ValueError(f"generation must be 0 or more, not {generation}")
    if role not in ("server", "client"):
        raise ValueError(f"role must be 'server' or 'client', not {role!r}")
    if not name or "\0" in name:
        raise ValueError(f"invalid leaf name {name!r}")
    dns = sorted(set(dns_names))
    # The separators keep the derivation input unambiguous.
    if any(not d or "," in d or "\0" in d for d in dns):
        raise ValueError(f"invalid DNS names {dns!r}")
    if role == "server" and not dns:
        raise ValueError(f"the server leaf {name!r} needs at least one DNS name")
    start = period_start(now)
    not_before = start - SKEW
    not_after = min(start + LIFETIME, ca.cert.not_valid_after_utc)
    if not_after <= now:
        raise ValueError(f"the fleet CA expired at {ca.cert.not_valid_after_utc.isoformat()}")

    parts = [role, name, ",".join(dns), start.isoformat()]
    if generation:
        parts.append(str(generation))
    info = "\0".join(parts).encode()
    key = _derive_key(ca, info)
    ca_der = ca.cert.public_bytes(serialization.Encoding.DER)
    serial = int.from_bytes(hashlib.sha256(info + ca_der).digest()[:19], "big") | 1
    usage = ExtendedKeyUsageOID.SERVER_AUTH if role == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if dns:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False
        )
    cert = builder.sign(ca.key, hashes.SHA256(), ecdsa_deterministic=True)
    return Leaf(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=_key_pem(key),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
    )
