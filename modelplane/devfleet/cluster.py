"""One dev-fleet cluster: a real control plane and its simulated nodes, inside the fleet's netns.

Processes (each its own process group, logs under ``<cluster>/logs/``), all bound to the
cluster's own addresses:

- kine (SQLite) and kube-apiserver on ``api_host`` (a 127.x address, bridged to the host);
- kube-controller-manager (every default controller: Deployments, ReplicaSets, the garbage
  collector, the ResourceClaim controller, node lifecycle) and kube-scheduler (DRA on);
- kwok, managing the Nodes annotated ``kwok.x-k8s.io/node=fake`` with the stages vendored from
  the kwok module (node initialize + lease heartbeat, pod ready/complete/delete), serving pods
  starting unready (``stages.py``) until the pod agent sees their stand-ins answer;
- the LeaderWorkerSet controller, its webhooks served on ``api_host:9443`` with a certificate
  from the cluster CA, registered with ``url`` client configs;
- two Traefik instances with the Kubernetes Gateway provider: the *workload* gateway (class
  ``modelplane-dev``, address ``gateway_ip`` — a private 10.x address, because EndpointSlices
  refuse loopback) and the *front door* (the InferenceGateway's class, address ``api_host``,
  which the host reaches through the bridge).

Traefik and kwok authenticate with a static bearer token (``--token-auth-file``); everything
else with the admin client certificate. Secrets stay in mode-0600 files under the cluster dir.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from modelplane.devcluster.certs import (
    KeyPair,
    PKIPaths,
    generate_serving_cert,
    write_pki,
    write_secret,
)
from modelplane.devcluster.crds import install_crds
from modelplane.devcluster.launch import (
    DevClusterError,
    ManagedProcess,
    apiserver_argv,
    clean_env,
    controller_manager_argv,
    kine_argv,
    scheduler_argv,
    spawn,
)
from modelplane.devcluster.rest import KubeRest, KubeRestError
from modelplane.devcluster.server import render_kubeconfig, wait_until_ready
from modelplane.devfleet import netns
from modelplane.devfleet.nodes import KWOK_ANNOTATION, KWOK_VALUE, ClusterNodes
from modelplane.devfleet.stages import (
    POD_COMPLETE_STAGE,
    POD_READY_STAGE,
    pod_complete_stages,
    pod_ready_stages,
)
from modelplane.gobuild.fleet import FleetBinaries
from modelplane.gobuild.kube import KubeBinaries
from modelplane.observe.usage import access_log_arguments

KINE_PORT = 2379
API_PORT = 6443
WEBHOOK_PORT = 9443
GATEWAY_PORT = 8000
"""The front door's `web` entrypoint, as in the Traefik Helm chart (the InferenceGateway's
Gateway listens on 8000); the bridge serves it on port 80 to the host, like the chart's Service."""
WORKLOAD_GATEWAY_PORT = 443
"""The workload gateway's one entrypoint (HTTPS, mutual TLS): `servingStack.gateway.port`'s
default, as specs/dev leaves it."""
SERVICE_RANGE = "10.96.0.0/16"
FRONT_DOOR_DIAL_TIMEOUT = "2s"
FRONT_DOOR_TLS_PORT = 8443  # `websecure`, as in the chart (spec.tls); bridged to the host's 443
"""As the InferenceGateway's Traefik (components/gateway.py): a dead endpoint costs one retry."""
WORKLOAD_GATEWAY_CLASS = "modelplane-dev"
# Where each Traefik takes its TLSOption `default` from (as components/workload/gateway_tls.py
# and the InferenceGateway's chart values put them; a test keeps them equal).
SYSTEM_NAMESPACE = "modelplane-system"
TRAEFIK_TLS_NAMESPACE = "modelplane-hop"
WORKLOAD_CLASS_LABEL = "modelplane.ai/dev-fleet-gateway"
FRONT_DOOR_SELECTOR = "modelplane.ai/gateway"
TRAEFIK_CONTROLLER = "traefik.io/gateway-controller"
LWS_NAMESPACE = "lws-system"
COMPONENT_USER = "modelplane-dev-components"
FIELD_MANAGER = "modelplane-dev-fleet"


