"""The dev fleet's pod agent: a stand-in for kubelet + the model server, inside the namespace.

kwok marks pods Running and gives them addresses, but nothing listens there. This agent
watches every cluster's pods and, for each Running serving pod (a container port named
``http``), runs a stand-in model server (``standin.py``) on the pod's IP and that port — so
Services, EndpointSlices, Traefik and modelplane's routes lead to something that answers, and
says which replica, role and cluster it is. When the pod goes away, so does its server.

Readiness is truthful, as a kubelet's: kwok starts serving pods Running but not Ready
(``stages.py``); the agent probes each pod's readiness probes (``httpGet`` path and port, or
``tcpSocket``) against its stand-ins and marks the pod Ready once every probe passes, unready
again after ``failureThreshold`` failures in a row. Probes whose port has no stand-in pass (the
endpoint picker's gRPC probe: nothing to simulate). ``initialDelaySeconds`` is ignored: the
stand-in's load time plays that part. A pod someone else made unready (a ``Ready`` condition
False with a reason other than ``ContainersNotReady``, as tests do) is left alone.

What a pod asks of its stand-ins (dev fleet only; production ignores these):

- load time: env ``MODELPLANE_STANDIN_LOAD_TIME`` (seconds) on the container, else the pod
  annotation ``modelplane.ai/standin-load-time``, else ``DEFAULT_LOAD_TIME`` (2 s);
- misbehaviour: env ``MODELPLANE_STANDIN_ERROR_RATIO`` (0..1 of generation requests answered
  500) and ``MODELPLANE_STANDIN_FIRST_TOKEN_DELAY`` (seconds); an image tag containing
  ``standin-errors`` means ratio 1, one containing ``standin-slow`` a 2 s delay (env wins);
- the revision it reports (``x-modelplane-revision``): the pod's ``modelplane.ai/revision``
  annotation or label, else the container's image;
- service time and concurrency: ``MODELPLANE_STANDIN_SERVICE_TIME`` / ``_CONCURRENCY``.
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
from modelplane.devfleet import netns, probes

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
    service_time: float = 0.0
    concurrency: int = 0
    load_time: float = 0.0
    revision: str = ""
    error_ratio: float = 0.0
    first_token_delay: float = 0.0
    token_time: float = 0.0


SERVICE_TIME_ENV = "MODELPLANE_STANDIN_SERVICE_TIME"
CONCURRENCY_ENV = "MODELPLANE_STANDIN_CONCURRENCY"
LOAD_TIME_ENV = "MODELPLANE_STANDIN_LOAD_TIME"
ERROR_RATIO_ENV = "MODELPLANE_STANDIN_ERROR_RATIO"
FIRST_TOKEN_DELAY_ENV = "MODELPLANE_STANDIN_FIRST_TOKEN_DELAY"
LOAD_TIME_ANNOTATION = "modelplane.ai/standin-load-time"
REVISION_KEY = "modelplane.ai/revision"
DEFAULT_LOAD_TIME = 2.0
"""Seconds a serving pod's stand-in takes to "load its model": a few, so an all-at-once
change visibly fails requests, and small, so dev-fleet tests stay fast."""
ERRORS_TAG = "standin-errors"
SLOW_TAG = "standin-slow"
SLOW_TAG_DELAY = 2.0
TOKEN_TIME_ENV = "MODELPLANE_STANDIN_TOKEN_TIME"  # seconds per streamed token


@dataclass(frozen=True)
class StandinLoad:
    """What a pod's container asks its stand-in for (bad values fall back to the default)."""

    service_time: float = 0.0
    concurrency: int = 0
    load_time: float = DEFAULT_LOAD_TIME
    error_ratio: float = 0.0
    first_token_delay: float = 0.0
    token_time: float = 0.0


def _number(text: str | None, default: float, high: float = float("inf")) -> float:
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        return default
    return value if 0 <= value <= high else default


