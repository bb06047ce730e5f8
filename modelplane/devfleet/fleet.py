"""`modelplane dev-fleet up|down|status`: N real control planes with simulated GPU nodes.

State directory (``$MODELPLANE_DEV_FLEET_STATE``, else ``.modelplane/dev-fleet`` of the current
directory)::

    fleet.json                 what runs where (addresses, pids, log paths; no secrets)
    bridge.json, logs/         the host <-> namespace relays
    dev-1/kubeconfig           each cluster's admin kubeconfig (mode 0600: a secret)
    dev-1/logs/*.log           one log per process
    dev-1/pki/, token, ...     certificates and keys (0600)

The node pools come from a fleet's specs (``--specs``, default ``specs/dev`` when it exists):
cluster ``dev-<i>`` gets the pools of the InferenceCluster named ``dev-<i>``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelplane.devcluster.launch import DevClusterError, ManagedProcess, clean_env, spawn
from modelplane.devcluster.rest import KubeRestError
from modelplane.devfleet import authz, netns
from modelplane.devfleet import fleet_address as address
from modelplane.devfleet.bridge import Route
from modelplane.devfleet.cluster import (
    API_PORT,
    FRONT_DOOR_TLS_PORT,
    GATEWAY_PORT,
    ClusterAddresses,
    FleetCluster,
    start_control_plane,
    start_controllers,
)
from modelplane.devfleet.nodes import cluster_nodes
from modelplane.devfleet.prometheus import start_prometheus
from modelplane.errors import EnvironmentProblem
from modelplane.gobuild.fleet import FleetBinaries, ensure_fleet_binaries
from modelplane.gobuild.kube import KubeBinaries, ensure_kube_binaries
from modelplane.gobuild.prometheus import ensure_prometheus

STATE_ENV = "MODELPLANE_DEV_FLEET_STATE"
DEFAULT_STATE = Path(".modelplane/dev-fleet")
DEFAULT_SPECS = Path("specs/dev")
STATE_FILE = "fleet.json"

Progress = Callable[[str], None]


class DevFleetError(EnvironmentProblem, RuntimeError):
    """The dev fleet could not be started, reached or stopped; the message says why."""


def state_dir(explicit: Path | None = None) -> Path:
    """``explicit``, else ``$MODELPLANE_DEV_FLEET_STATE``, else ``.modelplane/dev-fleet``."""
    if explicit is not None:
        return explicit.expanduser().resolve()
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return (Path.cwd() / DEFAULT_STATE).resolve()


def cluster_name(index: int) -> str:
    return f"dev-{index}"


@dataclass
class DevFleet:
    """A running (or recorded) dev fleet."""

    root: Path
    netns: str
    slot: int
    clusters: list[FleetCluster] = field(default_factory=list)
    services: list[ManagedProcess] = field(default_factory=list)  # bridge, pod agent
    specs: str | None = None
    started_at: float = 0.0

    def cluster(self, name: str) -> FleetCluster:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise DevFleetError(f"the dev fleet has no cluster {name!r}")

    def all_processes(self) -> list[ManagedProcess]:
        return [*self.services, *(p for c in self.clusters for p in c.processes)]

    def running(self) -> bool:
        return bool(self.clusters) and all(p.running() for p in self.all_processes())

    def to_state(self) -> dict[str, Any]:
        return {
            "netns": self.netns,
            "slot": self.slot,
            "specs": self.specs,
            "startedAt": self.started_at,
            "services": [p.to_state() for p in self.services],
            "clusters": [c.to_state() for c in self.clusters],
        }

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / STATE_FILE).write_text(json.dumps(self.to_state(), indent=2) + "\n")

    @classmethod
    def load(cls, root: Path) -> DevFleet | None:
        path = root / STATE_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            return cls(
                root=root,
                netns=str(data["netns"]),
                slot=int(data["slot"]),
                specs=data.get("specs"),
                started_at=float(data.get("startedAt", 0.0)),
                services=[ManagedProcess.from_state(p) for p in data["services"]],
                clusters=[FleetCluster.from_state(c) for c in data["clusters"]],
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DevFleetError(f"cannot read the dev-fleet state {path}: {exc}") from None

    # -- teardown

    def stop(self) -> list[str]:
        """Stop every process (services last), remove the namespace; returns problems."""
        problems: list[str] = []
        with ThreadPoolExecutor(max_workers=max(1, len(self.clusters))) as pool:
            for result in pool.map(_stop_cluster, self.clusters):
                problems.extend(result)
        for process in reversed(self.services):
            try:
                process.stop(timeout=10)
            except DevClusterError as exc:
                problems.append(str(exc))
        try:
            netns.delete(self.netns)
        except netns.NetnsError as exc:
            problems.append(str(exc))
        return problems


def _stop_cluster(cluster: FleetCluster) -> list[str]:
    try:
        cluster.stop()
    except DevClusterError as exc:
        return [str(exc)]
    return []


# --------------------------------------------------------------------------- up


def _free_slot(clusters: int) -> int:
    """The first slot whose host addresses are free (API and front-door ports)."""
    for slot in range(1, 251):
        ok = True
        hosts = [(address.host(slot), 80)] + [
            (ClusterAddresses(cluster_name(index), index, slot).api_host, port)
            for index in range(1, clusters + 1)
            for port in (API_PORT, 80)
        ]
        for host, port in hosts:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((host, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return slot
    raise DevFleetError("no free 127.77.<slot>.x addresses for the dev fleet's host bridge")


def bridge_routes(addresses: list[ClusterAddresses], slot: int) -> list[Route]:
    """Host 127.x -> inside: each API server (same address), and each front door on port 80
    (Traefik's `web` entrypoint on its private address, port 8000, as behind the Helm chart's
    Service) and 443 (`websecure`, on the host's address: Traefik picks a certificate by the
    address a connection without SNI arrived on); the fleet address on port 80
    (devfleet/fleet_address.py)."""
    routes = [Route(address.host(slot), 80, address.inside(slot), address.PORT)]
    for a in addresses:
        routes.append(Route(a.api_host, API_PORT, a.api_host, API_PORT))
        routes.append(Route(a.front_door, 80, a.front_door_ip, GATEWAY_PORT))
        routes.append(Route(a.front_door, 443, a.front_door, FRONT_DOOR_TLS_PORT))
    return routes


def _load_specs(specs: Path | None, say: Progress) -> Any:
    if specs is None:
        return None
    from modelplane.api.loader import load_fleet

    result = load_fleet(specs)
    if result.errors:
        first = result.errors[0]
        raise DevFleetError(
            f"the specs in {specs} are invalid ({len(result.errors)} error(s); first: "
            f"{first}); run `modelplane validate {specs}`"
        )
    say(f"node pools from {specs}")
    return result.fleet


def ensure_caller_keys(fleet_spec: Any, root: Path) -> list[Path]:
    """A random API key (mode 0600) for each InferenceGateway caller whose secretRef is a
    file of the dev fleet's state directory (``file:${MODELPLANE_DEV_FLEET_STATE}/...``)
    and does not exist yet: the dev fleet's keys live with its other secrets, never in the
    specs. Returns the files written."""
    from modelplane.secrets import (
        DEV_FLEET_STATE_ENV,
        ensure_caller_key_files,
        expand_path_variables,
    )

    def place(ref: str) -> Path | None:
        if DEV_FLEET_STATE_ENV not in ref:
            return None
        expanded, missing = expand_path_variables(ref, {DEV_FLEET_STATE_ENV: str(root)})
        return None if missing else Path(expanded)

    return ensure_caller_key_files(fleet_spec, place, root)


def _start_service(
    name: str, argv: list[str], root: Path, ready: str, timeout: float = 30.0
) -> ManagedProcess:
    log_path = root / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    process = ManagedProcess(name, popen.pid, argv[0], log_path, popen)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready in process.log_tail(50):
            return process
        if not process.running():
            raise DevFleetError(f"{name} exited during startup:\n{process.log_tail()}")
        time.sleep(0.05)
    process.stop()
    raise DevFleetError(f"{name} not ready after {timeout:.0f}s; log: {log_path}")


def up(
    root: Path,
    *,
    clusters: int = 3,
    specs: Path | None = None,
    progress: Progress | None = None,
    kube: KubeBinaries | None = None,
    fleet_binaries: FleetBinaries | None = None,
    prometheus: bool = False,
    prometheus_binary: Path | None = None,
) -> DevFleet:
    """Start the dev fleet (or return it if it already runs). Each `up` starts empty.
    ``prometheus``: also one Prometheus per cluster, scraping the serving pods as the
    serving stack's does, behind the Service `monitoring/prometheus-prometheus`."""
    say: Progress = progress or (lambda _m: None)
    if clusters < 1 or clusters > 50:
        raise DevFleetError(f"--clusters must be between 1 and 50, not {clusters}")
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    existing = DevFleet.load(root)
    if existing is not None:
        if existing.running() and len(existing.clusters) == clusters:
            say(f"the dev fleet in {root} is already running")
            return existing
        existing.stop()
    fleet_spec = _load_specs(specs, say)
    for path in ensure_caller_keys(fleet_spec, root):
        say(f"API key for a caller of the front door written to {path}")
    kube = kube or ensure_kube_binaries(progress=say)
    if prometheus and prometheus_binary is None:
        # Two independent Go builds (when not cached): at the same time.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="devfleet-build") as pool:
            building = pool.submit(ensure_prometheus, progress=say)
            fleet_binaries = fleet_binaries or ensure_fleet_binaries(progress=say)
            prometheus_binary = building.result()
    fleet_binaries = fleet_binaries or ensure_fleet_binaries(progress=say)
    started = time.monotonic()
    slot = _free_slot(clusters)
    name = netns.namespace_name(root)
    netns.delete(name)  # leftovers of a crashed fleet
    netns.create(name)
    # The front door's key check (InferenceGateway spec.auth), by its Service's DNS name.
    netns.set_static_hosts(name, {authz.HOST: authz.authz_ip(slot)})
    fleet = DevFleet(
        root=root,
        netns=name,
        slot=slot,
        specs=str(specs.resolve()) if specs else None,
        started_at=time.time(),
    )
    addresses = [ClusterAddresses(cluster_name(i), i, slot) for i in range(1, clusters + 1)]
    try:
        (root / "bridge.json").write_text(
            json.dumps(
                {"netns": name, "routes": [r.to_json() for r in bridge_routes(addresses, slot)]},
                indent=2,
            )
        )
        fleet.services.append(
            _start_service(
                "bridge",
                [
                    sys.executable,
                    "-m",
                    "modelplane.devfleet.bridge",
                    "--config",
                    str(root / "bridge.json"),
                ],
                root,
                "bridge ready",
            )
        )
        for a in addresses:
            workdir = root / a.name
            workdir.mkdir(parents=True, exist_ok=True)
            fleet.clusters.append(FleetCluster(a, workdir))
        say(f"starting {clusters} control plane(s) in network namespace {name}")
        _parallel(lambda c: start_control_plane(c, kube, name), fleet.clusters)
        say("starting controllers, schedulers, kwok, LWS and Traefik; creating nodes")

        def controllers(c: FleetCluster) -> None:
            spec = fleet_spec.clusters.get(c.name) if fleet_spec is not None else None
            classes = fleet_spec.classes if fleet_spec is not None else {}
            start_controllers(
                c,
                kube,
                fleet_binaries,
                name,
                cluster_nodes(c.name, spec, classes, c.addresses.pod_range),
            )
            if prometheus_binary is not None:
                start_prometheus(c, prometheus_binary, name)

        _parallel(controllers, fleet.clusters)
        fleet.save()  # the pod agent reads it
        fleet.services.append(
            _start_service(
                "pod-agent",
                [sys.executable, "-m", "modelplane.devfleet.agent", "--state", str(root)],
                root,
                "agent ready",
            )
        )
        fleet.services.append(
            _start_service(
                "authz",
                [sys.executable, "-m", "modelplane.devfleet.authz", "--state", str(root)],
                root,
                "authz ready",
            )
        )
        # The fleet address (devfleet/fleet_address.py): pointed at the specs' front doors.
        doors = (
            fleet_spec.gateway.spec.front_door_clusters if fleet_spec and fleet_spec.gateway else []
        )
        address.point(root, [c.addresses for c in fleet.clusters if c.name in doors])
        fleet.services.append(_start_fleet_address(fleet, fleet_binaries.traefik))
        fleet.save()
        say(f"dev fleet up in {time.monotonic() - started:.1f}s")
        return fleet
    except BaseException:
        fleet.save()
        fleet.stop()
        (root / STATE_FILE).unlink(missing_ok=True)
        raise


