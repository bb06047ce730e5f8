"""The dev fleet's pure parts: simulated nodes and slices from specs, pod stand-ins, the build's
go.mod, the bridge routes, dev-fleet kubeconfig paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.api.loader import load_fleet
from modelplane.devfleet.agent import pod_hosts, pod_servers
from modelplane.devfleet.bridge import Route
from modelplane.devfleet.cluster import ClusterAddresses, lws_webhooks
from modelplane.devfleet.fleet import bridge_routes
from modelplane.devfleet.nodes import (
    GPU_TAINT,
    POOL_LABEL,
    cluster_nodes,
    device_classes,
    resource_slices,
)
from modelplane.gobuild.fleet import render_fleet_gomod, render_lws_gomod
from modelplane.secrets import expand_path_variables

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dev_specs() -> Any:
    result = load_fleet(REPO / "specs" / "dev")
    assert not result.errors, result.errors
    return result.fleet


# --------------------------------------------------------------------------- nodes and slices


@pytest.mark.parametrize(
    ("cluster", "pools"),
    [
        ("dev-1", {"system": 1, "h100": 2, "l4": 2}),
        ("dev-2", {"system": 1, "h100": 2, "l4": 2}),
        ("dev-3", {"system": 1, "l4": 3}),
    ],
)
def test_nodes_follow_the_cluster_pools(
    dev_specs: Any, cluster: str, pools: dict[str, int]
) -> None:
    sim = cluster_nodes(cluster, dev_specs.clusters[cluster], dev_specs.classes, "10.101.0.0/16")
    seen: dict[str, int] = {}
    for node in sim.nodes:
        pool = node["metadata"]["labels"][POOL_LABEL]
        seen[pool] = seen.get(pool, 0) + 1
        gpu = pool != "system"
        assert (GPU_TAINT in node["spec"]["taints"]) is gpu
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert node["status"]["allocatable"]["pods"]
    assert seen == pools
    cidrs = [n["spec"]["podCIDR"] for n in sim.nodes]
    assert len(set(cidrs)) == len(cidrs)  # every node its own /24
    assert all(c.startswith("10.101.") and c.endswith("/24") for c in cidrs)


def test_one_slice_per_node_holds_the_class_devices_exactly(dev_specs: Any) -> None:
    klass = dev_specs.classes["h100-8x"]
    (slice_,) = resource_slices("dev-1-h100-0", klass)
    spec = slice_["spec"]
    assert slice_["apiVersion"] == "resource.k8s.io/v1"
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["nodeName"] == "dev-1-h100-0"
    assert spec["pool"] == {"name": "dev-1-h100-0", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    first = spec["devices"][0]
    assert first["attributes"] == {
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
    }
    assert first["capacity"] == {"memory": {"value": "80Gi"}}


def test_slices_per_driver_and_synthetic_devices_unpublished() -> None:
    from modelplane.api.inference_class import InferenceClass

    klass = InferenceClass.model_validate(
        {
            "metadata": {"name": "mixed"},
            "spec": {
                "devices": [
                    {
                        "name": "gpu",
                        "driver": "gpu.nvidia.com",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 2,
                    },
                    {
                        "name": "nic",
                        "driver": "dra.net",
                        "deviceClassName": "dra.net",
                        "count": 4,
                        "attributes": {"linkType": {"string": "efa"}},
                    },
                    {"name": "fpga", "driver": "example.com", "claim": "Synthetic"},
                ]
            },
        }
    )
    slices = resource_slices("n0", klass)
    assert [(s["spec"]["driver"], len(s["spec"]["devices"])) for s in slices] == [
        ("dra.net", 4),
        ("gpu.nvidia.com", 2),
    ]
    assert [c["metadata"]["name"] for c in device_classes([klass])] == ["dra.net", "gpu.nvidia.com"]
    assert device_classes([klass])[0]["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "dra.net"'}}
    ]


def test_a_cluster_without_specs_gets_only_system_nodes() -> None:
    sim = cluster_nodes("dev-9", None, {}, "10.109.0.0/16", system_nodes=2)
    assert [n["metadata"]["name"] for n in sim.nodes] == ["dev-9-system-0", "dev-9-system-1"]
    assert sim.slices == [] and sim.device_classes == []


# --------------------------------------------------------------------------- pod stand-ins


def _pod(**overrides: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "qwen-abc-0",
            "namespace": "demo",
            "labels": {
                "modelplane.ai/replica": "qwen-abc",
                "modelplane.ai/role": "unified",
                "modelplane.ai/deployment": "qwen",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "args": ["--model=Qwen/Qwen2.5-0.5B-Instruct"],
                    "ports": [{"name": "http", "containerPort": 8000}],
                },
                {"name": "metrics", "ports": [{"name": "metrics", "containerPort": 9000}]},
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.101.1.5",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    for path, value in overrides.items():
        section, field = path.split("__")
        pod[section][field] = value
    return pod


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (_pod(), [("dev-1/demo/qwen-abc-0/8000", "10.101.1.5", 8000)]),
        (_pod(status__phase="Pending"), []),
        (_pod(status__podIP=None), []),
        (_pod(metadata__deletionTimestamp="2026-01-01T00:00:00Z"), []),
        # an unready pod still gets its stand-in: the stand-in is what makes it Ready
        (
            _pod(status__conditions=[{"type": "Ready", "status": "False"}]),
            [("dev-1/demo/qwen-abc-0/8000", "10.101.1.5", 8000)],
        ),
    ],
)
def test_pod_servers(pod: dict[str, Any], expected: list[tuple[str, str, int]]) -> None:
    got = pod_servers("dev-1", pod)
    assert [(s.key, s.ip, s.port) for s in got] == expected
    for server in got:
        assert (server.replica, server.role, server.model) == (
            "qwen-abc",
            "unified",
            "Qwen/Qwen2.5-0.5B-Instruct",
        )


def test_pod_servers_answer_on_a_decode_leaders_sidecar_and_engine_ports() -> None:
    pod = _pod(
        spec__containers=[
            {"name": "pd-sidecar", "ports": [{"name": "pd-proxy", "containerPort": 8000}]},
            {
                "name": "engine",
                "args": ["--model=Qwen/Qwen2.5-0.5B-Instruct"],
                "ports": [{"name": "http", "containerPort": 8001}],
            },
        ]
    )
    got = pod_servers("dev-1", pod)
    assert [(s.key, s.port, s.model) for s in got] == [
        ("dev-1/demo/qwen-abc-0/8000", 8000, "qwen"),
        ("dev-1/demo/qwen-abc-0/8001", 8001, "Qwen/Qwen2.5-0.5B-Instruct"),
    ]


def test_pod_hosts_resolve_lws_leader_names() -> None:
    pod = _pod()
    pod["spec"].update({"hostname": "llama-0", "subdomain": "llama"})
    assert pod_hosts([pod, _pod()]) == {
        "llama-0.llama.demo": "10.101.1.5",
        "llama-0.llama.demo.svc.cluster.local": "10.101.1.5",
    }


# --------------------------------------------------------------------------- build, bridge


KWOK_GOMOD = "module sigs.k8s.io/kwok\n\ngo 1.26.0\n\nrequire k8s.io/api v0.36.1\n"
TRAEFIK_GOMOD = """module github.com/traefik/traefik/v3

