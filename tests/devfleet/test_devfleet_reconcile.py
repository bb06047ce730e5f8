"""Readiness, `reconcile` and failover on the dev fleet (issue 11).

One deployment of a slim copy of specs/dev (qwen x3 over the L4 pools of dev-1..3 and the
ModelService demo/chat on the front door of dev-1), driven by `modelplane reconcile`. Tests
run in order. Select them with `pytest -k "failover or reconcile"`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.devfleet import fleet as devfleet
from modelplane.devfleet.cluster import FleetCluster
from modelplane.observe.cluster import observe_routes
from modelplane.observe.kube import KubeReader, parse_kubeconfig
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

QWEN = "demo/qwen"
CHAT = "demo/chat"
INTERVAL = 10.0  # seconds between reconcile rounds in the failover test
GRACE = 10.0
PROBE = 2.0  # between rounds, how often reconcile checks whether each API server answers
# Dead endpoints out of the live route: one interval + the first round's own time + this
# (Traefik picking up the changed HTTPRoute, the test's polling).
ROUTE_SLACK = 10.0
RESULTS = Path(os.environ.get("MODELPLANE_FAILOVER_RESULTS", "/tmp/modelplane-failover.json"))


def models(replicas: int) -> str:
    """qwen (``replicas``, a GPU of 16 GiB or more each) behind the ModelService demo/chat."""
    return fx.specs_yaml(
        fx.model_deployment("qwen", replicas=replicas, gpu=fx.GPU_16GI),
        fx.model_service("chat", "qwen"),
    )


def write_models(fleet_dir: Path, replicas: int) -> None:
    (fleet_dir / "models.yaml").write_text(models(replicas))


@pytest.fixture(scope="module")
def fleet_dir(deployer: fx.Deployer, dev_fleet: devfleet.DevFleet) -> Path:
    return deployer.dev_specs("reconcile", models=models(3))


def lock_clusters(fleet_dir: Path) -> list[str]:
    lock = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    return sorted(r["cluster"] for r in lock["deployments"][QWEN]["replicas"])


# --------------------------------------------------------------------------- readiness


def test_reconcile_once_and_status_readiness_goes_from_0_to_m(
    fleet_dir: Path, deployer: fx.Deployer
) -> None:
    before = fx.readiness(fleet_dir, deployer).deployment(QWEN)
    assert (before.ready, before.desired, before.placed) == (0, 3, 0)
    assert before.conditions[1].reason == "NothingPlaced"

    result = deployer.run("reconcile", str(fleet_dir), "--once", "-o", "json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (round_,) = fx.json_stream(result.stdout)
    assert round_["ok"] and round_["lockWritten"] and not round_["upSkipped"]
    assert len(round_["added"]) == 3

    seen: list[str] = []

    def all_ready() -> bool:
        d = fx.readiness(fleet_dir, deployer).deployment(QWEN)
        seen.append(f"{d.ready}/{d.desired}")
        return d.ready == 3

    fx.wait_for("qwen 3/3 ready", all_ready, timeout=180, interval=0.5)
    assert seen[-1] == "3/3"
    view = fx.readiness(fleet_dir, deployer)
    assert [c.health for c in view.clusters] == ["Healthy"] * 3
    assert view.deployment(QWEN).clusters == ["dev-1", "dev-2", "dev-3"]
    assert view.deployment(QWEN).conditions[1].reason == "AllReady"

    wide = deployer.run("status", str(fleet_dir), "-o", "wide")
    assert wide.returncode == 0, wide.stderr[-3000:]
    assert "3/3" in wide.stdout and "ReplicasReady=True" in wide.stdout
    assert wide.stdout.count("Ready") >= 3 and "replicas" in wide.stdout
    data = json.loads(deployer.run("status", str(fleet_dir), "-o", "json").stdout)
    assert data["readiness"]["deployments"][QWEN]["ready"] == "3/3"
    chat = data["readiness"]["services"][CHAT]
    assert (chat["endpoints"], chat["routable"]) == (3, 3) and chat["url"]

    again = deployer.run("reconcile", str(fleet_dir), "--once", "-o", "json")
    (second,) = fx.json_stream(again.stdout)
    assert second["ok"] and not second["lockWritten"] and second["added"] == []
    # a deployment's only replicas are never kept out of its routes, and reconcile
    # forgets its readiness view when it stops
    assert round_["unready"] == {} and second["unready"] == {}
    routing = fleet_dir / ".modelplane" / "routing.json"
    assert not routing.exists() or "unready" not in json.loads(routing.read_text())


def _qwen_pod(cluster: FleetCluster) -> str:
    pods = cluster.rest().get("/api/v1/namespaces/demo/pods?labelSelector=modelplane.ai%2Frole")
    return str(pods["items"][0]["metadata"]["name"])


def _set_pod_ready(cluster: FleetCluster, pod: str, ready: bool) -> None:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    if not ready:
        condition |= {"reason": "ForcedUnready", "message": "the test says so"}
    cluster.rest().request(
        "PATCH",
        f"/api/v1/namespaces/demo/pods/{pod}/status",
        body={"status": {"conditions": [condition]}},
        content_type="application/strategic-merge-patch+json",
    )


def test_reconcile_a_pod_forced_unready_shows_with_its_reason(
    fleet_dir: Path, deployer: fx.Deployer, dev_fleet: devfleet.DevFleet
) -> None:
    cluster = dev_fleet.cluster("dev-2")
    pod = _qwen_pod(cluster)
    _set_pod_ready(cluster, pod, False)
    try:
        view = fx.wait_for(
            "qwen 2/3",
            lambda: (lambda v: v if v.deployment(QWEN).ready == 2 else None)(
                fx.readiness(fleet_dir, deployer)
            ),
            timeout=30,
        )
        d = view.deployment(QWEN)
        (row,) = [r for r in d.replicas if r.cluster == "dev-2"]
        assert row.phase == "NotReady"
        assert row.reason == f"{pod}: ForcedUnready (the test says so)"
        assert d.conditions[1].reason == "ReplicasNotReady"
        assert view.service(CHAT).routable == 2
        time.sleep(3)  # kwok does not make a pod it already started Ready again
        assert fx.readiness(fleet_dir, deployer).deployment(QWEN).ready == 2
    finally:
        _set_pod_ready(cluster, pod, True)
    fx.wait_for(
        "qwen 3/3 again", lambda: fx.readiness(fleet_dir, deployer).deployment(QWEN).ready == 3
    )


GATEWAY = (
    "/apis/gateway.networking.k8s.io/v1/namespaces/modelplane-system/gateways/inference-gateway"
)


def test_reconcile_a_cluster_without_gateway_address_gets_no_new_replicas(
    fleet_dir: Path, deployer: fx.Deployer, dev_fleet: devfleet.DevFleet
) -> None:
    """dev-2's Gateway loses its address (its controller, Traefik, is frozen meanwhile)."""
    cluster = dev_fleet.cluster("dev-2")
    rest = cluster.rest()
    traefik = cluster.process("traefik-workload")
    assert traefik is not None
    addresses = rest.get(GATEWAY)["status"]["addresses"]
    assert addresses

    def set_addresses(value: list[dict[str, Any]]) -> None:
        rest.request(
            "PATCH",
            GATEWAY + "/status",
            body={"status": {"addresses": value}},
            content_type="application/merge-patch+json",
        )

    os.killpg(traefik.pid, signal.SIGSTOP)
    try:
        set_addresses([])
        # A plan-only deployment asking for more than the fleet has: reasons for every cluster.
        (fleet_dir / "probe.yaml").write_text(
            fx.specs_yaml(fx.model_deployment("probe", replicas=100, gpu=fx.GPU_16GI))
        )
        plain = json.loads(deployer.run("plan", str(fleet_dir), "-o", "json").stdout)
        assert "dev-2" in {r["cluster"] for r in plain["deployments"]["demo/probe"]["replicas"]}
        result = deployer.run("plan", str(fleet_dir), "--observe", "-o", "json")
        assert result.returncode == 0, result.stderr[-2000:]
        out = json.loads(result.stdout)
        probe = out["deployments"]["demo/probe"]
        assert "dev-2" not in {r["cluster"] for r in probe["replicas"]}
        assert (
            "dev-2: no gateway address (inference-gateway has none): no new replicas"
            in (probe["reasons"])
        )
        # the replica already there stays (grace period)
        assert "dev-2" in {r["cluster"] for r in out["deployments"][QWEN]["replicas"]}
        assert list(out["unhealthy"]) == ["dev-2"]
        view = fx.readiness(fleet_dir, deployer)
        assert [c.health for c in view.clusters if c.name == "dev-2"] == ["NoGatewayAddress"]
    finally:
        (fleet_dir / "probe.yaml").unlink(missing_ok=True)
        set_addresses(addresses)
        os.killpg(traefik.pid, signal.SIGCONT)
    fx.wait_for(
        "dev-2 healthy again",
        lambda: [c.health for c in fx.readiness(fleet_dir, deployer).clusters] == ["Healthy"] * 3,
        timeout=60,
    )


