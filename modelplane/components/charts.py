"""The serving stack's pinned charts and CRD bundles, and how overrides and mirrors apply to them.

One table, keyed by the names a user writes in ``servingStack.versions``. Repositories are
the ones the original modelplane's ServingStack uses (reference facts: original-modelplane.md
§1.9/§3.2, ecosystem-and-peers.md §D.7). Versions are the newest releases checked against the
upstream repositories' tags and each chart's values.yaml for every key modelplane sets (as of
2026-08): cert-manager v1.21.1, Envoy Gateway v1.8.3 (the newest 1.8: it bundles Gateway API
v1.5.1, the vendored bundle; 1.9 bundles v1.6), Envoy AI Gateway v1.1.0, kube-prometheus-stack
88.5.3, LWS v0.10.0, NFD 0.19.0, the NVIDIA DRA driver 0.4.1, KEDA 2.20.2, cluster-autoscaler
chart 9.59.0, the AWS EFA device plugin chart v0.5.30 (image v0.5.20; aws/eks-charts'
gh-pages index, 2026-08-03; its values.yaml has ``tolerations`` and lists p5en.48xlarge in
``supportedInstanceLabels``).

Gateway API and the Gateway API Inference Extension ship no Helm chart in the reference
facts (Gateway API is a ``standard-install.yaml`` release asset, GAIE is applied as vendored
CRDs), so they are *CRD bundles*: the unmodified upstream CRDs vendored under ``modelplane/crds/`` (data
of the ``crds`` package, so a wheel install has them too), applied with
``kubernetes.yaml.v2.ConfigGroup``. Their "version" selects a vendored bundle directory; overriding it to a version that is not vendored is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from modelplane.crds import CRDS_DIR  # the vendored bundles, package data of the `crds` package


@dataclass(frozen=True)
class Chart:
    """A Helm chart the serving stack installs as release ``mp-<chart>``."""

    key: str
    """The ``servingStack.versions`` key."""
    chart: str
    repository: str
    """An ``https://`` chart repository or an ``oci://`` registry path (without the chart)."""
    version: str
    namespace: str

    @property
    def release_name(self) -> str:
        return f"mp-{self.chart}"


@dataclass(frozen=True)
class CrdBundle:
    """Upstream CRDs vendored under ``modelplane/crds/<directory>`` (``{version}`` is substituted)."""

    key: str
    version: str
    directory: str

    def path(self, version: str | None = None) -> Path:
        return CRDS_DIR / self.directory.format(version=version or self.version)


# The pins, one line each (a table reads better than wrapped calls).
# ruff: noqa: E501
# fmt: off
_PINS = (
    # key (servingStack.versions)  chart                   repository                                version    namespace
    ("certManager",          "cert-manager",           "https://charts.jetstack.io",                          "v1.21.1", "cert-manager"),
    ("envoyGateway",         "gateway-helm",           "oci://docker.io/envoyproxy",                          "v1.8.3",  "envoy-gateway-system"),
    # Envoy AI Gateway: the extension server that lets Envoy Gateway route HTTPRoutes to GAIE
    # InferencePools (both charts; v1.1.0 needs Envoy Gateway >= 1.8.1).
    ("envoyAiGatewayCrds",   "ai-gateway-crds-helm",   "oci://docker.io/envoyproxy",                          "v1.1.0",  "envoy-ai-gateway-system"),
    ("envoyAiGateway",       "ai-gateway-helm",        "oci://docker.io/envoyproxy",                          "v1.1.0",  "envoy-ai-gateway-system"),
    ("prometheus",           "kube-prometheus-stack",  "https://prometheus-community.github.io/helm-charts",  "88.5.3",  "monitoring"),
    ("leaderWorkerSet",      "lws",                    "oci://registry.k8s.io/lws/charts",                    "v0.10.0", "lws-system"),
    ("nodeFeatureDiscovery", "node-feature-discovery", "oci://registry.k8s.io/nfd/charts",                    "0.19.0",  "node-feature-discovery"),
    ("nvidiaDraDriver",      "dra-driver-nvidia-gpu",  "oci://registry.k8s.io/dra-driver-nvidia/charts",      "0.4.1",   "dra-driver-nvidia-gpu"),
    ("keda",                 "keda",                   "https://kedacore.github.io/charts",                   "2.20.2",  "keda"),
    # EKS only (InferenceCluster installs it, whatever servingStack.install says): scales the
    # managed node groups between minNodeCount and maxNodeCount.
    # EKS pools with fabric EFA: advertises the EFA interfaces as vpc.amazonaws.com/efa.
    ("awsEfaDevicePlugin",   "aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts",                 "v0.5.30", "kube-system"),
    ("clusterAutoscaler",    "cluster-autoscaler",     "https://kubernetes.github.io/autoscaler",             "9.59.0",  "kube-system"),
)
# fmt: on