go 1.26.0

require github.com/go-acme/lego/v5 v5.4.1

replace github.com/traefik/traefik/dynamic/ext => ./pkg/config/dynamic/ext

replace (
	github.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1-0.20260804094822-b975dcaa8c48
	github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59
)

exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible
"""


def test_fleet_wrapper_gomod_replaces_what_the_proxy_cannot_serve() -> None:
    text = render_fleet_gomod(kwok_gomod=KWOK_GOMOD, traefik_gomod=TRAEFIK_GOMOD)
    lines = [line.strip() for line in text.splitlines()]
    assert "go 1.26.0" in lines
    assert (
        "sigs.k8s.io/kwok/cmd/kwok" in lines
        and "github.com/traefik/traefik/v3/cmd/traefik" in lines
    )
    assert "github.com/traefik/traefik/dynamic/ext => ./ext" in lines
    assert "github.com/go-acme/lego/v5 => ./lego" in lines
    assert (
        "github.com/abbot/go-http-auth => github.com/containous/go-http-auth "
        "v0.4.1-0.20200324110947-a37a7636d23e"
    ) in lines
    assert (
        "github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59"
        in lines
    )
    assert "github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible" in lines
    assert "./pkg/config" not in text  # no path into the upstream repository survives


def test_lws_wrapper_gomod_is_its_own_module() -> None:
    text = render_lws_gomod("module sigs.k8s.io/lws\n\ngo 1.25.0\n")
    assert "tool sigs.k8s.io/lws/cmd" in text and "sigs.k8s.io/lws v0.8.0" in text


def test_bridge_routes_are_loopback_on_the_host() -> None:
    addresses = [ClusterAddresses(f"dev-{i}", i, 7) for i in (1, 2)]
    routes = bridge_routes(addresses, 7)
    assert routes == [
        Route("127.77.7.9", 80, "10.253.7.9", 8000),  # the fleet address
        Route("127.77.7.11", 6443, "127.77.7.11", 6443),
        Route("127.77.7.11", 80, "10.253.7.11", 8000),
        Route("127.77.7.11", 443, "127.77.7.11", 8443),
        Route("127.77.7.12", 6443, "127.77.7.12", 6443),
        Route("127.77.7.12", 80, "10.253.7.12", 8000),
        Route("127.77.7.12", 443, "127.77.7.12", 8443),
    ]
    assert all(r.listen_host.startswith("127.") for r in routes)
    assert Route.from_json(routes[2].to_json()) == routes[2]
    # private addresses only inside the namespace (the front door's: its Service can hold it)
    assert addresses[0].gateway_ip.startswith("10.") and addresses[0].pod_range.startswith("10.")
    assert addresses[0].front_door_ip.startswith("10.") and addresses[0].front_door == "127.77.7.11"


def test_front_door_service_is_the_charts_with_the_process_as_endpoint() -> None:
    from modelplane.components.gateway import INTERNAL_SERVICE, TRAEFIK
    from modelplane.components.workload import gateway_tls, objects
    from modelplane.devfleet.cluster import (
        SYSTEM_NAMESPACE,
        TRAEFIK_TLS_NAMESPACE,
        front_door_service,
    )

    _, *objects_made = front_door_service(ClusterAddresses("dev-1", 1, 7))
    services = objects_made[0::2]
    slices = objects_made[1::2]
    # The chart's Service and, for `tls.http: Refuse`, its internal one: both the process.
    assert [(s["metadata"]["name"], s["metadata"]["namespace"]) for s in services] == [
        (TRAEFIK["release"], TRAEFIK["namespace"]),
        (INTERNAL_SERVICE, TRAEFIK["namespace"]),
    ]
    for service, endpoints in zip(services, slices, strict=True):
        assert service["spec"]["ports"][0]["port"] == 80
        assert (
            endpoints["metadata"]["labels"]["kubernetes.io/service-name"]
            == (service["metadata"]["name"])
        )
        assert endpoints["endpoints"][0]["addresses"] == ["10.253.7.11"]
        assert endpoints["ports"] == [{"name": "web", "port": TRAEFIK["port"], "protocol": "TCP"}]
    # Where each of the dev fleet's Traefiks reads its default TLS options from.
    assert TRAEFIK_TLS_NAMESPACE == gateway_tls.TRAEFIK_TLS_NAMESPACE
    assert SYSTEM_NAMESPACE == objects.SYSTEM_NAMESPACE


def test_lws_webhooks_point_at_the_loopback_server() -> None:
    hooks = lws_webhooks("127.77.7.11", b"CA")
    urls = [h["clientConfig"]["url"] for cfg in hooks for h in cfg["webhooks"]]
    assert urls == [
        "https://127.77.7.11:9443/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "https://127.77.7.11:9443/mutate--v1-pod",
        "https://127.77.7.11:9443/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "https://127.77.7.11:9443/validate--v1-pod",
    ]
    pod_hooks = [h for cfg in hooks for h in cfg["webhooks"] if h["name"].endswith("pod.kb.io")]
    assert all("objectSelector" in h for h in pod_hooks)  # only LWS pods go through them


# --------------------------------------------------------------------------- kubeconfig paths


@pytest.mark.parametrize(
    ("text", "env", "expected", "missing"),
    [
        (
            "${MODELPLANE_DEV_FLEET_STATE}/dev-1/kubeconfig",
            {"MODELPLANE_DEV_FLEET_STATE": "/s"},
            "/s/dev-1/kubeconfig",
            [],
        ),
        ("$HOME/k", {"HOME": "/h"}, "/h/k", []),
        ("${NOPE}/k", {}, "${NOPE}/k", ["NOPE"]),
        ("plain/path", {}, "plain/path", []),
    ],
)
def test_file_secret_paths_expand_variables(
    text: str, env: dict[str, str], expected: str, missing: list[str]
) -> None:
    assert expand_path_variables(text, env) == (expected, missing)


def test_dev_fleet_state_defaults_to_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    got, missing = expand_path_variables("${MODELPLANE_DEV_FLEET_STATE}/dev-1", {})
    assert (got, missing) == (f"{tmp_path}/.modelplane/dev-fleet/dev-1", [])


def test_dev_prometheus_scrapes_like_the_serving_stack_through_its_api_server(
    tmp_path: Path,
) -> None:
    from modelplane.devfleet.prometheus import prometheus_config, service_manifests
    from modelplane.observe.prometheus import PROMETHEUS_PROXY, engine_scrape_job

    config = prometheus_config(
        server="https://127.77.1.11:6443", ca_file=tmp_path / "ca.crt", token_file=tmp_path / "t"
    )
    [job] = config["scrape_configs"]
    [sd] = job.pop("kubernetes_sd_configs")
    assert sd == {
        "role": "pod",
        "api_server": "https://127.77.1.11:6443",
        "tls_config": {"ca_file": str(tmp_path / "ca.crt")},
        "authorization": {"credentials_file": str(tmp_path / "t")},
    }
    expected = engine_scrape_job()
    expected.pop("kubernetes_sd_configs")
    assert job == expected
    namespace, pod, service = service_manifests("dev-1-system-0")
    # the path reconcile asks: /api/v1/namespaces/<ns>/services/<name>:<port name>/proxy/...
    assert PROMETHEUS_PROXY.startswith(
        f"/api/v1/namespaces/{namespace['metadata']['name']}/services/"
        f"{service['metadata']['name']}:{service['spec']['ports'][0]['name']}/proxy/"
    )
    # the service proxy reaches Pods only: a hostNetwork pod (the node's IP, where the
    # process listens) selected by the Service, its port by name
    assert pod["spec"]["hostNetwork"] and pod["spec"]["nodeName"] == "dev-1-system-0"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    [port] = pod["spec"]["containers"][0]["ports"]
    assert (port["name"], port["containerPort"]) == (
        service["spec"]["ports"][0]["targetPort"],
        service["spec"]["ports"][0]["port"],
    )


def test_prometheus_wrapper_gomod_builds_the_pinned_module() -> None:
    from modelplane.gobuild.fleet_versions import PROMETHEUS_MODULE_VERSION, PROMETHEUS_PACKAGE
    from modelplane.gobuild.prometheus import render_gomod

    text = render_gomod("module github.com/prometheus/prometheus\n\ngo 1.26.7\n")
    assert "go 1.26.7" in text
    assert f"tool {PROMETHEUS_PACKAGE}" in text
    assert f"github.com/prometheus/prometheus {PROMETHEUS_MODULE_VERSION}" in text


def test_the_agent_names_what_changed_in_a_replaced_stand_in() -> None:
    """A stand-in replaced at once (grace 0) is logged with the fields that changed, so a cut
    stream can be traced to it (or ruled out) from the fleet's pod-agent.log."""
    from dataclasses import replace

    from modelplane.devfleet.agent import PodServer, _changed

    old = PodServer(
        "dev-1/demo/p/8000", "10.0.0.1", 8000, "dev-1", "demo", "p", "r", "unified", "m"
    )
    new = replace(old, ip="10.0.0.2", revision="b")
    assert _changed(old, new) == "ip '10.0.0.1' -> '10.0.0.2', revision '' -> 'b'"
    assert _changed(old, old) == ""