def _image_tag(image: str) -> str:
    name = image.split("@", 1)[0]
    return name.rpartition(":")[2] if ":" in name.rpartition("/")[2] else ""


def _standin_load(
    container: Mapping[str, Any], annotations: Mapping[str, Any] | None = None
) -> StandinLoad:
    """What a pod's container asks its stand-in for: env ``MODELPLANE_STANDIN_*`` first,
    then the pod's load-time annotation and the image tag, then the defaults."""
    env = {
        str(e.get("name")): str(e.get("value", ""))
        for e in container.get("env", []) or []
        if isinstance(e, Mapping)
    }
    tag = _image_tag(str(container.get("image", "")))
    annotated = _number((annotations or {}).get(LOAD_TIME_ANNOTATION), DEFAULT_LOAD_TIME)
    return StandinLoad(
        service_time=_number(env.get(SERVICE_TIME_ENV), 0.0),
        concurrency=int(_number(env.get(CONCURRENCY_ENV), 0)),
        load_time=_number(env.get(LOAD_TIME_ENV), annotated),
        error_ratio=_number(env.get(ERROR_RATIO_ENV), 1.0 if ERRORS_TAG in tag else 0.0, 1.0),
        first_token_delay=_number(
            env.get(FIRST_TOKEN_DELAY_ENV), SLOW_TAG_DELAY if SLOW_TAG in tag else 0.0
        ),
        token_time=_number(env.get(TOKEN_TIME_ENV), 0.0),
    )


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
    annotations = meta.get("annotations", {}) or {}
    servers = []
    for container in (pod.get("spec", {}) or {}).get("containers", []) or []:
        for port in container.get("ports", []) or []:
            if port.get("name") not in SERVING_PORT_NAMES:
                continue
            number = int(port.get("containerPort", 0))
            name = str(meta.get("name", ""))
            load = _standin_load(container, annotations)
            revision = annotations.get(REVISION_KEY) or labels.get(REVISION_KEY)
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
                    service_time=load.service_time,
                    concurrency=load.concurrency,
                    load_time=load.load_time,
                    revision=str(revision or container.get("image", "")),
                    error_ratio=load.error_ratio,
                    first_token_delay=load.first_token_delay,
                    token_time=load.token_time,
                )
            )
    return servers


def _log(message: str) -> None:
    print(f"{time.time():.3f} agent: {message}", flush=True)