def test_reconcile_up_wait_returns_once_the_new_replica_is_ready(
    fleet_dir: Path, deployer: fx.Deployer
) -> None:
    write_models(fleet_dir, 4)
    try:
        result = deployer.run("up", str(fleet_dir), "--yes", "--wait", "--timeout", "3m")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert "ready: 1 deployment(s)" in result.stderr
        d = fx.readiness(fleet_dir, deployer).deployment(QWEN)
        assert (d.ready, d.desired) == (4, 4)
    finally:
        write_models(fleet_dir, 3)
        back = deployer.run("up", str(fleet_dir), "--yes")
    assert back.returncode == 0, back.stderr[-2000:]
    assert lock_clusters(fleet_dir) == ["dev-1", "dev-2", "dev-3"]


# --------------------------------------------------------------------------- failover


@pytest.fixture
def reconciler(
    fleet_dir: Path, deployer: fx.Deployer, tmp_path: Path
) -> Iterator[fx.ReconcileLoop]:
    loop = fx.start_reconcile(
        fleet_dir, deployer.env(), tmp_path, interval=INTERVAL, grace=GRACE, probe=PROBE
    )
    try:
        yield loop
    finally:
        loop.stop(wait=None)


def live_routes(cluster: FleetCluster) -> tuple[str, ...]:
    """The endpoints of demo/chat's HTTPRoute on the gateway cluster (as `status` reads it)."""
    path = cluster.kubeconfig_path
    reader = KubeReader(parse_kubeconfig(path.read_text(), str(path.parent)), timeout=2.0)
    seen = observe_routes(reader, ["demo"])
    assert seen.observed, seen.error
    return seen.services.get(CHAT, ())


