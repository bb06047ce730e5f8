"""One real Prometheus per dev-fleet cluster, standing in for the serving stack's.

Built once per user by `modelplane.gobuild.prometheus` (every service discovery but Kubernetes
left out). Each cluster's Prometheus runs in the fleet's network namespace on the cluster's
workload address (``gateway_ip``, port 9090), discovers the serving pods through the cluster's
API server (``kubernetes_sd``, the components' bearer token) and scrapes them with the job the
serving stack installs (``modelplane.observe.prometheus.engine_scrape_job``). A Pod standing for
it and the Service ``monitoring/prometheus-prometheus`` (the name kube-prometheus-stack gives
it) let the API server's service proxy reach it: the path `reconcile` asks.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from modelplane.devcluster.launch import DevClusterError, clean_env, spawn
from modelplane.devfleet import netns
from modelplane.gobuild.fleet_versions import PROMETHEUS_VERSION
from modelplane.observe.prometheus import (
    PROMETHEUS_NAMESPACE,
    PROMETHEUS_PORT,
    PROMETHEUS_PORT_NAME,
    PROMETHEUS_SERVICE,
    engine_scrape_job,
)

if TYPE_CHECKING:
    from modelplane.devfleet.cluster import FleetCluster

PROCESS = "prometheus"
READY = "Server is ready to receive web requests."


# --------------------------------------------------------------------------- run


def prometheus_config(*, server: str, ca_file: Path, token_file: Path) -> dict[str, Any]:
    """The dev cluster's Prometheus configuration: the serving stack's engine job, with
    Kubernetes discovery against this cluster's API server (pure)."""
    job = engine_scrape_job()
    job["kubernetes_sd_configs"] = [
        {
            **sd,
            "api_server": server,
            "tls_config": {"ca_file": str(ca_file)},
            "authorization": {"credentials_file": str(token_file)},
        }
        for sd in job["kubernetes_sd_configs"]
    ]
    return {"global": {"scrape_interval": job["scrape_interval"]}, "scrape_configs": [job]}


def prometheus_argv(binary: Path, *, config: Path, data: Path, address: str) -> list[str]:
    return [
        str(binary),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=2h",
        f"--web.listen-address={address}:{PROMETHEUS_PORT}",
        "--log.level=info",
    ]


PROMETHEUS_POD = "prometheus-prometheus-0"


def service_manifests(system_node: str) -> list[dict[str, Any]]:
    """Namespace, Pod and Service ``monitoring/prometheus-prometheus`` for the dev Prometheus
    (pure). The API server's service proxy only reaches addresses that are Pods (an
    endpoint's `targetRef`, its IP among the pod's IPs): the Pod stands for the process, on
    the untainted system node with `hostNetwork`, so kwok gives it the node's IP — the
    cluster's workload address, where the process listens — and the endpoints controller
    fills the Service's endpoints from it, as for the chart's Prometheus pod."""
    labels = {"app.kubernetes.io/name": "prometheus", "modelplane.ai/dev-fleet": "prometheus"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROMETHEUS_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": PROMETHEUS_POD,
                "namespace": PROMETHEUS_NAMESPACE,
                "labels": labels,
            },
            "spec": {
                "nodeName": system_node,
                "hostNetwork": True,
                "containers": [
                    {
                        "name": "prometheus",
                        "image": f"quay.io/prometheus/prometheus:v{PROMETHEUS_VERSION}",
                        "ports": [
                            {
                                "name": PROMETHEUS_PORT_NAME,
                                "containerPort": PROMETHEUS_PORT,
                                "protocol": "TCP",
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": PROMETHEUS_SERVICE,
                "namespace": PROMETHEUS_NAMESPACE,
                "labels": labels,
            },
            "spec": {
                "selector": labels,
                "ports": [
                    {
                        "name": PROMETHEUS_PORT_NAME,
                        "port": PROMETHEUS_PORT,
                        "targetPort": PROMETHEUS_PORT_NAME,
                        "protocol": "TCP",
                    }
                ],
            },
        },
    ]


def start_prometheus(
    cluster: FleetCluster, binary: Path, ns: str, *, timeout: float = 60.0
) -> None:
    """Start the cluster's Prometheus in the fleet's netns and register its Service."""
    from modelplane.devfleet.cluster import apply

    a = cluster.addresses
    w = cluster.workdir
    data = w / "prometheus"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    config = w / "prometheus.yaml"
    config.write_text(
        yaml.safe_dump(
            prometheus_config(server=a.server, ca_file=cluster.pki.ca_cert, token_file=w / "token"),
            sort_keys=False,
        )
    )
    process = spawn(
        PROCESS,
        prometheus_argv(binary, config=config, data=data / "tsdb", address=a.gateway_ip),
        cwd=data,
        log_path=w / "logs" / f"{PROCESS}.log",
        prefix=netns.exec_prefix(ns),
        env=clean_env(),
    )
    cluster.processes.append(process)
    deadline = time.monotonic() + timeout
    while READY not in process.log_tail(200):
        if not process.running():
            raise DevClusterError(f"{cluster.name}: prometheus exited:\n{process.log_tail()}")
        if time.monotonic() > deadline:
            raise DevClusterError(
                f"{cluster.name}: prometheus not ready after {timeout:.0f}s; log: "
                f"{process.log_path}"
            )
        time.sleep(0.1)
    rest = cluster.rest()
    system = next((n for n in cluster.nodes if "system" in n), None)
    if system is None:
        raise DevClusterError(f"{cluster.name}: no system node for the Prometheus pod")
    for manifest in service_manifests(system):
        apply(rest, manifest)