@dataclass(frozen=True)
class ClusterAddresses:
    """Where cluster ``index`` (1-based) of a fleet in host slot ``slot`` listens."""

    name: str
    index: int
    slot: int

    @property
    def api_host(self) -> str:
        return f"127.77.{self.slot}.{10 + self.index}"

    @property
    def server(self) -> str:
        return f"https://{self.api_host}:{API_PORT}"

    @property
    def gateway_ip(self) -> str:
        return f"10.255.{self.slot}.{10 + self.index}"

    @property
    def front_door(self) -> str:
        """The front door as the host sees it (through the bridge) and its Gateway's address."""
        return self.api_host

    @property
    def front_door_ip(self) -> str:
        """Where the front door listens inside the namespace: private, so an EndpointSlice can
        hold it (its own Service, as the Traefik chart's, for a sharded service's second pass)."""
        return f"10.253.{self.slot}.{10 + self.index}"

    @property
    def pod_range(self) -> str:
        return f"10.{100 + self.index}.0.0/16"


@dataclass
class FleetCluster:
    """A running cluster (paths and processes; the kubeconfig file holds the secret)."""

    addresses: ClusterAddresses
    workdir: Path
    processes: list[ManagedProcess] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.addresses.name

    @property
    def kubeconfig_path(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def pki(self) -> PKIPaths:
        return PKIPaths.under(self.workdir / "pki")

    def rest(self) -> KubeRest:
        pki = self.pki
        return KubeRest(self.addresses.server, pki.ca_cert, pki.admin_cert, pki.admin_key)

    def process(self, name: str) -> ManagedProcess | None:
        return next((p for p in self.processes if p.name == name), None)

    def running(self) -> bool:
        return bool(self.processes) and all(p.running() for p in self.processes)

    def stop(self, only: tuple[str, ...] | None = None) -> None:
        errors = []
        for process in reversed(self.processes):
            if only is not None and process.name not in only:
                continue
            try:
                process.stop(timeout=10)
            except DevClusterError as exc:
                errors.append(str(exc))
        if errors:
            raise DevClusterError("; ".join(errors))

    def to_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "index": self.addresses.index,
            "slot": self.addresses.slot,
            "workdir": str(self.workdir),
            "server": self.addresses.server,
            "gatewayAddress": self.addresses.gateway_ip,
            "frontDoorAddress": self.addresses.front_door,
            "nodes": list(self.nodes),
            "processes": [p.to_state() for p in self.processes],
        }

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> FleetCluster:
        return cls(
            addresses=ClusterAddresses(str(data["name"]), int(data["index"]), int(data["slot"])),
            workdir=Path(data["workdir"]),
            processes=[ManagedProcess.from_state(p) for p in data["processes"]],
            nodes=list(data.get("nodes", [])),
        )


# --------------------------------------------------------------------------- processes


def _wait_listening(
    cluster: FleetCluster, process: ManagedProcess, check: Any, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not process.running():
            raise DevClusterError(
                f"{cluster.name}: {process.name} exited during startup; log: {process.log_path}\n"
                f"{process.log_tail()}"
            )
        try:
            if check():
                return
        except (KubeRestError, OSError) as exc:
            last = str(exc)[:300]
        time.sleep(0.2)
    raise DevClusterError(
        f"{cluster.name}: {process.name} not ready after {timeout:.0f}s ({last}); "
        f"log: {process.log_path}"
    )


# --------------------------------------------------------------------------- configuration


def kwok_config(stages_dir: Path) -> str:
    """KwokConfiguration plus the vendored stages, one multi-document file."""
    docs = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {
                # The binary does not default a configuration file's options: set them all.
                "manageNodesWithAnnotationSelector": f"{KWOK_ANNOTATION}={KWOK_VALUE}",
                "manageAllNodes": False,
                "nodeLeaseDurationSeconds": 40,
                "nodeLeaseParallelism": 4,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 4,
                "podsOnNodeSyncParallelism": 2,
                "enablePodsOnNodeSyncListPager": True,
                "enablePodsOnNodeSyncStreamWatch": False,
                "enableDebuggingHandlers": False,
                "enableContentionProfiling": False,
                "enableProfilingHandler": False,
                "enableCRDs": [],
            },
        }
    ]
    text = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)
    for stage in sorted(stages_dir.glob("*.yaml")):
        if stage.name == f"{POD_READY_STAGE}.yaml":
            # Serving pods start unready; the pod agent makes them Ready (stages.py).
            for doc in pod_ready_stages(stage.read_text()):
                text += "---\n" + yaml.safe_dump(doc, sort_keys=False)
            continue
        if stage.name == f"{POD_COMPLETE_STAGE}.yaml":
            # A ModelCache download takes a few seconds (stages.py).
            for doc in pod_complete_stages(stage.read_text()):
                text += "---\n" + yaml.safe_dump(doc, sort_keys=False)
            continue
        text += "---\n" + stage.read_text()
    return text


