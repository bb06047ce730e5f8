"""The fleet's front-door key: generated once by modelplane, kept as a Pulumi config secret.

The front door sends it to every workload gateway, which refuses a request without it
(api.md "Private workload gateways", components/workload/front_door.py). The deployment and
gateway stacks read it as the secret `modelplane-front-door`/`key` (architecture.md
"Secrets"): before an `up`, every such stack whose config lacks
`modelplane:secrets.modelplane-front-door.key` gets it, encrypted by the stack's secrets
provider (`pulumi config set --secret`), with the value another stack already holds or, the
first time, a new random one. `MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY` in the
environment takes the place of all of this. The key is never printed or written in plaintext.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from modelplane.driver import stacklock
from modelplane.driver.errors import DriverError
from modelplane.driver.workspace import read_stack_config

if TYPE_CHECKING:
    from modelplane.driver.workspace import EngineSession

CONFIG_KEY = "modelplane:secrets.modelplane-front-door.key"
ENV = "MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY"


def needs_key(stack: str) -> bool:
    return stack == "gateway" or stack.startswith("deploy-")


def _holders(session: EngineSession) -> list[str]:
    names = [
        p.name[len("Pulumi.") : -len(".yaml")]
        for p in sorted(session.config_dir.glob("Pulumi.*.yaml"))
    ]
    return [n for n in names if CONFIG_KEY in read_stack_config(session.config_dir, n)]


def existing_key(session: EngineSession) -> str | None:
    """The key one of the fleet's stacks holds (decrypted by the engine), or None."""
    from pulumi.automation.errors import CommandError

    for name in _holders(session):
        try:
            value = session.stack(name, create=False).get_config(CONFIG_KEY).value
        except CommandError:
            continue
        if value:
            return value
    return None


def ensure_front_door_key(
    session: EngineSession, stacks: Iterable[str], env: Mapping[str, str], *, write: bool = True
) -> None:
    """Give every deployment and gateway stack among ``stacks`` the fleet's key.

    ``write``: set it in their config (up); otherwise (preview, which writes no config) the
    key, when some stack holds one, reaches the program through the environment only."""
    from pulumi.automation.errors import CommandError

    if env.get(ENV):
        return
    wanted = [s for s in stacks if needs_key(s)]
    lacking = [s for s in wanted if CONFIG_KEY not in read_stack_config(session.config_dir, s)]
    if not lacking:
        return

    value = existing_key(session)
    if not write:
        # A preview writes no config: the key held, or a stand-in for the one `up` will make
        # (a secret either way, so the preview shows the same changes).
        session.program_env[ENV] = value or secrets.token_urlsafe(32)
        return
    # A new key goes to every stack (one that held an unreadable one included): one per fleet.
    targets = lacking if value is not None else wanted
    value = value or secrets.token_urlsafe(32)
    locked = False
    for name in targets:
        try:
            session.stack(name)  # made (or selected) first: config belongs to a stack
            session.set_secret_config(name, CONFIG_KEY, value)
        except (CommandError, DriverError) as exc:
            if not stacklock.is_lock_error(exc):
                raise
            # Locked by another update (or one a kill left): the stack's own operation meets
            # the lock (waits, or recovers a stale one); this run's program gets the key
            # through the environment, and the next `up` writes it into the config.
            locked = True
    if locked:
        session.program_env[ENV] = value
