"""Benchmark: GPUs placed by the default fill and by `--optimize`, against the solver optimum.

Run: .venv/bin/python bench/packing_quality.py [--fleets 200] [--seed 13] [--scale]

Each fleet is random (seeded) and capacity-short: classes of 1, 2, 4 or 8 GPUs per node,
2-6 clusters of 1-3 pools of 1-4 nodes, 2-6 deployments of 1-8 GPUs per replica (tensor
1, 2, 4 or 8, sometimes pipeline 2), some with a clusterSelector, all at one priority,
asking for more GPUs than the fleet has. Node and pod sizes divide each other and pools
that may host a multi-node worker are modelled per node, so the solver's model is exact
and its optimum is the true one.

Per fleet: GPUs placed by the default fill and by `--optimize`, relative to the optimum
(the solver's objective when it closes); both plans are re-planned with their own lock
and must not change (sticky). `--scale` also times both at 1k clusters / 10k replicas
(the fleet of bench/plan_scale.py).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from modelplane.api.fleet import FleetSpec  # noqa: E402
from modelplane.scheduler import schedule  # noqa: E402
from modelplane.scheduler.placement import replica_gpus  # noqa: E402
from tests.factories import cluster, deployment, fleet, inference_class, pool  # noqa: E402

SIZES = (1, 2, 4, 8)


def random_fleet(rng: random.Random) -> FleetSpec:
    classes = [inference_class(f"g{n}", n) for n in SIZES]
    clusters = []
    capacity = 0
    for c in range(rng.randint(2, 6)):
        pools = []
        for p in range(rng.randint(1, 3)):
            gpus, nodes = rng.choice(SIZES), rng.randint(1, 4)
            pools.append(pool(f"p{p}", f"g{gpus}", nodes))
            capacity += gpus * nodes
        clusters.append(cluster(f"c{c}", pools, labels={"zone": rng.choice("ab")}))
    specs = []  # [name, replicas, tensor, pipeline, selector]
    wanted = 0
    for d in range(rng.randint(2, 6)):
        tensor = rng.choice(SIZES)
        pipeline = 2 if rng.random() < 0.15 else 1
        selector = {"matchLabels": {"zone": rng.choice("ab")}} if rng.random() < 0.2 else None
        replicas = rng.randint(1, 6)
        specs.append([f"m{d}", replicas, tensor, pipeline, selector])
        wanted += replicas * tensor * pipeline
    if wanted <= capacity:  # capacity-short: the last one asks for more than is left
        last = specs[-1]
        last[1] += (capacity - wanted) // (last[2] * last[3]) + 2
    deps = [deployment(n, r, tensor=t, pipeline=p, selector=s) for n, r, t, p, s in specs]
    return fleet(classes, clusters, deps)


def mixed_fleet(rng: random.Random) -> FleetSpec:
    """The remaining worst case (issue 23): TP4xPP2 workers (two 4-GPU pods on distinct
    nodes) with TP1 and TP8 replicas, over a pool of 4-GPU nodes and a pool of 8-GPU
    nodes per cluster, capacity-short."""
    classes = [inference_class("g4", 4), inference_class("g8", 8)]
    clusters = []
    capacity = 0
    for c in range(rng.randint(1, 3)):
        n4, n8 = rng.randint(1, 4), rng.randint(1, 3)
        clusters.append(cluster(f"c{c}", [pool("p4", "g4", n4), pool("p8", "g8", n8)]))
        capacity += 4 * n4 + 8 * n8
    shapes = [(4, 2), (1, 1), (8, 1)]  # (tensor, pipeline)
    specs = []
    wanted = 0
    for d in range(rng.randint(3, 5)):
        tensor, pipeline = shapes[d % 3] if d < 3 else rng.choice(shapes)
        replicas = rng.randint(1, 6) if tensor > 1 else rng.randint(2, 12)
        specs.append([f"m{d}", replicas, tensor, pipeline])
        wanted += replicas * tensor * pipeline
    if wanted <= capacity:
        specs[0][1] += (capacity - wanted) // 8 + 1
    deps = [deployment(n, r, tensor=t, pipeline=p) for n, r, t, p in specs]
    return fleet(classes, clusters, deps)


FLEETS = {"random": random_fleet, "mixed": mixed_fleet}


def gpus(result) -> int:  # noqa: ANN001
    return sum(replica_gpus_of(result, k) for k in result.report)


_DEPS: dict[str, int] = {}


def replica_gpus_of(result, key: str) -> int:  # noqa: ANN001
    return _DEPS[key] * len(result.lock.deployments[key].replicas)


def quality(fleets: int, seed: int, time_limit: float, kind: str = "random") -> None:
    default_ratios, opt_ratios = [], []
    closed = 0
    not_sticky = 0
    default_optimal = 0
    worst: list[tuple[float, int]] = []
    t_default = t_opt = 0.0
    for i in range(fleets):
        rng = random.Random(seed * 100_003 + i)
        f = FLEETS[kind](rng)
        _DEPS.clear()
        _DEPS.update({k: replica_gpus(d) for k, d in f.deployments.items()})
        t0 = time.perf_counter()
        default = schedule(f, None)
        t_default += time.perf_counter() - t0
        t0 = time.perf_counter()
        opt = schedule(f, None, optimize=True, time_limit=time_limit)
        t_opt += time.perf_counter() - t0
        assert opt.optimize is not None
        if schedule(f, default.lock) != default or schedule(f, opt.lock) != opt:
            not_sticky += 1
        if schedule(f, opt.lock, optimize=True, time_limit=time_limit) != opt:
            not_sticky += 1
        if not opt.optimize.optimal:
            continue
        closed += 1
        best = opt.optimize.objective_gpus
        got_default, got_opt = gpus(default), gpus(opt)
        r_default = got_default / best if best else 1.0
        r_opt = got_opt / best if best else 1.0
        default_ratios.append(r_default)
        opt_ratios.append(r_opt)
        default_optimal += got_default >= best
        worst.append((r_default, i))
    print(
        f"fleets: {fleets} {kind} (seed {seed}), "
        f"solver closed {closed} within {time_limit:g} s each"
    )
    print(
        f"default:    mean {100 * statistics.mean(default_ratios):.2f} %, "
        f"worst {100 * min(default_ratios):.2f} % (fleet {min(worst)[1]}), "
        f"optimal in {default_optimal}/{closed}, {t_default:.2f} s total"
    )
    print(
        f"--optimize: mean {100 * statistics.mean(opt_ratios):.2f} %, "
        f"worst {100 * min(opt_ratios):.2f} %, {t_opt:.2f} s total"
    )
    print(f"re-plan with the written lock changed the plan: {not_sticky} times")
    low = sorted(worst)[:5]
    print("default's worst fleets: " + ", ".join(f"{i} ({100 * r:.1f} %)" for r, i in low))
    print(f"default below 90 %: {sum(r < 0.9 for r, _ in worst)} of {closed}")


def scale(time_limit: float) -> None:
    from bench.plan_scale import build_fleet

    f = build_fleet(1000, 500, 10_000)
    t0 = time.perf_counter()
    default = schedule(f, None)
    t_default = time.perf_counter() - t0
    t0 = time.perf_counter()
    opt = schedule(f, None, optimize=True, time_limit=time_limit)
    t_opt = time.perf_counter() - t0
    assert opt.optimize is not None
    deps = {k: replica_gpus(d) for k, d in f.deployments.items()}
    g_default = sum(deps[k] * len(d.replicas) for k, d in default.lock.deployments.items())
    g_opt = sum(deps[k] * len(d.replicas) for k, d in opt.lock.deployments.items())
    print("scale: 1000 clusters x 4 pools, 500 deployments, 10000 replicas wanted")
    print(f"default:    {t_default:.2f} s, {g_default} GPUs placed")
    print(
        f"--optimize: {t_opt:.2f} s wall (solver {opt.optimize.seconds:.2f} s, "
        f"{opt.optimize.status}, optimal={opt.optimize.optimal}), {g_opt} GPUs placed, "
        f"solver objective {opt.optimize.objective_gpus}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fleets", type=int, default=200)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--scale", action="store_true")
    parser.add_argument(
        "--fleets-kind",
        choices=sorted(FLEETS),
        default="random",
        help="random (the default sample) or mixed (TP4xPP2 + TP1 + TP8 over 4- and "
        "8-GPU pools, issue 23's worst case)",
    )
    args = parser.parse_args()
    quality(args.fleets, args.seed, args.time_limit, args.fleets_kind)
    if args.scale:
        scale(args.time_limit)


if __name__ == "__main__":
    main()
