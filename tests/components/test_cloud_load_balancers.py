"""Load balancers hold a silent request for the longest request (issue 36, N5; m11).

A non-streaming generation sends nothing until it is done. On EKS the gateways' Services are
Classic Load Balancers (60 s idle timeout by default); on GKE passthrough load balancers whose
VPC forgets a flow after 10 silent minutes; Envoy resets a stream after 5 silent minutes.
modelplane/components/load_balancers.py sets each hop; these tests pin the rendered resources per cloud
(Pulumi's mocks) and check Envoy Gateway's policy against its v1.8.3 CRD.
`pytest -k "gke or eks or cloud"`."""

from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.inference_gateway import InferenceGateway
from modelplane.components.gateway import TRAEFIK, InferenceGatewayComponent
from modelplane.components.inference_cluster import InferenceClusterComponent
from modelplane.components.load_balancers import (
    AWS_IDLE_TIMEOUT,
    KEEPALIVE_SECONDS,
    LONGEST_REQUEST_SECONDS,
    duration_seconds,
)
from tests import k8s_schemas
from tests.components.cluster_helpers import (
    EKS_CLASSES,
    RELEASE,
    eks_cluster,
    gke_class,
    gke_cluster,
)
from tests.pulumi_mocks import MockRun, Registered

GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
CTP = "kubernetes:gateway.envoyproxy.io/v1alpha1:ClientTrafficPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"
GCP_CONNECTION_TRACKING_SECONDS = 600
"""GCP's VPC firewall keeps a flow's tracking while a packet passes at least every 10 min."""
CLB_MAX_IDLE_SECONDS = 4000


def _manifest(resource: Registered) -> dict[str, Any]:
    return {k: resource.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}


def assert_envoy_outlasts_the_longest_request(run: MockRun, gateway: str, namespace: str) -> None:
    """The Gateway's ClientTrafficPolicy: streams and connections with a request in flight may
    stay silent for the longest request; keepalives under GCP's connection tracking."""
    [policy] = [
        p
        for p in run.of_type(CTP)
        if p.get("spec.targetRefs")
        == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway}]
    ]
    assert policy.get("metadata.namespace") == namespace
    http = policy.get("spec.timeout.http")
    assert duration_seconds(http["streamIdleTimeout"]) >= LONGEST_REQUEST_SECONDS
    assert duration_seconds(http["idleTimeout"]) >= LONGEST_REQUEST_SECONDS
    keepalive = policy.get("spec.tcpKeepalive")
    assert duration_seconds(keepalive["idleTime"]) == KEEPALIVE_SECONDS
    assert duration_seconds(keepalive["interval"]) < GCP_CONNECTION_TRACKING_SECONDS
    assert k8s_schemas.errors(_manifest(policy)) == []


@pytest.fixture(scope="module")
def clusters() -> dict[str, MockRun]:
    return {
        "gke": MockRun.of(
            lambda: InferenceClusterComponent(
                "gke-central", gke_cluster(), {"h100-gke": gke_class()}
            )
        ),
        "eks": MockRun.of(
            lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES)
        ),
    }


def test_eks_workload_gateway_load_balancer_idles_for_the_longest_request(
    clusters: dict[str, MockRun],
) -> None:
    run = clusters["eks"]
    gateway = run.one(GATEWAY)
    annotations = gateway.get("spec.infrastructure.annotations")
    # Still internal, and the Classic LB's 60 s idle timeout raised to the longest request.
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] == "true"
    idle = int(annotations[AWS_IDLE_TIMEOUT])
    assert LONGEST_REQUEST_SECONDS <= idle <= CLB_MAX_IDLE_SECONDS
    assert_envoy_outlasts_the_longest_request(run, "inference-gateway", "modelplane-system")
    policy = run.one(CTP)
    # Applied before the Gateway can take traffic, after the controller serves its kind.
    assert not gateway.depends_on(policy)
    assert policy.depends_on(run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass"))


def test_gke_workload_gateway_keeps_silent_requests_alive(clusters: dict[str, MockRun]) -> None:
    run = clusters["gke"]
    annotations = run.one(GATEWAY).get("spec.infrastructure.annotations")
    # A passthrough load balancer has no idle timeout to raise: no AWS annotation leaks here;
    # Envoy's keepalives hold the VPC's connection tracking instead.
    assert annotations == {
        "networking.gke.io/load-balancer-type": "Internal",
        "networking.gke.io/internal-load-balancer-allow-global-access": "true",
    }
    assert_envoy_outlasts_the_longest_request(run, "inference-gateway", "modelplane-system")


def front_door(backend: str, cloud: str | None, *, install_controller: bool = True) -> MockRun:
    """The InferenceGateway component of a front door on cluster `edge` (mocked)."""
    gateway = InferenceGateway.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"backend": backend, "cluster": {"inferenceClusterRef": "edge"}},
        }
    )
    return MockRun.of(
        lambda: InferenceGatewayComponent(
            "default",
            gateway,
            k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests"),
            cloud=cloud,
            install_controller=install_controller,
        )
    )


@pytest.mark.parametrize(
    ("cloud", "idle"), [("EKS", str(LONGEST_REQUEST_SECONDS)), ("GKE", None), (None, None)]
)
def test_cloud_traefik_front_door_service_idles_for_the_longest_request(
    cloud: str | None, idle: str | None
) -> None:
    run = front_door("Traefik", cloud)
    traefik = run.one(RELEASE)
    annotations = traefik.get("values.service.annotations") or {}
    assert annotations.get(AWS_IDLE_TIMEOUT) == idle
    # traefik/traefik-helm-chart v41.3.0 values.yaml has `service.annotations`.
    assert set(traefik.get("values.service") or {}) <= {"annotations"}
    # m11: on a cloud, the front door's namespace is this stack's, so destroy waits until its
    # load balancer is gone (Helm's create_namespace would leave the Service behind).
    owned = [n for n in run.of_type(NAMESPACE) if n.get("metadata.name") == TRAEFIK["namespace"]]
    if cloud is None:
        assert not owned and traefik.get("createNamespace") is True
        return
    [namespace] = owned
    assert traefik.get("createNamespace") is False
    assert traefik.depends_on(namespace)
    assert namespace.custom_timeouts.get("delete") == "30m"


@pytest.mark.parametrize("cloud", ["EKS", "GKE"])
def test_cloud_envoy_front_door_outlasts_the_longest_request(cloud: str) -> None:
    run = front_door("EnvoyGateway", cloud)
    gateway = run.one(GATEWAY)
    annotations = gateway.get("spec.infrastructure.annotations") or {}
    expected = {AWS_IDLE_TIMEOUT: str(LONGEST_REQUEST_SECONDS)} if cloud == "EKS" else {}
    assert annotations == expected  # public: no internal-LB annotation on the front door
    assert_envoy_outlasts_the_longest_request(run, "modelplane", "modelplane-system")


def test_cloud_gateway_durations_parse_as_gateway_api_durations() -> None:
    assert duration_seconds("3600s") == duration_seconds("1h") == 3600
    assert duration_seconds("1h30m") == 5400
    with pytest.raises(ValueError, match="not a Gateway API duration"):
        duration_seconds("1 hour")
