"""ModelCache: model weights staged once per covered cluster on ReadWriteMany storage.

Per cluster, in the cache's namespace: a RWX PVC of `sizeGiB` on the cluster's
RWX StorageClass, the HuggingFace token Secret (when `authSecret` is set; its
value is a Pulumi secret resolved by the stack program), and a hydration Job
that downloads the repo into the PVC. The marker file records `repo@revision`: a re-run for
the same weights is a no-op, a new repo or revision downloads again (the old code skipped on
any marker and kept serving the old weights). Deployments that reference the cache mount the
same PVC read-only at `/mnt/models` (`cache_claim_name`) and wait, in an init container, until
the marker names their cache's `repo@revision` (`hydrated_marker`), instead of crash-looping
on a half-filled volume.

On GKE the PVC is a Filestore instance of the cache's tier (`filestore.tier`, StorageClass
`modelplane-rwx` for Zonal, `modelplane-rwx-regional` for Regional) whose capacity is sized
for the weights and the `throughputMiBps` hint (modelplane.api.cache_storage: Filestore's read
throughput scales with capacity); on EKS an access point on the elastic-throughput EFS file
system, of `sizeGiB`.

The PVC is not awaited (`skipAwait`): on GKE each PVC provisions a Filestore instance, which
often takes longer than pulumi-kubernetes' wait for `Bound`; the Job's pod waits for the volume
to mount anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from components.workload.objects import (
    MODEL_CACHE,
    SKIP_AWAIT,
    Manifest,
    app_labels,
    ensure_namespace,
    hand_off,
    labels,
    metadata,
    register,
)
from components.workload.pods import CACHE_MARKER, CACHE_MOUNT
from components.workload.targets import ClusterTarget
from modelplane.api.cache_storage import CacheVolume, efs_volume, filestore_volume
from modelplane.api.model_cache import ModelCache
from modelplane.api.names import child_name

HYDRATE_IMAGE = "python:3.12-slim"
MOUNT = CACHE_MOUNT
MARKER = CACHE_MARKER

HYDRATE_SCRIPT = f"""set -eu
want="$MODELPLANE_REPO@$MODELPLANE_REVISION"
if [ "$(cat "{MOUNT}/{MARKER}" 2>/dev/null || true)" = "$want" ]; then
  echo "model cache already hydrated with $want"; exit 0
fi
rm -f "{MOUNT}/{MARKER}"
pip install --no-cache-dir --quiet "huggingface_hub[cli]"
hf download "$MODELPLANE_REPO" --revision "$MODELPLANE_REVISION" --local-dir "{MOUNT}"
printf '%s' "$want" > "{MOUNT}/{MARKER}"
"""


def hydrated_marker(cache: ModelCache) -> str | None:
    """What the marker file holds once the cache's weights are in place: `repo@revision`."""
    hf = cache.spec.hugging_face
    return f"{hf.repo}@{hf.revision}" if hf is not None else None


def cache_claim_name(cache_name: str) -> str:
    """The PVC a cache fills and deployments mount (same name on every cluster)."""
    return child_name("modelcache", cache_name)


def cache_labels(cache: ModelCache) -> dict[str, str]:
    name = cache.metadata.name
    return labels(app_labels(name, name, "model-cache"), {MODEL_CACHE: name})


FILESTORE_STORAGE_CLASSES: dict[str, str] = {
    "Zonal": "modelplane-rwx",
    "Regional": "modelplane-rwx-regional",
}
"""GKE: the StorageClass of each Filestore tier (InferenceCluster creates both)."""
FILESTORE_CSI_TIERS: dict[str, str] = {"Zonal": "zonal", "Regional": "regional"}
"""The Filestore CSI driver's `tier` parameter of each (pkg/csi_driver/controller.go)."""


def cache_volume(cache: ModelCache, cloud: str | None) -> CacheVolume | None:
    """The cache's volume on a provisioned cluster (None on an Existing one): GKE a Filestore
    instance sized for the bytes and the throughput hint, EKS an elastic EFS access point."""
    spec = cache.spec
    if cloud == "GKE":
        return filestore_volume(spec.size_gib, spec.throughput_mibps, spec.filestore.tier)
    if cloud == "EKS":
        return efs_volume(spec.size_gib)
    return None


def pvc_manifest(
    cache: ModelCache,
    storage_class: Any,
    object_labels: Mapping[str, str],
    capacity_gib: int | None = None,
) -> Manifest:
    """``capacity_gib``: the volume's size where the cloud sizes it (Filestore), else
    ``sizeGiB``."""
    size = capacity_gib if capacity_gib is not None else cache.spec.size_gib
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(
            cache_claim_name(cache.metadata.name),
            cache.metadata.namespace,
            object_labels,
            SKIP_AWAIT,
        ),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": f"{size}Gi"}},
        },
    }


