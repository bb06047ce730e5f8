"""Mutual TLS on the hop front door -> workload gateway (issue 33 item 3; api.md "Mutual TLS
between the gateways"): what the cluster and gateway stacks render from the fleet CA, every
manifest checked against its CRD's schema. The real Traefiks serving it: the dev fleet's
test_devfleet_auth.py. Select with `pytest -k mtls`.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pulumi_kubernetes as k8s
import pytest
from cryptography import x509

from modelplane import fleet_pki
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.model_service import ModelService
from modelplane.components.gateway import HEALTH_ROUTE, HOP_CHECK, InferenceGatewayComponent
from modelplane.components.inference_cluster import InferenceClusterComponent
from modelplane.components.model_service import (
    LOOP_NAMESPACE,
    LOOP_PORT,
    LOOP_SERVICE,
    EndpointInfo,
    FrontDoor,
    endpoint_manifests,
    service_route_manifests,
)
from modelplane.components.workload import gateway_tls
from modelplane.network.hop import hop_path, hop_target, replica_of
from modelplane.observe.cluster import observe_routes
from modelplane.program import through_second_pass
from tests import k8s_schemas
from tests.components.test_gateway_security_hop import cluster
from tests.components.workload_helpers import CLASSES
from tests.pulumi_mocks import MockRun, contains_secret, unwrap

NOW = datetime(2026, 12, 7, tzinfo=UTC)
CA = fleet_pki.new_ca(NOW)
SECRET = "kubernetes:core/v1:Secret"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
CTP = "kubernetes:gateway.envoyproxy.io/v1alpha1:ClientTrafficPolicy"
TLS_OPTION = "kubernetes:traefik.io/v1alpha1:TLSOption"
INGRESS_ROUTE = "kubernetes:traefik.io/v1alpha1:IngressRoute"
TRANSPORT = "kubernetes:traefik.io/v1alpha1:ServersTransport"


def manifest_of(resource: Any) -> dict[str, Any]:
    out = {k: resource.get(k) for k in ("apiVersion", "kind", "metadata", "spec", "data")}
    out.update({k: resource.get(k) for k in ("type", "stringData", "addressType", "endpoints")})
    out["ports"] = resource.get("ports")
    return {k: v for k, v in out.items() if v is not None}


def certificate(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


# (servingStack, the workload listener's port, the objects that make the controller require
# a client certificate: (type, namespace/name))
CLUSTERS = [
    ("{install: true}", 443, [(CTP, "modelplane-system/inference-gateway-timeouts")]),
    (
        "{install: false, gateway: {className: traefik, controller: Traefik}}",
        443,
        [(TLS_OPTION, "modelplane-hop/default"), (SECRET, "modelplane-hop/modelplane-fleet-ca")],
    ),
    (
        "{install: false, gateway: {className: eg, port: 8443, controller: EnvoyGateway}}",
        8443,
        [(CTP, "modelplane-system/inference-gateway-timeouts")],
    ),
]


@pytest.mark.parametrize(("serving_stack", "port", "validation"), CLUSTERS)
def test_mtls_workload_gateway_serves_the_fleet_certificate_and_requires_one(
    serving_stack: str, port: int, validation: list[tuple[str, str]]
) -> None:
    run = MockRun.of(
        lambda: InferenceClusterComponent(
            "west", cluster(serving_stack), CLASSES, kubeconfig="kube", fleet_ca=CA
        )
    )
    [gateway] = [g for g in run.of_type(GATEWAY) if g.get("metadata.name") == "inference-gateway"]
    [listener] = gateway.get("spec.listeners")
    assert (listener["protocol"], listener["port"]) == ("HTTPS", port)  # no plain HTTP
    assert listener["tls"]["certificateRefs"] == [
        {"group": "", "kind": "Secret", "name": gateway_tls.SERVER_SECRET}
    ]
    [server] = [
        s for s in run.of_type(SECRET) if s.get("metadata.name") == "modelplane-gateway-tls"
    ]
    assert server.get("type") == "kubernetes.io/tls"
    assert contains_secret(server.inputs["stringData"])  # never in plaintext in the state
    cert = certificate(unwrap(server.inputs["stringData"])["tls.crt"])
    ca = fleet_pki.parse_ca(CA)
    cert.verify_directly_issued_by(ca.cert)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["west.gateway.modelplane.internal"]
    # The Gateway waits for its certificate; the controller's client validation is there.
    assert gateway.depends_on(server)
    for type_, key in validation:
        namespace, name = key.split("/")
        [found] = [
            r
            for r in run.of_type(type_)
            if (r.get("metadata.namespace"), r.get("metadata.name")) == (namespace, name)
        ]
        if type_ == CTP:
            assert found.get("spec.tls.clientValidation.caCertificateRefs") == [
                {"group": "", "kind": "ConfigMap", "name": gateway_tls.CA_NAME}
            ]
        elif type_ == TLS_OPTION:
            assert found.get("spec.clientAuth") == {
                "secretNames": [gateway_tls.CA_NAME],
                "clientAuthType": "RequireAndVerifyClientCert",
            }
        assert k8s_schemas.errors(manifest_of(found)) == []
    assert k8s_schemas.errors(manifest_of(gateway)) == []


def test_mtls_render_to_cluster_gets_the_listener_and_no_key() -> None:
    spec = cluster("{install: false, gateway: {className: traefik, controller: Traefik}}")
    raw = spec.model_dump(by_alias=True, exclude_none=True)
    raw["spec"]["cluster"]["existing"] = {"renderTo": "/tmp/mtls-render-test"}
    rendered = InferenceCluster.model_validate(raw)
    run = MockRun.of(lambda: InferenceClusterComponent("west", rendered, CLASSES, fleet_ca=CA))
    [gateway] = run.of_type(GATEWAY)
    assert gateway.get("spec.listeners.0.protocol") == "HTTPS"
    # The certificate's Secret is the platform's to fill: named, typed, keys listed, no value.
    [secret] = run.of_type(SECRET)
    assert (secret.get("metadata.name"), secret.get("type")) == (
        gateway_tls.SERVER_SECRET,
        "kubernetes.io/tls",
    )
    assert secret.get("stringData") is None and secret.get("data") is None
    assert "tls.crt, tls.key" in secret.get("metadata.annotations")["modelplane.ai/hand-off"]
    assert gateway.depends_on(secret)


def _front_door(backend: str) -> InferenceGateway:
    return InferenceGateway.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"backend": backend, "cluster": {"inferenceClusterRef": "east"}},
        }
    )


def test_mtls_traefik_front_door_second_pass_per_workload_gateway() -> None:
    gateways = {"west": ("10.0.0.7", 443), "north": ("gw.north.example", 8443)}
    run = MockRun.of(
        lambda: InferenceGatewayComponent(
            "default",
            _front_door("Traefik"),
            k8s.Provider("gw", kubeconfig="kube"),
            front_door_key="fd-key",
            fleet_ca=CA,
            workload_gateways=gateways,
        )
    )
    client = next(
        s for s in run.of_type(SECRET) if s.get("metadata.name") == gateway_tls.CLIENT_SECRET
    )
    cert = certificate(unwrap(client.inputs["stringData"])["tls.crt"])
    assert (
        x509.ExtendedKeyUsageOID.CLIENT_AUTH
        in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    )
    routes = {r.get("metadata.name"): r for r in run.of_type(INGRESS_ROUTE)}
    transports = {t.get("metadata.name"): t for t in run.of_type(TRANSPORT)}
    # Besides the front door's own health answer, one second pass per workload gateway.
    assert routes.pop(HEALTH_ROUTE).get("spec.routes")[0]["services"] == [
        {"name": "ping@internal", "kind": "TraefikService"}
    ]
    assert set(routes) == set(transports) == {"gateway-west", "gateway-north"}
    for name, (_host, port) in gateways.items():
        route = routes[f"gateway-{name}"]
        [rule] = route.get("spec.routes")
        assert route.get("spec.entryPoints") == ["web"]
        assert rule["match"] == f"PathPrefix(`/_gateways/{name}/`)"
        # The front door's credentials first: no caller reaches a workload gateway this way.
        assert rule["middlewares"][0] == {"name": HOP_CHECK}
        [service] = rule["services"]
        assert (service["scheme"], service["port"]) == ("https", port)
        transport = transports[f"gateway-{name}"].get("spec")
        assert transport["serverName"] == f"{name}.gateway.modelplane.internal"
        assert transport["certificatesSecrets"] == [gateway_tls.CLIENT_SECRET]
        assert transport["rootCAs"] == [{"secret": gateway_tls.CA_NAME}]
        assert k8s_schemas.errors(manifest_of(route)) == []
        assert k8s_schemas.errors(manifest_of(transports[f"gateway-{name}"])) == []
    slices = {
        s.get("metadata.name"): s
        for s in run.of_type("kubernetes:discovery.k8s.io/v1:EndpointSlice")
    }
    assert slices["gateway-north-addr"].get("addressType") == "FQDN"
    assert slices["gateway-west-addr"].get("endpoints") == [
        {"addresses": ["10.0.0.7"], "conditions": {"ready": True}}
    ]
    # Every object of the second pass exists before the front door's Gateway.
    [gateway] = run.of_type(GATEWAY)
    assert all(gateway.depends_on(r) for r in [*routes.values(), *transports.values(), client])


def test_mtls_replica_backends_go_through_the_front_doors_own_service() -> None:
    service = ModelService.model_validate(
        {
            "metadata": {"name": "chat", "namespace": "demo"},
            "spec": {"endpoints": [{"selector": {"matchLabels": {"app": "qwen"}}}]},
        }
    )
    replicas = [
        EndpointInfo(
            f"qwen-{i}",
            "demo",
            f"https://10.0.0.{i}/demo/qwen-{i}/",
            f"/demo/qwen-{i}/",
            {"app": "qwen"},
            replica=True,
            cluster=f"c{i}",
        )
        for i in (1, 2)
    ]
    looped = through_second_pass(replicas, LOOP_SERVICE)
    assert all(endpoint_manifests(e, "Traefik") == [] for e in looped)  # no per-replica Service
    *grants, route = service_route_manifests(
        service, looped, "Traefik", ("modelplane", "modelplane-system"), FrontDoor()
    )
    [rule] = route["spec"]["rules"]
    refs = rule["backendRefs"]
    assert {(r["name"], r["namespace"], r["port"]) for r in refs} == {
        (LOOP_SERVICE, LOOP_NAMESPACE, LOOP_PORT)
    }
    rewrites = sorted(r["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] for r in refs)
    assert rewrites == ["/_gateways/c1/demo/qwen-1/", "/_gateways/c2/demo/qwen-2/"]
    [grant] = grants
    assert grant["metadata"]["namespace"] == LOOP_NAMESPACE
    assert grant["spec"]["from"][0]["namespace"] == "demo"
    assert grant["spec"]["to"] == [{"group": "", "kind": "Service", "name": LOOP_SERVICE}]
    for manifest in [*grants, route]:
        assert k8s_schemas.errors(manifest) == []
    # status, reconcile and the rollouts read the replicas back from the route's rewrites:
    # every backendRef names the same loop Service.
    seen = observe_routes(_Served({"demo": [route]}), ["demo"])
    assert seen.observed and seen.services == {"demo/chat": ("qwen-1", "qwen-2")}


class _Served:
    """What observe_routes lists from an API server: the routes, no Services or Backends."""

    def __init__(self, routes: dict[str, list[dict[str, Any]]]) -> None:
        self.routes = routes

    def items(self, path: str, **_query: str) -> list[dict[str, Any]]:
        ns = path.split("/namespaces/")[1].split("/")[0]
        return self.routes.get(ns, []) if path.endswith("/httproutes") else []


@pytest.mark.parametrize(
    ("path", "target", "replica"),
    [
        ("/_gateways/c1/demo/qwen-1/", ("c1", "/demo/qwen-1/"), "qwen-1"),
        ("/_gateways/dev-2/ns/r/x", ("dev-2", "/ns/r/x"), "r"),
        ("/_gateways/c1/", ("c1", "/"), None),
        ("/_gateways/c1", None, None),
        ("/_gateways/", None, None),
        ("/demo/qwen-1/", None, None),
        ("/_gatewaysX/c1/demo/r/", None, None),
    ],
)
def test_mtls_hop_paths_read_back(
    path: str, target: tuple[str, str] | None, replica: str | None
) -> None:
    assert hop_target(path) == target
    assert replica_of(path) == replica
    if target is not None:
        assert hop_path(*target) == path


def test_mtls_envoy_front_door_backend_tls_policy_per_replica() -> None:
    replica = EndpointInfo(
        "qwen-1",
        "demo",
        "https://10.0.0.1/demo/qwen-1/",
        "/demo/qwen-1/",
        replica=True,
        cluster="west",
    )
    named = EndpointInfo(
        "qwen-2",
        "demo",
        "https://gw.west.example/demo/qwen-2/",
        "/demo/qwen-2/",
        replica=True,
        cluster="west",
    )
    for endpoint, target_kind in ((replica, "Service"), (named, "Backend")):
        made = endpoint_manifests(endpoint, "EnvoyGateway", "CA-PEM")
        kinds = [m["kind"] for m in made]
        policy = next(m for m in made if m["kind"] == "BackendTLSPolicy")
        assert policy["spec"]["targetRefs"][0]["kind"] == target_kind
        assert policy["spec"]["validation"]["hostname"] == "west.gateway.modelplane.internal"
        assert "ConfigMap" in kinds
        for manifest in made:
            if manifest["kind"] == "Backend":
                assert "tls" not in manifest["spec"]  # the policy's, not the system roots
            assert k8s_schemas.errors(manifest) == []
    run = MockRun.of(
        lambda: InferenceGatewayComponent(
            "default", _front_door("EnvoyGateway"), k8s.Provider("gw", kubeconfig="k"), fleet_ca=CA
        )
    )
    [gateway] = run.of_type(GATEWAY)
    assert gateway.get("spec.tls.backend.clientCertificateRef") == {
        "group": "",
        "kind": "Secret",
        "name": gateway_tls.CLIENT_SECRET,
    }
    assert k8s_schemas.errors(manifest_of(gateway)) == []


def test_mtls_certificates_are_the_same_within_a_period_and_new_in_the_next() -> None:
    start = fleet_pki.period_start(NOW)
    times = [start, start + fleet_pki.PERIOD / 2, start + fleet_pki.PERIOD]
    run = MockRun()
    certs = run.run(
        lambda: [
            gateway_tls.certificates(CA, name="west", role="server", dns_names=["w"], now=t)
            for t in times
        ]
    )
    pems = [MockRun.value(c.cert) for c in certs]
    assert pems[0] == pems[1] != pems[2]  # no diff within a period, a new one after it
    assert all(MockRun.is_secret(c.key) and MockRun.is_secret(c.cert) for c in certs)


@pytest.mark.parametrize(
    ("specs", "backend", "reads"),
    [
        # Traefik: its second pass to every workload gateway, its own cluster's too.
        ("dev", None, ["cluster-dev-1", "cluster-dev-2", "cluster-dev-3"]),
        # Envoy Gateway presents the client certificate itself: its own cluster only.
        ("dev", "EnvoyGateway", ["cluster-dev-1"]),
        # A renderTo cluster has no workload gateway the front door reaches.
        ("local", None, ["cluster-local"]),
    ],
)
def test_mtls_the_gateway_stack_reads_every_workload_gateway_it_keeps_a_hop_to(
    specs: str, backend: str | None, reads: list[str]
) -> None:
    """A Traefik front door keeps its second pass to every workload gateway, whether or not
    it holds a replica now: the gateway stack reads each one's address (and runs after it)."""
    from modelplane.api.loader import load_fleet
    from modelplane.api.placement_lock import PlacementLock
    from modelplane.stacks import stack_units
    from tests.fixtures.devfleet import REPO

    fleet = load_fleet(REPO / "specs" / specs).fleet
    if backend is not None:
        gw = fleet.gateway
        assert gw is not None
        spec = gw.spec.model_copy(update={"backend": backend})
        fleet = dataclasses.replace(fleet, gateway=gw.model_copy(update={"spec": spec}))
    [unit] = [u for u in stack_units(fleet, PlacementLock()) if u.name == "gateway"]
    assert sorted(d for d in unit.upstream if d.startswith("cluster-")) == reads
    # Only its own cluster holds it back: a failed cluster stack still has its address.
    assert [d for d in unit.depends_on if d.startswith("cluster-")] == reads[:1]
