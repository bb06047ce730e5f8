"""Runtime state in PostgreSQL: the :class:`~modelplane.driver.state.StateStore` of a fleet
whose Pulumi backend is ``postgres://`` (docs/architecture.md, "Where runtime state lives").

The documents sit next to the stacks' state, in the same database, in one table::

    modelplane_runtime(fleet text, name text, document jsonb, updated timestamptz,
                       primary key (fleet, name))

``fleet`` is the fleet id (the database is shared by every fleet on it, so documents are
keyed by it: ``MODELPLANE_FLEET_ID``, else the fleet's Pulumi project name). Every write is
one statement (``insert ... on conflict do update``): a reader sees the old or the new
document, never a torn one. The connection is opened per call (a reconcile round writes a
handful of documents; the round trip is measured in docs/benchmarks.md) so a restarted
database costs one failed write, never a stuck process.

A name can be shared by two fleets by mistake, so each id is claimed by the fleet's uid
(``modelplane.fleetUid`` in its ``Pulumi.yaml``, modelplane.driver.project) in a second
table::

    modelplane_fleets(fleet text primary key, uid text, claimed timestamptz)

The first write of a fleet with a uid claims an unclaimed id (and so adopts the documents a
fleet without a uid kept there). Until a fleet owns its id, each statement first reads the
claim, and a fleet of another uid (or of none) is refused with
:class:`~modelplane.driver.errors.FleetIdTaken` before anything is read or written.

The client is ``pg8000`` (pure Python). The URL is the backend's own: its password is
never logged or quoted in an error.
"""

from __future__ import annotations

import ipaddress
import json
import os
import ssl
import threading
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from modelplane.driver.errors import BackendError, FleetIdTaken
from modelplane.driver.settings import redact_url

TABLE = "modelplane_runtime"
FLEETS = "modelplane_fleets"
CONNECT_TIMEOUT = 10.0

_SCHEMA = (
    f"create table if not exists {TABLE} ("
    " fleet text not null, name text not null, document jsonb not null,"
    " updated timestamptz not null default now(), primary key (fleet, name))"
)
_FLEETS_SCHEMA = (
    f"create table if not exists {FLEETS} ("
    " fleet text primary key, uid text not null, claimed timestamptz not null default now())"
)


def redact(url: str) -> str:
    """The URL without its password (for messages): :func:`settings.redact_url`."""
    return redact_url(url)