def _start_fleet_address(fleet: DevFleet, traefik: Path, timeout: float = 30.0) -> ManagedProcess:
    """The fleet address's Traefik, in the namespace; ready once it accepts connections."""
    process = spawn(
        "fleet-address",
        address.traefik_argv(traefik, slot=fleet.slot, root=fleet.root),
        cwd=fleet.root,
        log_path=fleet.root / "logs" / "fleet-address.log",
        prefix=netns.exec_prefix(fleet.netns),
        env=clean_env(),
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address.host(fleet.slot), 80), timeout=1):
                return process
        except OSError:
            if not process.running():
                raise DevFleetError(
                    f"the fleet address's Traefik exited:\n{process.log_tail()}"
                ) from None
            time.sleep(0.1)
    process.stop()
    raise DevFleetError(f"the fleet address's Traefik not listening after {timeout:.0f}s")


def point_fleet_address(fleet: DevFleet, clusters: list[str]) -> list[str]:
    """Point the fleet address at these clusters' front doors (`dev-fleet fleet-address`);
    the URLs it sends to."""
    known = {c.name: c for c in fleet.clusters}
    unknown = [c for c in clusters if c not in known]
    if unknown:
        raise DevFleetError(
            f"no dev cluster named {', '.join(unknown)} (the fleet has {', '.join(known)})"
        )
    address.point(fleet.root, [known[c].addresses for c in clusters])
    return address.pointed(fleet.root)