def lws_config(host: str, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": host, "port": WEBHOOK_PORT, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
    }


def lws_webhooks(host: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The LWS controller's admission webhooks (paths and rules as its manifests declare),
    pointing at its loopback server."""
    import base64

    bundle = base64.b64encode(ca_pem).decode()

    def hook(name: str, path: str, group: str, resource: str, ops: list[str], pods: bool):
        entry: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"url": f"https://{host}:{WEBHOOK_PORT}{path}", "caBundle": bundle},
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": ops,
                    "resources": [resource],
                }
            ],
        }
        if pods:
            entry["objectSelector"] = {
                "matchExpressions": [
                    {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}
                ]
            }
        return entry

    lws_group = "leaderworkerset.x-k8s.io"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "lws-mutating-webhook-configuration"},
            "webhooks": [
                hook(
                    "mleaderworkerset.kb.io",
                    "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                    lws_group,
                    "leaderworkersets",
                    ["CREATE", "UPDATE"],
                    False,
                ),
                hook("mpod.kb.io", "/mutate--v1-pod", "", "pods", ["CREATE"], True),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "lws-validating-webhook-configuration"},
            "webhooks": [
                hook(
                    "vleaderworkerset.kb.io",
                    "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                    lws_group,
                    "leaderworkersets",
                    ["CREATE", "UPDATE"],
                    False,
                ),
                hook("vpod.kb.io", "/validate--v1-pod", "", "pods", ["CREATE", "UPDATE"], True),
            ],
        },
    ]


def gateway_classes() -> list[dict[str, Any]]:
    """The workload GatewayClass the dev fleet's clusters advertise (``servingStack.gateway``)."""
    return [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {
                "name": WORKLOAD_GATEWAY_CLASS,
                "labels": {WORKLOAD_CLASS_LABEL: "workload"},
            },
            "spec": {"controllerName": TRAEFIK_CONTROLLER},
        }
    ]


RWX_STORAGE_CLASS = "modelplane-dev-rwx"
RWX_VOLUMES = 8
RWX_VOLUME_SIZE = "4Ti"


# The Traefik chart's Service as modelplane installs the InferenceGateway's controller
# (components/gateway.py TRAEFIK: release `mp-traefik` in `traefik-system`, `web` on port 80).
FRONT_DOOR_SERVICE = ("mp-traefik", "traefik-system")


def front_door_service(addresses: ClusterAddresses) -> list[dict[str, Any]]:
    """The front door's own Services, as the chart makes them, with the Traefik process's
    address as their endpoint: a sharded service's second pass, and a replica's to its
    workload gateway, go through it (`mp-traefik`; with `spec.tls.http: Refuse` the chart's
    ClusterIP Service `mp-traefik-internal`, components/gateway.py INTERNAL_SERVICE)."""
    name, namespace = FRONT_DOOR_SERVICE
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    ]
    for service in (name, f"{name}-internal"):
        out += [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": service, "namespace": namespace},
                "spec": {
                    "type": "ClusterIP",
                    "ports": [{"name": "web", "port": 80, "targetPort": "web", "protocol": "TCP"}],
                },
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{service}-dev-fleet",
                    "namespace": namespace,
                    "labels": {"kubernetes.io/service-name": service},
                },
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": [addresses.front_door_ip], "conditions": {"ready": True}}
                ],
                "ports": [{"name": "web", "port": GATEWAY_PORT, "protocol": "TCP"}],
            },
        ]
    return out


