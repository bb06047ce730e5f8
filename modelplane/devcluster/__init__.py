"""A real Kubernetes API server on 127.0.0.1 for tests and for people.

``ensure_kube_binaries()`` builds kube-apiserver and kine from Go modules into the modelplane
cache (once); ``start_dev_cluster(workdir)`` runs them, installs the vendored CRDs and writes a
kubeconfig.
"""

from modelplane.devcluster.build import (
    KubeBinaries,
    KubeBuildError,
    cached_kube_binaries,
    ensure_kube_binaries,
)
from modelplane.devcluster.crds import CRDInstallError, InstallReport, install_crds
from modelplane.devcluster.server import DevCluster, DevClusterError, start_dev_cluster
from modelplane.devcluster.versions import KINE_VERSION, KUBERNETES_VERSION, kube_cache_dir

__all__ = [
    "KINE_VERSION",
    "KUBERNETES_VERSION",
    "CRDInstallError",
    "DevCluster",
    "DevClusterError",
    "InstallReport",
    "KubeBinaries",
    "KubeBuildError",
    "cached_kube_binaries",
    "ensure_kube_binaries",
    "install_crds",
    "kube_cache_dir",
    "start_dev_cluster",
]