def _parallel(fn: Callable[[FleetCluster], None], clusters: list[FleetCluster]) -> None:
    with ThreadPoolExecutor(max_workers=len(clusters)) as pool:
        futures = [pool.submit(fn, c) for c in clusters]
        errors = []
        for future in futures:
            try:
                future.result()
            except (DevClusterError, KubeRestError, OSError) as exc:
                errors.append(str(exc))
        if errors:
            raise DevFleetError("\n".join(errors))


def down(root: Path, progress: Progress | None = None) -> bool:
    """Stop everything recorded in ``root``; False when nothing was recorded."""
    say: Progress = progress or (lambda _m: None)
    fleet = DevFleet.load(root.resolve())
    if fleet is None:
        return False
    problems = fleet.stop()
    for cluster in fleet.clusters:
        for secret in ("kubeconfig", "token", "pki", "lws-certs", "apiserver-certs"):
            target = cluster.workdir / secret
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists():
                target.unlink()
    (fleet.root / STATE_FILE).unlink(missing_ok=True)
    for problem in problems:
        say(f"while stopping: {problem}")
    return True


# --------------------------------------------------------------------------- status


def _ready_nodes(cluster: FleetCluster) -> tuple[int, int]:
    items = cluster.rest().get("/api/v1/nodes", timeout=5).get("items", [])
    ready = 0
    for node in items:
        for condition in node.get("status", {}).get("conditions", []):
            if condition.get("type") == "Ready" and condition.get("status") == "True":
                ready += 1
    return ready, len(items)