def replica_objects(cluster: FleetCluster, replica: str) -> list[str]:
    """What is left on a cluster of one replica: its Services, pods and workloads."""
    rest = cluster.rest()
    selector = f"modelplane.ai%2Freplica%3D{replica}"
    out = []
    for path in (
        "/api/v1/namespaces/demo/services",
        "/api/v1/namespaces/demo/pods",
        "/apis/apps/v1/namespaces/demo/deployments",
        "/apis/leaderworkerset.x-k8s.io/v1/namespaces/demo/leaderworkersets",
    ):
        try:
            items = rest.get(f"{path}?labelSelector={selector}")["items"]
        except Exception:  # noqa: BLE001 - a kind this cluster does not serve
            continue
        out += [f"{path.rsplit('/', 1)[-1]}/{i['metadata']['name']}" for i in items]
    return out


def test_failover_replicas_replaced_and_routes_drop_dead_endpoints(
    fleet_dir: Path,
    deployer: fx.Deployer,
    dev_fleet: devfleet.DevFleet,
    reconciler: fx.ReconcileLoop,
) -> None:
    assert lock_clusters(fleet_dir) == ["dev-1", "dev-2", "dev-3"]
    lock = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    (dead,) = [r["name"] for r in lock["deployments"][QWEN]["replicas"] if r["cluster"] == "dev-3"]
    url = deployer.fleet(fleet_dir).status().gateway["services"][CHAT]
    gateway_cluster = dev_fleet.cluster("dev-1")
    assert dead in live_routes(gateway_cluster)
    fx.wait_for("a first quiet round", lambda: len(fx.rounds(reconciler)) >= 1, timeout=180)
    assert fx.rounds(reconciler)[0]["ok"], fx.rounds(reconciler)[0]
    outage = fx.Outage(dev_fleet, dev_fleet.cluster("dev-3"))
    with fx.Load(url) as load:
        time.sleep(3)
        assert load.count() > 5 and not load.failures(), load.results[-5:]
        down = time.monotonic()
        outage.start()

        fx.wait_for(
            "dev-3's endpoint out of the live route",
            lambda: dead not in live_routes(gateway_cluster),
            timeout=300,
            interval=0.2,
        )
        dropped = time.monotonic()

        def moved() -> bool:
            return "dev-3" not in lock_clusters(fleet_dir)

        fx.wait_for("qwen re-placed off dev-3", moved, timeout=300, interval=0.2)
        replaced = time.monotonic()

        def routes_updated() -> dict[str, Any] | None:
            for r in fx.rounds(reconciler):
                if r["removed"] and r["up"] is not None:
                    return r
            return None

        applied = fx.wait_for("the round that moved qwen to finish its up", routes_updated, 300)
        recovered = time.monotonic()
        assert applied["ok"], applied
        assert "dev-3" in applied["evicting"]
        assert applied["forgotten"].get("deploy-demo-qwen"), applied["forgotten"]
        ran = {s["stack"]: s["result"] for s in applied["up"]["stacks"]}
        assert ran["deploy-demo-qwen"] == "succeeded" and ran["gateway"] == "succeeded"
        first = next(r for r in fx.rounds(reconciler) if r["routesFirst"] is not None)
        assert first["unroutable"] == {"dev-3": first["unroutable"]["dev-3"]}, first
        assert [s["stack"] for s in first["routesFirst"]["stacks"]] == ["gateway"]
        # the new replica joins the route once a round has seen it Ready
        fx.wait_for(
            "3 endpoints in the live route",
            lambda: len(live_routes(gateway_cluster)) == 3,
            timeout=300,
        )
        rerouted = time.monotonic()
        # Traefik reloads its routes: a few seconds, then nothing fails.
        time.sleep(5)
        settled = time.monotonic()
        time.sleep(15)
        after = load.failures(since=settled)
        served_after = load.count(since=settled)
        clusters_after = {r[2] for r in load.results if r[0] >= settled and r[1] == 200}
        failed = load.failures(since=down)
        last_failure = max((r[0] for r in failed), default=down)
        routes_before_return = live_routes(gateway_cluster)
        assert os.path.exists(fleet_dir / ".modelplane" / "orphans.json")
        # Bring dev-3 back: nothing moves back, nothing flaps, its orphans are deleted.
        outage.end()
        back = time.monotonic()
        fx.wait_for(
            "dev-3 healthy",
            lambda: (
                [c.health for c in fx.readiness(fleet_dir, deployer).clusters] == ["Healthy"] * 3
            ),
            timeout=120,
        )
        fx.wait_for(
            "dev-3's orphans deleted",
            lambda: not replica_objects(dev_fleet.cluster("dev-3"), dead),
            timeout=120,
        )
        cleaned = time.monotonic()
        lock_after = (fleet_dir / "modelplane.lock.yaml").read_text()
        seen = len(fx.rounds(reconciler))
        fx.wait_for("two more rounds", lambda: len(fx.rounds(reconciler)) >= seen + 2, timeout=300)
        final_failures = load.failures(since=settled)
        routes_after_return = live_routes(gateway_cluster)
    later = fx.rounds(reconciler)[seen:]
    assert (fleet_dir / "modelplane.lock.yaml").read_text() == lock_after
    assert all(r["ok"] and not r["removed"] and not r["added"] for r in later), later
    assert "dev-3" not in lock_clusters(fleet_dir)
    assert routes_after_return == routes_before_return and dead not in routes_after_return
    deleted = [line for r in fx.rounds(reconciler) for line in r["orphansDeleted"]]
    assert any(line.startswith("dev-3: Service demo/") for line in deleted), deleted
    assert not os.path.exists(fleet_dir / ".modelplane" / "orphans.json")
    service = fx.readiness(fleet_dir, deployer).service(CHAT)
    assert (service.endpoints, service.routable, service.unroutable) == (3, 3, [])
    # SIGTERM stops the loop cleanly.
    process = reconciler.process
    process.send_signal(signal.SIGTERM)
    assert process.wait(300) == 0
    assert "reconcile: stopped" in reconciler.err.read_text()
    assert "Traceback" not in reconciler.err.read_text()

    report = {
        "interval": INTERVAL,
        "grace": GRACE,
        "probe": PROBE,
        "probeNoticed": [e for e in fx.events(reconciler) if "probe" in e],
        "routeDroppedAfter": round(dropped - down, 1),
        "routeDropGoalMet": dropped - down <= 2 * INTERVAL,
        "replacedAfter": round(replaced - down, 1),
        "routesUpdatedAfter": round(recovered - down, 1),
        "newReplicaRoutedAfter": round(rerouted - down, 1),
        "lastFailedRequestAfter": round(last_failure - down, 1),
        "failedRequests": len(failed),
        "requestsDuringOutage": load.count(since=down),
        "failedAfterRecovery": len(final_failures),
        "servedAfterRecovery": served_after,
        "routesFirst": {
            "phases": first["phases"],
            "gatewaySeconds": first["routesFirst"]["stacks"][0]["duration"],
        },
        "replacingRound": {
            "phases": applied["phases"],
            "stacks": {s["stack"]: s["duration"] for s in applied["up"]["stacks"]},
        },
        "orphansCleanedAfterReturn": round(cleaned - back, 1),
        "orphansDeleted": len(deleted),
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print("failover:", json.dumps(report))
    assert not after and not final_failures, (after + final_failures)[:5]
    assert served_after > 20 and "dev-3" not in clusters_after, clusters_after
    # Routes first: the round that sees the outage runs the gateway stack alone, so the dead
    # endpoint leaves the live route within one interval plus that round's observation and
    # gateway `up` (the goal, two intervals, when that `up` takes less than one interval;
    # on the shared 2-core machine it does not: docs/benchmarks.md), and before the replicas
    # are re-placed.
    first_round = first["phases"]["observe"] + first["phases"]["routesFirst"]
    assert dropped - down <= INTERVAL + first_round + ROUTE_SLACK, report
    assert dropped < replaced, report
    # The decision: within two intervals once the grace period is over (a round that is
    # running an `up` when the cluster dies delays the next one by that `up`).
    assert replaced - down <= GRACE + 2 * INTERVAL + 60, report
