"""Where a stack's objects go: one workload cluster, as the components need it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi

from modelplane.api.inference_class import ClassDevice, InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.pod_security import BASELINE, PRIVILEGED, exempt_deployments
from modelplane.components.images import MODEL_CACHE_IMAGE


@dataclass(frozen=True)
class ClusterTarget:
    """A workload cluster: its provider, gateway address, labels and pool devices.

    `pool_devices` maps a pool name to the devices of its InferenceClass (how a
    DRA request finds its DeviceClass); `storage_class_name` is the RWX class
    a ModelCache's PVC uses there.
    """

    name: str
    provider: pulumi.ProviderResource
    gateway_address: pulumi.Input[str] = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    pool_devices: Mapping[str, Sequence[ClassDevice]] = field(default_factory=dict)
    storage_class_name: pulumi.Input[str] | None = None
    # The workload gateway routes to GAIE InferencePools (the installed stack's Envoy Gateway
    # with the AI Gateway extension); a platform's own gateway gets the decode Service instead.
    inference_pools: bool = True
    # The workload gateway's controller, for the front-door check on replica routes
    # (components/workload/front_door.py); None: modelplane cannot configure it, no routes.
    front_door: Literal["Traefik", "EnvoyGateway"] | None = None
    # The fleet's front-door key (a secret output); None: no routes (fail closed) -- but on a
    # renderTo cluster (`render_only`) the hand-off keeps its routes and their check, without
    # the Secret the check reads (refusing everything until the platform adds it).
    front_door_key: pulumi.Input[str] | None = None
    render_only: bool = False
    # GKE or EKS where modelplane provisions the cluster (its RWX storage: Filestore, EFS);
    # None for an Existing cluster (its StorageClass is the platform's).
    cloud: Literal["GKE", "EKS"] | None = None
    # The namespaces of the deployments this cluster's allowlist lets run outside Pod Security
    # "baseline" (spec.podSecurity.exemptDeployments): they enforce `privileged` here.
    privileged_namespaces: frozenset[str] = frozenset()
    # The namespace of a platform's own gateway's proxies (`servingStack.gateway.namespace`;
    # None: not declared): the replicas' NetworkPolicy admits it (network_policies.py).
    gateway_namespace: str | None = None
    # The fleet's InferenceGateway's backend when it runs on this cluster (its proxies route
    # to a replica's Service directly when the cluster's gateway has no address); else None.
    front_door_here: Literal["Traefik", "EnvoyGateway"] | None = None
    # The image of the ModelCache Jobs and the replicas' wait for the cache here (the
    # platform's `spec.images.modelCache`, pinned by digest; else the default tag).
    model_cache_image: str = MODEL_CACHE_IMAGE

    @classmethod
    def from_spec(
        cls,
        cluster: InferenceCluster,
        classes: Mapping[str, InferenceClass],
        provider: pulumi.ProviderResource,
        *,
        gateway_address: pulumi.Input[str] = "",
        storage_class_name: pulumi.Input[str] | None = None,
        front_door_key: pulumi.Input[str] | None = None,
        render_only: bool = False,
        front_door_here: Literal["Traefik", "EnvoyGateway"] | None = None,
        model_cache_image: str = MODEL_CACHE_IMAGE,
    ) -> ClusterTarget:
        pools = {
            pool.name: tuple(classes[pool.class_name].spec.devices)
            for pool in cluster.spec.node_pools
            if pool.class_name in classes
        }
        return cls(
            name=cluster.metadata.name,
            provider=provider,
            gateway_address=gateway_address,
            labels=dict(cluster.metadata.labels),
            pool_devices=pools,
            storage_class_name=storage_class_name,
            inference_pools=cluster.spec.serving_stack.install,
            front_door=workload_controller(cluster),
            front_door_key=front_door_key,
            render_only=render_only,
            cloud=source if (source := cluster.spec.cluster.source) != "Existing" else None,
            privileged_namespaces=frozenset(
                k.split("/", 1)[0] for k in exempt_deployments(cluster)
            ),
            gateway_namespace=(
                cluster.spec.serving_stack.gateway.namespace
                if cluster.spec.serving_stack.gateway is not None
                else None
            ),
            front_door_here=front_door_here,
            model_cache_image=model_cache_image,
        )

    def pod_security(self, namespace: str) -> str:
        """The Pod Security level a workload namespace enforces here (namespace_level)."""
        return PRIVILEGED if namespace in self.privileged_namespaces else BASELINE

    @property
    def routable(self) -> bool:
        """Replica routes here can require the front door's credentials."""
        return self.front_door is not None and (self.front_door_key is not None or self.render_only)


def workload_controller(cluster: InferenceCluster) -> Literal["Traefik", "EnvoyGateway"] | None:
    """The installed stack's Envoy Gateway, or the controller the platform's class declares."""
    stack = cluster.spec.serving_stack
    if stack.install:
        return "EnvoyGateway"
    return stack.gateway.controller if stack.gateway is not None else None
