"""InferenceClasses against what the clusters publish (pure).

A class's device `capacity` must be what the DRA driver publishes, not the marketing size
(an L4 publishes 23034Mi, not 24Gi): a class that declares more gets replicas placed whose
claims can never be allocated. `status` compares each pool's class with the smallest GPU
`memory` the pool's ResourceSlices publish and says which class to fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.cel.quantity import parse_quantity
from modelplane.health.observation import ClusterObservation

GPU_DRIVER = "gpu.nvidia.com"


def class_mismatches(
    cluster: InferenceCluster,
    classes: Mapping[str, InferenceClass],
    seen: ClusterObservation | None,
) -> list[str]:
    """One message per pool whose class declares more GPU memory than its devices publish."""
    if seen is None or not seen.reachable:
        return []
    out = []
    for pool in cluster.spec.node_pools:
        observed = seen.pools.get(pool.name)
        cls = classes.get(pool.class_name)
        if observed is None or observed.gpu_memory is None or cls is None:
            continue
        for device in cls.spec.devices:
            declared = device.capacity.get("memory")
            if device.driver != GPU_DRIVER or declared is None:
                continue
            if parse_quantity(declared.value) > parse_quantity(observed.gpu_memory):
                out.append(
                    f"pool {pool.name}: InferenceClass {cls.metadata.name} declares "
                    f"{GPU_DRIVER} memory {declared.value} but its GPUs publish "
                    f"{observed.gpu_memory}; set the class's capacity to what the driver "
                    "publishes (docs/api.md)"
                )
    return out
