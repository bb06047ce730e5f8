"""Input limits: the ranges of the spec's integer fields (docs/api.md, "Input limits and
strictness").

Strictness itself (YAML integers only for integer fields, YAML booleans only for boolean
fields, finite numbers) is the `Strict` base model's config; these are the ranges. Counts
have maxima so that nothing downstream (the scheduler keeps a row per node of a pool)
grows without a bound.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: Nodes of one pool (nodeCount, minNodeCount, maxNodeCount) and, summed over its pools'
#: scheduling capacity, of one cluster: Kubernetes' largest supported cluster.
MAX_POOL_NODES = 5_000
MAX_CLUSTER_NODES = 5_000
#: ModelDeployment replicas and the autoscaler's bounds and steps.
MAX_REPLICAS = 1_000
#: Workers of a role, parallel degrees, devices of one request or class device.
MAX_WORKERS = 64
MAX_DATA_PARALLEL = 1_024
#: Pods of one worker at most (pipeline x data / dataLocal at their maxima).
MAX_NODES_PER_WORKER = 64 * MAX_DATA_PARALLEL
#: Devices one pod takes of its node (16 requests of at most 64).
MAX_DEVICES_PER_POD = 16 * 64
MAX_WEIGHT = 1_000_000
MAX_CACHE_GIB = 100_000
#: Boot disk in GB: GCE's largest persistent disk (EBS volumes stop at 16 TiB).
MAX_DISK_GB = 65_536

Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
"""Kubernetes' int32 (e.g. a PriorityClass value)."""
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
"""Kubernetes' int64 (DRA integer attributes)."""
NonNegInt64 = Annotated[int, Field(ge=0, le=INT64_MAX)]
Port = Annotated[int, Field(ge=1, le=65535)]
"""A TCP/UDP port, 1..65535."""
PoolNodes = Annotated[int, Field(ge=0, le=MAX_POOL_NODES)]
"""A node count of one pool, 0..MAX_POOL_NODES."""
Replicas = Annotated[int, Field(ge=0, le=MAX_REPLICAS)]
"""A replica count, 0..MAX_REPLICAS."""
