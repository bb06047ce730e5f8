"""Readiness, `reconcile` and failover on the dev fleet (issues 11 and 27).

One deployment of a slim copy of specs/dev (qwen x3 over the L4 pools of dev-1..3 and the
ModelService demo/chat on the front door of dev-1), driven by `modelplane reconcile`, its
stacks and runtime state in a shared PostgreSQL backend (a real server started by
tests/fixtures/postgres.py). The failover test is the high-availability drill: two
`reconcile --leader-elect` processes, the Lease on dev-1; the leader is SIGKILLed and dev-3
stopped during the leader change. Tests run in order (the failover test deploys the fleet
itself when it runs alone). Select them with `pytest -k "failover or reconcile"`; the drill
also with `-k leader`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.devfleet import fleet as devfleet
from modelplane.devfleet.cluster import FleetCluster
from modelplane.observe.cluster import observe_routes
from modelplane.observe.kube import KubeReader, parse_kubeconfig
from tests.fixtures import devfleet as fx
from tests.fixtures.postgres import new_database
from tests.fixtures.service import free_port, scrape_metrics

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

QWEN = "demo/qwen"
CHAT = "demo/chat"
INTERVAL = 5.0  # seconds between reconcile rounds in the failover test
GRACE = 8.0
PROBE = 2.0  # between rounds, how often reconcile checks whether each API server answers
# The Lease (on dev-1): a standby takes over LEASE after the leader's last renewal.
LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
LEASE_NAME = "modelplane-reconcile-drill"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/modelplane-system/leases/"
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
def backend(postgres_url: str, deployer: fx.Deployer) -> str:
    """The module's shared backend: a fresh database; every command of the module uses it."""
    url = new_database(postgres_url)
    deployer.extra_env["PULUMI_BACKEND_URL"] = url
    return url


@pytest.fixture(scope="module")
def fleet_dir(deployer: fx.Deployer, dev_fleet: devfleet.DevFleet, backend: str) -> Path:
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
    assert deployer.fleet(fleet_dir).runtime.routing().unready == {}
    # the runtime state is in the shared backend, not in the fleet directory
    assert not (fleet_dir / ".modelplane" / "routing.json").exists()


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


@dataclass
class Candidate:
    """One `reconcile --leader-elect` process: its loop, its /metrics port."""

    name: str
    loop: fx.ReconcileLoop
    port: int

    def metrics(self) -> dict[str, float]:
        """Its unlabelled `modelplane_reconcile_*` samples; empty when it does not answer."""
        return scrape_metrics(self.port)

    def log(self) -> list[dict[str, Any]]:
        """Its JSON log lines (stderr, `--log-format json`)."""
        out = []
        for line in self.loop.err.read_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out


@pytest.fixture
def candidates(
    fleet_dir: Path, deployer: fx.Deployer, tmp_path: Path
) -> Iterator[dict[str, Candidate]]:
    """Two leader-elected reconcile processes on the same fleet folder (a volume both
    replicas mount) and the same backend, the Lease on dev-1."""
    out: dict[str, Candidate] = {}
    for name in ("reconcile-a", "reconcile-b"):
        port = free_port()
        lease = ["--leader-elect", "--lease-cluster", "dev-1", "--lease-name", LEASE_NAME]
        lease += ["--identity", name, "--lease-duration", f"{LEASE:g}s"]
        lease += ["--renew-deadline", f"{RENEW:g}s", "--retry-period", f"{RETRY:g}s"]
        lease += ["--listen", f"127.0.0.1:{port}", "--log-format", "json"]
        loop = fx.start_reconcile(
            fleet_dir,
            deployer.env(),
            tmp_path,
            interval=INTERVAL,
            grace=GRACE,
            probe=PROBE,
            extra=lease,
            name=name,
        )
        out[name] = Candidate(name, loop, port)
    try:
        yield out
    finally:
        for c in out.values():
            c.loop.stop(wait=None)


def lease_holder(cluster: FleetCluster) -> str:
    return str(cluster.rest().get(LEASES + LEASE_NAME)["spec"].get("holderIdentity") or "")


def lease_renewed(cluster: FleetCluster) -> float:
    """The Lease's renewTime (its holder's clock: this host's), as a Unix time."""
    renew = cluster.rest().get(LEASES + LEASE_NAME)["spec"]["renewTime"]
    return datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp()


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


