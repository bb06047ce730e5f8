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
from modelplane.scheduler.taints import BLOCKS_NEW


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
        self._cluster_pools = cluster_pools
        self._eligibility = eligibility
        self._deployments = deployments

    def reasons(self, dep_key: str, dep: ModelDeployment) -> list[str]:
        """Why no cluster takes another replica of `dep`: one reason per cluster considered
        (those matching its clusterSelector), or one reason when none is."""
        if not self._cluster_names:
            return [reasons.NO_CLUSTERS]
        eligibility = self._eligibility
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
        pools = self._cluster_pools[cluster]
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
