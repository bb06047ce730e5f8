"""`plan`: load, validate, schedule against the previous lock, and report (pure)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelplane.api.cache_storage import CacheTooLarge, CacheVolume, efs_volume, filestore_volume
from modelplane.api.errors import FleetInvalid, SpecError
from modelplane.api.fleet import FleetSpec
from modelplane.api.loader import load_fleet, no_specs
from modelplane.api.network import CREATED, declared_ranges, fleet_paths
from modelplane.api.placement_lock import PlacementLock
from modelplane.lock import ADDRESS_FIELDS, default_lock_path, read_lock
from modelplane.network import plan_addresses
from modelplane.network.addresses import provisioned
from modelplane.rollout import Progress, lock_progress
from modelplane.scheduler import DEFAULT_TIME_LIMIT, RemovedReport, ScheduleResult, schedule
from modelplane.scheduler.cordon import cordoned_fleet
from modelplane.stacks import path_stack

if TYPE_CHECKING:
    from modelplane.scheduler.survive import SurviveReport


@dataclass
class PlanOutcome:
    fleet: FleetSpec
    previous: PlacementLock
    lock_path: Path
    result: ScheduleResult | None = None
    errors: list[SpecError] = field(default_factory=list)
    warnings: list[SpecError] = field(default_factory=list)
    survive: SurviveReport | None = None  # `what_if` with losses or a label
    explain: dict[str, dict[str, Any]] = field(default_factory=dict)  # `what_if` evidence

    @property
    def removed(self) -> dict[str, RemovedReport]:
        """Deployments the previous lock placed that the fleet no longer has: their stacks
        keep running until `up --prune` destroys them, and the scheduler charges what they
        hold (docs/scheduling.md, "Pools and capacity")."""
        return dict(self.result.removed) if self.result is not None else {}

    @property
    def shortfall(self) -> bool:
        return self.result is not None and any(r.unplaced for r in self.result.report.values())

    def as_json(self) -> dict[str, Any]:
        warnings = [w.as_dict() for w in self.warnings]
        if self.errors or self.result is None:
            return {
                "deployments": {},
                "errors": [e.as_dict() for e in self.errors],
                "warnings": warnings,
            }
        deployments = {key: rep.as_dict() for key, rep in self.result.report.items()}
        for key, progress in self.rollouts().items():
            if key in deployments:
                deployments[key]["rollout"] = {**progress.as_json(), "line": progress.line}
        out: dict[str, Any] = {"deployments": deployments, "errors": [], "warnings": warnings}
        if self.removed:
            out["removed"] = {key: r.as_dict() for key, r in self.removed.items()}
        if self.result.optimize is not None:
            out["optimize"] = self.result.optimize.as_dict()
        if self.survive is not None:
            out["survive"] = self.survive.as_dict()
        if self.explain:
            out["explain"] = self.explain
        addresses = self.addresses()
        if addresses:
            out["network"] = addresses
        paths = self.paths()
        if paths:
            out["paths"] = paths
        caches = self.caches()
        if caches:
            out["caches"] = {
                key: {
                    cluster: {
                        "storage": volume.storage,
                        "capacityGiB": volume.capacity_gib,
                        "readMiBps": volume.read_mibps,
                        "loadSeconds": round(
                            volume.load_seconds(self.fleet.caches[key].spec.size_gib)
                        ),
                    }
                    for cluster, volume in per_cluster.items()
                }
                for key, per_cluster in caches.items()
            }
        return out

    def addresses(self) -> dict[str, dict[str, Any]]:
        """Per cluster with known ranges: where they come from (`plan`: the fleet address
        plan's block, kept from before it, or declared) and the ranges, by field."""
        out: dict[str, dict[str, Any]] = {}
        network = self.result.lock.network if self.result is not None else None
        planned = network.clusters if network is not None else {}
        for name, cluster in self.fleet.clusters.items():
            entry = planned.get(name)
            if entry is not None and provisioned(cluster) is not None:
                ranges = entry.model_dump(exclude_none=True, exclude={"source"})
                ordered = {k: ranges[k] for k in ADDRESS_FIELDS if k in ranges}  # the lock's
                out[name] = {"from": "plan" if entry.block else "kept", **ordered}
                continue
            declared = declared_ranges(self.fleet, name, cluster)
            if declared:
                out[name] = {"from": "declared"}
                for r in declared:
                    out[name].setdefault(r.path.rsplit(".", 1)[-1].split("[")[0], []).append(
                        str(r.net)
                    )
        return out

    def paths(self) -> list[dict[str, Any]]:
        """How the front door reaches each other cluster (docs/api.md, "Paths"): the kind,
        in words, and the stack that builds it (None: the platform's, or no stack)."""
        return [
            {
                "from": p.door,
                "to": p.cluster,
                "kind": p.kind,
                "how": p.how,
                "stack": path_stack(p.door, p.cluster) if p.kind in CREATED else None,
            }
            for p in fleet_paths(self.fleet)
        ]

    def caches(self) -> dict[str, dict[str, CacheVolume]]:
        """Per ModelCache, per provisioned cluster it covers: its volume there and the read
        throughput a loading replica can expect (api.md "ModelCache"; plan shows the load
        time). Existing clusters' storage is the platform's: not estimated."""
        out: dict[str, dict[str, CacheVolume]] = {}
        for key, cache in self.fleet.caches.items():
            per_cluster = {}
            for name, cluster in self.fleet.clusters.items():
                source = cluster.spec.cluster.source
                if source == "Existing" or not cache.spec.cluster_selector.matches(
                    dict(cluster.metadata.labels)
                ):
                    continue
                spec = cache.spec
                try:
                    per_cluster[name] = (
                        filestore_volume(spec.size_gib, spec.throughput_mibps, spec.filestore.tier)
                        if source == "GKE"
                        else efs_volume(spec.size_gib)
                    )
                except CacheTooLarge:
                    continue  # a validation error already
            if per_cluster:
                out[key] = per_cluster
        return out

    def rollouts(self) -> dict[str, Progress]:
        """Deployments whose replicas the lock records at another revision than the spec's:
        where each rollout stands and which replicas change next (docs/api.md, rollout)."""
        if self.result is None:
            return {}
        labels = {n: c.metadata.labels for n, c in self.fleet.clusters.items()}
        out = {}
        for key, dep in self.fleet.deployments.items():
            progress = lock_progress(
                dep, self.result.lock.replicas_of(key), labels, self.fleet.caches
            )
            if progress is not None:
                out[key] = progress
        return out

    def what_if(
        self,
        *,
        losses: int | None = None,
        label: str | None = None,
        explain: list[str] | None = None,
    ) -> list[str]:
        """Check the plan against losing clusters (`losses` at a time, or each value of
        `label`) and gather the evidence for `explain` (deployment keys; `short`: every
        short deployment). Returns errors (unknown deployments), and does nothing then."""
        if self.result is None:
            return []
        keys: list[str] = []
        errors = []
        for key in explain or []:
            if key == "short":
                keys += [k for k, r in self.result.report.items() if r.unplaced]
            elif key in self.fleet.deployments:
                keys.append(key)
            else:
                errors.append(f"--explain {key}: no ModelDeployment {key} in the fleet")
        if label is not None and not any(
            label in c.metadata.labels for c in self.fleet.clusters.values()
        ):
            errors.append(f"--survive-label {label}: no InferenceCluster has the label {label}")
        if errors:
            return errors
        if losses is not None or label is not None:
            from modelplane.scheduler.survive import survive

            self.survive = survive(self.fleet, self.result, losses=losses, label=label)
        if explain is not None:
            from modelplane.scheduler.evidence import explain_plan

            self.explain = explain_plan(
                self.fleet, self.result, self.previous, sorted(dict.fromkeys(keys))
            )
        return []


def plan_fleet(
    fleet_dir: str | Path,
    lock_path: str | Path | None = None,
    *,
    optimize: bool = False,
    time_limit: float = DEFAULT_TIME_LIMIT,
    strict: bool = False,
    require_specs: bool = False,
    cordons: Collection[str] = (),
) -> PlanOutcome:
    """Validate and schedule (with `optimize`, by the MILP within `time_limit` seconds);
    errors (specs or lock) are collected, never raised. With `strict`, warnings are
    errors (and nothing is scheduled). With `require_specs` (`plan --write`), a fleet
    folder without a spec is an error. `cordons`: the clusters kept out of new placements
    (scheduling.md, "Cordons")."""
    fleet_dir = Path(fleet_dir)
    lock_file = Path(lock_path) if lock_path else default_lock_path(fleet_dir)
    loaded = load_fleet(fleet_dir)
    errors = list(loaded.errors)
    warnings = list(loaded.warnings)
    if strict:
        errors, warnings = errors + warnings, []
    if require_specs and not errors and loaded.fleet.empty:
        errors.append(no_specs(fleet_dir))
    previous = PlacementLock()
    try:
        previous = read_lock(lock_file)
    except FleetInvalid as exc:
        errors.extend(exc.errors)
    outcome = PlanOutcome(
        cordoned_fleet(loaded.fleet, cordons),
        previous,
        lock_file,
        errors=sorted(errors),
        warnings=warnings,
    )
    if not outcome.errors:
        outcome.errors = plan_addresses(outcome.fleet, previous, str(lock_file)).errors
    if not outcome.errors:
        outcome.result = schedule(outcome.fleet, previous, optimize=optimize, time_limit=time_limit)
    return outcome
