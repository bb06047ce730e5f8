"""modelplane's policy pack on the real engine (issue 34): the engine runs it through the
Python language host's RunPlugin on every stack `up` touches. specs/local's workload Gateway
declares no private network, so the mandatory rule stops its cluster stack before anything
is written; as advisory (a policy config file) the fleet goes up with the warning; with the
pack, unchanged stacks are judged again, not skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelplane.driver.fleet import Fleet
from modelplane.driver.results import Outcome
from tests.fixtures.engine import LOCAL, REPO, check, copy_fleet, manifests, outcomes

pytestmark = pytest.mark.engine

PACK = str(REPO / "policy")


def test_policy_pack_engine_mandatory_stops_advisory_warns_and_nothing_is_skipped(
    tmp_path: Path, env: dict[str, str]
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    refused = Fleet.load(fleet_dir, env=env).up(policy_packs=[PACK])
    cluster = refused.result("cluster-local")
    assert cluster.outcome == Outcome.FAILED, (cluster.outcome, cluster.note)
    said = (cluster.error or "") + " ".join(cluster.warnings)
    assert "workload-gateways-private" in said, said
    assert "inference-gateway" in said and "connectedTo" in said, said
    # Dependants never ran; the mandatory violation stopped the update before any write.
    assert outcomes(refused)["deploy-demo-qwen"] == Outcome.SKIPPED
    assert manifests(fleet_dir / "rendered") == {}

    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"workload-gateways-private": {"enforcementLevel": "advisory"}}))
    fleet = Fleet.load(fleet_dir, env=env)
    advised = check(fleet.up(policy_packs=[PACK], policy_pack_configs=[str(config)]))
    warned = " ".join(advised.result("cluster-local").warnings)
    assert "workload-gateways-private" in warned, advised.result("cluster-local").warnings
    assert manifests(fleet_dir / "rendered")  # the fleet is up

    # Without a pack an unchanged fleet is skipped; with one every stack is judged again.
    plain = check(Fleet.load(fleet_dir, env=env).up())
    assert set(outcomes(plain).values()) == {Outcome.UNCHANGED}
    judged = check(
        Fleet.load(fleet_dir, env=env).up(policy_packs=[PACK], policy_pack_configs=[str(config)])
    )
    for result in judged.results:
        assert "inputs unchanged" not in (result.note or ""), (result.stack, result.note)
    assert "workload-gateways-private" in " ".join(judged.result("cluster-local").warnings)
