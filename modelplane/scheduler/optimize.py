"""`--optimize`: place new replicas with a mixed-integer program (HiGHS), see scheduling.md.

The model, after retain and scale down (kept replicas are constants):

- one integer variable per (deployment, cluster, pool per role): new replicas there;
- per deployment, at most the replicas still missing;
- per pool whose pods are all single-node: per resource, the total its nodes offer
  and, per pod size s, at most floor(node / s) pods of size >= s per node
  (`pod_resources`: devices, and cpu and memory where the class has an
  allocatable);
- per pool that hosts multi-node workers (whose pods need distinct nodes): pods per
  node, kept pods included, each node within what it offers, and no node with more
  pods of one role than that role has workers (so every worker's pods can be on
  distinct nodes); node loads in non-increasing order (the nodes are alike);
- objective: devices placed, each priority level weighted above everything
  below it, plus a spread bonus and (deployments with `placementPolicy: Cheapest`)
  a cost penalty, together worth less than one device.

The model is built as arrays and handed to HiGHS in bulk. HiGHS runs single-threaded
with a fixed seed on a model built in a fixed order, so a solve that closes gives the
same answer every time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

import highspy
import numpy as np

from modelplane.api.model_deployment import ModelDeployment
from modelplane.scheduler.capacity import Item, Pool
from modelplane.scheduler.matching import PodDemand
from modelplane.scheduler.placement import Placement, cheapest_first, lowest_free, replica_gpus
from modelplane.scheduler.result import OptimizeReport

SEED = 0
MIB = 1024 * 1024
# Above this many (deployment, cluster) pairs the spread bonus is left out: its binaries
# would dwarf the placement model.
SPREAD_PAIRS_LIMIT = 20_000
# Pools with more nodes than this keep the per-pool bound even with multi-node workers.
NODE_ROWS_LIMIT = 64
INF = highspy.kHighsInf


@dataclass
class Option:
    """New replicas of one deployment on one cluster, one pool per role."""

    deployment: str
    cluster: str
    pools: tuple[tuple[str, int, PodDemand], ...]  # (role, pool position, demand)
    column: int = -1


@dataclass
class PoolTerms:
    """What may land on one pool: per new option's role, (column, demand)."""

    pool: Pool
    terms: list[tuple[int, PodDemand]] = field(default_factory=list)