def rwx_storage(cluster: str) -> list[dict[str, Any]]:
    """A ReadWriteMany StorageClass with pre-made volumes (the dev fleet has no provisioner):
    what `existing.cache.storageClassName` names for ModelCache PVCs. The volumes are
    hostPath placeholders -- kwok's pods never mount anything."""
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": RWX_STORAGE_CLASS},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Retain",
        }
    ]
    for i in range(RWX_VOLUMES):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{cluster}-rwx-{i}"},
                "spec": {
                    "capacity": {"storage": RWX_VOLUME_SIZE},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": RWX_STORAGE_CLASS,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/var/lib/modelplane-dev/{cluster}/rwx-{i}"},
                },
            }
        )
    return objects


def scheduler_config(kubeconfig: Path) -> dict[str, Any]:
    """kube-scheduler packs nodes (NodeResourcesFit MostAllocated) instead of spreading.

    The default LeastAllocated spreads pods over nodes; with GPU pools that strands devices
    (three 2-GPU pods on three 4-GPU nodes leave no node for a 4-GPU pod), while modelplane's
    capacity model -- and GKE's optimize-utilization profile -- pack. Every modelplane pod
    requests CPU and memory, so packing by them packs the GPU nodes too.
    """
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [
                                    {"name": "cpu", "weight": 1},
                                    {"name": "memory", "weight": 1},
                                ],
                            }
                        },
                    }
                ],
            }
        ],
    }


def front_door_access_log(workdir: Path) -> Path:
    """The front door's access log (JSON lines; `modelplane usage` reads it)."""
    return workdir / "logs" / "front-door-access.log"


def traefik_argv(
    traefik: Path,
    *,
    server: str,
    token_file: Path,
    ca: Path,
    address: str,
    port: int,
    selector: str,
    front_door: bool = False,
    access_log: Path | None = None,
    status_address: str | None = None,
    tls_address: str | None = None,
    entry_point: str = "web",
    default_tls_namespace: str = "modelplane-system",
) -> list[str]:
    """Both with Traefik's Kubernetes CRD provider: the Middlewares routes name (the retry and
    key check of a ModelService route, api.md "Retries and ejection"; the front-door check of
    a replica route, "Private workload gateways"). ``front_door``: also a short dial timeout
    and the TLS entrypoint. ``status_address``: the Gateway address Traefik publishes, and
    ``tls_address`` where its TLS entrypoint listens (both by default ``address``).
    ``entry_point``: the name of the entrypoint on ``address``:``port`` (the workload
    gateway's is `websecure`, its only one: no plain HTTP). ``default_tls_namespace``: the
    one namespace whose TLSOption `default` counts (the front door's in modelplane-system, the
    workload gateway's -- client certificates required -- in modelplane-hop: both Traefiks
    read the same objects; components/workload/gateway_tls.py)."""
    extra = [
        "--providers.kubernetescrd=true",
        f"--providers.kubernetescrd.endpoint={server}",
        f"--providers.kubernetescrd.token={token_file}",
        f"--providers.kubernetescrd.certAuthFilePath={ca}",
        "--providers.kubernetescrd.throttleDuration=0s",
        # modelplane's own objects only (security review H3). Stand-in: a chart front door
        # lists modelplane's namespaces (modelplane.components.gateway.release_values); this Traefik
        # starts before the fleet's namespaces are known, so it selects by the objects'
        # management label, which a tenant could copy.
        "--providers.kubernetescrd.labelSelector=app.kubernetes.io/managed-by=modelplane",
        f"--providers.kubernetescrd.defaultTLSResourcesNamespace={default_tls_namespace}",
    ]
    if front_door:
        extra += [
            # The access log `modelplane usage` counts (api.md "Usage per caller").
            *access_log_arguments(str(access_log) if access_log else None),
            f"--serversTransport.forwardingTimeouts.dialTimeout={FRONT_DOOR_DIAL_TIMEOUT}",
            f"--entryPoints.websecure.address={tls_address or address}:{FRONT_DOOR_TLS_PORT}",
            # `ping@internal`, which the front door's health route names (as the chart's
            # Traefik, whose probes use it); on `web`, not a port of its own per Traefik.
            "--ping=true",
            f"--ping.entryPoint={entry_point}",
        ]
    return [
        str(traefik),
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
        f"--entryPoints.{entry_point}.address={address}:{port}",
        "--providers.kubernetesgateway=true",
        f"--providers.kubernetesgateway.endpoint={server}",
        f"--providers.kubernetesgateway.token={token_file}",
        f"--providers.kubernetesgateway.certAuthFilePath={ca}",
        f"--providers.kubernetesgateway.labelSelector={selector}",
        f"--providers.kubernetesgateway.statusAddress.ip={status_address or address}",
        "--providers.kubernetesgateway.throttleDuration=0s",
        "--log.level=WARN",
        "--log.noColor=true",
        *extra,
    ]