def test_failover_leader_killed_and_a_cluster_stopped_replicas_replaced_routes_drop_dead(
    fleet_dir: Path,
    deployer: fx.Deployer,
    dev_fleet: devfleet.DevFleet,
    candidates: dict[str, Candidate],
) -> None:
    """The HA drill: of two leader-elected reconcile processes exactly one acts; the leader is
    SIGKILLed and dev-3 stopped right after; the standby takes over once the lease has run
    out and fails over: dev-3's endpoint leaves the live route first (by the new leader's
    first round), its replica is re-placed, 0 failed requests after recovery; dev-3 back,
    its orphans are deleted. Order and outcome are asserted; the times go to
    $MODELPLANE_FAILOVER_RESULTS (a loaded machine is slower, not wrong)."""
    if not (fleet_dir / "modelplane.lock.yaml").exists():  # selected alone (-k leader)
        fx.reconcile_once_until_ready(fleet_dir, deployer, QWEN, ready=3)
    assert lock_clusters(fleet_dir) == ["dev-1", "dev-2", "dev-3"]
    lock = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    (dead,) = [r["name"] for r in lock["deployments"][QWEN]["replicas"] if r["cluster"] == "dev-3"]
    url = deployer.fleet(fleet_dir).status().gateway["services"][CHAT]
    gateway_cluster = dev_fleet.cluster("dev-1")
    assert dead in live_routes(gateway_cluster)

    def one_leading() -> str | None:
        seen = {name: c.metrics() for name, c in candidates.items()}
        leaders = [name for name, m in seen.items() if m.get("leader") == 1]
        if not all(seen.values()) or len(leaders) != 1:
            return None
        return leaders[0] if fx.rounds(candidates[leaders[0]].loop) else None

    leader_name = fx.wait_for("one leader and its first round", one_leading, timeout=180)
    leader = candidates[leader_name]
    (standby,) = [c for name, c in candidates.items() if name != leader_name]
    assert fx.rounds(leader.loop)[0]["ok"], fx.rounds(leader.loop)[0]
    assert lease_holder(gateway_cluster) == leader.name
    outage = fx.Outage(dev_fleet, dev_fleet.cluster("dev-3"))
    with fx.Load(url, pace=fx.DRILL_PACE) as load:
        fx.wait_for("requests served", lambda: load.count() > 5, timeout=30, interval=0.1)
        assert not load.failures(), load.results[-5:]
        # Exactly one acts, up to the kill: the standby ran no round, the Lease names the leader.
        before = {c.name: c.metrics() for c in (leader, standby)}
        assert before[leader.name]["leader"] == 1 and before[leader.name]["rounds_total"] >= 1
        assert (before[standby.name]["leader"], before[standby.name]["rounds_total"]) == (0, 0)
        assert fx.rounds(standby.loop) == [] and lease_holder(gateway_cluster) == leader.name
        with urllib.request.urlopen(f"http://127.0.0.1:{standby.port}/readyz", timeout=2) as r:
            assert r.status == 200  # a standby that reaches the Lease is ready
        leader.loop.process.send_signal(signal.SIGKILL)
        leader.loop.process.wait(30)
        killed, killed_at = time.monotonic(), time.time()
        renewed_at = lease_renewed(gateway_cluster)  # the dead leader's last renewal
        down = time.monotonic()
        outage.start()  # dev-3 stops while nobody leads

        def took_over() -> dict[str, Any] | None:
            return next((e for e in standby.log() if e.get("event") == "leader"), None)

        led = fx.wait_for("the standby takes over", took_over, timeout=LEASE + 60, interval=0.1)
        takeover = led["ts"] - killed_at
        fx.wait_for("the new leader's first round", lambda: fx.rounds(standby.loop), 300, 0.2)
        acted = fx.rounds(standby.loop)[0]["started"] - killed_at
        assert lease_holder(gateway_cluster) == standby.name

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
            for r in fx.rounds(standby.loop):
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
        # The new leader's first round saw dev-3 down and took the routes first.
        first = fx.rounds(standby.loop)[0]
        assert first["unroutable"] == {"dev-3": first["unroutable"]["dev-3"]}, first
        assert first["routesFirst"] is not None, first
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
        time.sleep(5)
        failed = load.failures(since=down)
        last_failure = max((r[0] for r in failed), default=down)
        routes_before_return = live_routes(gateway_cluster)
        runtime = deployer.fleet(fleet_dir).runtime  # the shared backend's, as any host reads it
        assert {o.cluster for o in runtime.orphans()} == {"dev-3"}
        assert not (fleet_dir / ".modelplane" / "orphans.json").exists()
        # Bring dev-3 back: nothing moves back, nothing flaps, its orphans are deleted.
        outage.end()
        back = time.monotonic()
        fx.wait_for(
            "dev-3 healthy",
            lambda: (
                [c.health for c in fx.readiness(fleet_dir, deployer).clusters] == ["Healthy"] * 3
            ),
            timeout=300,
        )
        fx.wait_for(
            "dev-3's orphans deleted",
            lambda: not replica_objects(dev_fleet.cluster("dev-3"), dead),
            timeout=300,
        )
        cleaned = time.monotonic()
        lock_after = (fleet_dir / "modelplane.lock.yaml").read_text()
        seen = len(fx.rounds(standby.loop))
        fx.wait_for(
            "two more rounds", lambda: len(fx.rounds(standby.loop)) >= seen + 2, timeout=300
        )
        routes_after_return = live_routes(gateway_cluster)
    final_failures = load.failures(since=settled)
    served_after = load.count(since=settled)
    clusters_after = {r[2] for r in load.results if r[0] >= settled and r[1] == 200}
    rounds = fx.rounds(standby.loop)
    later = rounds[seen:]
    assert (fleet_dir / "modelplane.lock.yaml").read_text() == lock_after
    assert all(r["ok"] and not r["removed"] and not r["added"] for r in later), later
    assert "dev-3" not in lock_clusters(fleet_dir)
    assert routes_after_return == routes_before_return and dead not in routes_after_return
    deleted = [line for r in rounds for line in r["orphansDeleted"]]
    assert any(line.startswith("dev-3: Service demo/") for line in deleted), deleted
    assert deployer.fleet(fleet_dir).runtime.orphans() == []
    service = fx.readiness(fleet_dir, deployer).service(CHAT)
    assert (service.endpoints, service.routable, service.unroutable) == (3, 3, [])
    # Never two actors: the old leader's rounds all started before the kill, the new one's
    # after it took the Lease.
    assert all(r["started"] < killed_at for r in fx.rounds(leader.loop))
    assert all(r["started"] >= led["ts"] for r in rounds)
    # SIGTERM stops the new leader cleanly and releases the Lease.
    process = standby.loop.process
    process.send_signal(signal.SIGTERM)
    assert process.wait(300) == 0
    err = standby.loop.err.read_text()
    assert "reconcile: stopped" in err and "Traceback" not in err
    assert lease_holder(gateway_cluster) == ""
    events = [e["event"] for e in standby.log()]
    assert events[:2] == ["candidate", "leader"] and "standby" in events[2:], events

    report = {
        "interval": INTERVAL,
        "grace": GRACE,
        "probe": PROBE,
        "lease": {"duration": LEASE, "renewDeadline": RENEW, "retryPeriod": RETRY},
        "takeoverAfterKill": round(takeover, 2),
        "takeoverAfterLastRenewal": round(led["ts"] - renewed_at, 2),
        "newLeaderActedAfterKill": round(acted, 2),
        "probeNoticed": [e for e in fx.events(standby.loop) if "probe" in e],
        "routeDroppedAfter": round(dropped - down, 1),
        "routeDroppedAfterKill": round(dropped - killed, 1),
        "replacedAfter": round(replaced - down, 1),
        "routesUpdatedAfter": round(recovered - down, 1),
        "newReplicaRoutedAfter": round(rerouted - down, 1),
        "lastFailedRequestAfter": round(last_failure - down, 1),
        "failedRequests": len(failed),
        "requestsDuringOutage": load.count(since=down),
        "failedAfterRecovery": len(final_failures),
        "servedAfterRecovery": served_after,
        "leaderFirstRound": _stack_costs(fx.rounds(leader.loop)[0]),
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
    assert not final_failures, final_failures[:5]
    assert served_after > 20 and "dev-3" not in clusters_after, clusters_after
    # The standby takes over once the lease has run out, not before (counted from the
    # dead leader's last renewal), after the kill; it acts after the takeover, and its first
    # round is the one that takes the routes. How long each step took is in the report (a
    # benchmark: a loaded machine is slower, not wrong).
    assert led["ts"] - renewed_at >= LEASE - 0.05, (led, renewed_at)
    assert killed_at < led["ts"] <= first["started"], report
    # Routes first: the new leader's first round runs the gateway stack alone, so the dead
    # endpoint leaves the live route after that round started and before the re-placement.
    assert acted <= dropped - killed, report
    assert dropped < replaced, report


def _stack_costs(round_: dict[str, Any]) -> dict[str, Any]:
    """A first round's `up` (every stack by fingerprint, none changed): what each stack's
    check costs against the backend."""
    stacks = round_["up"]["stacks"] if round_["up"] else []
    seconds = round_["phases"].get("up", 0.0)
    return {
        "stacks": len(stacks),
        "results": sorted({s["result"] for s in stacks}),
        "upSeconds": seconds,
        "perStack": round(seconds / max(1, len(stacks)), 2),
    }
