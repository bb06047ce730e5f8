"""Kubernetes objects as plain manifests, and their registration as Pulumi resources.

The builders in this package return applyable manifests (dicts with camelCase
keys, exactly what `kubectl apply` takes); `register` turns one into the typed
pulumi-kubernetes resource for its kind (or a CustomResource for CRD kinds),
so the recorded inputs of every Kubernetes resource are its manifest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modelplane.api.names import child_name

Manifest = dict[str, Any]

# modelplane's labels (api.md, "Labels modelplane owns").
DEPLOYMENT = "modelplane.ai/deployment"
REPLICA = "modelplane.ai/replica"
ROLE = "modelplane.ai/role"
CLUSTER = "modelplane.ai/cluster"
REPLICA_INDEX = "modelplane.ai/replica-index"
POOL = "modelplane.ai/pool"
MODEL_CACHE = "modelplane.ai/modelcache"
SERVICE = "modelplane.ai/service"
ENDPOINT = "modelplane.ai/endpoint"
MANAGED_BY = {"app.kubernetes.io/managed-by": "modelplane"}
#: The Kubernetes recommended labels every object modelplane generates carries (on its
#: metadata and its pod templates; never in a selector, which is immutable on workloads).
APP_LABEL_KEYS = tuple(
    f"app.kubernetes.io/{k}" for k in ("name", "instance", "component", "part-of", "managed-by")
)

# Long-running work (model downloads, GPU nodes scaling up) must not block `pulumi up`;
# readiness is reported by `modelplane status` instead.
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}

# The cluster autoscaler must not scale down a node under a serving pod (budgets.py).
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"

SYSTEM_NAMESPACE = "modelplane-system"
WORKLOAD_GATEWAY = "inference-gateway"
PREEXISTING_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


def labels(*parts: Mapping[str, str] | None, **extra: str) -> dict[str, str]:
    """Merge label maps left to right (later wins), modelplane's management label first."""
    out: dict[str, str] = dict(MANAGED_BY)
    for part in parts:
        if part:
            out.update(part)
    out.update(extra)
    return out


def app_labels(name: str, instance: str, component: str) -> dict[str, str]:
    """The recommended labels: what the object belongs to (``name``, e.g. the model), which
    instance of it (e.g. the replica), its ``component``; part of and managed by modelplane."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "modelplane",
        **MANAGED_BY,
    }


#: Namespaces are shared by every stack on a cluster: the same labels from each of them.
NAMESPACE_LABELS = app_labels("modelplane", "modelplane", "namespace")


def metadata(
    name: str,
    namespace: str | None,
    labels_: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels_)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def dns1035(*parts: str) -> str:
    """A name valid for a Service (DNS-1035: starts with a letter), within 63 characters."""
    name = child_name(*parts)
    if not name[:1].isalpha():
        name = child_name("mp", *parts)
    return name


def namespace_manifest(namespace: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(namespace, None, labels(NAMESPACE_LABELS)),
    }


_TYPED: dict[tuple[str, str], Any] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): k8s.resource.v1.ResourceClaimTemplate,
    ("discovery.k8s.io/v1", "EndpointSlice"): k8s.discovery.v1.EndpointSlice,
}


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def resource_name(scope: str, manifest: Manifest) -> str:
    """A Pulumi logical name unique in the stack: `<scope>/<namespace>/<name>`."""
    meta = manifest["metadata"]
    ns = meta.get("namespace")
    return "/".join(p for p in (scope, ns, meta["name"]) if p)


def register(
    manifest: Manifest,
    opts: pulumi.ResourceOptions,
    *,
    scope: str = "",
    name: str | None = None,
) -> pulumi.CustomResource:
    """Register one manifest as its pulumi-kubernetes resource (typed when the SDK has it)."""
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    logical = name or resource_name(scope, manifest)
    cls = _TYPED.get((api_version, kind))
    if cls is None:
        return k8s.apiextensions.CustomResource(
            logical, api_version=api_version, kind=kind, opts=opts, **body
        )
    typed: pulumi.CustomResource = cls(
        logical, opts=opts, **{_snake(k): v for k, v in body.items()}
    )
    return typed


def ensure_namespace(
    namespace: str, opts: pulumi.ResourceOptions, *, scope: str
) -> pulumi.CustomResource | None:
    """The namespace, shared by every stack that puts objects in it.

    Registered as a `NamespacePatch` (server-side apply): it creates the
    namespace when it is missing and co-owns it when another stack (or the
    serving stack, or the platform team) already made it. A plain `Namespace`
    would fail with AlreadyExists in the second stack (pulumi-kubernetes creates
    client-side since v4.29), and deleting it with one stack would delete every
    other stack's objects in it; deleting a patch only gives up its fields.
    Built-in namespaces are not touched.
    """
    if namespace in PREEXISTING_NAMESPACES:
        return None
    manifest = namespace_manifest(namespace)
    return k8s.core.v1.NamespacePatch(
        resource_name(scope, manifest), metadata=manifest["metadata"], opts=opts
    )
