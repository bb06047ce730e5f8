"""The runtime state's PostgreSQL connection is verified TLS unless the database is on this
machine (security review M6), against a real server with a certificate for 127.0.0.1."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from modelplane.devcluster.certs import generate_ca
from modelplane.driver.errors import BackendError
from modelplane.driver.pgstore import PostgresStore, connect_args

# (id, query, the host, TLS: "off", "offered" (when the server offers it, unverified),
# "unverified", "chain", "full")
POLICY = [
    ("loopback default: as libpq's prefer", "", "127.0.0.1", "offered"),
    ("localhost default: as libpq's prefer", "", "localhost", "offered"),
    ("remote default: verify-full", "", "db.example", "full"),
    ("remote disable", "sslmode=disable", "db.example", "off"),
    ("loopback disable", "sslmode=disable", "127.0.0.1", "off"),
    ("require", "sslmode=require", "db.example", "unverified"),
    ("require with a root: verify-ca", "sslmode=require&sslrootcert=system", "db.example", "chain"),
    ("verify-ca", "sslmode=verify-ca", "db.example", "chain"),
    ("verify-full on loopback", "sslmode=verify-full", "127.0.0.1", "full"),
]


@pytest.mark.parametrize(
    ("query", "host", "tls"), [c[1:] for c in POLICY], ids=[c[0] for c in POLICY]
)
def test_backend_postgres_tls_policy(query: str, host: str, tls: str) -> None:
    context = connect_args(f"postgres://mp:pw@{host}:5432/state?{query}")["ssl_context"]
    if tls in ("off", "offered"):
        assert context is {"off": False, "offered": None}[tls]  # pg8000's two meanings
        return
    assert isinstance(context, ssl.SSLContext)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    checked = context.verify_mode == ssl.CERT_REQUIRED
    assert (checked, context.check_hostname) == {
        "unverified": (False, False),
        "chain": (True, False),
        "full": (True, True),
    }[tls]


@pytest.mark.parametrize("mode", ["prefer", "allow", "verify-some"])
def test_backend_postgres_modes_that_could_fall_back_are_refused(mode: str) -> None:
    with pytest.raises(BackendError) as caught:
        connect_args(f"postgres://mp:hidden@db.example/state?sslmode={mode}")
    assert "sslmode" in str(caught.value) and "hidden" not in str(caught.value)


def _store(url: str) -> PostgresStore:
    return PostgresStore(url, "tls-test")


def _tls_in_use(store: PostgresStore) -> bool:
    [[used]] = store._run("select ssl from pg_stat_ssl where pid = pg_backend_pid()")
    return bool(used)


def test_backend_postgres_verified_tls_against_a_real_server(
    postgres_url: str, postgres_ca: Path, tmp_path: Path
) -> None:
    base = postgres_url.split("?", 1)[0]
    verified = _store(f"{base}?sslmode=verify-full&sslrootcert={postgres_ca}")
    try:
        verified.save("health", {"ok": True})
        assert verified.load("health") == {"ok": True} and _tls_in_use(verified)
    finally:
        verified.close()
    for query, tls in (("", True), ("?sslmode=disable", False)):  # loopback: as offered
        store = _store(base + query)
        try:
            assert _tls_in_use(store) is tls, query
        finally:
            store.close()

    other = tmp_path / "other-ca.crt"
    other.write_bytes(generate_ca("someone-else").cert_pem)
    # (id, URL): the server's certificate does not verify
    refused = [
        ("another CA", f"{base}?sslmode=verify-full&sslrootcert={other}"),
        ("require with another CA", f"{base}?sslmode=require&sslrootcert={other}"),
        ("a name the certificate lacks", f"{base.replace('127.0.0.1', 'localhost')}"
         f"?sslmode=verify-full&sslrootcert={postgres_ca}"),
    ]  # fmt: skip
    for what, url in refused:
        store = _store(url.replace("modelplane@", "modelplane:hidden@"))
        with pytest.raises(BackendError) as caught:
            store.save("health", {})
        message = str(caught.value)
        assert "cannot connect" in message and "hidden" not in message, what
        assert "the server's certificate does not verify" in message, what
    # The chain alone (verify-ca) accepts the name it lacks.
    chain = _store(
        f"{base.replace('127.0.0.1', 'localhost')}?sslmode=verify-ca&sslrootcert={postgres_ca}"
    )
    try:
        assert _tls_in_use(chain)
    finally:
        chain.close()