def token_secret_name(cache_name: str) -> str:
    return child_name("modelcache", cache_name, "auth")


def secret_manifest(
    cache: ModelCache, token: pulumi.Input[str], object_labels: Mapping[str, str]
) -> Manifest:
    hf = cache.spec.hugging_face
    assert hf is not None and hf.auth_secret is not None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(
            token_secret_name(cache.metadata.name), cache.metadata.namespace, object_labels
        ),
        "type": "Opaque",
        "stringData": {hf.auth_secret.key: token},
    }


def job_manifest(
    cache: ModelCache, object_labels: Mapping[str, str], *, with_token: bool
) -> Manifest:
    hf = cache.spec.hugging_face
    assert hf is not None
    env: list[dict[str, Any]] = [
        {"name": "MODELPLANE_REPO", "value": hf.repo},
        {"name": "MODELPLANE_REVISION", "value": hf.revision},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
    ]
    if with_token and hf.auth_secret is not None:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {
                        "name": token_secret_name(cache.metadata.name),
                        "key": hf.auth_secret.key,
                    }
                },
            }
        )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(
            child_name("modelcache", cache.metadata.name, "hydrate"),
            cache.metadata.namespace,
            object_labels,
            SKIP_AWAIT,
        ),
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": dict(object_labels)},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [
                        {
                            "name": "hydrate",
                            "image": HYDRATE_IMAGE,
                            "command": ["/bin/sh", "-c", HYDRATE_SCRIPT],
                            "env": env,
                            "volumeMounts": [{"name": "model-cache", "mountPath": MOUNT}],
                            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                        }
                    ],
                    "volumes": [
                        {
                            "name": "model-cache",
                            "persistentVolumeClaim": {
                                "claimName": cache_claim_name(cache.metadata.name)
                            },
                        }
                    ],
                },
            },
        },
    }


class ModelCacheComponent(pulumi.ComponentResource):
    """`modelplane:cache:ModelCache`: PVC + token Secret + hydration Job per covered cluster.

    `targets` are the covered clusters (each with its provider and RWX
    `storage_class_name`); `token` is the HuggingFace token (a secret Output)
    when the cache names an `authSecret`.
    """

    claim_name: pulumi.Output[str]
    clusters: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        cache: ModelCache,
        targets: Mapping[str, ClusterTarget],
        *,
        token: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("modelplane:cache:ModelCache", name, None, opts)
        hf = cache.spec.hugging_face
        with_token = token is not None and hf is not None and hf.auth_secret is not None
        object_labels = cache_labels(cache)
        for cluster, target in targets.items():
            if target.storage_class_name is None:
                raise ValueError(
                    f"ModelCache {cache.key}: cluster {cluster!r} has no RWX StorageClass "
                    "(set existing.cache.storageClassName on an Existing cluster)"
                )
            child = pulumi.ResourceOptions(parent=self, provider=target.provider)
            namespace = cache.metadata.namespace or "default"
            ns = ensure_namespace(
                namespace, child, scope=cluster, pod_security=target.pod_security(namespace)
            )
            after = pulumi.ResourceOptions(
                parent=self, provider=target.provider, depends_on=[ns] if ns else None
            )
            # GKE: the tier's class, at the capacity that gives the throughput asked for.
            volume = cache_volume(cache, target.cloud)
            storage_class = (
                FILESTORE_STORAGE_CLASSES[cache.spec.filestore.tier]
                if target.cloud == "GKE"
                else target.storage_class_name
            )
            capacity = volume.capacity_gib if volume is not None and target.cloud == "GKE" else None
            pvc = register(
                pvc_manifest(cache, storage_class, object_labels, capacity), after, scope=cluster
            )
            deps: list[pulumi.Resource] = [pvc]
            if with_token:
                assert token is not None
                made = secret_manifest(cache, pulumi.Output.secret(token), object_labels)
                secret = register(
                    hand_off(made) if target.render_only else made, after, scope=cluster
                )
                deps.append(secret)
            register(
                job_manifest(cache, object_labels, with_token=with_token),
                pulumi.ResourceOptions(parent=self, provider=target.provider, depends_on=deps),
                scope=cluster,
            )
        self.claim_name = pulumi.Output.from_input(cache_claim_name(cache.metadata.name))
        self.clusters = pulumi.Output.from_input(sorted(targets))
        self.register_outputs({"claimName": self.claim_name, "clusters": self.clusters})
