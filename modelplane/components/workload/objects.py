"""Kubernetes objects as plain manifests, and their registration as Pulumi resources.

The builders in this package return applyable manifests (dicts with camelCase
keys, exactly what `kubectl apply` takes); `register` turns one into the typed
pulumi-kubernetes resource for its kind (or a CustomResource for CRD kinds),
so the recorded inputs of every Kubernetes resource are its manifest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from modelplane.api.names import child_name
from modelplane.api.pod_security import namespace_labels

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


#: The label on every namespace modelplane manages: the only namespaces whose routes the
#: front door and the workload gateways accept (`ROUTES_FROM`; security review H3).
ROUTES_LABEL = {"modelplane.ai/routes": "true"}

#: Namespaces are shared by every stack on a cluster: the same labels from each of them.
NAMESPACE_LABELS = {**app_labels("modelplane", "modelplane", "namespace"), **ROUTES_LABEL}

#: A Gateway listener's `allowedRoutes`: routes of modelplane's namespaces only, so a route a
#: tenant attaches from another namespace (a longer prefix of a model's path) is not accepted.
ROUTES_FROM = {"namespaces": {"from": "Selector", "selector": {"matchLabels": ROUTES_LABEL}}}


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


HAND_OFF_ANNOTATION = "modelplane.ai/hand-off"


def hand_off(manifest: Manifest) -> Manifest:
    """``manifest`` as it goes into a renderTo cluster's rendered folder: a Secret keeps its
    name, type and the keys it must hold, never a value (the Kubernetes provider writes
    rendered Secrets in plaintext, and the folder is usually committed); the platform team
    creates its data (api.md, "renderTo"). Anything else is returned as it is."""
    if manifest.get("kind") != "Secret":
        return manifest
    keys = sorted({*(manifest.get("stringData") or {}), *(manifest.get("data") or {})})
    out = {k: v for k, v in manifest.items() if k not in ("data", "stringData")}
    meta = dict(out.get("metadata") or {})
    notes = dict(meta.get("annotations") or {})
    notes[HAND_OFF_ANNOTATION] = (
        f"create this Secret's data out of band (keys: {', '.join(keys)}); modelplane writes "
        "no secret value into rendered files"
    )
    meta["annotations"] = notes
    out["metadata"] = meta
    return out


def dns1035(*parts: str) -> str:
    """A name valid for a Service (DNS-1035: starts with a letter), within 63 characters."""
    name = child_name(*parts)
    if not name[:1].isalpha():
        name = child_name("mp", *parts)
    return name


def namespace_manifest(namespace: str, pod_security: str | None = None) -> Manifest:
    """A namespace; ``pod_security``: the Pod Security level it enforces (a workload namespace:
    `baseline`, or `privileged` where a cluster's allowlist names a deployment of it; None: a
    system namespace, not labelled)."""
    extra = namespace_labels(pod_security) if pod_security else {}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(namespace, None, labels(NAMESPACE_LABELS, extra)),
    }


def type_token(api_version: str, kind: str) -> str:
    """The Kubernetes provider's type token of a kind: ``kubernetes:<group>/<version>:<kind>``
    (the core group is ``core``): ``v1/Service`` -> ``kubernetes:core/v1:Service``."""
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


#: Kinds whose values the provider must keep secret (as the SDK's typed classes do).
_SECRET_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("v1", "Secret"): ("data", "stringData"),
}


class KubernetesObject(pulumi.CustomResource):
    """One Kubernetes object, registered by its manifest under the provider's own type token.

    The same registration the SDK's generated classes make (type token, inputs, version, the
    secret fields of a Secret), without importing them: their modules (``core.v1._inputs``
    alone is 2.6 MB) cost about a second of every engine run of a deployment or gateway stack
    (docs/benchmarks.md, "Engine runs"). The URN and the recorded inputs are those of the typed
    class, so stacks made with either see no change. Not registered: the typed classes'
    aliases to pre-v1 API versions, which modelplane never used.
    """

    def __init__(
        self,
        resource_name: str,
        manifest: Manifest,
        opts: pulumi.ResourceOptions | None = None,
        *,
        token: str | None = None,
    ) -> None:
        from pulumi_kubernetes._utilities import get_resource_opts_defaults

        api_version, kind = manifest["apiVersion"], manifest["kind"]
        props: dict[str, Any] = dict(manifest)
        secret = _SECRET_FIELDS.get((api_version, kind), ())
        for key in secret:
            if props.get(key) is not None:
                props[key] = pulumi.Output.secret(props[key])
        merged = pulumi.ResourceOptions.merge(get_resource_opts_defaults(), opts)
        if secret:
            merged = pulumi.ResourceOptions.merge(
                merged, pulumi.ResourceOptions(additional_secret_outputs=list(secret))
            )
        super().__init__(token or type_token(api_version, kind), resource_name, props, merged)


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
    """Register one manifest as a Kubernetes resource of the provider (:class:`KubernetesObject`:
    the type token and inputs of the SDK's class for its kind, or of a CustomResource)."""
    return KubernetesObject(name or resource_name(scope, manifest), manifest, opts)


def ensure_namespace(
    namespace: str, opts: pulumi.ResourceOptions, *, scope: str, pod_security: str | None = None
) -> pulumi.CustomResource | None:
    """The namespace, shared by every stack that puts objects in it.

    Registered as a `NamespacePatch` (server-side apply): it creates the
    namespace when it is missing and co-owns it when another stack (or the
    serving stack, or the platform team) already made it. A plain `Namespace`
    would fail with AlreadyExists in the second stack (pulumi-kubernetes creates
    client-side since v4.29), and deleting it with one stack would delete every
    other stack's objects in it; deleting a patch only gives up its fields.
    Built-in namespaces are not touched, but for `default`, which gets only `ROUTES_LABEL`
    (models may be served from it). ``pod_security``: the level a workload namespace
    enforces (every stack that co-owns it says the same: `ClusterTarget.pod_security`).
    """
    if namespace == "default":
        manifest = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": dict(ROUTES_LABEL)},
        }
    elif namespace in PREEXISTING_NAMESPACES:
        return None
    else:
        manifest = namespace_manifest(namespace, pod_security)
    return KubernetesObject(
        resource_name(scope, manifest),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": manifest["metadata"]},
        opts,
        token="kubernetes:core/v1:NamespacePatch",
    )
