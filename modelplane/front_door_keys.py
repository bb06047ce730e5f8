"""The fleet's front-door keys: which the workload gateways accept, which the front door sends
(api.md "Private workload gateways", "Keys"; security review M2).

The front-door secret (`modelplane-front-door`/`key`) holds one key a line, like a caller's
keys (modelplane/caller_keys.py), with three optional attributes::

    <old key> notAfter=2026-12-02T09:00:00Z
    <new key> id=3f9a1c0e notBefore=2026-12-01T09:10:00Z

- every workload gateway accepts every key not past its ``notAfter``: one htpasswd line each,
  under a user of its own (``modelplane`` for the one key without an ``id``, the fleet's first;
  ``modelplane-<id>`` for each key a rotation added), since Envoy's and Traefik's basic auth
  hold one hash per user;
- the front door sends the newest key whose ``notBefore`` has come (and whose ``notAfter``
  has not).

So a rotation (``modelplane keys rotate DIR --front-door``) appends a key that becomes the
one sent only later, and ends the old ones later still: the `up` after the rotation makes
every workload gateway accept the new key while the front door still sends the old one; the
first `up` after ``notBefore`` switches the front door; the first after ``notAfter`` drops
the old key's line. The driver counts each of those instants as a changed input of the stacks
that read the key (modelplane/driver/fingerprint.py), so each such `up` (and a reconcile
round) runs them. The times and ids without the keys are the key's schedule, kept in plain
stack config for that (``SCHEDULE_CONFIG``).

Pure: standard library only; never puts a key into a message.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from modelplane.caller_keys import (
    ID,
    NOT_AFTER,
    NOT_BEFORE,
    CallerKey,
    KeyFormatError,
    format_keys,
    parse_keys,
    parse_time,
    rfc3339,
)

USER = "modelplane"
ATTRIBUTES = (ID, NOT_BEFORE, NOT_AFTER)
SCHEDULE_CONFIG = "modelplane:frontDoorSchedule"
"""Plain stack config beside the secret: the keys' ids and times, no key (JSON)."""
_ID = re.compile(r"^[a-z0-9]{1,16}$")
WHERE = "the front-door key (modelplane-front-door/key)"


def parse(text: str, *, where: str = WHERE) -> list[CallerKey]:
    """The front-door keys, in order; KeyFormatError for a malformed line, a bad or repeated
    id, or more than one key without an id (they would share the user ``modelplane``)."""
    keys = parse_keys(text, where=where, attributes=ATTRIBUTES)
    seen: set[str | None] = set()
    for number, key in enumerate(keys, start=1):
        if key.id is not None and not _ID.match(key.id):
            raise KeyFormatError(
                f"{where}, key {number}: id={key.id!r} is not 1 to 16 lowercase letters or digits"
            )
        if key.id in seen:
            which = f"id={key.id!r}" if key.id is not None else "no id"
            raise KeyFormatError(
                f"{where}, key {number}: another key has {which} (each key needs a user of "
                "its own on the workload gateways: give every key but one an id)"
            )
        seen.add(key.id)
    return keys


def user(key: CallerKey) -> str:
    """The basic-auth user a key is sent and checked under."""
    return USER if key.id is None else f"{USER}-{key.id}"


def accepted(keys: Sequence[CallerKey], now: datetime) -> list[CallerKey]:
    """The keys the workload gateways accept at ``now``: every one not ended."""
    return [k for k in keys if not k.expired(now)]


def sent(keys: Sequence[CallerKey], now: datetime) -> CallerKey:
    """The key the front door sends at ``now``: the newest accepted one that is due, else
    (no accepted key due yet) the first accepted one; KeyFormatError when every key ended."""
    live = accepted(keys, now)
    if not live:
        raise KeyFormatError(f"{WHERE}: every key has ended (notAfter): rotate it")
    due = [k for k in live if k.due(now)]
    return due[-1] if due else live[0]


def schedule(keys: Sequence[CallerKey], changed: datetime | None = None) -> str:
    """The keys' ids and times as canonical JSON (plain config: no key in it), with the
    time of the change that made them (``changed``: which of two schedules is newer)."""
    rows = [
        {
            "id": k.id,
            NOT_BEFORE: rfc3339(k.not_before) if k.not_before else None,
            NOT_AFTER: rfc3339(k.not_after) if k.not_after else None,
        }
        for k in keys
    ]
    data = {"changed": rfc3339(changed) if changed else None, "keys": rows}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def changed(schedule_json: str | None) -> str:
    """When a schedule was made (RFC 3339 in UTC: the text sorts by time), "" if unknown."""
    try:
        data = json.loads(schedule_json or "null")
        return str(data.get("changed") or "") if isinstance(data, dict) else ""
    except ValueError:
        return ""


