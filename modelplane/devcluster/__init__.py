"""A real Kubernetes API server on 127.0.0.1 for tests and for people.

``ensure_kube_binaries()`` builds kube-apiserver and kine from Go modules into the modelplane
cache (once, `modelplane.gobuild.kube`); ``start_dev_cluster(workdir)`` runs them, installs the
vendored CRDs and writes a kubeconfig.
"""

from modelplane.devcluster.crds import CRDInstallError, InstallReport, install_crds
from modelplane.devcluster.launch import DevClusterError
from modelplane.devcluster.server import DevCluster, start_dev_cluster
from modelplane.gobuild.gotool import GoError
from modelplane.gobuild.kube import KubeBinaries, cached_kube_binaries, ensure_kube_binaries
from modelplane.gobuild.kube_versions import KINE_VERSION, KUBERNETES_VERSION, kube_cache_dir

__all__ = [
    "KINE_VERSION",
    "KUBERNETES_VERSION",
    "CRDInstallError",
    "DevCluster",
    "DevClusterError",
    "GoError",
    "InstallReport",
    "KubeBinaries",
    "cached_kube_binaries",
    "ensure_kube_binaries",
    "install_crds",
    "kube_cache_dir",
    "start_dev_cluster",
]
