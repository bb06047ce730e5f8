"""The fleet CA in the stacks' config (issue 33 item 3; api.md "Mutual TLS between the
gateways"), through the real engine: made once, encrypted, the same in every stack that
derives a certificate, kept across runs, given to a stack made later; a preview writes
nothing; `keys rotate --certificates` counts the generation up in the same stacks. Select
with `pytest -k mtls`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modelplane import fleet_pki
from modelplane.api.loader import load_fleet
from modelplane.driver.fleet import Fleet
from modelplane.driver.fleet_ca import (
    CONFIG_KEY,
    ENV,
    ca_stacks,
    ensure_fleet_ca,
    existing_ca,
    rotate_certificates,
)
from tests.fixtures.engine import LOCAL, copy_fleet

pytestmark = pytest.mark.engine

# A cluster with a workload gateway modelplane configures (and an API server): its stack
# derives a server certificate, the gateway stack the front door's client one.
REMOTE = """apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: remote
spec:
  cluster:
    source: Existing
    existing:
      secretRef: {name: remote-kube}
  servingStack:
    install: false
    gateway: {className: traefik, controller: Traefik}
  nodePools:
  - {name: gpu, className: local-l4, nodeCount: 1}
"""


def config_of(fleet_dir: Path, stack: str) -> dict[str, object]:
    path = fleet_dir / f"Pulumi.{stack}.yaml"
    if not path.exists():
        return {}
    return (yaml.safe_load(path.read_text()) or {}).get("config") or {}


def test_mtls_fleet_ca_made_once_encrypted_and_shared(tmp_path: Path, env: dict[str, str]) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    (fleet_dir / "remote.yaml").write_text(REMOTE)
    spec = load_fleet(fleet_dir).fleet
    # specs/local's own cluster renders to a folder: no hop, no certificate.
    assert ca_stacks(spec) == {"cluster-remote", "gateway"}
    fleet = Fleet.load(fleet_dir, env=env)
    with fleet.session() as session:
        session.list_stacks()
        # A preview writes no config: a stand-in through the environment.
        ensure_fleet_ca(session, ["cluster-remote", "gateway"], session.env, write=False)
        assert fleet_pki.parse_ca(session.program_env[ENV])
        assert CONFIG_KEY not in config_of(fleet_dir, "gateway")
        del session.program_env[ENV]
        ensure_fleet_ca(session, ["cluster-remote", "gateway", "deploy-demo-qwen"], session.env)
        first = existing_ca(session)
        assert first is not None and fleet_pki.parse_ca(first)
        assert ENV not in session.program_env
        for stack in ("cluster-remote", "gateway"):
            held = config_of(fleet_dir, stack)[CONFIG_KEY]
            assert isinstance(held, dict) and "secure" in held  # encrypted
            value = session.stack(stack, create=False).get_config(CONFIG_KEY)
            assert value.secret and value.value == first
        assert CONFIG_KEY not in config_of(fleet_dir, "deploy-demo-qwen")
        # Kept: a later run changes nothing; a stack made since gets the same CA.
        before = (fleet_dir / "Pulumi.gateway.yaml").read_text()
        ensure_fleet_ca(session, ["cluster-remote", "gateway", "cluster-later"], session.env)
        assert (fleet_dir / "Pulumi.gateway.yaml").read_text() == before
        later = session.stack("cluster-later", create=False).get_config(CONFIG_KEY).value
        assert later == first
        # `keys rotate --certificates`: the generation, plain, in the same stacks.
        done = rotate_certificates(session, ["cluster-remote", "gateway", "deploy-demo-qwen"])
        again = rotate_certificates(session, ["cluster-remote", "gateway"])
    assert (done.generation, again.generation) == (1, 2)
    assert done.stacks == ["cluster-remote", "gateway"]
    for stack in ("cluster-remote", "gateway"):
        assert config_of(fleet_dir, stack)[fleet_pki.GENERATION_CONFIG] == "2"
    # The CA's key is nowhere in plaintext in the fleet's folder.
    key_lines = [
        line
        for line in first.split("-----END CERTIFICATE-----")[1].splitlines()
        if line and not line.startswith("-----")
    ]
    for path in fleet_dir.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            assert not any(line in text for line in key_lines), path


def test_mtls_fleet_ca_from_the_environment_is_checked(tmp_path: Path, env: dict[str, str]) -> None:
    from modelplane.driver.errors import DriverError

    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    good = fleet_pki.new_ca(fleet_pki.EPOCH)
    with Fleet.load(fleet_dir, env={**env, ENV: good}).session() as session:
        ensure_fleet_ca(session, ["gateway"], session.env)
        assert CONFIG_KEY not in config_of(fleet_dir, "gateway")  # the environment's, not stored
    with Fleet.load(fleet_dir, env={**env, ENV: "not a CA"}).session() as session:
        with pytest.raises(DriverError, match=f"{ENV}: the fleet CA"):
            ensure_fleet_ca(session, ["gateway"], session.env)


def test_mtls_rotating_certificates_before_any_up_is_refused(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`keys rotate --certificates` on a fleet never brought up: one line saying what makes
    the certificates, the driver's failure (exit 1), and no stack created."""
    from typer.testing import CliRunner

    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    (fleet_dir / "remote.yaml").write_text(REMOTE)
    result = CliRunner().invoke(app, ["keys", "rotate", str(fleet_dir), "--certificates"], env=env)
    assert result.exit_code == 1, result.output
    assert "`modelplane up` makes them" in result.output
    assert "Traceback" not in result.output
    assert not list(fleet_dir.glob("Pulumi.*.yaml"))