CHARTS: Mapping[str, Chart] = {pin[0]: Chart(*pin) for pin in _PINS}

CLUSTER_AUTOSCALER_IMAGES: Mapping[str, str] = {
    # Kubernetes minor -> the newest cluster-autoscaler patch release of that minor (tags
    # cluster-autoscaler-<version> of kubernetes/autoscaler, as of 2026-08). Cluster-autoscaler
    # supports only the Kubernetes minor it was built for; chart 9.59.0 defaults to v1.35.0.
    "1.34": "v1.34.5",
    "1.35": "v1.35.2",
    "1.36": "v1.36.1",
}

CRD_BUNDLES: Mapping[str, CrdBundle] = {
    b.key: b
    for b in (
        CrdBundle("gatewayApi", "v1.5.1", "gateway-api-{version}-standard"),
        CrdBundle("inferenceExtension", "v1.0.1", "gaie-{version}"),
    )
}

VERSION_KEYS: frozenset[str] = frozenset(CHARTS) | frozenset(CRD_BUNDLES)


@dataclass(frozen=True)
class ResolvedChart:
    """What a ``helm.v3.Release`` needs: ``chart`` (a name, or a full ``oci://`` reference),
    ``repository`` (an https repo, or None for OCI), ``version``."""

    spec: Chart
    chart: str
    repository: str | None
    version: str


def check_version_keys(versions: Mapping[str, str]) -> None:
    unknown = sorted(set(versions) - VERSION_KEYS)
    if unknown:
        raise ValueError(
            f"servingStack.versions: unknown component(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(VERSION_KEYS))}"
        )


def resolve_chart(
    key: str, versions: Mapping[str, str], chart_repository: str = ""
) -> ResolvedChart:
    """The chart ``key`` at its pinned (or overridden) version, from upstream or the mirror.

    A mirror (``servingStack.chartRepository``) replaces every chart's repository: an ``oci://``
    mirror serves ``<mirror>/<chart>``, an https mirror is a Helm repository holding every chart.
    """
    spec = CHARTS[key]
    version = versions.get(key) or spec.version
    repository = chart_repository.strip().rstrip("/") or spec.repository
    if repository.startswith("oci://"):
        return ResolvedChart(spec, f"{repository}/{spec.chart}", None, version)
    return ResolvedChart(spec, spec.chart, repository, version)


def crd_files(key: str, versions: Mapping[str, str]) -> list[str]:
    """Absolute paths of the vendored CRD manifests of bundle ``key`` (sorted)."""
    bundle = CRD_BUNDLES[key]
    version = versions.get(key) or bundle.version
    directory = bundle.path(version)
    files = sorted(str(p) for p in directory.glob("*.yaml")) if directory.is_dir() else []
    if not files:
        raise ValueError(
            f"servingStack {key} {version}: no vendored CRDs at {directory} "
            f"(vendored bundles: {', '.join(_vendored(bundle)) or 'none'})"
        )
    return files


def _vendored(bundle: CrdBundle) -> list[str]:
    prefix, _, suffix = bundle.directory.partition("{version}")
    if not CRDS_DIR.is_dir():
        return []
    return sorted(
        p.name[len(prefix) : len(p.name) - len(suffix)]
        for p in CRDS_DIR.iterdir()
        if p.is_dir() and p.name.startswith(prefix) and p.name.endswith(suffix)
    )
