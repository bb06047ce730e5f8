"""Why a deployment is short: one reason per cluster considered (scheduling.md, step 7).

Works on a finished run's state (its eligibility and pool layouts), so re-planning the
written lock, which starts from that state, explains exactly the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from modelplane.api.model_deployment import ModelDeployment
from modelplane.scheduler import reasons, reserved
from modelplane.scheduler.capacity import Pool
from modelplane.scheduler.eligibility import Eligibility, RolePools
from modelplane.scheduler.taints import BLOCKS_NEW, CORDON_KEY, UNHEALTHY_KEY


class Explainer:
    """Shortfall reasons over one run's clusters and pools."""

    def __init__(
        self,
        cluster_names: Sequence[str],
        cluster_pools: Mapping[str, list[Pool]],
        eligibility: Eligibility,
        deployments: Mapping[str, ModelDeployment],
    ) -> None:
        self._cluster_names = cluster_names
        self.cluster_pools = cluster_pools
        self.eligibility = eligibility
        self._deployments = deployments

    def reasons(self, dep_key: str, dep: ModelDeployment) -> list[str]:
        """Why no cluster takes another replica of `dep`: one reason per cluster considered
        (those matching its clusterSelector), or one reason when none is."""
        if not self._cluster_names:
            return [reasons.NO_CLUSTERS]
        eligibility = self.eligibility
        considered = [c for c in self._cluster_names if eligibility.selected(dep_key, dep, c)]
        if not considered:
            return [reasons.NO_SELECTOR_MATCH]
        out = []
        for cluster in considered:
            why = eligibility.blocked(dep_key, dep, cluster, BLOCKS_NEW)
            if why is None:
                pools = eligibility.role_pools(dep_key, dep, cluster)
                why = pools if isinstance(pools, str) else self.why_full(cluster, pools)
            out.append(reasons.at(cluster, why))
        return out

    def why_full(self, cluster: str, role_pools: RolePools) -> str:
        """The first role short of nodes, with the pool that comes closest to hosting it.

        A "free node" is a node with room for one more pod of the role; the role needs
        one per pod (workers x nodes per worker)."""
        pools = self.cluster_pools[cluster]
        for role, matching in role_pools.roles:
            free, _, pool_pos, demand = max(
                (pools[pos].free_nodes(d), -pos, pos, d) for pos, d in matching
            )
            if free < demand.pods:
                pool = pools[pool_pos]
                short = pool.device_nodes(demand) - free
                why = reasons.pool_short(pool.name, free, role, demand.pods, max(0, short))
                return why + self._held_note([pools[pos] for pos, _ in matching])
        if len(role_pools.roles) > 1:
            return reasons.roles_together([role for role, _ in role_pools.roles])
        role, matching = role_pools.roles[0]
        free, _, pool_pos, _ = max((pools[pos].free_nodes(d), -pos, pos, d) for pos, d in matching)
        why = reasons.pool_fragmented(pools[pool_pos].name, role)
        return why + self._held_note([pools[pos] for pos, _ in matching])

    def _held_note(self, pools: Sequence[Pool]) -> str:
        """What removed deployments hold on `pools`, as a reason's suffix (or "")."""
        held: list[tuple[str, str, int]] = []
        for pool in pools:
            for key, n in sorted(reserved.held(pool, self._deployments).items()):
                if n:
                    held.append((key, pool.name, n))
        return reasons.held_by_removed(held)


# -- evidence (`plan --explain`): the first rule that rejects each cluster, with numbers --

RULES = (
    "clusterSelector",
    "cache",
    "cordoned",
    "health",
    "taints",
    "devices",
    "resources",
    "capacity",
)


def _selectors(dep: ModelDeployment, why: str) -> list[str]:
    """The CEL selectors of the device requests a `no pool matches` reason names."""
    out = []
    for role in dep.spec.roles.values():
        for req in role.node_selector.devices if role.node_selector else []:
            if f" {req.name}" in why:
                out += [s.cel for s in req.selectors]
    return out


def cluster_evidence(
    explainer: Explainer, dep_key: str, dep: ModelDeployment, cluster: str, fits: bool
) -> dict[str, object]:
    """One cluster's verdict for a new replica of `dep`: the first rule that rejects it
    (`rule`, `message`, and the numbers behind it), or `rule: null` when it has room
    (`fits`, worked out by the caller with the fill's own fit)."""
    eligibility = explainer.eligibility
    out: dict[str, object] = {"cluster": cluster}
    if not eligibility.selected(dep_key, dep, cluster):
        labels = eligibility.fleet.clusters[cluster].metadata.labels
        sel = dep.spec.cluster_selector.model_dump(by_alias=True, exclude_defaults=True)
        return {**out, "rule": "clusterSelector", "message": "labels do not match",
                "labels": dict(sorted(labels.items())), "clusterSelector": sel}  # fmt: skip
    why = eligibility.blocked(dep_key, dep, cluster, BLOCKS_NEW)
    if why is not None:
        rule = "cache" if why.startswith("not covered") else "taints"
        if UNHEALTHY_KEY in why:
            rule = "health"
        if CORDON_KEY in why:
            rule = "cordoned"
        return {**out, "rule": rule, "message": why}
    pools = eligibility.role_pools(dep_key, dep, cluster)
    if isinstance(pools, str):
        if "offers" in pools:
            return {**out, "rule": "resources", "message": pools}
        return {**out, "rule": "devices", "message": pools, "selectors": _selectors(dep, pools)}
    if fits:
        return {**out, "rule": None, "message": "has room for another replica"}
    per_role = []
    cluster_pools = explainer.cluster_pools[cluster]
    for role, matching in pools.roles:
        for pos, demand in matching:
            pool = cluster_pools[pos]
            per_role.append(
                {
                    "role": role,
                    "pool": pool.name,
                    "freeNodes": pool.free_nodes(demand),
                    "neededNodes": demand.pods,
                    "freeDevices": pool.layout.free_total,
                    "neededDevices": demand.pods * demand.devices_per_pod,
                }
            )
    message = explainer.why_full(cluster, pools)
    return {**out, "rule": "capacity", "message": message, "pools": per_role}