# --------------------------------------------------------------------------- start


def start_control_plane(
    cluster: FleetCluster, kube: KubeBinaries, ns: str, *, timeout: float = 90.0
) -> None:
    """kine + kube-apiserver, ready, CRDs installed, kubeconfig and token written."""
    a = cluster.addresses
    w = cluster.workdir
    for stale in ("kine", "pki", "apiserver-certs", "logs", "lws-certs"):
        shutil.rmtree(w / stale, ignore_errors=True)
    (w / "kine").mkdir(parents=True)
    pki = write_pki(w / "pki", hosts=(a.api_host, "localhost"))
    (w / "apiserver-certs").mkdir(mode=0o700)
    token = secrets.token_urlsafe(32)
    write_secret(w / "token", token)
    write_secret(
        w / "pki" / "tokens.csv", f'{token},{COMPONENT_USER},{COMPONENT_USER},"system:masters"\n'
    )
    env = clean_env()
    prefix = netns.exec_prefix(ns)
    kine = spawn(
        "kine",
        kine_argv(kube.kine, host=a.api_host, port=KINE_PORT, database=w / "kine" / "state.db"),
        cwd=w / "kine",
        log_path=w / "logs" / "kine.log",
        prefix=prefix,
        env=env,
    )
    cluster.processes.append(kine)
    apiserver = spawn(
        "kube-apiserver",
        apiserver_argv(
            kube.kube_apiserver,
            host=a.api_host,
            port=API_PORT,
            etcd_port=KINE_PORT,
            pki=pki,
            cert_dir=w / "apiserver-certs",
            service_range=SERVICE_RANGE,
            authorization="Node,RBAC",
            extra=[f"--token-auth-file={w / 'pki' / 'tokens.csv'}"],
        ),
        cwd=w,
        log_path=w / "logs" / "kube-apiserver.log",
        prefix=prefix,
        env=env,
    )
    cluster.processes.append(apiserver)
    rest = cluster.rest()

    def kine_alive() -> None:
        if not kine.running():
            raise DevClusterError(
                f"{cluster.name}: kine exited; log: {kine.log_path}\n{kine.log_tail()}"
            )

    wait_until_ready(rest, apiserver, timeout, check=kine_alive)
    write_secret(
        cluster.kubeconfig_path,
        render_kubeconfig(
            name=cluster.name,
            server=a.server,
            ca_cert_pem=pki.ca_cert.read_bytes(),
            client_cert_pem=pki.admin_cert.read_bytes(),
            client_key_pem=pki.admin_key.read_bytes(),
        ),
    )
    install_crds(rest)


def apply(rest: KubeRest, manifest: dict[str, Any]) -> None:
    """Server-side apply one object (cluster-scoped or namespaced)."""
    rest.apply(manifest, field_manager=FIELD_MANAGER)


