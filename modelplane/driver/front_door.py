"""The fleet's front-door key: generated once by modelplane, kept as a Pulumi config secret.

The front door sends it to every workload gateway, which refuses a request without it
(api.md "Private workload gateways", components/workload/front_door.py). The deployment and
gateway stacks read it as the secret `modelplane-front-door`/`key` (architecture.md
"Secrets"): before an `up`, every such stack whose config lacks
`modelplane:secrets.modelplane-front-door.key` gets it, encrypted by the stack's secrets
provider (`pulumi config set --secret`), with the value another stack already holds or, the
first time, a new random one. `MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY` in the
environment takes the place of all of this. The key is never printed or written in plaintext.

`modelplane keys rotate DIR --front-door` appends a key and ends the older ones
(modelplane/front_door_keys.py); the keys' ids and times without the keys go beside the
secret as plain config (`modelplane:frontDoorSchedule`), which orders rotations: a stack
whose schedule is older than another's (a rotation cut short by a lock, a stack made since)
gets the newest keys at the next `up`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from modelplane import front_door_keys
from modelplane.caller_keys import CallerKey, KeyFormatError, format_keys, rfc3339
from modelplane.driver import stacklock
from modelplane.driver.errors import DriverError
from modelplane.driver.stack_secrets import first_value, holders, write_each
from modelplane.driver.workspace import read_stack_config
from modelplane.stacks import is_gateway_stack

if TYPE_CHECKING:
    from modelplane.driver.workspace import EngineSession

CONFIG_KEY = "modelplane:secrets.modelplane-front-door.key"
SCHEDULE_CONFIG = front_door_keys.SCHEDULE_CONFIG
ENV = "MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY"


def needs_key(stack: str) -> bool:
    return is_gateway_stack(stack) or stack.startswith("deploy-")


def _holders(session: EngineSession) -> list[str]:
    return holders(session, CONFIG_KEY)


def _schedule(session: EngineSession, stack: str) -> str | None:
    value = read_stack_config(session.config_dir, stack).get(SCHEDULE_CONFIG)
    return value if isinstance(value, str) and value else None


def _rank(schedule: str | None) -> str:
    """Which of two schedules is newer: the later change (a stack without one: the oldest)."""
    return front_door_keys.changed(schedule)


def existing_key(session: EngineSession, schedule: str | None = None) -> str | None:
    """The key text one of the fleet's stacks holds (decrypted by the engine), or None;
    ``schedule``: only from a stack whose schedule is that one."""
    names = [n for n in _holders(session) if _schedule(session, n) == schedule]
    return first_value(session, names, CONFIG_KEY)


def ever_rotated(session: EngineSession, env: Mapping[str, str]) -> bool:
    """Whether the fleet's front-door key has been rotated (a schedule in some stack's config,
    or several keys in the environment's text): only then can the driver's hold change a
    render, so only then are the stacks' outputs read for it."""
    text = env.get(ENV)
    if text:
        return len([ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]) > 1
    return any(_schedule(session, n) is not None for n in _holders(session))


def _newest_schedule(session: EngineSession) -> str | None:
    schedules = [_schedule(session, n) for n in _holders(session)]
    return max(schedules, key=_rank, default=None)


def _write(session: EngineSession, name: str, value: str, schedule: str | None) -> None:
    session.stack(name)  # made (or selected) first: config belongs to a stack
    session.set_secret_config(name, CONFIG_KEY, value)
    if schedule is not None or _schedule(session, name) is not None:
        session.sync_config(name, {SCHEDULE_CONFIG: schedule})


def ensure_front_door_key(
    session: EngineSession, stacks: Iterable[str], env: Mapping[str, str], *, write: bool = True
) -> None:
    """Give every deployment and gateway stack among ``stacks`` the fleet's key: the one the
    stacks hold, the newest rotation's when they differ (a rotation cut short, a stack made
    since), else a new one.

    ``write``: set it in their config (up); otherwise (preview, which writes no config) the
    key, when some stack holds one, reaches the program through the environment only."""
    if env.get(ENV):
        try:
            front_door_keys.parse(env[ENV], where=ENV)
        except KeyFormatError as exc:
            raise DriverError(str(exc)) from None
        return
    wanted = [s for s in stacks if needs_key(s)]
    newest = _newest_schedule(session)
    lacking = [
        s
        for s in wanted
        if CONFIG_KEY not in read_stack_config(session.config_dir, s)
        or _schedule(session, s) != newest
    ]
    if not lacking:
        return

    value = existing_key(session, newest)
    if not write:
        # A preview writes no config: the key held, or a stand-in for the one `up` will make
        # (a secret either way, so the preview shows the same changes).
        session.program_env[ENV] = value or front_door_keys.new_key()
        return
    # A new key goes to every stack (one that held an unreadable one included): one per fleet.
    targets = lacking if value is not None else wanted
    if value is None:
        value, newest = front_door_keys.new_key(), None
    locked = write_each(session, targets, lambda name: _write(session, name, value, newest))
    if locked:
        session.program_env[ENV] = value


