"""Which clusters a deployment may use before capacity: selector, cache, taints, pools.

Clusters that look alike to a deployment (same labels, taints and pool
classes) get the same answer, so answers are memoized per such profile: a
fleet of a thousand clusters usually has a few dozen profiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from modelplane.api.fleet import FleetSpec
from modelplane.api.model_deployment import ModelDeployment
from modelplane.scheduler import reasons
from modelplane.scheduler.matching import Matcher, PodDemand
from modelplane.scheduler.taints import BLOCKS_NEW, untolerated

Profile = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, str], ...], tuple[str, ...]]


@dataclass(frozen=True)
class RolePools:
    """Per role (in role order), the pools (by position) a pod fits on when empty."""

    roles: tuple[tuple[str, tuple[tuple[int, PodDemand], ...]], ...]
    least_room: int  # a cluster whose roomiest pool has fewer free devices has no room

    @staticmethod
    def of(roles: tuple[tuple[str, tuple[tuple[int, PodDemand], ...]], ...]) -> RolePools:
        least = max(min(d.least_consumed for _, d in matching) for _, matching in roles)
        return RolePools(roles, least)


class Eligibility:
    def __init__(self, fleet: FleetSpec, matcher: Matcher) -> None:
        self.fleet = fleet
        self.matcher = matcher
        self.profiles: dict[str, Profile] = {}
        self.profile_ids: dict[str, int] = {}  # cluster -> small id of its profile (memo key)
        ids: dict[Profile, int] = {}
        for name in sorted(fleet.clusters):
            cluster = fleet.clusters[name]
            profile = (
                tuple(sorted(cluster.metadata.labels.items())),
                tuple((t.key, t.value, t.effect) for t in cluster.spec.taints),
                tuple(p.class_name for p in cluster.spec.node_pools),
            )
            self.profiles[name] = profile
            self.profile_ids[name] = ids.setdefault(profile, len(ids))
        # profile id -> its clusters, in name order
        self.members: dict[int, list[str]] = {}
        for name, pid in self.profile_ids.items():
            self.members.setdefault(pid, []).append(name)
        self._selected: dict[tuple[str, int], bool] = {}
        self._blocked: dict[tuple[str, int, tuple[str, ...]], str | None] = {}
        self._pools: dict[tuple[str, int], RolePools | str] = {}
        self._by_classes: dict[tuple[str, tuple[str, ...]], RolePools | str] = {}
        self._open: dict[tuple[str, int], RolePools | None] = {}

    def open_for_new(self, dep_key: str, dep: ModelDeployment, cluster: str) -> RolePools | None:
        """Each role's pools if the cluster is open to new replicas of the deployment
        (selector, cache, NoSchedule and NoExecute taints, a matching pool per role)."""
        memo = (dep_key, self.profile_ids[cluster])
        if memo not in self._open:
            pools = None
            if (
                self.selected(dep_key, dep, cluster)
                and self.blocked(dep_key, dep, cluster, BLOCKS_NEW) is None
            ):
                found = self.role_pools(dep_key, dep, cluster)
                pools = found if isinstance(found, RolePools) else None
            self._open[memo] = pools
        return self._open[memo]

    def selected(self, dep_key: str, dep: ModelDeployment, cluster: str) -> bool:
        """The cluster matches the deployment's clusterSelector."""
        memo = (dep_key, self.profile_ids[cluster])
        hit = self._selected.get(memo)
        if hit is None:
            labels = self.fleet.clusters[cluster].metadata.labels
            hit = self._selected[memo] = dep.spec.cluster_selector.matches(labels)
        return hit

    def blocked(
        self, dep_key: str, dep: ModelDeployment, cluster: str, effects: Sequence[str]
    ) -> str | None:
        """Why the cluster is closed to the deployment (cache, then taints with `effects`),
        as a reason without the `<cluster>: ` prefix, or None."""
        memo = (dep_key, self.profile_ids[cluster], tuple(effects))
        if memo not in self._blocked:
            self._blocked[memo] = self._why_blocked(dep, cluster, effects)
        return self._blocked[memo]

    def _why_blocked(
        self, dep: ModelDeployment, cluster: str, effects: Sequence[str]
    ) -> str | None:
        spec = self.fleet.clusters[cluster]
        ref = dep.spec.model_cache_ref
        if ref is not None:
            cache_key = f"{dep.metadata.namespace}/{ref.name}"
            cache = self.fleet.caches.get(cache_key)
            if cache is None or not cache.spec.cluster_selector.matches(spec.metadata.labels):
                return reasons.not_covered(cache_key)
        bad = untolerated(spec.spec.taints, dep.spec.tolerations, effects)
        return reasons.taints_not_tolerated(bad) if bad else None

    def role_pools(self, dep_key: str, dep: ModelDeployment, cluster: str) -> RolePools | str:
        """The pools each role fits when empty, or why some role has none (no prefix)."""
        memo = (dep_key, self.profile_ids[cluster])
        hit = self._pools.get(memo)
        if hit is None:
            # Profiles that differ only in labels or taints have the same pools.
            classes = self.profiles[cluster][2]
            hit = self._by_classes.get((dep_key, classes))
            if hit is None:
                hit = self._by_classes[(dep_key, classes)] = self._resolve(dep_key, dep, classes)
            self._pools[memo] = hit
        return hit

    def _resolve(
        self, dep_key: str, dep: ModelDeployment, classes: tuple[str, ...]
    ) -> RolePools | str:
        roles = []
        for role_name, role in dep.spec.roles.items():
            fits = [self.matcher.fit(dep_key, role_name, role, c) for c in classes]
            matching = tuple((pos, f.demand) for pos, f in enumerate(fits) if f.demand)
            if not matching:
                oversized = next((f.oversized for f in fits if f.oversized), None)
                if oversized is not None:
                    return reasons.no_pool_offers(role_name, oversized)
                unmatched = {f.unmatched for f in fits if f.unmatched}
                names = [r.name for r in role.node_selector.devices] if role.node_selector else []
                ordered = [n for n in names if n in unmatched] or sorted(unmatched)
                return reasons.no_pool_matches(role_name, ordered)
            roles.append((role_name, matching))
        return RolePools.of(tuple(roles))