def connect_args(url: str) -> dict[str, Any]:
    """pg8000's keyword arguments for a ``postgres://user:pw@host:port/db?sslmode=...`` URL."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise BackendError(f"{redact(url)} is not a postgres:// URL")
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    try:
        port = parsed.port  # a password holding "/" unencoded ends up here: never quoted
    except ValueError:
        raise BackendError(
            f"{redact(url)} is not a valid postgres:// URL (percent-encode the password's "
            "special characters, e.g. / as %2F)"
        ) from None
    args: dict[str, Any] = {
        "user": unquote(parsed.username or "postgres"),
        "host": parsed.hostname or "127.0.0.1",
        "port": port or 5432,
        "database": unquote(parsed.path.lstrip("/")) or "postgres",
        "timeout": CONNECT_TIMEOUT,
    }
    if parsed.password is not None:
        args["password"] = unquote(parsed.password)
    args["ssl_context"] = tls_context(url, args["host"], query)
    return args


SSL_MODES = ("disable", "require", "verify-ca", "verify-full")


def loopback(host: str) -> bool:
    """A host on this machine (a connection that never crosses a network)."""
    if host == "localhost" or host.startswith("/"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_context(url: str, host: str, query: dict[str, str]) -> ssl.SSLContext | bool | None:
    """pg8000's `ssl_context` by libpq's `sslmode` (docs/architecture.md, "Where runtime
    state lives"): absent, `verify-full` unless the host is loopback (then libpq's `prefer`:
    TLS when the server offers it, unverified, None); `disable`: no TLS (False); `require`
    encrypts without checking the server, unless `sslrootcert` is given (then as
    `verify-ca`, as libpq does); `verify-ca` checks the chain, `verify-full` the chain and the
    host name. `sslrootcert`: the CA file (`system`: the system's CAs, also the default);
    `sslcert`/`sslkey`: a client certificate. `allow` and `prefer` fall back to plaintext,
    which this client does not do: refused with the reason."""
    mode = query.get("sslmode")
    if not mode and loopback(host):
        return None  # the connection never leaves this machine
    mode = mode or "verify-full"
    if mode in ("allow", "prefer"):
        raise BackendError(
            f"{redact(url)}: sslmode={mode} may fall back to plaintext, which modelplane's "
            "runtime state does not do: use sslmode=verify-full (with sslrootcert=<CA file>), "
            "verify-ca, require, or disable (loopback hosts only, by default)"
        )
    if mode not in SSL_MODES:
        raise BackendError(f"{redact(url)}: unknown sslmode={mode} (one of {', '.join(SSL_MODES)})")
    if mode == "disable":
        return False
    root = query.get("sslrootcert")
    cafile = None if root in (None, "", "system") else root
    if cafile is not None and not os.path.isfile(cafile):
        raise BackendError(f"{redact(url)}: sslrootcert {cafile} is not a readable file")
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if mode == "require" and root is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif mode in ("require", "verify-ca"):
        context.check_hostname = False  # the chain is checked, not the name
    if query.get("sslcert"):
        context.load_cert_chain(query["sslcert"], query.get("sslkey") or None)
    return context


class PostgresStore:
    """Named JSON documents of one fleet in the ``modelplane_runtime`` table.

    ``uid``: the fleet's uid (None for a fleet whose ``Pulumi.yaml`` records none), checked
    against the id's claim; ``project_file``: where the fleet's ``name`` is set (for the
    refusal's message)."""

    def __init__(
        self, url: str, fleet: str, uid: str | None = None, project_file: str | None = None
    ) -> None:
        self.url = url
        self.fleet = fleet
        self.uid = uid
        self.project_file = project_file
        self._args = connect_args(url)
        self._ready = False
        self._conn: Any = None
        self._guard = threading.Lock()
        self._owned = False  # the id's claim names this fleet's uid: nothing more to check

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url)!r}, fleet={self.fleet!r})"

    def _connect(self) -> Any:
        try:
            import pg8000.native
        except ImportError:
            raise BackendError(
                "runtime state on a postgres:// backend needs the pg8000 package "
                "(pip install pg8000)"
            ) from None
        try:
            conn = pg8000.native.Connection(**self._args)
        except Exception as exc:  # pg8000 raises its own and socket errors
            raise BackendError(
                f"cannot connect to {redact(self.url)} for the runtime state: "
                f"{type(exc).__name__}: {_message(exc)}"
            ) from None
        if not self._ready:
            conn.run(_SCHEMA)
            conn.run(_FLEETS_SCHEMA)
            self._ready = True
        return conn

    def _run(self, sql: str, **params: Any) -> list[Any]:
        """One statement that reads (:meth:`_execute`)."""
        return self._execute(sql, params, write=False)

    def _write(self, sql: str, **params: Any) -> list[Any]:
        """One statement that writes: the fleet's id claimed first (:meth:`_execute`)."""
        return self._execute(sql, params, write=True)

    def _execute(self, sql: str, params: dict[str, Any], write: bool) -> list[Any]:
        """One statement on the store's connection (opened on first use: a connection costs
        a server process, ~100 ms; a statement well under 1 ms), after the fleet id's claim
        is checked (:meth:`_check_claim_locked`). A broken connection (the server restarted)
        is opened again once."""
        with self._guard:
            for attempt in (0, 1):
                if self._conn is None:
                    self._conn = self._connect()
                try:
                    self._check_claim_locked(write)
                    return list(self._conn.run(sql, **params) or [])
                except FleetIdTaken:
                    raise
                except Exception as exc:
                    self.close_locked()
                    if attempt == 0 and _broken(exc):
                        continue
                    raise BackendError(
                        f"runtime state on {redact(self.url)}: "
                        f"{type(exc).__name__}: {_message(exc)}"
                    ) from None
        raise AssertionError("unreachable")

    def _check_claim_locked(self, write: bool) -> None:
        """Until this fleet owns its id, before each statement: refuse an id another fleet
        claimed; a write of a fleet with a uid claims an unclaimed id (the first uid to claim
        it owns it; from then on nothing is checked). A fleet without a uid never owns one:
        each of its statements costs one more (well under 1 ms)."""
        if self._owned:
            return
        if write and self.uid is not None:
            self._conn.run(
                f"insert into {FLEETS} (fleet, uid) values (:f, :u) on conflict (fleet) do nothing",
                f=self.fleet,
                u=self.uid,
            )
        rows = self._conn.run(f"select uid from {FLEETS} where fleet = :f", f=self.fleet)
        owner = str(rows[0][0]) if rows else None
        if owner is None:
            return
        if owner != self.uid:
            raise FleetIdTaken(self._taken(owner))
        self._owned = True

    def _taken(self, owner: str) -> str:
        """The refusal: one line with the id, whose it is, and the fix."""
        mine = (
            f"this fleet's is {self.uid}"
            if self.uid is not None
            else "this fleet's Pulumi.yaml records none; if it is that fleet, use a checkout "
            "whose Pulumi.yaml has its `modelplane.fleetUid`"
        )
        where = self.project_file or "the fleet's Pulumi.yaml"
        return (
            f"fleet id {self.fleet!r} belongs to another fleet on this database "
            f"({redact(self.url)}: fleet uid {owner}; {mine}): set a distinct `name` in "
            f"{where}, or MODELPLANE_FLEET_ID"
        )

    def close_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken
                pass

    def close(self) -> None:
        with self._guard:
            self.close_locked()

    def load(self, name: str) -> Any | None:
        try:
            rows = self._run(
                f"select document::text from {TABLE} where fleet = :f and name = :n",
                f=self.fleet,
                n=name,
            )
        except FleetIdTaken:
            raise  # another fleet's documents: never read as this fleet's
        except BackendError:
            return None  # the state is a memory: unreadable reads as empty
        if not rows:
            return None
        try:
            return json.loads(rows[0][0])
        except (ValueError, TypeError):
            return None

    def save(self, name: str, document: Any) -> None:
        self._write(
            f"insert into {TABLE} (fleet, name, document) values (:f, :n, cast(:d as jsonb)) "
            "on conflict (fleet, name) do update set document = excluded.document, "
            "updated = now()",
            f=self.fleet,
            n=name,
            d=json.dumps(document),
        )

    def delete(self, name: str) -> None:
        self._write(f"delete from {TABLE} where fleet = :f and name = :n", f=self.fleet, n=name)

    def adopt(self, old_fleet: str) -> int:
        """Move the documents kept under another fleet key (the fleet's key before it had a
        project name of its own) to this fleet's, unless this fleet has one of that name or
        another fleet uid claimed that key (its documents are that fleet's); how many moved.
        One statement."""
        rows = self._write(
            f"update {TABLE} set fleet = :f where fleet = :o and name not in "
            f"(select name from {TABLE} where fleet = :f) and not exists "
            f"(select 1 from {FLEETS} c where c.fleet = :o and c.uid is distinct from "
            "cast(:u as text)) returning name",
            f=self.fleet,
            o=old_fleet,
            u=self.uid,
        )
        return len(rows)

    def names(self) -> list[str]:
        """The fleet's documents (for `status` and tests)."""
        rows = self._run(f"select name from {TABLE} where fleet = :f order by name", f=self.fleet)
        return [str(r[0]) for r in rows]


def _broken(exc: Exception) -> bool:
    """A connection that no longer works (not an SQL error)."""
    return type(exc).__name__ == "InterfaceError" or isinstance(exc, OSError)


def _message(exc: Exception) -> str:
    """pg8000's error text (a dict with the server's fields, or a plain message); a failed
    certificate check says why (its args hold only an error number)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the server's certificate does not verify: {exc.verify_message or exc.reason}"
    arg = exc.args[0] if exc.args else exc
    if isinstance(arg, dict):
        return str(arg.get("M") or arg)
    return str(arg)
