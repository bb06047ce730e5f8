"""Which stacks still hold Kubernetes objects on which cluster (pure: reads exported state).

A deployment or cache stack reaches cluster `c` through a `kubernetes` provider named
`<c>-k8s`; the gateway stack through `gateway-k8s` on the gateway's cluster. Destroying a
cluster stack while another stack's state still holds objects through such a provider
strands that state (its next update cannot reach the cluster), so `destroy` and
`up --prune` refuse it unless forced (architecture.md, "Stacks").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from modelplane.stacks import cluster_stack

K8S_PROVIDER_TYPE = "pulumi:providers:kubernetes"
GATEWAY_PROVIDER = "gateway-k8s"


def _provider_name(ref: str) -> str | None:
    """`urn:pulumi:<stack>::<project>::pulumi:providers:kubernetes::<name>::<id>` -> name."""
    urn = ref.rsplit("::", 1)[0]
    parts = urn.split("::")
    if len(parts) < 2 or parts[-2].split("$")[-1] != K8S_PROVIDER_TYPE:
        return None
    return parts[-1]


def objects_per_cluster_stack(
    resources: Iterable[Mapping[str, Any]], gateway_cluster: str | None
) -> dict[str, int]:
    """Per cluster stack, how many Kubernetes objects one stack's state holds on it."""
    counts: dict[str, int] = {}
    for res in resources:
        kind = str(res.get("type", ""))
        if not kind.startswith("kubernetes:"):
            continue
        name = _provider_name(str(res.get("provider", "")))
        if name is None or not name.endswith("-k8s"):
            continue
        if name == GATEWAY_PROVIDER:
            if gateway_cluster is None:
                continue
            cluster = gateway_cluster
        else:
            cluster = name[: -len("-k8s")]
        stack = cluster_stack(cluster)
        counts[stack] = counts.get(stack, 0) + 1
    return counts


def still_hosting(
    clusters: Iterable[str],
    states: Mapping[str, Iterable[Mapping[str, Any]]],
    gateway_cluster: str | None,
) -> dict[str, list[str]]:
    """Of the cluster stacks `clusters` (about to be destroyed), those on which one of the
    other stacks (`states`: stack -> exported resources) still holds objects, with those
    stacks in name order."""
    wanted = set(clusters)
    out: dict[str, list[str]] = {}
    for stack in sorted(states):
        for cluster in objects_per_cluster_stack(states[stack], gateway_cluster):
            if cluster in wanted:
                out.setdefault(cluster, []).append(stack)
    return out


def refusal(stacks: list[str]) -> str:
    listed = ", ".join(stacks)
    return (
        f"not destroyed: stack(s) {listed} still hold objects on this cluster; destroy or "
        "update them first (they would be stranded), or pass --force"
    )
