"""The fleet CA: deterministic leaves, rotation overlap, CA text parsing, and a real mutual-TLS
handshake over 127.0.0.1 with the leaves it issues."""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modelplane.fleet_pki import (
    CA_LIFETIME,
    EPOCH,
    LIFETIME,
    PERIOD,
    SKEW,
    FleetCA,
    Leaf,
    PKIFormatError,
    leaf,
    new_ca,
    next_change,
    parse_ca,
    period_start,
    server_name,
)

# Real time: the handshake checks validity against the clock. Three days into the period, so
# NOW + 20 days is still inside it.
REAL_NOW = datetime.now(UTC)
NOW = period_start(REAL_NOW) + timedelta(days=3, hours=5)
US = timedelta(microseconds=1)
DEV2 = server_name("dev-2")


@pytest.fixture(scope="module")
def ca_text() -> str:
    return new_ca(REAL_NOW)


@pytest.fixture(scope="module")
def ca(ca_text: str) -> FleetCA:
    return parse_ca(ca_text)


@pytest.fixture(scope="module")
def other_ca() -> FleetCA:
    return parse_ca(new_ca(REAL_NOW))


def _cert(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def _public_der(pem_key: str) -> bytes:
    key = serialization.load_pem_private_key(pem_key.encode(), password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _ext(cert: x509.Certificate, kind: type[Any]) -> Any:
    return cert.extensions.get_extension_for_class(kind)


# --- the CA ------------------------------------------------------------------------------------


def test_new_ca_is_a_p256_ca_valid_for_ten_years(ca_text: str, ca: FleetCA) -> None:
    assert ca_text.startswith("-----BEGIN CERTIFICATE-----")
    assert ca_text.rstrip().endswith("-----END PRIVATE KEY-----")
    assert ca.cert_pem in ca_text
    assert isinstance(ca.key.curve, ec.SECP256R1)
    name = {a.oid: a.value for a in ca.cert.subject}
    assert name == {
        NameOID.COMMON_NAME: "modelplane fleet CA",
        NameOID.ORGANIZATION_NAME: "modelplane",
    }
    assert ca.cert.issuer == ca.cert.subject
    assert ca.cert.not_valid_before_utc == (REAL_NOW - SKEW).replace(microsecond=0)
    assert ca.cert.not_valid_after_utc == (REAL_NOW + CA_LIFETIME).replace(microsecond=0)
    constraints = _ext(ca.cert, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = _ext(ca.cert, x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature
    _ext(ca.cert, x509.SubjectKeyIdentifier)
    ca.cert.verify_directly_issued_by(ca.cert)
    assert "PRIVATE" not in repr(ca)


def test_new_ca_is_random() -> None:
    assert parse_ca(new_ca(REAL_NOW)).cert_pem != parse_ca(new_ca(REAL_NOW)).cert_pem


def _p384_ca_text() -> str:
    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "p384")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(REAL_NOW)
        .not_valid_after(REAL_NOW + PERIOD)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode() + key_pem.decode()


def _split(text: str) -> tuple[str, str]:
    at = text.index("-----BEGIN PRIVATE KEY-----")
    return text[:at], text[at:]


def _corrupt(pem: str) -> str:
    lines = pem.splitlines()
    lines[1] = "A" * len(lines[1])
    return "\n".join(lines) + "\n"


BAD_CA_TEXTS = [
    ("empty", lambda mine, other: "", "no certificate"),
    ("garbage", lambda mine, other: "not a PEM at all\n\x00\xff", "no certificate"),
    ("cert only", lambda mine, other: _split(mine)[0], "no private key"),
    ("key only", lambda mine, other: _split(mine)[1], "no certificate"),
    ("two CAs mixed", lambda mine, other: _split(mine)[0] + _split(other)[1], "does not match"),
    ("two certificates", lambda mine, other: _split(other)[0] + mine, "2 certificate"),
    (
        "corrupt certificate",
        lambda mine, other: _corrupt(_split(mine)[0]) + _split(mine)[1],
        "certificate does not parse",
    ),
    (
        "corrupt key",
        lambda mine, other: _split(mine)[0] + _corrupt(_split(mine)[1]),
        "key does not parse",
    ),
    ("P-384 key", lambda mine, other: _p384_ca_text(), "not an ECDSA P-256 key"),
]


@pytest.mark.parametrize(
    ("make", "says"), [c[1:] for c in BAD_CA_TEXTS], ids=[c[0] for c in BAD_CA_TEXTS]
)
def test_parse_ca_rejects(make: Any, says: str, ca_text: str) -> None:
    other = new_ca(REAL_NOW)
    text = make(ca_text, other)
    with pytest.raises(PKIFormatError) as caught:
        parse_ca(text)
    message = str(caught.value)
    assert message.startswith("the fleet CA (modelplane-fleet-ca/pem): ")
    assert says in message
    assert "PRIVATE KEY" not in message and "-----" not in message
    for secret in (ca_text, other):
        for line in _split(secret)[1].splitlines()[1:-1]:
            assert line not in message
    assert caught.value.__cause__ is None


def test_parse_ca_rejects_a_leaf_as_ca(ca: FleetCA) -> None:
    issued = leaf(ca, name="front-door", role="client", now=NOW)
    with pytest.raises(PKIFormatError, match="not a CA certificate"):
        parse_ca(issued.cert_pem + issued.key_pem)


def test_parse_ca_round_trips(ca_text: str, ca: FleetCA) -> None:
    again = parse_ca("\n  " + ca_text + "\n")
    assert again.cert_pem == ca.cert_pem
    assert again.key.private_numbers() == ca.key.private_numbers()


# --- periods -----------------------------------------------------------------------------------

PERIODS = [
    ("epoch", EPOCH, EPOCH),
    ("just after epoch", EPOCH + US, EPOCH),
    ("end of first period", EPOCH + PERIOD - US, EPOCH),
    ("second period", EPOCH + PERIOD, EPOCH + PERIOD),
    ("tenth period, mid", EPOCH + 9 * PERIOD + timedelta(days=17), EPOCH + 9 * PERIOD),
    ("just before epoch", EPOCH - US, EPOCH - PERIOD),
    ("a period before epoch", EPOCH - PERIOD, EPOCH - PERIOD),
    ("just before that", EPOCH - PERIOD - US, EPOCH - 2 * PERIOD),
    ("long before epoch", datetime(2000, 6, 1, tzinfo=UTC), EPOCH - 312 * PERIOD),
    # 23:00 UTC on 2026-01-30, an hour before the second period starts.
    ("non-UTC zone", datetime(2026, 1, 31, 1, tzinfo=timezone(timedelta(hours=2))), EPOCH),
]


@pytest.mark.parametrize(("now", "start"), [c[1:] for c in PERIODS], ids=[c[0] for c in PERIODS])
def test_period_start_and_next_change(now: datetime, start: datetime) -> None:
    assert period_start(now) == start
    assert next_change(now) == start + PERIOD
    assert period_start(now) <= now < next_change(now)


def test_period_needs_an_aware_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        period_start(datetime(2026, 3, 1))


def test_server_name() -> None:
    assert server_name("dev-2") == "dev-2.gateway.modelplane.internal"


# --- leaves ------------------------------------------------------------------------------------

BASE: dict[str, Any] = {"name": "front-door", "role": "server", "dns_names": ("a.example",)}

SAME = [
    ("same inputs", {}),
    ("20 days later in the period", {"now": NOW + timedelta(days=20)}),
    ("start of the period", {"now": period_start(NOW)}),
    ("DNS names in another order", {"dns_names": ("b.example", "a.example")}),
    ("DNS names repeated", {"dns_names": ("b.example", "a.example", "b.example")}),
]


@pytest.mark.parametrize("change", [c[1] for c in SAME], ids=[c[0] for c in SAME])
def test_leaf_is_deterministic(change: dict[str, Any], ca: FleetCA) -> None:
    base = {**BASE, "dns_names": ("a.example", "b.example"), "now": NOW}
    first = leaf(ca, **base)
    again = leaf(ca, **{**base, **change})
    assert again == first


DIFFERENT = [
    ("name", {"name": "front-door-2"}),
    ("role", {"role": "client"}),
    ("DNS name", {"dns_names": ("b.example",)}),
    ("extra DNS name", {"dns_names": ("a.example", "b.example")}),
    ("next period", {"now": NOW + PERIOD}),
    ("previous period", {"now": NOW - PERIOD}),
    ("another CA", {"ca": "other"}),
]


@pytest.mark.parametrize("change", [c[1] for c in DIFFERENT], ids=[c[0] for c in DIFFERENT])
def test_leaf_differs(change: dict[str, Any], ca: FleetCA, other_ca: FleetCA) -> None:
    first = leaf(ca, **BASE, now=NOW)
    args = {**BASE, "now": NOW, **change}
    issuer = other_ca if args.pop("ca", None) == "other" else ca
    second = leaf(issuer, **args)
    assert _public_der(second.key_pem) != _public_der(first.key_pem)
    assert second.cert_pem != first.cert_pem
    assert _cert(second.cert_pem).serial_number != _cert(first.cert_pem).serial_number


ROLES = [
    ("server", (DEV2,), ExtendedKeyUsageOID.SERVER_AUTH),
    ("client", (), ExtendedKeyUsageOID.CLIENT_AUTH),
    ("client", ("front-door.modelplane.internal",), ExtendedKeyUsageOID.CLIENT_AUTH),
]


@pytest.mark.parametrize(("role", "dns_names", "usage"), ROLES)
def test_leaf_certificate(
    role: str, dns_names: tuple[str, ...], usage: x509.ObjectIdentifier, ca: FleetCA
) -> None:
    issued = leaf(ca, name="gw", role=role, dns_names=dns_names, now=NOW)  # type: ignore[arg-type]
    cert = _cert(issued.cert_pem)
    cert.verify_directly_issued_by(ca.cert)
    assert cert.issuer == ca.cert.subject
    assert {a.oid: a.value for a in cert.subject} == {
        NameOID.COMMON_NAME: "gw",
        NameOID.ORGANIZATION_NAME: "modelplane",
    }
    assert _ext(cert, x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage([usage])
    if dns_names:
        sans = _ext(cert, x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
        assert sans == list(dns_names)
    else:
        with pytest.raises(x509.ExtensionNotFound):
            _ext(cert, x509.SubjectAlternativeName)
    key_usage = _ext(cert, x509.KeyUsage)
    assert key_usage.critical and key_usage.value.digital_signature
    assert not key_usage.value.key_cert_sign
    assert _ext(cert, x509.BasicConstraints).value.ca is False
    assert _ext(cert, x509.AuthorityKeyIdentifier).value.key_identifier == (
        _ext(ca.cert, x509.SubjectKeyIdentifier).value.digest
    )
    assert _ext(cert, x509.SubjectKeyIdentifier).value == (
        x509.SubjectKeyIdentifier.from_public_key(cert.public_key())
    )
    assert 0 < cert.serial_number < 2**159 and cert.serial_number % 2 == 1
    assert _public_der(issued.key_pem) == cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert issued.key_pem.startswith("-----BEGIN PRIVATE KEY-----")
    assert "PRIVATE" not in repr(issued)
    start = period_start(NOW)
    assert (issued.not_before, issued.not_after) == (start - SKEW, start + LIFETIME)
    assert (cert.not_valid_before_utc, cert.not_valid_after_utc) == (start - SKEW, start + LIFETIME)


def test_rotation_overlaps_the_previous_leaf_by_60_days(ca: FleetCA) -> None:
    old = leaf(ca, **BASE, now=NOW)
    new = leaf(ca, **BASE, now=NOW + PERIOD)
    assert new.not_before == old.not_before + PERIOD
    assert new.not_before < old.not_after
    assert old.not_after - period_start(NOW + PERIOD) == LIFETIME - PERIOD == timedelta(days=60)
    for issued in (old, new):
        _cert(issued.cert_pem).verify_directly_issued_by(ca.cert)


def test_leaf_ends_with_the_ca(ca: FleetCA) -> None:
    ca_end = ca.cert.not_valid_after_utc
    issued = leaf(ca, **BASE, now=ca_end - timedelta(days=10))
    assert issued.not_after == ca_end
    with pytest.raises(ValueError, match="expired"):
        leaf(ca, **BASE, now=ca_end + US)


INVALID = [
    ("server without DNS names", {"dns_names": ()}, "at least one DNS name"),
    ("unknown role", {"role": "peer"}, "role"),
    ("empty name", {"name": ""}, "name"),
    ("comma in a DNS name", {"dns_names": ("a,b.example",)}, "DNS names"),
    ("naive now", {"now": datetime(2026, 3, 1)}, "timezone-aware"),
]


@pytest.mark.parametrize(("change", "says"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_leaf_rejects(change: dict[str, Any], says: str, ca: FleetCA) -> None:
    with pytest.raises(ValueError, match=says):
        leaf(ca, **{**BASE, "now": NOW, **change})


# --- mutual TLS --------------------------------------------------------------------------------


def _files(tmp_path: Path, label: str, issued: Leaf) -> tuple[Path, Path]:
    cert, key = tmp_path / f"{label}.crt", tmp_path / f"{label}.key"
    cert.write_text(issued.cert_pem)
    key.write_text(issued.key_pem)
    return cert, key


@dataclass
class _Server:
    port: int
    thread: threading.Thread
    outcome: list[object]


def _serve_once(ctx: ssl.SSLContext) -> _Server:
    """Accept one connection, complete the handshake, send b"hello" and the peer's CN."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    outcome: list[object] = []

    def serve() -> None:
        with listener:
            try:
                conn, _ = listener.accept()
                conn.settimeout(10)
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    peer = dict(a[0] for a in tls.getpeercert()["subject"])  # type: ignore[index]
                    tls.sendall(b"hello " + peer["commonName"].encode())
                    outcome.append(peer["commonName"])
            except OSError as error:
                outcome.append(error)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return _Server(listener.getsockname()[1], thread, outcome)


def _connect(ctx: ssl.SSLContext, port: int, hostname: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=hostname) as tls:
            return tls.recv(100)


def _contexts(
    tmp_path: Path, ca: FleetCA, client: Leaf | None
) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server_leaf = leaf(ca, name="gateway-dev-2", role="server", dns_names=(DEV2,), now=REAL_NOW)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_verify_locations(cadata=ca.cert_pem)
    server_ctx.load_cert_chain(*_files(tmp_path, "server", server_leaf))
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cadata=ca.cert_pem)
    if client is not None:
        client_ctx.load_cert_chain(*_files(tmp_path, "client", client))
    return server_ctx, client_ctx


def test_mutual_tls_handshake(tmp_path: Path, ca: FleetCA) -> None:
    client = leaf(ca, name="front-door", role="client", now=REAL_NOW)
    server_ctx, client_ctx = _contexts(tmp_path, ca, client)
    server = _serve_once(server_ctx)
    assert _connect(client_ctx, server.port, DEV2) == b"hello front-door"
    server.thread.join(10)
    assert server.outcome == ["front-door"]


REFUSED = [
    ("no client certificate", None, DEV2),
    ("client leaf from another CA", "other-ca", DEV2),
    ("server leaf as client certificate", "server-role", DEV2),
    ("server name of another cluster", "client", server_name("dev-3")),
]


@pytest.mark.parametrize(
    ("client", "hostname"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_mutual_tls_refused(
    client: str | None, hostname: str, tmp_path: Path, ca: FleetCA, other_ca: FleetCA
) -> None:
    leaves = {
        "client": leaf(ca, name="front-door", role="client", now=REAL_NOW),
        "other-ca": leaf(other_ca, name="front-door", role="client", now=REAL_NOW),
        "server-role": leaf(ca, name="front-door", role="server", dns_names=("x",), now=REAL_NOW),
    }
    server_ctx, client_ctx = _contexts(tmp_path, ca, None if client is None else leaves[client])
    server = _serve_once(server_ctx)
    # TLS 1.3: the client may finish its handshake before the server's alert arrives.
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        _connect(client_ctx, server.port, hostname)
    server.thread.join(10)
    assert len(server.outcome) == 1 and isinstance(server.outcome[0], ssl.SSLError)
