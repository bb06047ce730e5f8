"""The fleet CA: made once by modelplane, kept as a Pulumi config secret.

The workload gateways serve a certificate of it and require the front door's, also of it
(api.md "Mutual TLS between the gateways", modelplane/fleet_pki.py). The cluster and gateway
stacks read it as the secret `modelplane-fleet-ca`/`pem`: before an `up`, every such stack
whose config lacks `modelplane:secrets.modelplane-fleet-ca.pem` gets it, encrypted by the
stack's secrets provider, with the value another stack already holds or, the first time, a
new CA. `MODELPLANE_SECRET_MODELPLANE_FLEET_CA_PEM` in the environment takes the place of all
of this. The CA's key is never printed or written in plaintext.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from modelplane import fleet_pki
from modelplane.driver import stacklock
from modelplane.driver.errors import DriverError
from modelplane.driver.workspace import read_stack_config

if TYPE_CHECKING:
    from modelplane.driver.workspace import EngineSession

CONFIG_KEY = f"modelplane:secrets.{fleet_pki.SECRET[0]}.{fleet_pki.SECRET[1]}"
ENV = "MODELPLANE_SECRET_MODELPLANE_FLEET_CA_PEM"


def needs_ca(stack: str) -> bool:
    """The stacks that derive a certificate from the CA: each cluster's (its workload
    gateway's) and the gateway's (the front door's)."""
    return stack == "gateway" or stack.startswith("cluster-")


def _holders(session: EngineSession) -> list[str]:
    names = [
        p.name[len("Pulumi.") : -len(".yaml")]
        for p in sorted(session.config_dir.glob("Pulumi.*.yaml"))
    ]
    return [n for n in names if CONFIG_KEY in read_stack_config(session.config_dir, n)]


def existing_ca(session: EngineSession) -> str | None:
    """The CA text one of the fleet's stacks holds (decrypted by the engine), or None."""
    from pulumi.automation.errors import CommandError

    for name in _holders(session):
        try:
            value = session.stack(name, create=False).get_config(CONFIG_KEY).value
        except CommandError:
            continue
        if value:
            return value
    return None


def ensure_fleet_ca(
    session: EngineSession, stacks: Iterable[str], env: Mapping[str, str], *, write: bool = True
) -> None:
    """Give every cluster and gateway stack among ``stacks`` the fleet's CA: the one some
    stack holds, else a new one. ``write``: set it in their config (up); otherwise (preview,
    which writes no config) the CA reaches the program through the environment only (a
    stand-in when no stack holds one yet, so the preview shows what `up` will make)."""
    from pulumi.automation.errors import CommandError

    if env.get(ENV):
        try:
            fleet_pki.parse_ca(env[ENV])
        except fleet_pki.PKIFormatError as exc:
            raise DriverError(f"{ENV}: {exc}") from None
        return
    wanted = [s for s in stacks if needs_ca(s)]
    lacking = [s for s in wanted if CONFIG_KEY not in read_stack_config(session.config_dir, s)]
    if not lacking and write:
        return
    value = existing_ca(session)
    if not write:
        if lacking or value is None:
            session.program_env[ENV] = value or fleet_pki.new_ca(datetime.now(UTC))
        return
    targets = lacking if value is not None else wanted
    value = value or fleet_pki.new_ca(datetime.now(UTC))
    locked = False
    for name in targets:
        try:
            session.stack(name)  # made (or selected) first: config belongs to a stack
            session.set_secret_config(name, CONFIG_KEY, value)
        except (CommandError, DriverError) as exc:
            if not stacklock.is_lock_error(exc):
                raise
            # Locked by another update: this run's program gets the CA through the
            # environment, and the next `up` writes it into the config.
            locked = True
    if locked:
        session.program_env[ENV] = value
