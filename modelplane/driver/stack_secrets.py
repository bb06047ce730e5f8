"""The secrets modelplane makes itself (the front-door key, the fleet CA), kept as config
secrets of the stacks that read them: which stacks hold one, and writing one into several.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from modelplane.driver import stacklock
from modelplane.driver.errors import DriverError
from modelplane.driver.workspace import read_stack_config

if TYPE_CHECKING:
    from modelplane.driver.workspace import EngineSession


def holders(session: EngineSession, key: str) -> list[str]:
    """The stacks whose config file holds ``key``."""
    names = [
        p.name[len("Pulumi.") : -len(".yaml")]
        for p in sorted(session.config_dir.glob("Pulumi.*.yaml"))
    ]
    return [n for n in names if key in read_stack_config(session.config_dir, n)]


def first_value(session: EngineSession, names: Iterable[str], key: str) -> str | None:
    """The value of config ``key`` in the first of ``names`` that holds one (decrypted by the
    engine), or None."""
    from pulumi.automation.errors import CommandError

    for name in names:
        try:
            value = session.stack(name, create=False).get_config(key).value
        except CommandError:
            continue
        if value:
            return value
    return None


def write_each(session: EngineSession, names: Iterable[str], write: Callable[[str], None]) -> bool:
    """``write`` each stack's config; True when a stack was locked by another update (or
    one a kill left): its own operation meets the lock (waits, or recovers a stale one), so
    the caller hands this run's program the value through the environment instead, and the
    next `up` writes it into the config."""
    from pulumi.automation.errors import CommandError

    locked = False
    for name in names:
        try:
            write(name)
        except (CommandError, DriverError) as exc:
            if not stacklock.is_lock_error(exc):
                raise
            locked = True
    return locked
