"""What the driver remembers of each stack between runs, so an unchanged stack costs no CLI call.

Deciding that a stack is unchanged used to take four ``pulumi`` processes per stack (``stack
select``, ``stack history`` for the recorded fingerprint, and ``stack output`` twice for the
outputs its downstream stacks' fingerprints hash), each a process start, a backend read and,
on a passphrase stack, a key derivation: about 1-2 s per stack, paid by every ``up`` and
every reconcile round, for every stack. The stack cache keeps, per stack, the fingerprint and
the outputs of the update modelplane last made or saw (the outputs as a digest of their plain
values and masked for display: no secret is written), and the backend's own record of that
update: ``stack ls``'s ``lastUpdate`` (millisecond resolution) and ``resourceCount``.

One ``stack ls`` per run (already made to find the existing stacks) then says whether each
entry still describes the stack: a stack whose ``lastUpdate`` and ``resourceCount`` are
those recorded was not touched since (by this driver, a hand-run ``pulumi up -s``, a refresh
or a destroy), and its fingerprint and outputs are the cached ones. Anything else -- no entry,
another update, an update in progress -- falls back to reading the stack's history.

After its own update, the driver does not know the backend's ``lastUpdate`` yet (asking costs
a process): it records the interval its ``pulumi up`` ran in, and the next run confirms the
entry when ``lastUpdate`` falls inside it. An update by anyone else cannot end inside that
interval (the stack lock serialises updates), so a confirmed entry is always this driver's.
Entries live in the fleet's runtime state (document ``stacks``), on PostgreSQL beside the
stacks when the backend is there.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

DOCUMENT = "stacks"
#: Seconds of slack around an update's interval (the CLI stamps ``lastUpdate`` just before
#: it exits; the driver's clock readings bracket the process).
SLACK = 0.5


class Store(Protocol):
    def load(self, name: str) -> Any | None: ...

    def save(self, name: str, document: Any) -> None: ...


def outputs_digest(outputs: Mapping[str, Any] | None) -> str:
    """The digest of a stack's plain outputs (secrets included, only hashed)."""
    text = json.dumps(dict(outputs or {}), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Marker:
    """The backend's record of a stack's last update, from ``stack ls``."""

    last_update: float | None  # Unix seconds
    resources: int | None
    in_progress: bool = False

    @classmethod
    def of(cls, summary: Any) -> Marker:
        """From an Automation API ``StackSummary`` (``last_update`` a naive UTC datetime)."""
        when = summary.last_update
        if isinstance(when, datetime):
            stamp: float | None = when.replace(tzinfo=UTC).timestamp()
        else:
            stamp = None
        return cls(stamp, summary.resource_count, bool(summary.update_in_progress))

    def as_json(self) -> dict[str, Any]:
        return {"lastUpdate": self.last_update, "resources": self.resources}


@dataclass(frozen=True)
class Entry:
    """One stack as modelplane last updated or saw it."""

    fingerprint: str
    outputs: str  # outputs_digest of the plain outputs
    masked: dict[str, Any]  # the outputs, secrets masked
    marker: Marker | None = None  # confirmed: the backend's record of this update
    window: tuple[float, float] | None = None  # unconfirmed: when our update ran

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "outputs": self.outputs,
            "masked": self.masked,
        }
        if self.marker is not None:
            data["marker"] = self.marker.as_json()
        if self.window is not None:
            data["window"] = list(self.window)
        return data

    @classmethod
    def from_json(cls, data: Any) -> Entry | None:
        try:
            marker = data.get("marker")
            window = data.get("window")
            return cls(
                fingerprint=str(data["fingerprint"]),
                outputs=str(data["outputs"]),
                masked=dict(data.get("masked") or {}),
                marker=(
                    Marker(marker.get("lastUpdate"), marker.get("resources"))
                    if isinstance(marker, dict)
                    else None
                ),
                window=(float(window[0]), float(window[1])) if window else None,
            )
        except (AttributeError, KeyError, TypeError, ValueError, IndexError):
            return None

    def describes(self, now: Marker) -> bool:
        """Whether this entry is the stack's last update, as the backend lists it now."""
        if now.in_progress or now.last_update is None:
            return False
        if self.marker is not None:
            return (
                self.marker.last_update == now.last_update
                and self.marker.resources == now.resources
            )
        if self.window is not None:
            start, end = self.window
            return start - SLACK <= now.last_update <= end + SLACK
        return False


class StackCache:
    """The entries of one fleet, checked against one ``stack ls`` (thread-safe)."""

    def __init__(self, store: Store | None, markers: Mapping[str, Marker]) -> None:
        self.store = store
        self.markers = dict(markers)
        self._lock = threading.Lock()
        raw = store.load(DOCUMENT) if store is not None else None
        self._entries: dict[str, Entry] = {}
        for name, data in (raw or {}).items() if isinstance(raw, dict) else ():
            entry = Entry.from_json(data)
            if entry is not None:
                self._entries[name] = entry
        self._dirty = False
        self._here: dict[str, str] = {}  # stacks this process updated -> their fingerprint

    def updated_here(self, stack: str) -> str | None:
        """The fingerprint this process last updated the stack with (None: it did not)."""
        with self._lock:
            return self._here.get(stack)

    def valid(self, stack: str) -> Entry | None:
        """The entry when it still describes the stack (confirmed now if it was pending)."""
        with self._lock:
            entry = self._entries.get(stack)
            now = self.markers.get(stack)
            if entry is None or now is None or not entry.describes(now):
                return None
            if entry.marker is None:
                entry = Entry(entry.fingerprint, entry.outputs, entry.masked, marker=now)
                self._entries[stack] = entry
                self._dirty = True
            return entry

    def seen(
        self, stack: str, fingerprint: str, plain: Mapping[str, Any], masked: Mapping[str, Any]
    ) -> None:
        """The stack's history showed an update with ``fingerprint`` as its last one (at the
        marker of this run's ``stack ls``)."""
        now = self.markers.get(stack)
        if now is None or now.in_progress or now.last_update is None:
            return
        self._put(stack, Entry(fingerprint, outputs_digest(plain), dict(masked), marker=now))

    def updated(
        self,
        stack: str,
        fingerprint: str,
        plain: Mapping[str, Any],
        masked: Mapping[str, Any],
        window: tuple[float, float],
    ) -> None:
        """This driver updated the stack with ``fingerprint`` between ``window``'s times."""
        self._put(stack, Entry(fingerprint, outputs_digest(plain), dict(masked), window=window))
        with self._lock:
            self._here[stack] = fingerprint

    def forget(self, stack: str) -> None:
        with self._lock:
            if self._entries.pop(stack, None) is not None:
                self._dirty = True

    def _put(self, stack: str, entry: Entry) -> None:
        with self._lock:
            if self._entries.get(stack) != entry:
                self._entries[stack] = entry
                self._dirty = True

    def save(self) -> None:
        """Write the entries back when they changed (nothing without a store)."""
        with self._lock:
            if not self._dirty or self.store is None:
                return
            document = {name: e.as_json() for name, e in sorted(self._entries.items())}
            self._dirty = False
        self.store.save(DOCUMENT, document)