def test_front_door_listens_privately_for_http_and_on_the_hosts_address_for_tls() -> None:
    """`web` on the private address its Service's EndpointSlice holds; `websecure` where the
    host's connections arrive (Traefik matches a certificate to that address without SNI);
    the Gateway's address is the host's."""
    from modelplane.devfleet.cluster import traefik_argv

    a = ClusterAddresses("dev-1", 1, 7)
    argv = traefik_argv(
        Path("traefik"),
        server="https://127.77.7.11:6443",
        token_file=Path("token"),
        ca=Path("ca.crt"),
        address=a.front_door_ip,
        port=8000,
        selector="modelplane.ai/gateway",
        front_door=True,
        status_address=a.front_door,
        tls_address=a.front_door,
    )
    assert "--entryPoints.web.address=10.253.7.11:8000" in argv
    assert "--entryPoints.websecure.address=127.77.7.11:8443" in argv
    assert "--providers.kubernetesgateway.statusAddress.ip=127.77.7.11" in argv


def test_workload_gateway_has_one_https_entrypoint_and_its_own_default_tls_options() -> None:
    """The workload gateway's Traefik listens only for HTTPS (`websecure` on 443; no `web`,
    so plain HTTP finds no listener) and takes its default TLS options -- client
    certificates required -- from `modelplane-hop`; the front door's from `modelplane-system`
    (both read the same objects; api.md "Mutual TLS between the gateways")."""
    from modelplane.devfleet.cluster import WORKLOAD_GATEWAY_PORT, traefik_argv

    a = ClusterAddresses("dev-2", 2, 7)
    common = {"server": "https://x:6443", "token_file": Path("t"), "ca": Path("ca.crt")}
    workload = traefik_argv(
        Path("traefik"),
        **common,
        address=a.gateway_ip,
        port=WORKLOAD_GATEWAY_PORT,
        selector="modelplane.ai/dev-fleet-gateway=workload",
        entry_point="websecure",
        default_tls_namespace="modelplane-hop",
    )
    entrypoints = [arg for arg in workload if arg.startswith("--entryPoints.")]
    assert entrypoints == ["--entryPoints.websecure.address=10.255.7.12:443"]
    assert "--providers.kubernetescrd.defaultTLSResourcesNamespace=modelplane-hop" in workload
    door = traefik_argv(
        Path("traefik"), **common, address=a.front_door_ip, port=8000, selector="s", front_door=True
    )
    assert "--providers.kubernetescrd.defaultTLSResourcesNamespace=modelplane-system" in door


