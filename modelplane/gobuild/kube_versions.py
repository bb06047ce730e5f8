"""Pinned versions of the local Kubernetes control plane and where its binaries are cached.

Kubernetes 1.35 serves ``resource.k8s.io/v1`` (DRA, GA since 1.34) by default. v1.35.8 is the
newest 1.35 patch the Go module proxy serves; kine v0.16.4 is an etcd shim over SQLite that
builds without cgo (pure-Go ``modernc.org/sqlite``) and needs no replace directives.
"""

from __future__ import annotations

from pathlib import Path

from modelplane.gobuild.cache import cache_root

KUBERNETES_VERSION = "1.35.8"
"""Kubernetes release (module ``k8s.io/kubernetes`` v1.35.8, staging modules v0.35.8)."""

KINE_VERSION = "0.16.4"
"""kine release (module ``github.com/k3s-io/kine``)."""

KUBERNETES_MODULE = "k8s.io/kubernetes"
KUBE_APISERVER_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
# No kubectl: nothing modelplane runs or tests needs it (a cold build is shorter without it).
KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
"""The control-plane commands built from one wrapper module (one ``go build``, shared packages)."""
KUBE_PACKAGES = tuple(f"k8s.io/kubernetes/cmd/{name}" for name in KUBE_COMMANDS)
KINE_MODULE = "github.com/k3s-io/kine"
KINE_PACKAGE = "github.com/k3s-io/kine"


def staging_version(kubernetes_version: str = KUBERNETES_VERSION) -> str:
    """The published staging-module version matching a Kubernetes release: 1.35.8 -> v0.35.8."""
    major, minor, patch = _split(kubernetes_version)
    if major != 1:
        raise ValueError(f"unsupported Kubernetes version {kubernetes_version!r}")
    return f"v0.{minor}.{patch}"


def _split(version: str) -> tuple[int, int, int]:
    parts = version.removeprefix("v").split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"expected a version like 1.35.8, got {version!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def kube_cache_dir(
    kubernetes_version: str = KUBERNETES_VERSION, kine_version: str = KINE_VERSION
) -> Path:
    """``<cache root>/kube/k8s-v<k8s>-kine-v<kine>``: wrapper modules in ``src/``, binaries in
    ``bin/``."""
    return cache_root() / "kube" / f"k8s-v{kubernetes_version}-kine-v{kine_version}"
