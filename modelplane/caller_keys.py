"""A caller's keys: the text a caller's secretRef holds (api.md "Callers", "Keys").

One key a line, newest last, each optionally ending at a time::

    sk-mp-old... notAfter=2026-12-02T09:00:00Z
    sk-mp-new...

A line is a key, then attributes separated by blanks; the one attribute is ``notAfter=<RFC
3339 time with a zone>``: from then on the key is refused (the authorization service checks
it against its clock on every request, so a key expires without another `up`). Blank lines
and lines starting with ``#`` are ignored. A file of one key and nothing else, what
modelplane wrote before keys could expire, is one key without an end. The same text works
from every source of a secret (stack config, ``MODELPLANE_SECRET_*``, ``file:``).

Several keys let a key be replaced without a window of refused requests: ``modelplane keys
rotate`` appends a new key and ends the old ones after a grace period; `up` publishes every
unexpired key's hash (components/gateway.py ``callers_table``).

Pure: standard library only; never puts a key into a message.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from modelplane.errors import UserError

__all__ = [
    "NOT_AFTER",
    "CallerKey",
    "KeyFormatError",
    "format_keys",
    "live_keys",
    "new_key",
    "newest_live_key",
    "parse_keys",
    "parse_time",
    "rfc3339",
]

NOT_AFTER = "notAfter"
KEY_PREFIX = "sk-mp-"


class KeyFormatError(UserError, ValueError):
    """A caller's key text that is not one key a line with optional `notAfter=` (the message
    names the line, never a key)."""


@dataclass(frozen=True)
class CallerKey:
    key: str
    not_after: datetime | None = None  # aware, UTC

    def expired(self, now: datetime) -> bool:
        return self.not_after is not None and now >= self.not_after

    def line(self) -> str:
        if self.not_after is None:
            return self.key
        return f"{self.key} {NOT_AFTER}={rfc3339(self.not_after)}"


def rfc3339(when: datetime) -> str:
    """``2026-12-02T09:00:00Z``: UTC, whole seconds (later times round down never: a key is
    refused from the second it names)."""
    return when.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time with a zone (``Z`` or ``+hh:mm``), as an aware UTC datetime; a time
    without a zone is a ValueError (it would mean different instants on different hosts)."""
    value = datetime.fromisoformat(text.strip())
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone (add Z or +00:00)")
    return value.astimezone(UTC)


def parse_keys(text: str, *, where: str = "the key") -> list[CallerKey]:
    """Every key of a caller's key text, in order; KeyFormatError for a malformed line or
    text without any key."""
    keys: list[CallerKey] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, *attributes = line.split()
        not_after: datetime | None = None
        for attribute in attributes:
            name, sep, value = attribute.partition("=")
            if not sep or name != NOT_AFTER:
                raise KeyFormatError(
                    f"{where}, line {number}: unknown attribute {name!r} after the key "
                    f"(a line is `<key> [{NOT_AFTER}=<RFC 3339 time>]`)"
                )
            try:
                not_after = parse_time(value)
            except ValueError:
                raise KeyFormatError(
                    f"{where}, line {number}: {NOT_AFTER}={value!r} is not an RFC 3339 time "
                    "with a zone (e.g. 2026-12-02T09:00:00Z)"
                ) from None
        keys.append(CallerKey(key, not_after))
    if not keys:
        raise KeyFormatError(f"{where} holds no key")
    return keys


def format_keys(keys: Iterable[CallerKey]) -> str:
    """The text of a key file: one line a key, a newline after each."""
    return "".join(k.line() + "\n" for k in keys)


def live_keys(keys: Sequence[CallerKey], now: datetime) -> list[CallerKey]:
    """The keys not expired at ``now``, in order."""
    return [k for k in keys if not k.expired(now)]


def newest_live_key(keys: Sequence[CallerKey], now: datetime) -> CallerKey | None:
    """The key a client should send: the last unexpired one (``keys rotate`` appends)."""
    live = live_keys(keys, now)
    return live[-1] if live else None


def new_key() -> str:
    """A new random key: ``sk-mp-`` and 256 random bits."""
    return f"{KEY_PREFIX}{secrets.token_urlsafe(32)}"