def phase(
    schedule_json: str | None,
    now: datetime,
    *,
    keep: str | None = None,
    only: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """What the stacks render at ``now`` from a schedule, without its keys: the users the
    workload gateways accept (``keep`` among them) and the user the front door sends (one
    of ``only``: the driver's hold, below). None without a schedule or times (nothing
    changes with the clock) or with one that does not parse (the stacks' own parse reports
    it)."""
    if not schedule_json:
        return None
    try:
        rows = json.loads(schedule_json)["keys"]
        if not any(r.get(NOT_AFTER) or r.get(NOT_BEFORE) for r in rows):
            return None
        keys = [
            CallerKey(
                "",
                parse_time(r[NOT_AFTER]) if r.get(NOT_AFTER) else None,
                parse_time(r[NOT_BEFORE]) if r.get(NOT_BEFORE) else None,
                r.get("id"),
            )
            for r in rows
        ]
        kept = [CallerKey("", None, k.not_before, k.id) if user(k) == keep else k for k in keys]
        allowed = [k for k in keys if only is None or user(k) in only] or keys
        return {
            "accepted": [user(k) for k in accepted(kept, now)],
            "sent": user(sent(allowed, now)),
        }
    except (ValueError, TypeError, KeyError, AttributeError, KeyFormatError):
        return None


def new_id(keys: Sequence[CallerKey]) -> str:
    taken = {k.id for k in keys}
    while True:
        candidate = secrets.token_hex(4)
        if candidate not in taken:
            return candidate


def new_key() -> str:
    """256 random bits (the first key, and each a rotation adds)."""
    return secrets.token_urlsafe(32)


def rotated(
    keys: Sequence[CallerKey], now: datetime, *, after: timedelta, grace: timedelta
) -> list[CallerKey]:
    """The keys after a rotation at ``now``: ended ones dropped, the others ending ``grace``
    from now (an earlier end kept), a new key appended that the front door sends from
    ``after`` on. ValueError unless ``after`` < ``grace`` (the old key must outlive the
    switch, or the front door would send a key no gateway accepts any more)."""
    if after >= grace:
        raise ValueError(
            f"the switch ({after}) must come before the old keys end ({grace}): the "
            "front door sends the old key until the switch"
        )
    end = now + grace
    kept = [
        CallerKey(
            k.key,
            min(k.not_after, end) if k.not_after is not None else end,
            k.not_before if k.not_before is not None and k.not_before > now else None,
            k.id,
        )
        for k in keys
        if not k.expired(now)
    ]
    return [*kept, CallerKey(new_key(), None, now + after, new_id(keys))]


def switched(keys: Sequence[CallerKey], now: datetime, *, grace: timedelta) -> list[CallerKey]:
    """The keys after ``keys switch`` at ``now``: the newest key still waiting for its
    switch is sent from now on (its ``notBefore`` now), the keys before it end ``grace``
    from now (an earlier end kept); ValueError when no key waits."""
    waiting = [i for i, k in enumerate(keys) if not k.due(now) and not k.expired(now)]
    if not waiting:
        raise ValueError(
            "no front-door key waits for its switch (`modelplane keys rotate DIR "
            "--front-door` adds one)"
        )
    at, end = waiting[-1], now + grace
    out: list[CallerKey] = []
    for i, k in enumerate(keys):
        if i < at:
            ends = min(k.not_after, end) if k.not_after is not None else end
            out.append(CallerKey(k.key, ends, k.not_before, k.id))
        elif i == at:
            out.append(CallerKey(k.key, k.not_after, now, k.id))
        else:
            out.append(k)
    return out


# --- the driver's hold: what the stacks saw in the previous `up` --------------------------
# The workload gateways and the front door are rendered by different stacks, one after the
# other, so each transition is made safe by what the other did in an earlier `up` (the
# driver reads their outputs before this one: modelplane/driver/operations.py):
# - a workload gateway keeps accepting the user the front door sent last, ended or not, until
#   the front door sends another (``keeping``);
# - the front door sends only keys every workload gateway accepted already (``restricted``).
KEEP_CONFIG = "modelplane:frontDoorKeep"
ACCEPTED_CONFIG = "modelplane:frontDoorAccepted"


def keeping(text: str, keep: str | None) -> str:
    """The key text with the key of user ``keep`` no longer ending (the front door may still
    send it); unchanged without ``keep`` or such a key."""
    if not keep:
        return text
    keys = parse(text)
    out = [CallerKey(k.key, None, k.not_before, k.id) if user(k) == keep else k for k in keys]
    return format_keys(out) if out != keys else text


def restricted(text: str, users: Sequence[str] | None) -> str:
    """The key text without the keys whose users are not among ``users`` (the ones every
    workload gateway accepted); unchanged without ``users`` or when none would be left."""
    if users is None:
        return text
    keys = parse(text)
    out = [k for k in keys if user(k) in users]
    return format_keys(out) if out and out != keys else text


def users_accepted(text: str, now: datetime) -> list[str]:
    return [user(k) for k in accepted(parse(text), now)]


def user_sent(text: str, now: datetime) -> str:
    return user(sent(parse(text), now))