def _gateways(cluster: FleetCluster) -> list[dict[str, Any]]:
    path = "/apis/gateway.networking.k8s.io/v1/gateways"
    found = []
    for gw in cluster.rest().get(path, timeout=5).get("items", []):
        meta, status = gw.get("metadata", {}), gw.get("status", {}) or {}
        addresses = [a.get("value") for a in status.get("addresses", []) or [] if a.get("value")]
        programmed = any(
            c.get("type") == "Programmed" and c.get("status") == "True"
            for c in status.get("conditions", []) or []
        )
        found.append(
            {
                "name": f"{meta.get('namespace')}/{meta.get('name')}",
                "class": gw.get("spec", {}).get("gatewayClassName"),
                "addresses": addresses,
                "programmed": programmed,
            }
        )
    return found


def status(fleet: DevFleet) -> dict[str, Any]:
    """What runs, per cluster: processes, API, Ready nodes, Gateways (JSON-ready)."""
    clusters = []
    for cluster in fleet.clusters:
        processes = {p.name: p.running() for p in cluster.processes}
        entry: dict[str, Any] = {
            "name": cluster.name,
            "server": cluster.addresses.server,
            "kubeconfig": str(cluster.kubeconfig_path),
            "gatewayAddress": cluster.addresses.gateway_ip,
            "frontDoor": f"http://{cluster.addresses.front_door}",
            "processes": processes,
            "apiReachable": False,
            "nodesReady": 0,
            "nodes": 0,
            "gateways": [],
        }
        try:
            entry["nodesReady"], entry["nodes"] = _ready_nodes(cluster)
            entry["gateways"] = _gateways(cluster)
            entry["apiReachable"] = True
        except (KubeRestError, OSError) as exc:
            entry["error"] = str(exc)[:300]
        clusters.append(entry)
    services = {p.name: p.running() for p in fleet.services}
    return {
        "state": str(fleet.root),
        "netns": fleet.netns,
        "fleetAddress": {
            "url": f"http://{address.host(fleet.slot)}",
            "frontDoors": address.pointed(fleet.root),
        },
        "specs": fleet.specs,
        "running": fleet.running(),
        "services": services,
        "clusters": clusters,
    }
