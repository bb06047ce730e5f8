"""The dev fleet's pod agent: a stand-in for kubelet + the model server, inside the namespace.

kwok marks pods Running and gives them addresses, but nothing listens there. This agent
watches every cluster's pods and, for each Running serving pod (a container port named
``http``), runs a stand-in model server (``standin.py``) on the pod's IP and that port — so
Services, EndpointSlices, Traefik and modelplane's routes lead to something that answers, and
says which replica, role and cluster it is. When the pod goes away, so does its server.
It also keeps ``/etc/netns/<ns>/hosts`` holding each pod's DNS name
(``<hostname>.<subdomain>.<namespace>.svc.cluster.local``), so LWS leader addresses resolve.

Production pods run the user's image on real kubelets; this exists only in the dev fleet.

Run as ``python -m modelplane.devfleet.agent --state <dev-fleet state dir>``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelplane.devcluster.rest import KubeRest, KubeRestError
from modelplane.devfleet import netns

POLL_SECONDS = 0.5
REMOVE_GRACE = 2.0
EXTERNALS_FILE = "externals.json"
"""Stand-ins for endpoints outside the fleet (a test's external ModelEndpoints): a JSON list of
``{ip, port, replica, cluster, hostname?}`` in the state directory, read every poll."""
# The engine's port, and the P/D routing sidecar's (components/workload/disaggregation.py):
# on a dev cluster a stand-in answers on each.
SERVING_PORT_NAMES = frozenset({"http", "pd-proxy"})
REPLICA_LABEL = "modelplane.ai/replica"
ROLE_LABEL = "modelplane.ai/role"
DEPLOYMENT_LABEL = "modelplane.ai/deployment"
CLUSTER_LABEL = "modelplane.ai/cluster"


@dataclass(frozen=True)
class PodServer:
    """One stand-in to run: where, and who it says it is."""

    key: str  # <cluster>/<namespace>/<pod>/<port>
    ip: str
    port: int
    cluster: str
    namespace: str
    pod: str
    replica: str
    role: str
    model: str
    ready: bool
    service_time: float = 0.0
    concurrency: int = 0
    token_time: float = 0.0


SERVICE_TIME_ENV = "MODELPLANE_STANDIN_SERVICE_TIME"
CONCURRENCY_ENV = "MODELPLANE_STANDIN_CONCURRENCY"
TOKEN_TIME_ENV = "MODELPLANE_STANDIN_TOKEN_TIME"  # seconds per streamed token


def _token_time(container: Mapping[str, Any]) -> float:
    for e in container.get("env", []) or []:
        if isinstance(e, Mapping) and e.get("name") == TOKEN_TIME_ENV:
            try:
                return max(0.0, float(e.get("value") or 0))
            except ValueError:
                return 0.0
    return 0.0


def _standin_load(container: Mapping[str, Any]) -> tuple[float, int]:
    """Service time and concurrency a pod's container asks its stand-in for (env
    MODELPLANE_STANDIN_SERVICE_TIME / _CONCURRENCY: dev fleet only; bad values are 0)."""
    env = {
        str(e.get("name")): str(e.get("value", ""))
        for e in container.get("env", []) or []
        if isinstance(e, Mapping)
    }
    try:
        service_time = max(0.0, float(env.get(SERVICE_TIME_ENV, "0") or 0))
    except ValueError:
        service_time = 0.0
    try:
        concurrency = max(0, int(env.get(CONCURRENCY_ENV, "0") or 0))
    except ValueError:
        concurrency = 0
    return service_time, concurrency


def _model_name(container: Mapping[str, Any], fallback: str) -> str:
    args = [str(a) for a in container.get("args", []) or []]
    for prefix in ("--served-model-name=", "--model=", "--model-path="):
        for arg in args:
            if arg.startswith(prefix):
                return arg[len(prefix) :]
    return fallback


def pod_servers(cluster: str, pod: Mapping[str, Any]) -> list[PodServer]:
    """The stand-ins a pod needs (none unless it is Running with an IP and a serving port)."""
    meta = pod.get("metadata", {}) or {}
    status = pod.get("status", {}) or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return []
    ip = status.get("podIP")
    if not ip:
        return []
    labels = meta.get("labels", {}) or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions", []) or []
    )
    servers = []
    for container in (pod.get("spec", {}) or {}).get("containers", []) or []:
        for port in container.get("ports", []) or []:
            if port.get("name") not in SERVING_PORT_NAMES:
                continue
            number = int(port.get("containerPort", 0))
            name = str(meta.get("name", ""))
            service_time, concurrency = _standin_load(container)
            namespace = str(meta.get("namespace", "default"))
            servers.append(
                PodServer(
                    key=f"{cluster}/{namespace}/{name}/{number}",
                    ip=str(ip),
                    port=number,
                    cluster=str(labels.get(CLUSTER_LABEL, cluster)),
                    namespace=namespace,
                    pod=name,
                    replica=str(labels.get(REPLICA_LABEL, name)),
                    role=str(labels.get(ROLE_LABEL, "unified")),
                    model=_model_name(container, str(labels.get(DEPLOYMENT_LABEL, name))),
                    ready=ready,
                    service_time=service_time,
                    concurrency=concurrency,
                    token_time=_token_time(container),
                )
            )
    return servers


def pod_hosts(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """DNS names of pods with a hostname and subdomain (LWS/StatefulSet pods) -> pod IP."""
    hosts: dict[str, str] = {}
    for pod in pods:
        spec, meta = pod.get("spec", {}) or {}, pod.get("metadata", {}) or {}
        ip = (pod.get("status", {}) or {}).get("podIP")
        hostname, subdomain = spec.get("hostname"), spec.get("subdomain")
        if ip and hostname and subdomain:
            ns = meta.get("namespace", "default")
            hosts[f"{hostname}.{subdomain}.{ns}"] = ip
            hosts[f"{hostname}.{subdomain}.{ns}.svc.cluster.local"] = ip
    return hosts


class Agent:
    def __init__(self, state: Path) -> None:
        self.state = state
        data = json.loads((state / "fleet.json").read_text())
        self.netns = str(data["netns"])
        self.clusters: list[tuple[str, KubeRest]] = []
        for cluster in data["clusters"]:
            workdir = Path(cluster["workdir"])
            pki = workdir / "pki"
            rest = KubeRest(cluster["server"], pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
            self.clusters.append((str(cluster["name"]), rest))
        from modelplane.devfleet.standin import StandinHostThread

        self.host = StandinHostThread(grace=REMOVE_GRACE).start()
        # Draining a removed stand-in takes up to the grace period: off the sync loop.
        self.removals = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-remove")
        self.running: dict[str, PodServer] = {}
        self.hosts: dict[str, dict[str, str]] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def sync_cluster(self, name: str, rest: KubeRest) -> None:
        try:
            pods = rest.get("/api/v1/pods", timeout=5).get("items", [])
        except (KubeRestError, OSError):
            return  # a stopped control plane: keep what runs (its pods are not deleted)
        wanted = {s.key: s for pod in pods for s in pod_servers(name, pod)}
        self._converge(f"{name}/", wanted, name, pod_hosts(pods))

    def _converge(
        self, prefix: str, wanted: dict[str, PodServer], name: str, hosts: dict[str, str]
    ) -> None:
        with self.lock:
            mine = {k: v for k, v in self.running.items() if k.startswith(prefix)}
            for key in sorted(set(mine) - set(wanted)):
                self.removals.submit(self.host.remove, key)
                del self.running[key]
            for key, server in sorted(wanted.items()):
                current = self.running.get(key)
                if current == server:
                    continue
                if current is not None:
                    if (current.ip, current.port) == (server.ip, server.port):
                        self.host.set_ready(key, server.ready)
                        self.running[key] = server
                        continue
                    self.host.remove(key, 0.0)
                try:
                    self._add(server)
                except (OSError, ValueError) as exc:
                    print(
                        f"agent: cannot serve {key} on {server.ip}:{server.port}: {exc}", flush=True
                    )
                    continue
                self.running[key] = server
            if hosts != self.hosts.get(name):
                self.hosts[name] = hosts
                merged: dict[str, str] = {}
                for entries in self.hosts.values():
                    merged.update(entries)
                netns.write_hosts(self.netns, merged)

    def _add(self, server: PodServer) -> None:
        from modelplane.devfleet.standin import StandinConfig, StandinIdentity

        identity = StandinIdentity(
            replica=server.replica,
            role=server.role,
            cluster=server.cluster,
            model=server.model,
            pod=server.pod,
            namespace=server.namespace,
        )
        config = StandinConfig(
            ready=server.ready,
            prefix_tolerant=True,
            service_time=server.service_time,
            concurrency=server.concurrency,
            token_time=server.token_time,
        )
        self.host.add(server.key, server.ip, server.port, identity, config)

    def sync_externals(self) -> None:
        path = self.state / EXTERNALS_FILE
        try:
            entries = json.loads(path.read_text()) if path.is_file() else []
        except (OSError, ValueError):
            return
        wanted: dict[str, PodServer] = {}
        hosts: dict[str, str] = {}
        for e in entries:
            server = PodServer(
                key=f"external/{e['ip']}/{e['port']}",
                ip=str(e["ip"]),
                port=int(e["port"]),
                cluster=str(e.get("cluster", "outside")),
                namespace="",
                pod="",
                replica=str(e.get("replica", e["ip"])),
                role=str(e.get("role", "external")),
                model=str(e.get("model", "external")),
                ready=True,
            )
            wanted[server.key] = server
            if e.get("hostname"):
                hosts[str(e["hostname"])] = server.ip
        self._converge("external/", wanted, "external", hosts)

    def run(self) -> None:
        print("agent ready", flush=True)
        while not self.stop.is_set():
            for name, rest in self.clusters:
                self.sync_cluster(name, rest)
            self.sync_externals()
            self.stop.wait(POLL_SECONDS)
        self.removals.shutdown(wait=True)
        self.host.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modelplane.devfleet.agent")
    parser.add_argument("--state", required=True, type=Path)
    args = parser.parse_args(argv)
    data = json.loads((args.state / "fleet.json").read_text())
    netns.enter(str(data["netns"]))
    agent = Agent(args.state)
    signal.signal(signal.SIGTERM, lambda *_: agent.stop.set())
    signal.signal(signal.SIGINT, lambda *_: agent.stop.set())
    agent.run()
    return 0


if __name__ == "__main__":
    time.sleep(0)
    sys.exit(main())
