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
unexpired key's hash (modelplane/components/gateway.py ``callers_table``).

A key shorter than ``MIN_KEY_LENGTH`` is refused (security review L8: the table holds
unsalted SHA-256 hashes, so a short key falls to an offline guess from a leaked Secret): the
driver before any stack runs and the gateway stack's program both ask ``short_key_lines``.

Pure: standard library only; never puts a key into a message.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from modelplane.errors import UserError

__all__ = [
    "ID",
    "NOT_AFTER",
    "NOT_BEFORE",
    "CallerKey",
    "KeyFormatError",
    "MIN_KEY_LENGTH",
    "SHORT_KEY_RULE",
    "format_keys",
    "line_numbers",
    "live_keys",
    "new_key",
    "newest_live_key",
    "parse_keys",
    "parse_time",
    "rfc3339",
    "short_key_lines",
    "short_keys",
]

NOT_AFTER = "notAfter"
NOT_BEFORE = "notBefore"
ID = "id"
KEY_PREFIX = "sk-mp-"
MIN_KEY_LENGTH = 32  # `new_key` makes 49 characters (256 random bits)
SHORT_KEY_RULE = (
    f"a caller's key needs at least {MIN_KEY_LENGTH} characters (security review L8; "
    "`modelplane keys create` and `keys rotate` make 256-bit ones)"
)


class KeyFormatError(UserError, ValueError):
    """A caller's key text that is not one key a line with optional `notAfter=` (the message
    names the line, never a key)."""


@dataclass(frozen=True)
class CallerKey:
    key: str
    not_after: datetime | None = None  # aware, UTC
    # The front-door key's own attributes (modelplane/front_door_keys.py); a caller's key
    # has neither.
    not_before: datetime | None = None
    id: str | None = None

    def expired(self, now: datetime) -> bool:
        return self.not_after is not None and now >= self.not_after

    def due(self, now: datetime) -> bool:
        return self.not_before is None or now >= self.not_before

    def line(self) -> str:
        parts = [self.key]
        if self.id is not None:
            parts.append(f"{ID}={self.id}")
        if self.not_before is not None:
            parts.append(f"{NOT_BEFORE}={rfc3339(self.not_before)}")
        if self.not_after is not None:
            parts.append(f"{NOT_AFTER}={rfc3339(self.not_after)}")
        return " ".join(parts)


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


def parse_keys(
    text: str, *, where: str = "the key", attributes: tuple[str, ...] = (NOT_AFTER,)
) -> list[CallerKey]:
    """Every key of a caller's key text, in order; KeyFormatError for a malformed line or
    text without any key. ``attributes``: the ones a line may carry (a caller's key:
    ``notAfter``; the front door's: ``id``, ``notBefore`` too)."""
    shape = " ".join(f"[{a}=<{'id' if a == ID else 'RFC 3339 time'}>]" for a in attributes)
    keys: list[CallerKey] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, *rest = line.split()
        values: dict[str, str] = {}
        for attribute in rest:
            name, sep, value = attribute.partition("=")
            if not sep or name not in attributes or name in values:
                what = "repeated" if name in values else "unknown"
                raise KeyFormatError(
                    f"{where}, line {number}: {what} attribute {name!r} after the key "
                    f"(a line is `<key> {shape}`)"
                )
            values[name] = value
        times: dict[str, datetime | None] = {}
        for name in (NOT_AFTER, NOT_BEFORE):
            if name not in values:
                times[name] = None
                continue
            try:
                times[name] = parse_time(values[name])
            except ValueError:
                raise KeyFormatError(
                    f"{where}, line {number}: {name}={values[name]!r} is not an RFC 3339 time "
                    "with a zone (e.g. 2026-12-02T09:00:00Z)"
                ) from None
        keys.append(CallerKey(key, times[NOT_AFTER], times[NOT_BEFORE], values.get(ID)))
    if not keys:
        raise KeyFormatError(f"{where} holds no key")
    return keys


def short_key_lines(text: str, now: datetime, *, where: str = "the key") -> list[int]:
    """The line numbers of the keys of ``text`` not expired at ``now`` that are shorter than
    ``MIN_KEY_LENGTH``; KeyFormatError as :func:`parse_keys`. An ended key is never published,
    so it is not counted."""
    keys = parse_keys(text, where=where)
    numbers = [
        n
        for n, raw in enumerate(text.splitlines(), start=1)
        if raw.strip() and not raw.strip().startswith("#")
    ]  # the lines parse_keys read a key from, in order
    return [
        n
        for n, key in zip(numbers, keys, strict=True)
        if not key.expired(now) and len(key.key) < MIN_KEY_LENGTH
    ]


def short_keys(caller: str, source: str, lines: Sequence[int]) -> str:
    """One caller's short keys for a message: name, where the text is, lines (never a key)."""
    return f"caller {caller} ({source}, {line_numbers(lines)})"


def line_numbers(lines: Sequence[int]) -> str:
    """``line 2`` or ``lines 1, 3``."""
    return f"line{'s' if len(lines) > 1 else ''} {', '.join(str(n) for n in lines)}"


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