def test_the_fleet_address_sends_to_the_healthy_front_doors_it_was_pointed_at(
    tmp_path: Path,
) -> None:
    """The stand-in for a fleet address (devfleet/fleet_address.py): Traefik's file-provider
    configuration names each front door's `web` entrypoint, asks the health path every second
    and retries a failed connection on another front door; pointing again replaces it."""
    from modelplane.api.inference_gateway import HEALTH_PATH
    from modelplane.devfleet import fleet_address

    doors = [ClusterAddresses(f"dev-{i}", i, 7) for i in (1, 2)]
    assert fleet_address.pointed(tmp_path) == []
    path = fleet_address.point(tmp_path, doors)
    config = yaml.safe_load(path.read_text())
    service = config["http"]["services"][fleet_address.SERVICE]["loadBalancer"]
    assert [s["url"] for s in service["servers"]] == [
        "http://10.253.7.11:8000",
        "http://10.253.7.12:8000",
    ]
    assert service["healthCheck"] == {"path": HEALTH_PATH, "interval": "1s", "timeout": "500ms"}
    router = config["http"]["routers"]["fleet"]
    [middleware] = router["middlewares"]
    retry = config["http"]["middlewares"][middleware]["retry"]
    # POST (inference) is retried, on a refused connection and on a gateway error
    assert retry["attempts"] >= 2 and retry["retryNonIdempotentMethod"] is True
    assert retry["status"] == ["502-504"]
    assert fleet_address.pointed(tmp_path) == [s["url"] for s in service["servers"]]
    fleet_address.point(tmp_path, doors[1:])
    assert fleet_address.pointed(tmp_path) == ["http://10.253.7.12:8000"]
    fleet_address.point(tmp_path, [])
    assert fleet_address.pointed(tmp_path) == [] and yaml.safe_load(path.read_text()) == {}
    argv = fleet_address.traefik_argv(Path("/bin/traefik"), slot=7, root=tmp_path)
    assert "--entryPoints.web.address=10.253.7.9:8000" in argv
    assert f"--providers.file.directory={tmp_path / 'fleet-address'}" in argv
