"""ModelCache: model weights staged once per covered cluster on ReadWriteMany storage.

Per cluster, in the cache's namespace: a RWX PVC of `sizeGiB` on the cluster's RWX
StorageClass, the HuggingFace token Secret (when `authSecret` is set; its value is a Pulumi
secret resolved by the stack program), the `hf` CLI's pinned, hashed requirements (a
ConfigMap, components/manifests/hydrate-requirements.txt: the Job installs exactly those wheels,
security review M10), and per source (`repo@revision`) a hydration Job that
downloads it into a directory of its own, `revisions/<digest>` (`source_dir`), with a marker
file naming it: a re-run for the same weights is a no-op. A new revision downloads beside the
one replicas still read; the deployments that mount the cache move to it through their
rollout (the source is part of their revision: `modelplane.rollout.template`), and `up`
waits for that download before the rollout starts. Replicas mount their source's directory
read-only at `/mnt/models` (`subPath`) and wait, in an init container, until its marker
names their source, instead of crash-looping on a half-filled volume. A prune Job, named by
what it keeps, removes the directories no replica reads any more (and the volume's root
files of the layout before directories, once no replica reads them).

On GKE the PVC is a Filestore instance of the cache's tier (`filestore.tier`, StorageClass
`modelplane-rwx` for Zonal, `modelplane-rwx-regional` for Regional) whose capacity is sized
for the weights and the `throughputMiBps` hint (modelplane.api.cache_storage: Filestore's read
throughput scales with capacity); on EKS an access point on the elastic-throughput EFS file
system, of `sizeGiB`.

The PVC is not awaited (`skipAwait`): on GKE each PVC provisions a Filestore instance, which
often takes longer than pulumi-kubernetes' wait for `Bound`; the first Job's pod waits for the
volume to mount anyway.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi

from modelplane.api.cache_storage import CacheVolume, efs_volume, filestore_volume
from modelplane.api.model_cache import REVISIONS_DIR, ModelCache, cache_source, source_dir
from modelplane.api.names import child_name
from modelplane.components.images import MODEL_CACHE_IMAGE
from modelplane.components.manifests.hydrate_requirements import REQUIREMENTS
from modelplane.components.workload.objects import (
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
from modelplane.components.workload.pods import CACHE_MARKER, CACHE_MOUNT
from modelplane.components.workload.targets import ClusterTarget
from modelplane.rollout import CacheUse

HYDRATE_IMAGE = (
    MODEL_CACHE_IMAGE  # a tag; `spec.images.modelCache` pins it (modelplane/components/images.py)
)
REQUIREMENTS_DIR = "/etc/modelplane/hydrate"
REQUIREMENTS_FILE = "requirements.txt"
# The `hf` CLI and its dependencies, pinned with hashes (security review M10): the Job installs
# exactly these wheels or fails; it never resolves anything from PyPI at run time.
PIP_INSTALL = (
    "pip install --no-cache-dir --quiet --disable-pip-version-check --require-hashes "
    f"--only-binary=:all: -r {REQUIREMENTS_DIR}/{REQUIREMENTS_FILE}"
)
MOUNT = CACHE_MOUNT
MARKER = CACHE_MARKER

HYDRATE_SCRIPT = f"""set -eu
want="$MODELPLANE_REPO@$MODELPLANE_REVISION"
dir="{MOUNT}/$MODELPLANE_DIR"
if [ "$(cat "$dir/{MARKER}" 2>/dev/null || true)" = "$want" ]; then
  echo "model cache already holds $want"; exit 0