class Model:
    """Columns and rows collected in order, passed to HiGHS in bulk."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.cost: list[float] = []
        self.rows_lower: list[float] = []
        self.rows_upper: list[float] = []
        self.starts: list[int] = []
        self.index: list[int] = []
        self.value: list[float] = []

    def col(self, upper: float, cost: float = 0.0, lower: float = 0.0) -> int:
        self.lower.append(lower)
        self.upper.append(upper)
        self.cost.append(cost)
        return len(self.cost) - 1

    def row(self, lower: float, upper: float, terms: dict[int, float]) -> None:
        if not terms:
            return
        self.rows_lower.append(lower)
        self.rows_upper.append(upper)
        self.starts.append(len(self.index))
        for col in sorted(terms):
            self.index.append(col)
            self.value.append(terms[col])

    def into(self, h: highspy.Highs) -> None:
        n = len(self.cost)
        h.addCols(
            n,
            np.array(self.cost, dtype=np.float64),
            np.array(self.lower, dtype=np.float64),
            np.array(self.upper, dtype=np.float64),
            0,
            np.zeros(n, dtype=np.int32),
            np.zeros(0, dtype=np.int32),
            np.zeros(0, dtype=np.float64),
        )
        h.changeColsIntegrality(
            n, np.arange(n, dtype=np.int32), np.ones(n, dtype=np.uint8)
        )  # every column is an integer
        h.addRows(
            len(self.rows_lower),
            np.array(self.rows_lower, dtype=np.float64),
            np.array(self.rows_upper, dtype=np.float64),
            len(self.index),
            np.array(self.starts, dtype=np.int32),
            np.array(self.index, dtype=np.int32),
            np.array(self.value, dtype=np.float64),
        )


def pod_resources(demand: PodDemand) -> dict[str, int]:
    """What one pod consumes of a node, per resource (memory in MiB, rounded up)."""
    out = {"devices": demand.least_consumed // max(1, demand.pods)}
    if demand.resources:
        cpu, memory = demand.resources
        out["cpu"] = cpu
        out["memory"] = -(-memory // MIB)
    return out


def node_resources(pool: Pool) -> dict[str, int]:
    """What one node of the pool offers, per resource (memory in MiB, rounded down)."""
    out = {"devices": pool.shape.consumed_per_node}
    if pool.shape.resources:
        cpu, memory = pool.shape.resources
        out["cpu"] = cpu
        out["memory"] = memory // MIB
    return out


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

    weights = _priority_weights(run, order, missing)
    gpus = {k: replica_gpus(d) for k, d in order}
    unit = min(weights.values()) if weights else 1
    penalties = _cost_penalties(run, options, missing, unit)
    if penalties:
        # The cost penalty ranks options within a device, so the solve must close.
        h.setOptionValue("mip_abs_gap", 0.0)
    model = Model()
    by_dep: dict[str, list[int]] = defaultdict(list)
    pools: dict[tuple[str, int], PoolTerms] = {}
    for number, opt in enumerate(options):
        worth = float(weights[opt.deployment] * gpus[opt.deployment])
        worth -= penalties.get(number, 0.0)
        opt.column = model.col(float(missing[opt.deployment]), worth)
        by_dep[opt.deployment].append(opt.column)
        for _, pos, demand in opt.pools:
            pool = run.cluster_pools[opt.cluster][pos]
            pools.setdefault((opt.cluster, pos), PoolTerms(pool)).terms.append((opt.column, demand))
    for dep_key in sorted(by_dep):
        model.row(-INF, float(missing[dep_key]), dict.fromkeys(by_dep[dep_key], 1.0))
    for key in sorted(pools):
        terms = pools[key]
        gangs = any(d.pods_per_worker > 1 for _, d in terms.terms) or any(
            i.demand.pods_per_worker > 1 for i in terms.pool.layout.items
        )
        if gangs and terms.pool.nodes <= NODE_ROWS_LIMIT:
            _node_rows(model, terms)
        else:
            _capacity_rows(model, terms)
    spread = [o for o in options if not cheapest_first(run.deployments[o.deployment])]
    if spread and _spread_pairs(spread) <= SPREAD_PAIRS_LIMIT:
        _spread_bonus(model, spread, unit * (0.5 if penalties else 1.0))
    status = "no new replicas"
    seconds = 0.0
    objective = kept_gpus
    optimal = True
    if options:
        model.into(h)
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
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
        for cluster, role_pools in run.open_clusters(dep_key, dep).items():
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


def _capacity_rows(model: Model, terms: PoolTerms) -> None:
    """Per resource: the pool's total, and per pod size s at most floor(node / s) pods of
    size >= s per node (kept pods count too)."""
    pool = terms.pool
    node = node_resources(pool)
    kept: dict[str, list[tuple[int, int]]] = defaultdict(list)  # resource -> (size, pods)
    for item in pool.layout.items:
        for resource, amount in pod_resources(item.demand).items():
            kept[resource].append((amount, item.demand.pods))
    new: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # (column, size, pods)
    for col, demand in terms.terms:
        for resource, amount in pod_resources(demand).items():
            new[resource].append((col, amount, demand.pods))
    for resource in sorted(new):
        per_node = node.get(resource, 0)
        total: dict[int, float] = defaultdict(float)
        for col, amount, pods in new[resource]:
            total[col] += amount * pods
        used = sum(a * p for a, p in kept[resource])
        model.row(-INF, float(max(0, per_node * pool.nodes - used)), total)
        for size in sorted({a for _, a, _ in new[resource] if a > 0}):
            at_least: dict[int, float] = defaultdict(float)
            for col, amount, pods in new[resource]:
                if amount >= size:
                    at_least[col] += pods
            used = sum(p for a, p in kept[resource] if a >= size)
            model.row(-INF, float(max(0, (per_node // size) * pool.nodes - used)), at_least)


def _node_rows(model: Model, terms: PoolTerms) -> None:
    """Pods per node for every role that may land on the pool (new and kept): each
    role's pods are spread over the nodes, no node holds more pods of one role than it
    has workers when those span nodes, every node within what it offers, node loads
    non-increasing."""
    pool = terms.pool
    node = node_resources(pool)
    nodes = range(pool.nodes)
    load: list[dict[str, dict[int, float]]] = [defaultdict(dict) for _ in nodes]
    roles: list[tuple[int | None, PodDemand]] = [(col, d) for col, d in terms.terms]
    roles += [(None, i.demand) for i in pool.layout.items]
    for col, demand in roles:
        y = [model.col(float(demand.pods) if col is None else INF) for _ in nodes]
        spread = {c: 1.0 for c in y}
        if col is None:  # a kept role: its pods are on the pool, somewhere
            model.row(float(demand.pods), float(demand.pods), spread)
        else:
            spread[col] = -float(demand.pods)
            model.row(0.0, 0.0, spread)
        if demand.pods_per_worker > 1:
            for c in y:
                if col is None:
                    model.row(-INF, float(demand.workers), {c: 1.0})
                else:
                    model.row(-INF, 0.0, {c: 1.0, col: -float(demand.workers)})
        for j, c in enumerate(y):
            for resource, amount in pod_resources(demand).items():
                if amount:
                    load[j][resource][c] = float(amount)
    for resource in sorted(node):
        for j in nodes:
            model.row(-INF, float(node[resource]), load[j][resource])
        if resource == "devices":
            for j in list(nodes)[1:]:
                order = dict(load[j - 1][resource])
                for c, v in load[j][resource].items():
                    order[c] = order.get(c, 0.0) - v
                model.row(0.0, INF, order)


def _cost_penalties(
    run: Placement, options: list[Option], missing: dict[str, int], unit: int
) -> dict[int, float]:
    """Per option of a Cheapest deployment (by its position), what one replica there
    gives up for its price per hour: in proportion to the price, at most 0.4 of a
    lowest-priority device over every missing replica of such deployments (a pool without
    a price counts twice the dearest priced one)."""
    cheap = [(n, o) for n, o in enumerate(options) if cheapest_first(run.deployments[o.deployment])]
    if not cheap:
        return {}
    costs = {
        n: run.prices.replica(
            (run.cluster_pools[o.cluster][pos], demand) for _, pos, demand in o.pools
        )
        for n, o in cheap
    }
    finite = [c for c in costs.values() if not math.isinf(c)]
    dearest = 2 * max(finite) if finite and max(finite) > 0 else 1.0
    replicas = sum(missing[d] for d in {o.deployment for _, o in cheap})
    scale = 0.4 * unit / (dearest * max(1, replicas))
    return {n: scale * (dearest if math.isinf(c) else c) for n, c in costs.items()}


def _spread_pairs(options: list[Option]) -> int:
    return len({(o.deployment, o.cluster) for o in options})


def _spread_bonus(model: Model, options: list[Option], unit: float) -> None:
    """A binary per (deployment, cluster), at most the replicas placed there, each worth
    at most half a lowest-priority device (`unit`) in all: spread, never at a device's
    cost."""
    pairs: dict[tuple[str, int], list[int]] = defaultdict(list)
    names: dict[str, int] = {}
    for opt in options:
        names.setdefault(opt.cluster, len(names))
        pairs[(opt.deployment, names[opt.cluster])].append(opt.column)
    bonus = 0.5 * unit / (len(pairs) + 1)
    for key in sorted(pairs):
        col = model.col(1.0, bonus)
        terms = dict.fromkeys(pairs[key], -1.0)
        terms[col] = 1.0
        model.row(-INF, 0.0, terms)


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
    run.commit(dep_key, opt.cluster, index, final, taken)
    return True
