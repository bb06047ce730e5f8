"""InferenceCluster, GKECluster, EKSCluster and ServingStack under Pulumi's mock runtime.

Each test runs a component graph in process (no engine, no cloud, no network) and asserts the
registered resources and their key inputs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from modelplane.components.charts import CRDS_DIR
from modelplane.components.inference_cluster import InferenceClusterComponent
from modelplane.components.providers import cluster_provider
from tests.components.cluster_helpers import (
    K8S_PROVIDER,
    NODE_POOL,
    RELEASE,
    STORAGE_CLASS,
    assert_children_parented,
    assert_no_plaintext,
    eks_class,
    existing_cluster,
    existing_run,
    gke_class,
    gke_cluster,
    gpu_class,
    k8s_resources_use,
    release,
)
from tests.pulumi_mocks import MockRun, Secret, unwrap


def test_gke_cluster_network_cluster_and_node_pools() -> None:
    run = MockRun()
    ic = run.run(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": gke_class()})
    )

    network = run.one("gcp:compute/network:Network")
    assert network.inputs["autoCreateSubnetworks"] is False
    subnet = run.one("gcp:compute/subnetwork:Subnetwork")
    # The fleet address plan's first block, 10.0.0.0/16: pods the low half, nodes and
    # services an eighth each of the high half.
    assert subnet.inputs["ipCidrRange"] == "10.0.128.0/20"
    assert {r["rangeName"]: r["ipCidrRange"] for r in subnet.inputs["secondaryIpRanges"]} == {
        "pods": "10.0.0.0/17",
        "services": "10.0.144.0/20",
    }

    cluster = run.one("gcp:container/cluster:Cluster")
    assert cluster.inputs["removeDefaultNodePool"] is True
    assert cluster.inputs["deletionProtection"] is True  # protect: true by default
    assert cluster.inputs["minMasterVersion"] == "1.35"
    assert cluster.get("workloadIdentityConfig.workloadPool") == "acme-ml.svc.id.goog"
    assert cluster.get("addonsConfig.gcpFilestoreCsiDriverConfig.enabled") is True
    assert cluster.get("ipAllocationPolicy.clusterSecondaryRangeName") == "pods"
    assert cluster.get("ipAllocationPolicy.servicesSecondaryRangeName") == "services"
    assert cluster.inputs["location"] == "us-central1"

    pools = {p.inputs["name"]: p for p in run.of_type(NODE_POOL)}
    assert set(pools) == {"system", "gpu-h100"}
    system = pools["system"]
    assert system.get("nodeConfig.machineType") == "e2-standard-4"
    assert system.get("autoscaling.totalMinNodeCount") == 1
    assert system.get("autoscaling.totalMaxNodeCount") == 2
    assert system.inputs["initialNodeCount"] == 1
    assert system.inputs["nodeLocations"] == ["us-central1-a"]
    assert system.get("nodeConfig.labels") == {"modelplane.ai/pool": "system"}
    assert not system.get("nodeConfig.guestAccelerators")

    gpu = pools["gpu-h100"]
    assert gpu.get("nodeConfig.machineType") == "a3-highgpu-8g"
    assert gpu.get("nodeConfig.diskSizeGb") == 200
    [accelerator] = gpu.get("nodeConfig.guestAccelerators")
    assert accelerator["type"] == "nvidia-h100-80gb"
    assert accelerator["count"] == 8
    assert gpu.get("nodeConfig.labels") == {
        "modelplane.ai/pool": "gpu-h100",
        "modelplane.ai/gpu": "nvidia-h100-80gb",
        "gke-no-default-nvidia-gpu-device-plugin": "true",
        "cloud.google.com/gke-nvidia-gpu-dra-driver": "true",
        "nvidia.com/gpu.present": "true",
    }
    assert gpu.get("nodeConfig.taints") == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
    ]
    assert gpu.inputs["nodeLocations"] == ["us-central1-a", "us-central1-b"]
    assert gpu.get("autoscaling.totalMinNodeCount") == 0
    assert gpu.get("autoscaling.totalMaxNodeCount") == 4
    assert gpu.inputs["initialNodeCount"] == 1  # ceil(1 node / 2 zones), per zone
    assert gpu.inputs["cluster"] == cluster.state["name"]

    # One Filestore class per tier a ModelCache may ask for (issue 36, N7).
    classes = {s.get("metadata.name"): s for s in run.of_type(STORAGE_CLASS)}
    assert {n: s.get("parameters.tier") for n, s in classes.items()} == {
        "modelplane-rwx": "zonal",
        "modelplane-rwx-regional": "regional",
    }
    for storage in classes.values():
        assert storage.inputs["provisioner"] == "filestore.csi.storage.gke.io"
        assert storage.get("parameters.network") == network.state["name"]
        assert storage.inputs["allowVolumeExpansion"] is True

    provider = run.one(K8S_PROVIDER)
    assert isinstance(provider.inputs["kubeconfig"], Secret)
    kubeconfig = json.loads(unwrap(provider.inputs["kubeconfig"]))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://203.0.113.10"
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert "renderYamlToDirectory" not in provider.inputs
    assert all(provider.depends_on(pool) for pool in pools.values())  # nodes before charts
    k8s_resources_use(run, provider)

    dra = release(run, "nvidiaDraDriver")
    assert dra.get("values.nvidiaDriverRoot") == "/home/kubernetes/bin/nvidia"

    assert run.is_secret(ic.kubeconfig)
    assert run.value(ic.kubeconfig) == unwrap(provider.inputs["kubeconfig"])
    assert ic.storage_class_name == "modelplane-rwx"
    assert run.value(ic.gateway_address) == "192.0.2.10"
    assert ic.render_to is None
    assert ic.pool_shapes == [
        {
            "name": "gpu-h100",
            "nodes": 4,
            "devices": [
                {"name": "gpu", "driver": "gpu.nvidia.com", "claim": "DRA", "count": 8},
                {"name": "nic", "driver": "dra.net", "claim": "Synthetic", "count": 16},
            ],
        }
    ]
    assert_children_parented(run)
    assert_no_plaintext(run, "gke-gcloud-auth-plugin")


# --- EKS ------------------------------------------------------------------------------------


def test_gke_clusters_get_no_cluster_autoscaler_release() -> None:
    run = MockRun.of(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": gke_class()})
    )
    assert not [r for r in run.of_type(RELEASE) if "cluster-autoscaler" in r.name]
    assert not run.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")


def test_existing_render_to_has_no_serving_stack(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    cluster = existing_cluster({"renderTo": str(out), "cache": {"storageClassName": "nfs-rwx"}})
    run = MockRun()
    ic = run.run(lambda: InferenceClusterComponent("on-prem", cluster, {"h100-gke": gke_class()}))

    provider = run.one(K8S_PROVIDER)
    # Recorded relative to the working directory (the program's folder under the engine).
    recorded = provider.inputs["renderYamlToDirectory"]
    assert not os.path.isabs(recorded)
    assert Path(os.getcwd(), recorded).resolve() == out.resolve()
    # Explicitly empty (never the ambient $KUBECONFIG); the provider accepts "" with renderTo.
    assert provider.inputs.get("kubeconfig", "") == ""
    assert ic.provider is not None
    assert not run.find("modelplane:cluster:ServingStack")
    assert not run.of_type(RELEASE)
    assert not [r for r in run if r.type.startswith(("gcp:", "aws:", "eks:"))]
    assert ic.render_to == recorded
    assert run.is_secret(ic.kubeconfig) and run.value(ic.kubeconfig) == ""
    assert ic.storage_class_name == "nfs-rwx"
    assert run.value(ic.gateway_address) is None
    assert ic.pool_shapes[0]["name"] == "gpu" and ic.pool_shapes[0]["nodes"] == 3


def test_existing_with_kubeconfig_installs_serving_stack() -> None:
    kubeconfig = "apiVersion: v1\nkind: Config\n# token: s3cr3t-token\n"
    cluster = existing_cluster({"secretRef": {"name": "on-prem"}})
    run = MockRun()
    ic = run.run(
        lambda: InferenceClusterComponent(
            "on-prem", cluster, {"h100-gke": gke_class()}, kubeconfig=kubeconfig
        )
    )

    provider = run.one(K8S_PROVIDER)
    assert provider.inputs["kubeconfig"] == Secret(kubeconfig)
    assert run.one("modelplane:cluster:ServingStack").parent_type == (
        "modelplane:cluster:InferenceCluster"
    )
    assert release(run, "nvidiaDraDriver").get("values.nvidiaDriverRoot") == "/"
    assert not run.of_type(STORAGE_CLASS)
    assert ic.storage_class_name is None
    assert run.is_secret(ic.kubeconfig) and run.value(ic.kubeconfig) == kubeconfig
    k8s_resources_use(run, provider)
    assert_no_plaintext(run, "s3cr3t-token")
    assert_children_parented(run)


def test_existing_without_kubeconfig_or_render_to_is_an_error() -> None:
    cluster = existing_cluster({"secretRef": {"name": "on-prem"}})
    run = MockRun()
    with pytest.raises(ValueError, match="kubeconfig"):
        run.run(lambda: InferenceClusterComponent("on-prem", cluster, {"h100-gke": gke_class()}))


def test_serving_stack_can_be_skipped() -> None:
    cluster = existing_cluster({"secretRef": {"name": "x"}}, servingStack={"install": False})
    run = MockRun()
    ic = run.run(
        lambda: InferenceClusterComponent(
            "on-prem", cluster, {"h100-gke": gke_class()}, kubeconfig="k"
        )
    )
    assert not run.find("modelplane:cluster:ServingStack")
    assert run.value(ic.gateway_address) is None


# --- ServingStack ---------------------------------------------------------------------------


def test_serving_stack_prometheus_is_where_reconcile_asks_and_scrapes_the_engines() -> None:
    from modelplane.observe.prometheus import (
        ENGINE_JOB,
        PROMETHEUS_NAMESPACE,
        PROMETHEUS_SERVICE,
        engine_scrape_job,
    )

    run = existing_run()
    [release] = [r for r in run.of_type(RELEASE) if r.inputs["name"] == "mp-kube-prometheus-stack"]
    assert release.inputs["namespace"] == PROMETHEUS_NAMESPACE
    # kube-prometheus-stack names its Prometheus Service `<fullname>-prometheus`
    assert f"{release.get('values.fullnameOverride')}-prometheus" == PROMETHEUS_SERVICE
    jobs = release.get("values.prometheus.prometheusSpec.additionalScrapeConfigs")
    assert [j["job_name"] for j in jobs] == ["envoy-gateway-proxy", ENGINE_JOB]
    assert jobs[1] == engine_scrape_job()


def test_serving_stack_releases_pins_and_values() -> None:
    run = existing_run()
    releases = {r.inputs["name"]: r for r in run.of_type(RELEASE)}
    assert set(releases) == {
        "mp-cert-manager",
        "mp-gateway-helm",
        "mp-ai-gateway-crds-helm",
        "mp-ai-gateway-helm",
        "mp-kube-prometheus-stack",
        "mp-lws",
        "mp-node-feature-discovery",
        "mp-dra-driver-nvidia-gpu",
        "mp-keda",
    }
    assert all(name.startswith("mp-") for name in releases)
    expected = {
        "mp-cert-manager": ("cert-manager", "v1.21.1", "https://charts.jetstack.io"),
        "mp-gateway-helm": ("oci://docker.io/envoyproxy/gateway-helm", "v1.8.3", None),
        "mp-kube-prometheus-stack": (
            "kube-prometheus-stack",
            "88.5.3",
            "https://prometheus-community.github.io/helm-charts",
        ),
        "mp-lws": ("oci://registry.k8s.io/lws/charts/lws", "v0.10.0", None),
        "mp-node-feature-discovery": (
            "oci://registry.k8s.io/nfd/charts/node-feature-discovery",
            "0.19.0",
            None,
        ),
        "mp-dra-driver-nvidia-gpu": (
            "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu",
            "0.4.1",
            None,
        ),
        "mp-keda": ("keda", "2.20.2", "https://kedacore.github.io/charts"),
    }
    for name, (chart, version, repo) in expected.items():
        r = releases[name]
        assert (r.inputs["chart"], r.inputs["version"], r.get("repositoryOpts.repo")) == (
            chart,
            version,
            repo,
        ), name

    assert releases["mp-cert-manager"].get("values.crds.enabled") is True
    assert (
        releases["mp-gateway-helm"].get("values.config.envoyGateway.extensionApis.enableBackend")
        is True
    )
    assert releases["mp-kube-prometheus-stack"].get("values.grafana.enabled") is False
    assert releases["mp-kube-prometheus-stack"].get("values.alertmanager.enabled") is False
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        releases["mp-node-feature-discovery"].get("values.worker.tolerations")
    )
    dra = releases["mp-dra-driver-nvidia-gpu"]
    assert dra.get("values.gpuResourcesEnabledOverride") is True
    assert dra.get("values.resources.computeDomains.enabled") is False

    gateway_class = run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
    assert gateway_class.get("spec.controllerName") == (
        "gateway.envoyproxy.io/gatewayclass-controller"
    )
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.get("metadata.name") == "inference-gateway"
    assert gateway.get("metadata.namespace") == "modelplane-system"
    assert gateway.get("spec.gatewayClassName") == gateway_class.get("metadata.name")
    # HTTPS only, with the server certificate (mutual TLS: test_gateway_tls.py).
    assert gateway.get("spec.listeners") == [
        {
            "name": "https",
            "protocol": "HTTPS",
            "port": 443,
            "tls": {
                "mode": "Terminate",
                "certificateRefs": [
                    {"group": "", "kind": "Secret", "name": "modelplane-gateway-tls"}
                ],
            },
            "allowedRoutes": {
                "namespaces": {
                    "from": "Selector",
                    "selector": {"matchLabels": {"modelplane.ai/routes": "true"}},
                }
            },
        }
    ]
    namespace = next(
        n
        for n in run.of_type("kubernetes:core/v1:NamespacePatch")
        if n.get("metadata.name") == "modelplane-system"
    )
    assert gateway.depends_on(namespace)


def test_serving_stack_crds_before_the_objects_that_use_them() -> None:
    run = existing_run()
    groups = {
        g.name.rsplit("-serving-", 1)[1]: g for g in run.of_type("kubernetes:yaml/v2:ConfigGroup")
    }
    gateway_api = groups["gateway-api-crds"]
    gaie = groups["inference-extension-crds"]
    for group, folder in ((gateway_api, "gateway-api-v1.5.1-standard"), (gaie, "gaie-v1.0.1")):
        files = group.inputs["files"]
        assert files and all(os.path.isabs(f) and os.path.exists(f) for f in files)
        assert {Path(f).parent for f in files} == {CRDS_DIR / folder}
    assert any("httproutes" in f for f in gateway_api.inputs["files"])
    assert any("inferencepools" in f for f in gaie.inputs["files"])

    envoy = release(run, "envoyGateway")
    ai_gateway = release(run, "envoyAiGateway")
    gateway_class = run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert envoy.depends_on(gateway_api) and envoy.depends_on(gaie)
    assert ai_gateway.depends_on(envoy) and ai_gateway.depends_on(
        release(run, "envoyAiGatewayCrds")
    )
    assert gateway_class.depends_on(gateway_api) and gateway_class.depends_on(envoy)
    assert gateway.depends_on(gateway_class)
    dra = release(run, "nvidiaDraDriver")
    quota = run.one("kubernetes:core/v1:ResourceQuota")
    assert dra.depends_on(quota) and dra.depends_on(release(run, "nodeFeatureDiscovery"))


def test_serving_stack_version_overrides() -> None:
    run = existing_run(versions={"keda": "2.19.0", "certManager": "v1.19.1"})
    assert release(run, "keda").inputs["version"] == "2.19.0"
    assert release(run, "certManager").inputs["version"] == "v1.19.1"
    assert release(run, "envoyGateway").inputs["version"] == "v1.8.3"  # untouched


def test_serving_stack_rejects_unknown_versions() -> None:
    with pytest.raises(ValueError, match="unknown component"):
        existing_run(versions={"kedaa": "2.19.0"})
    with pytest.raises(ValueError, match="no vendored CRDs"):
        existing_run(versions={"gatewayApi": "v9.9.9"})


def test_serving_stack_oci_mirror_rewrites_every_chart() -> None:
    run = existing_run(chartRepository="oci://mirror.internal/charts/")
    for r in run.of_type(RELEASE):
        chart = r.inputs["chart"]
        assert chart.startswith("oci://mirror.internal/charts/"), chart
        assert chart.rsplit("/", 1)[1] == r.inputs["name"].removeprefix("mp-")
        assert "repositoryOpts" not in r.inputs


def test_serving_stack_https_mirror_rewrites_every_chart() -> None:
    run = existing_run(chartRepository="https://charts.mirror.internal")
    for r in run.of_type(RELEASE):
        assert r.get("repositoryOpts.repo") == "https://charts.mirror.internal"
        assert r.inputs["chart"] == r.inputs["name"].removeprefix("mp-")


# --- errors and providers -------------------------------------------------------------------


def test_pool_without_recipe_for_the_cloud_is_an_error() -> None:
    eks_only = eks_class("h100-gke", "p5.48xlarge")  # named as the pool expects, but EKS-only
    run = MockRun()
    with pytest.raises(ValueError) as err:
        run.run(
            lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": eks_only})
        )
    message = str(err.value)
    assert "gke-central" in message and "gpu-h100" in message and "h100-gke" in message
    assert "GKE" in message
    assert not run.resources  # validated before anything was registered

    bare = gpu_class("h100-gke", None)
    with pytest.raises(ValueError, match="no GKE provisioning recipe"):
        MockRun().run(
            lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": bare})
        )
    with pytest.raises(ValueError, match="does not exist"):
        MockRun().run(lambda: InferenceClusterComponent("gke-central", gke_cluster(), {}))


def test_cluster_provider_needs_exactly_one_target() -> None:
    with pytest.raises(ValueError, match="ambient kubeconfig"):
        MockRun().run(lambda: cluster_provider("p", kubeconfig=None, render_to=None, opts=None))
    with pytest.raises(ValueError, match="exactly one"):
        MockRun().run(lambda: cluster_provider("p", kubeconfig="k", render_to="/x", opts=None))


def test_validate_knows_exactly_the_pinned_serving_stack_components() -> None:
    from modelplane.api.inference_cluster import SERVING_STACK_COMPONENTS
    from modelplane.components.charts import VERSION_KEYS

    assert VERSION_KEYS == SERVING_STACK_COMPONENTS
