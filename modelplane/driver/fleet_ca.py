"""The fleet CA: made once by modelplane, kept as a Pulumi config secret.

The workload gateways serve a certificate of it and require the front door's, also of it
(api.md "Mutual TLS between the gateways", modelplane/fleet_pki.py). The cluster and gateway
stacks read it as the secret `modelplane-fleet-ca`/`pem`: before an `up`, every such stack
whose config lacks `modelplane:secrets.modelplane-fleet-ca.pem` gets it, encrypted by the
stack's secrets provider, with the value another stack already holds or, the first time, a
new CA. `MODELPLANE_SECRET_MODELPLANE_FLEET_CA_PEM` in the environment takes the place of all
of this. The CA's key is never printed or written in plaintext.

`modelplane keys rotate DIR --certificates` counts the certificates' generation up (plain
config `modelplane:certificateGeneration` of the same stacks): the next `up` derives new
certificates before their period ends (a certificate's key thought exposed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from modelplane import fleet_pki
from modelplane.api.fleet import FleetSpec
from modelplane.driver.errors import DriverError
from modelplane.driver.stack_secrets import first_value, holders, write_each
from modelplane.driver.workspace import read_stack_config
from modelplane.stacks import cluster_stack, gateway_stack_names, hop_clusters, is_gateway_stack

if TYPE_CHECKING:
    from modelplane.driver.workspace import EngineSession

CONFIG_KEY = f"modelplane:secrets.{fleet_pki.SECRET[0]}.{fleet_pki.SECRET[1]}"
ENV = "MODELPLANE_SECRET_MODELPLANE_FLEET_CA_PEM"


def needs_ca(stack: str) -> bool:
    """The stacks that derive a certificate from the CA: each cluster's (its workload
    gateway's) and the gateway's (the front door's)."""
    return is_gateway_stack(stack) or stack.startswith("cluster-")


def existing_ca(session: EngineSession) -> str | None:
    """The CA text one of the fleet's stacks holds (decrypted by the engine), or None."""
    return first_value(session, holders(session, CONFIG_KEY), CONFIG_KEY)


def ca_stacks(fleet: FleetSpec) -> set[str]:
    """The stacks that derive a certificate: each cluster whose workload gateway the front
    door may go through (modelplane creates one, and the cluster has an API server: not
    renderTo), and every front door's stack when there is any (the program's rule too)."""
    out = {cluster_stack(name) for name in hop_clusters(fleet)}
    if out:
        out.update(gateway_stack_names(fleet))
    return out


def ensure_fleet_ca(
    session: EngineSession, stacks: Iterable[str], env: Mapping[str, str], *, write: bool = True
) -> None:
    """Give every cluster and gateway stack among ``stacks`` the fleet's CA: the one some
    stack holds, else a new one. ``write``: set it in their config (up); otherwise (preview,
    which writes no config) the CA reaches the program through the environment only (a
    stand-in when no stack holds one yet, so the preview shows what `up` will make)."""
    if env.get(ENV):
        try:
            fleet_pki.parse_ca(env[ENV])
        except fleet_pki.PKIFormatError as exc:
            raise DriverError(f"{ENV}: {exc}") from None
        return
    wanted = [s for s in stacks if needs_ca(s)]
    lacking = [s for s in wanted if CONFIG_KEY not in read_stack_config(session.config_dir, s)]
    if not lacking:
        return
    value = existing_ca(session)
    if not write:
        session.program_env[ENV] = value or fleet_pki.new_ca(datetime.now(UTC))
        return
    targets = lacking if value is not None else wanted
    value = value or fleet_pki.new_ca(datetime.now(UTC))

    def store(name: str) -> None:
        session.stack(name)  # made (or selected) first: config belongs to a stack
        session.set_secret_config(name, CONFIG_KEY, value)

    locked = write_each(session, targets, store)
    if locked:
        session.program_env[ENV] = value


@dataclass
class CertificateRotation:
    """What ``rotate_certificates`` did (no key in it)."""

    generation: int
    stacks: list[str] = field(default_factory=list)


def rotate_certificates(session: EngineSession, stacks: Iterable[str]) -> CertificateRotation:
    """Count the certificates' generation up in every cluster and gateway stack among
    ``stacks`` (plain config; the stacks exist): their next `up` derives new certificates
    from the same CA, which both sides trust, so the stacks may run in any order."""
    wanted = [s for s in stacks if needs_ca(s)]
    if not wanted:
        raise DriverError(
            "no stack of the fleet has a certificate yet (a cluster whose workload gateway "
            "the front door goes through): `modelplane up` makes them"
        )
    current = 0
    for name in wanted:
        value = read_stack_config(session.config_dir, name).get(fleet_pki.GENERATION_CONFIG)
        if isinstance(value, str) and value.isdigit():
            current = max(current, int(value))
    generation = current + 1
    for name in wanted:
        session.stack(name, create=False)
        session.sync_config(name, {fleet_pki.GENERATION_CONFIG: str(generation)})
    return CertificateRotation(generation, wanted)
