"""`--optimize`: place new replicas with a mixed-integer program (HiGHS), see scheduling.md.

The model, after retain and scale down (kept replicas are constants):

- one integer variable per (deployment, cluster, pool per role): new replicas there;
- per deployment, at most the replicas still missing;
- per pool and per resource, the total its nodes offer and, per pod size s, at
  most floor(node / s) pods of size >= s per node (`PoolResources`; devices
  today, further per-node resources such as CPU and memory slot in as more
  entries);
- objective: devices placed, each priority level weighted above everything
  below it, plus a spread bonus worth less than one device in total.

HiGHS runs single-threaded with a fixed seed on a model built in a fixed
order, so a solve that closes gives the same answer every time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

import highspy

from modelplane.api.model_deployment import ModelDeployment
from modelplane.scheduler.capacity import Item, Pool
from modelplane.scheduler.matching import PodDemand
from modelplane.scheduler.placement import Placement, lowest_free, replica_gpus
from modelplane.scheduler.result import OptimizeReport

SEED = 0
# Above this many (deployment, cluster) pairs the spread bonus is left out: its binaries
# would dwarf the placement model.
SPREAD_PAIRS_LIMIT = 20_000


@dataclass
class Option:
    """New replicas of one deployment on one cluster, one pool per role."""

    deployment: str
    cluster: str
    pools: tuple[tuple[str, int, PodDemand], ...]  # (role, pool position, demand)
    column: int = -1


@dataclass
class PoolRows:
    """The terms of one pool's capacity rows: per resource, (column, amount) pairs."""

    pool: Pool
    terms: dict[tuple[str, int], list[tuple[int, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )


def pod_resources(demand: PodDemand) -> dict[str, int]:
    """What one pod consumes of a node, per resource. Extend here (cpu, memory)."""
    return {"devices": demand.least_consumed // max(1, demand.pods)}


def node_resources(pool: Pool) -> dict[str, int]:
    """What one node of the pool offers, per resource."""
    return {"devices": pool.shape.consumed_per_node}


def optimize(run: Placement, time_limit: float) -> OptimizeReport:
    """Fill `run` (after retain and scale_down) by the MILP, realise the solution through
    the canonical packing, top up greedily, and report on the solve."""
    order = run.fill_order()
    missing = {k: d.spec.replicas - len(run.placed[k]) for k, d in order}
    options = list(_options(run, order, missing))
    kept_gpus = _placed_gpus(run)

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", SEED)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)
    # GPUs are whole units and the spread bonus is worth at most 0.5 of one, so stopping
    # within 0.25 of the bound never gives up a GPU.
    h.setOptionValue("mip_abs_gap", 0.25)
    inf = highspy.kHighsInf

    weights = _priority_weights(run, order, missing)
    gpus = {k: replica_gpus(d) for k, d in order}
    by_dep: dict[str, list[int]] = defaultdict(list)
    pools: dict[tuple[str, int], PoolRows] = {}
    for col, opt in enumerate(options):
        opt.column = col
        cost = float(weights[opt.deployment] * gpus[opt.deployment])
        h.addVar(0.0, float(missing[opt.deployment]))
        h.changeColCost(col, cost)
        h.changeColIntegrality(col, highspy.HighsVarType.kInteger)
        by_dep[opt.deployment].append(col)
        for _, pos, demand in opt.pools:
            pool = run.cluster_pools[opt.cluster][pos]
            rows = pools.setdefault((opt.cluster, pos), PoolRows(pool))
            for resource, amount in pod_resources(demand).items():
                rows.terms[(resource, 0)].append((col, float(amount * demand.pods)))
                if amount > 0:
                    rows.terms[(resource, amount)].append((col, float(demand.pods)))
    for dep_key in sorted(by_dep):
        cols = by_dep[dep_key]
        h.addRow(0.0, float(missing[dep_key]), len(cols), cols, [1.0] * len(cols))
    for key in sorted(pools):
        _capacity_rows(h, pools[key], inf)
    if len(options) and _spread_pairs(options) <= SPREAD_PAIRS_LIMIT:
        _spread_bonus(h, options, len(options), min(weights.values()) if weights else 1)
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)

    status = "no new replicas"
    seconds = 0.0
    objective = kept_gpus
    optimal = True
    if options:
        h.run()
        model_status = h.getModelStatus()
        status = h.modelStatusToString(model_status)
        seconds = float(h.getRunTime())
        optimal = model_status == highspy.HighsModelStatus.kOptimal
        info = h.getInfo()
        if info.primal_solution_status == 2:  # kSolutionStatusFeasible
            values = h.getSolution().col_value
            counts = [round(values[opt.column]) for opt in options]
            objective += sum(gpus[o.deployment] * n for o, n in zip(options, counts, strict=True))
            _realise(run, order, options, counts)
    run.fill()  # tops up whatever the solution or its packing left missing; explains
    return OptimizeReport(optimal, status, seconds, objective, _placed_gpus(run))


def _placed_gpus(run: Placement) -> int:
    return sum(replica_gpus(run.deployments[k]) * len(p) for k, p in run.placed.items())


def _priority_weights(
    run: Placement, order: list[tuple[str, ModelDeployment]], missing: dict[str, int]
) -> dict[str, int]:
    """Per deployment, its priority level's weight: above the devices of all lower levels."""
    levels = sorted({d.spec.priority for _, d in order})
    demand: dict[int, int] = defaultdict(int)
    for key, dep in order:
        demand[dep.spec.priority] += max(0, missing[key]) * replica_gpus(dep)
    weight: dict[int, int] = {}
    below = 0  # the most all lower levels can be worth
    for level in levels:
        weight[level] = below + 1
        below += weight[level] * demand[level]
    return {k: weight[d.spec.priority] for k, d in order}


def _options(
    run: Placement, order: list[tuple[str, ModelDeployment]], missing: dict[str, int]
) -> Iterator[Option]:
    for dep_key, dep in sorted(order, key=lambda kv: kv[0]):
        if missing[dep_key] <= 0:
            continue
        for cluster, role_pools in run._open_clusters(dep_key, dep).items():
            pools = run.cluster_pools[cluster]
            per_role = [
                # the pods of one worker are on distinct nodes
                [
                    (role, pos, demand)
                    for pos, demand in matching
                    if demand.pods_per_worker <= pools[pos].nodes
                ]
                for role, matching in role_pools.roles
            ]
            for combo in product(*per_role):
                yield Option(dep_key, cluster, tuple(combo))


def _capacity_rows(h: highspy.Highs, rows: PoolRows, inf: float) -> None:
    """Per resource: the pool's total, and per pod size s at most floor(node / s) pods of
    size >= s per node (kept pods count too)."""
    pool = rows.pool
    node = node_resources(pool)
    kept: dict[str, list[tuple[int, int]]] = defaultdict(list)  # resource -> (size, pods)
    for item in pool.layout.items:
        for resource, amount in pod_resources(item.demand).items():
            kept[resource].append((amount, item.demand.pods))
    sizes: dict[str, list[int]] = defaultdict(list)
    for resource, size in rows.terms:
        sizes[resource].append(size)
    for resource in sorted(sizes):
        per_node = node.get(resource, 0)
        for size in sorted(sizes[resource]):
            terms = rows.terms[(resource, size)]
            if size == 0:
                used = sum(a * p for a, p in kept[resource])
                bound = per_node * pool.nodes - used
            else:
                used = sum(p for a, p in kept[resource] if a >= size)
                bound = (per_node // size) * pool.nodes - used
            # Columns of the larger sizes count against the smaller sizes' rows too.
            cols: dict[int, float] = defaultdict(float)
            if size == 0:
                for col, value in terms:
                    cols[col] += value
            else:
                for (res, other), other_terms in rows.terms.items():
                    if res == resource and other >= size:
                        for col, value in other_terms:
                            cols[col] += value
            idx = sorted(cols)
            h.addRow(-inf, float(max(0, bound)), len(idx), idx, [cols[c] for c in idx])


def _spread_pairs(options: list[Option]) -> int:
    return len({(o.deployment, o.cluster) for o in options})


def _spread_bonus(h: highspy.Highs, options: list[Option], first: int, unit: int) -> None:
    """A binary per (deployment, cluster), at most the replicas placed there, each worth
    at most half a lowest-priority device in all: spread, never at a device's cost."""
    pairs: dict[tuple[str, int], list[int]] = defaultdict(list)
    names: dict[str, int] = {}
    for opt in options:
        names.setdefault(opt.cluster, len(names))
        pairs[(opt.deployment, names[opt.cluster])].append(opt.column)
    bonus = 0.5 * unit / (len(pairs) + 1)
    col = first
    for key in sorted(pairs):
        h.addVar(0.0, 1.0)
        h.changeColCost(col, bonus)
        h.changeColIntegrality(col, highspy.HighsVarType.kInteger)
        idx = [col, *pairs[key]]
        h.addRow(-highspy.kHighsInf, 0.0, len(idx), idx, [1.0] + [-1.0] * len(pairs[key]))
        col += 1


def _realise(
    run: Placement,
    order: list[tuple[str, ModelDeployment]],
    options: list[Option],
    counts: list[int],
) -> None:
    """Seat the solution through the canonical packing, in fill order."""
    chosen: dict[str, list[tuple[Option, int]]] = defaultdict(list)
    for opt, n in zip(options, counts, strict=True):
        if n > 0:
            chosen[opt.deployment].append((opt, n))
    for dep_key, dep in order:
        taken: dict[str, set[int]] = {}
        for cluster, index in [*run.placed[dep_key], *run.draining[dep_key]]:
            taken.setdefault(cluster, set()).add(index)
        for opt, n in sorted(chosen.get(dep_key, []), key=lambda o: (o[0].cluster, o[0].column)):
            for _ in range(n):
                if not _seat(run, dep_key, dep, opt, taken):
                    break


def _seat(
    run: Placement, dep_key: str, dep: ModelDeployment, opt: Option, taken: dict[str, set[int]]
) -> bool:
    index = lowest_free(taken.setdefault(opt.cluster, set()))
    pools = run.cluster_pools[opt.cluster]
    layouts = {}
    plan = []
    for position, (role, pos, demand) in enumerate(opt.pools):
        pool = pools[pos]
        layout = layouts.get(pos, pool.layout)
        item = Item.make(dep.spec.priority, dep_key, index, role, position, demand)
        trial = pool.with_item(layout, item)
        if trial is None:
            return False
        layouts[pos] = trial
        plan.append((role, pool, trial))
    final = [(role, pool, layouts[pool.position]) for role, pool, _ in plan]
    run._commit(dep_key, opt.cluster, index, final, taken)
    return True