fi
mkdir -p "$dir"
rm -f "$dir/{MARKER}"
{PIP_INSTALL}
hf download "$MODELPLANE_REPO" --revision "$MODELPLANE_REVISION" --local-dir "$dir"
printf '%s' "$want" > "$dir/{MARKER}"
"""
# Removes what no replica reads any more: every source directory not in $MODELPLANE_KEEP
# (their digests), and the volume's root files unless a replica still reads them.
PRUNE_SCRIPT = f"""set -eu
cd "{MOUNT}"
keep=" $MODELPLANE_KEEP "
if [ -d {REVISIONS_DIR} ]; then
  for d in {REVISIONS_DIR}/*; do
    [ -e "$d" ] || continue
    case "$keep" in *" $(basename "$d") "*) ;; *) echo "removing $d"; rm -rf "$d";; esac
  done
fi
if [ "$MODELPLANE_KEEP_ROOT" != "true" ]; then
  for f in .[!.]* ..?* *; do
    [ -e "$f" ] || continue
    [ "$f" = {REVISIONS_DIR} ] && continue
    echo "removing $f"; rm -rf "$f"
  done
fi
"""
AWAIT_DOWNLOAD_SECONDS = 6 * 3600
"""How long `up` waits for a new revision's download before the rollout to it (then it
fails, naming the Job; the next `up` waits again)."""
CURRENT = "modelplane.ai/cache-current"
"""On the hydration Job of the cache's own source ("true"), the one `status` reports."""


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


def requirements_text() -> str:
    """components/manifests/hydrate-requirements.txt (generated: hydrate_requirements.py)."""
    return REQUIREMENTS.read_text()


def requirements_name(cache_name: str) -> str:
    """The ConfigMap of the hydration Jobs' pinned requirements (one per cache)."""
    return child_name("modelcache", cache_name, "requirements")


def requirements_manifest(cache: ModelCache, object_labels: Mapping[str, str]) -> Manifest:
    """The pinned, hashed requirements the hydration Jobs install (mounted read-only)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            requirements_name(cache.metadata.name), cache.metadata.namespace, object_labels
        ),
        "data": {REQUIREMENTS_FILE: requirements_text()},
    }


def job_name(cache: ModelCache, source: str) -> str:
    """`modelcache-<cache>-hydrate-<digest>`: one Job per source, so a new revision's
    download never replaces (or deletes) the Job of one replicas still read."""
    return child_name("modelcache", cache.metadata.name, "hydrate", source_dir(source)[-8:])


def _pod_spec(
    cache: ModelCache, container: dict[str, Any], extra_volumes: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    return {
        "restartPolicy": "OnFailure",
        "containers": [container],
        "volumes": [
            {
                "name": "model-cache",
                "persistentVolumeClaim": {"claimName": cache_claim_name(cache.metadata.name)},
            },
            *extra_volumes,
        ],
    }


def job_manifest(
    cache: ModelCache,
    object_labels: Mapping[str, str],
    *,
    with_token: bool,
    source: str | None = None,
    awaited: bool = False,
    image: str = HYDRATE_IMAGE,
) -> Manifest:
    """The download of ``source`` (`repo@revision`; None: the cache's own) into its
    directory. ``awaited``: `up` waits until it completes (a new revision, before the
    rollout to it), else not (a first download: the pods wait for it themselves). It
    installs the `hf` CLI from the cache's requirements ConfigMap (pinned, hashed);
    ``image``: ClusterTarget.model_cache_image."""
    hf = cache.spec.hugging_face
    assert hf is not None
    own = cache_source(cache)
    source = source or own
    assert source is not None
    repo, _, revision = source.partition("@")
    env: list[dict[str, Any]] = [
        {"name": "MODELPLANE_REPO", "value": repo},
        {"name": "MODELPLANE_REVISION", "value": revision},
        {"name": "MODELPLANE_DIR", "value": source_dir(source)},
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
    wait = {"pulumi.com/timeoutSeconds": str(AWAIT_DOWNLOAD_SECONDS)} if awaited else SKIP_AWAIT
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(
            job_name(cache, source),
            cache.metadata.namespace,
            {**object_labels, CURRENT: "true" if source == own else "false"},
            wait,
        ),
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {
                    "labels": dict(object_labels),
                    # The pins it installs: new pins, a new Job spec.
                    "annotations": {
                        "modelplane.ai/requirements-sha256": hashlib.sha256(
                            requirements_text().encode()
                        ).hexdigest()
                    },
                },
                "spec": _pod_spec(
                    cache,
                    {
                        "name": "hydrate",
                        "image": image,
                        "command": ["/bin/sh", "-c", HYDRATE_SCRIPT],
                        "env": env,
                        "volumeMounts": [
                            {"name": "model-cache", "mountPath": MOUNT},
                            {
                                "name": "requirements",
                                "mountPath": REQUIREMENTS_DIR,
                                "readOnly": True,
                            },
                        ],
                        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                    },
                    [
                        {
                            "name": "requirements",
                            "configMap": {"name": requirements_name(cache.metadata.name)},
                        }
                    ],
                ),
            },
        },
    }


def prune_manifest(
    cache: ModelCache,
    object_labels: Mapping[str, str],
    sources: Sequence[str],
    *,
    root: bool,
    image: str = HYDRATE_IMAGE,
) -> Manifest:
    """The Job that removes what no replica reads: named by what it keeps, so it runs once
    each time that changes (a rollout finished, a revision added)."""
    keep = sorted(source_dir(s).rsplit("/", 1)[-1] for s in sources)
    digest = hashlib.sha256(json.dumps([keep, root]).encode()).hexdigest()[:8]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(
            child_name("modelcache", cache.metadata.name, "prune", digest),
            cache.metadata.namespace,
            {**object_labels, CURRENT: "false"},  # never the Job `status` reports
            SKIP_AWAIT,
        ),
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": dict(object_labels)},
                "spec": _pod_spec(
                    cache,
                    {
                        "name": "prune",
                        "image": image,
                        "command": ["/bin/sh", "-c", PRUNE_SCRIPT],
                        "env": [
                            {"name": "MODELPLANE_KEEP", "value": " ".join(keep)},
                            {"name": "MODELPLANE_KEEP_ROOT", "value": "true" if root else "false"},
                        ],
                        "volumeMounts": [{"name": "model-cache", "mountPath": MOUNT}],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    },
                ),
            },
        },
    }


def cache_jobs(
    cache: ModelCache,
    object_labels: Mapping[str, str],
    use: CacheUse,
    *,
    with_token: bool,
    render_only: bool = False,
    image: str = HYDRATE_IMAGE,
) -> list[Manifest]:
    """One cluster's Jobs: a download per source in use, then the prune. The cache's own
    source is awaited when replicas read another one (they move to it by a rollout, which
    starts once the weights are there); a renderTo cluster has nothing to wait on."""
    own = cache_source(cache)
    others = use.root or any(s != own for s in use.sources)
    jobs = [
        job_manifest(
            cache,
            object_labels,
            with_token=with_token,
            source=source,
            awaited=others and source == own and not render_only,
            image=image,
        )
        for source in use.sources
    ]
    return [*jobs, prune_manifest(cache, object_labels, use.sources, root=use.root, image=image)]


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
        use: CacheUse | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``use``: the sources replicas read or are rolled to (`modelplane.rollout.cache_use`;
        None: the cache's own alone)."""
        super().__init__("modelplane:cache:ModelCache", name, None, opts)
        own = cache_source(cache)
        use = use or CacheUse(tuple(s for s in [own] if s is not None), root=False)
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
            deps.append(register(requirements_manifest(cache, object_labels), after, scope=cluster))
            for job in cache_jobs(
                cache,
                object_labels,
                use,
                with_token=with_token,
                render_only=target.render_only,
                image=target.model_cache_image,
            ):
                register(
                    job,
                    pulumi.ResourceOptions(parent=self, provider=target.provider, depends_on=deps),
                    scope=cluster,
                )
        self.claim_name = pulumi.Output.from_input(cache_claim_name(cache.metadata.name))
        self.clusters = pulumi.Output.from_input(sorted(targets))
        self.register_outputs({"claimName": self.claim_name, "clusters": self.clusters})