@dataclass
class Rotation:
    """What ``rotate_front_door_key`` did (no key in it)."""

    id: str
    switch: str  # RFC 3339: from then on the front door sends the new key
    end: str  # RFC 3339: the older keys end
    stacks: list[str] = field(default_factory=list)


def _rewrite(
    session: EngineSession,
    stacks: Iterable[str],
    env: Mapping[str, str],
    change: Callable[[list[CallerKey]], list[CallerKey]],
    verb: str,
    at: datetime,
) -> tuple[list[CallerKey], list[str]]:
    """``change`` applied to the fleet's front-door keys, written into every stack that
    holds them and every deployment and gateway stack among ``stacks``; the new keys and
    the stacks written."""
    from pulumi.automation.errors import CommandError

    if env.get(ENV):
        raise DriverError(
            f"the front-door key comes from {ENV}: {verb} it there (a rotation appends a line "
            "`<new key> id=<id> notBefore=<time>` and gives the older lines "
            '`notAfter=<later time>`; api.md "Keys")'
        )
    wanted = [s for s in stacks if needs_key(s)]
    ensure_front_door_key(session, wanted, env)  # every stack on the newest key first
    newest = _newest_schedule(session)
    value = existing_key(session, newest)
    if value is None:
        raise DriverError(
            "the fleet has no front-door key yet: `modelplane up` makes it (a fleet with "
            "replicas behind workload gateways)"
        )
    try:
        keys = change(front_door_keys.parse(value))
    except ValueError as exc:
        raise DriverError(f"cannot {verb} the front-door key: {exc}") from None
    text, schedule = format_keys(keys), front_door_keys.schedule(keys, at)
    targets = sorted(set(_holders(session)) | set(wanted))
    done: list[str] = []
    for name in targets:
        try:
            _write(session, name, text, schedule)
        except (CommandError, DriverError) as exc:
            rest = ", ".join(t for t in targets if t not in done)
            why = "locked by another update" if stacklock.is_lock_error(exc) else "failed"
            raise DriverError(
                f"the front-door key was changed in {', '.join(done) or 'no stack'} but not "
                f"in {rest} ({why}); the next `modelplane up` gives them the new keys"
            ) from None
        done.append(name)
    return keys, done


def rotate_front_door_key(
    session: EngineSession,
    stacks: Iterable[str],
    env: Mapping[str, str],
    *,
    after: timedelta,
    grace: timedelta,
    now: datetime | None = None,
) -> Rotation:
    """Append a new front-door key (sent from ``after`` on) and end the older ones ``grace``
    from now, in every stack that holds the key and every deployment and gateway stack among
    ``stacks`` (modelplane/front_door_keys.py says what each `up` then does)."""
    at = now or datetime.now(UTC)
    keys, done = _rewrite(
        session,
        stacks,
        env,
        lambda keys: front_door_keys.rotated(keys, at, after=after, grace=grace),
        "rotate",
        at,
    )
    new = keys[-1]
    assert new.id is not None and new.not_before is not None
    return Rotation(new.id, rfc3339(new.not_before), rfc3339(at + grace), done)


def switch_front_door_key(
    session: EngineSession,
    stacks: Iterable[str],
    env: Mapping[str, str],
    *,
    grace: timedelta,
    now: datetime | None = None,
) -> Rotation:
    """Send the key a rotation added from now on, not from its ``notBefore`` (after an `up`
    made the workload gateways accept it), and end the older keys ``grace`` from now."""
    at = now or datetime.now(UTC)
    keys, done = _rewrite(
        session,
        stacks,
        env,
        lambda keys: front_door_keys.switched(keys, at, grace=grace),
        "switch",
        at,
    )
    new = next(k for k in reversed(keys) if k.not_before == at)
    return Rotation(new.id or "", rfc3339(at), rfc3339(at + grace), done)