def start_controllers(
    cluster: FleetCluster,
    kube: KubeBinaries,
    fleet: FleetBinaries,
    ns: str,
    simulated: ClusterNodes,
    *,
    timeout: float = 60.0,
) -> None:
    """Controller manager, scheduler, kwok, LWS (+ webhooks), both Traefiks; then the nodes."""
    a = cluster.addresses
    w = cluster.workdir
    pki = cluster.pki
    env = clean_env()
    prefix = netns.exec_prefix(ns)
    rest = cluster.rest()
    kubeconfig = str(cluster.kubeconfig_path)

    def run(name: str, argv: list[str]) -> ManagedProcess:
        log = w / "logs" / f"{name}.log"
        process = spawn(name, argv, cwd=w, log_path=log, prefix=prefix, env=env)
        cluster.processes.append(process)
        return process

    run(
        "kube-controller-manager",
        controller_manager_argv(
            kube.kube_controller_manager,
            host=a.api_host,
            kubeconfig=cluster.kubeconfig_path,
            pki=pki,
            extra=[
                "--use-service-account-credentials=false",
                "--allocate-node-cidrs=false",
                "--node-monitor-period=2s",
                "--node-monitor-grace-period=20s",
                "--concurrent-gc-syncs=5",
            ],
        ),
    )
    (w / "scheduler.yaml").write_text(yaml.safe_dump(scheduler_config(cluster.kubeconfig_path)))
    run(
        "kube-scheduler",
        scheduler_argv(
            kube.kube_scheduler,
            host=a.api_host,
            config=w / "scheduler.yaml",
            kubeconfig=cluster.kubeconfig_path,
        ),
    )
    (w / "kwok.yaml").write_text(kwok_config(fleet.stages_dir))
    run(
        "kwok",
        [
            str(fleet.kwok),
            f"--kubeconfig={kubeconfig}",
            f"--config={w / 'kwok.yaml'}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_VALUE}",
            f"--cidr={a.pod_range}",
            f"--node-ip={a.gateway_ip}",
            "--server-address=",
        ],
    )
    # LWS: namespace, serving certificate from the cluster CA, webhooks, controller.
    apply(rest, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LWS_NAMESPACE}})
    cert_dir = w / "lws-certs"
    cert_dir.mkdir(mode=0o700, exist_ok=True)
    ca = KeyPair(pki.ca_cert.read_bytes(), pki.ca_key.read_bytes())
    serving = generate_serving_cert(ca, hosts=(a.api_host,), common_name="lws-webhook")
    (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
    write_secret(cert_dir / "tls.key", serving.key_pem.decode())
    (w / "lws-config.yaml").write_text(yaml.safe_dump(lws_config(a.api_host, cert_dir)))
    lws = run(
        "lws-controller",
        [
            str(fleet.lws_controller),
            f"--config={w / 'lws-config.yaml'}",
            f"--kubeconfig={kubeconfig}",
            "--zap-log-level=info",
        ],
    )
    for webhook in lws_webhooks(a.api_host, pki.ca_cert.read_bytes()):
        apply(rest, webhook)
    for gateway_class in gateway_classes():
        apply(rest, gateway_class)
    gateways = (
        (
            "traefik-workload",
            a.gateway_ip,
            WORKLOAD_GATEWAY_PORT,
            f"{WORKLOAD_CLASS_LABEL}=workload",
        ),
        ("traefik-front-door", a.front_door_ip, GATEWAY_PORT, FRONT_DOOR_SELECTOR),
    )
    for name, address, port, selector in gateways:
        argv = traefik_argv(
            fleet.traefik,
            server=a.server,
            token_file=w / "token",
            ca=pki.ca_cert,
            address=address,
            port=port,
            selector=selector,
            front_door=name == "traefik-front-door",
            access_log=front_door_access_log(cluster.workdir),
            # Clients reach the front door through the bridge, at the host's address. Its TLS
            # entrypoint listens there too: without SNI (a URL with an IP), Traefik picks the
            # certificate by the address the connection arrived on.
            status_address=a.front_door if name == "traefik-front-door" else None,
            tls_address=a.front_door if name == "traefik-front-door" else None,
            entry_point="web" if name == "traefik-front-door" else "websecure",
            default_tls_namespace=SYSTEM_NAMESPACE
            if name == "traefik-front-door"
            else TRAEFIK_TLS_NAMESPACE,
        )
        run(name, argv)
    for manifest in [*rwx_storage(cluster.name), *front_door_service(a)]:
        apply(rest, manifest)
    # The simulated hardware.
    for manifest in simulated.device_classes:
        apply(rest, manifest)
    for node in simulated.nodes:
        _create_node(rest, node)
    for resource_slice in simulated.slices:
        apply(rest, resource_slice)
    cluster.nodes = simulated.node_names()
    # The webhook port is only reachable inside the namespace: wait for the controller to say
    # it serves (pods and LWS objects cannot be admitted before that).
    _wait_listening(cluster, lws, lambda: "Serving webhook server" in lws.log_tail(400), timeout)


def _create_node(rest: KubeRest, node: dict[str, Any]) -> None:
    try:
        rest.request("POST", "/api/v1/nodes", body=node)
    except KubeRestError as exc:
        if exc.status != 409:
            raise
        rest.request("PUT", f"/api/v1/nodes/{node['metadata']['name']}", body=node)


def save(cluster: FleetCluster) -> None:
    (cluster.workdir / "cluster.json").write_text(json.dumps(cluster.to_state(), indent=2) + "\n")