def _changed(old: PodServer, new: PodServer) -> str:
    fields = [f for f in PodServer.__dataclass_fields__ if getattr(old, f) != getattr(new, f)]
    return ", ".join(f"{f} {getattr(old, f)!r} -> {getattr(new, f)!r}" for f in fields)


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
        from modelplane.devfleet.cluster import (
            FRONT_DOOR_TLS_PORT,
            GATEWAY_PORT,
            ClusterAddresses,
        )
        from modelplane.devfleet.router_pods import RouterPods

        self.clusters: list[tuple[str, KubeRest]] = []
        front_doors: dict[str, tuple[str, str]] = {}
        for cluster in data["clusters"]:
            name = str(cluster["name"])
            inside = ClusterAddresses(name, int(cluster["index"]), int(data["slot"]))
            front_doors[name] = (
                f"http://{inside.front_door_ip}:{GATEWAY_PORT}",
                f"https://{inside.front_door}:{FRONT_DOOR_TLS_PORT}",
            )
            workdir = Path(cluster["workdir"])
            pki = workdir / "pki"
            rest = KubeRest(cluster["server"], pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
            self.clusters.append((str(cluster["name"]), rest))
        from modelplane.devfleet.standin import StandinHostThread

        self.host = StandinHostThread(grace=REMOVE_GRACE).start()
        self.routers = RouterPods(state, front_doors)
        # Draining a removed stand-in takes up to the grace period: off the sync loop.
        self.removals = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-remove")
        self.running: dict[str, PodServer] = {}
        self.hosts: dict[str, dict[str, str]] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        # readiness probes: when each (pod, container) was last probed, failures in a row
        self.probed: dict[str, float] = {}
        self.failures: dict[str, int] = {}

    def sync_cluster(self, name: str, rest: KubeRest) -> None:
        try:
            pods = rest.get("/api/v1/pods", timeout=5).get("items", [])
        except (KubeRestError, OSError):
            return  # a stopped control plane: keep what runs (its pods are not deleted)
        self.routers.sync(name, rest, pods)
        wanted = {s.key: s for pod in pods for s in pod_servers(name, pod)}
        self._converge(f"{name}/", wanted, name, pod_hosts(pods))
        self._probe_pods(name, rest, pods)

    def _probe_pods(self, name: str, rest: KubeRest, pods: list[dict[str, Any]]) -> None:
        """Play the kubelet's readiness prober for the pods with stand-ins: probe, then patch
        the pod's status when what it says differs (see ``probes.py``)."""
        now = time.monotonic()
        seen: set[str] = set()
        for pod in pods:
            servers = pod_servers(name, pod)
            if not servers or probes.held_unready(pod):
                continue
            meta, status = pod["metadata"], pod.get("status", {}) or {}
            namespace, pod_name = meta.get("namespace", "default"), meta["name"]
            ports = {s.port for s in servers}
            served = {s.port for s in servers if self.running.get(s.key) == s}
            was = {
                str(c.get("name")): bool(c.get("ready"))
                for c in status.get("containerStatuses") or []
            }
            results: dict[str, bool] = {}
            for container, probe in probes.pod_probes(pod).items():
                if probe is None or probe.port not in ports:
                    results[container] = True  # no probe, or nothing simulated behind it
                    continue
                key = f"{name}/{namespace}/{pod_name}/{container}"
                seen.add(key)
                ready = was.get(container, False)
                if ready and now - self.probed.get(key, 0.0) < probe.period:
                    continue  # a ready container is probed every periodSeconds
                self.probed[key] = now
                if probe.port in served and probes.run_probe(servers[0].ip, probe):
                    self.failures[key] = 0
                    results[container] = True
                elif ready:
                    self.failures[key] = self.failures.get(key, 0) + 1
                    if self.failures[key] >= probe.failure_threshold:
                        results[container] = False
                else:
                    results[container] = False
            patch = probes.readiness_patch(pod, results)
            if patch is None:
                continue
            path = f"/api/v1/namespaces/{namespace}/pods/{pod_name}/status"
            try:
                rest.request(
                    "PATCH",
                    path,
                    body=patch,
                    content_type="application/merge-patch+json",
                    timeout=5,
                )
            except (KubeRestError, OSError):
                pass  # changed meanwhile (409) or gone: the next poll sees it again
        for key in [k for k in self.probed if k.startswith(f"{name}/") and k not in seen]:
            self.probed.pop(key, None)
            self.failures.pop(key, None)

    def _converge(
        self, prefix: str, wanted: dict[str, PodServer], name: str, hosts: dict[str, str]
    ) -> None:
        with self.lock:
            mine = {k: v for k, v in self.running.items() if k.startswith(prefix)}
            for key in sorted(set(mine) - set(wanted)):
                _log(f"remove {key} (gone; grace {REMOVE_GRACE}s)")
                self.removals.submit(self.host.remove, key)
                del self.running[key]
            for key, server in sorted(wanted.items()):
                current = self.running.get(key)
                if current == server:
                    continue
                if current is not None:
                    _log(f"remove {key} (changed: {_changed(current, server)}; grace 0s)")
                    self.host.remove(key, 0.0)
                _log(f"add {key} on {server.ip}:{server.port}")
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

        identity = StandinIdentity.of(server)
        config = StandinConfig(
            prefix_tolerant=True,
            service_time=server.service_time,
            concurrency=server.concurrency,
            load_time=server.load_time,
            revision=server.revision,
            error_ratio=server.error_ratio,
            first_token_delay=server.first_token_delay,
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
        self.routers.stop()
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
