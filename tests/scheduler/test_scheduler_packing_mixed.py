"""The packing worst case of issue 23: TP4xPP2 workers (two 4-GPU pods on distinct nodes)
with TP1 and TP8 replicas over a pool of 4-GPU nodes and a pool of 8-GPU nodes.

Each case is a fleet of bench/packing_quality.py's mixed sample that the default fill
placed below the optimum (the `--optimize` objective) before this change (main), or with
only the first of the two rules below (the last column);
scheduling.md, steps 5 (an 8-GPU pod before a 4+4-GPU worker of the same size) and 6
(second thoughts also take out what was placed after the replica on its cluster); the last
two cases needed the second fill of small fleets (step 5, "A second fill"), `before` being
the fill without it."""

from __future__ import annotations

import pytest

from modelplane.scheduler import schedule
from modelplane.scheduler.placement import replica_gpus
from tests.factories import cluster, deployment, fleet, inference_class, pool

SHAPES = {"pp": (4, 2), "tp1": (1, 1), "tp8": (8, 1)}

CASES = [
    # id, clusters {name: (4-GPU nodes, 8-GPU nodes)}, deployments [(name, shape, replicas)],
    # replicas placed per deployment, GPUs placed (= optimum), GPUs before (main or the
    # pod-size order alone)
    ("one-cluster", {"c0": (1, 2)}, [("m0", "pp", 1), ("m1", "tp1", 5), ("m2", "tp8", 3),
     ("m3", "tp8", 3)], {"m0": 0, "m1": 4, "m2": 2, "m3": 0}, 20, 13),
    ("spread-blocks-pp2", {"c0": (3, 1), "c1": (4, 2)}, [("m0", "pp", 5), ("m1", "tp1", 3),
     ("m2", "tp8", 2)], {"m0": 5, "m1": 3, "m2": 1}, 51, 43),
    ("tp8-on-both", {"c0": (1, 2), "c1": (2, 2)}, [("m0", "pp", 6), ("m1", "tp1", 2),
     ("m2", "tp8", 3)], {"m0": 3, "m1": 2, "m2": 2}, 42, 34),
    ("three-shapes", {"c0": (3, 2), "c1": (2, 3)}, [("m0", "pp", 4), ("m1", "tp1", 3),
     ("m2", "tp8", 4)], {"m0": 4, "m1": 3, "m2": 3}, 59, 51),
    ("three-clusters", {"c0": (2, 1), "c1": (2, 2), "c2": (1, 2)}, [("m0", "pp", 5),
     ("m1", "tp1", 2), ("m2", "tp8", 5), ("m3", "tp8", 2)],
     {"m0": 2, "m1": 2, "m2": 5, "m3": 0}, 58, 50),
    # the second fill (step 5): seed 13 fleet 87 (TP8 on the 8-GPU pool PP2 workers need,
    # where a 1-node 8-GPU pool elsewhere costs them nothing) and fleet 86 (TP8 spread over
    # both 8-GPU pools; PP2 workers first take one cluster's whole 8-GPU pool)
    ("tp8-where-workers-lose-equal", {"c0": (3, 2), "c1": (1, 3), "c2": (3, 1)},
     [("m0", "pp", 7), ("m1", "tp1", 9), ("m2", "tp8", 1), ("m3", "pp", 1)],
     {"m0": 7, "m1": 9, "m2": 1, "m3": 0}, 73, 65),
    ("workers-first-pack-tp8", {"c0": (1, 3), "c1": (4, 3)}, [("m0", "pp", 5),
     ("m1", "tp1", 3), ("m2", "tp8", 3), ("m3", "tp1", 2)],
     {"m0": 5, "m1": 3, "m2": 3, "m3": 1}, 68, 61),
]  # fmt: skip


@pytest.mark.parametrize(
    ("clusters", "deps", "placed", "gpus", "before"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_mixed_pp2_tp1_tp8_packing(clusters, deps, placed, gpus, before):
    f = fleet(
        [inference_class("g4", 4), inference_class("g8", 8)],
        [cluster(n, [pool("p4", "g4", a), pool("p8", "g8", b)]) for n, (a, b) in clusters.items()],
        [deployment(n, r, tensor=SHAPES[s][0], pipeline=SHAPES[s][1]) for n, s, r in deps],
    )
    result = schedule(f, None)
    got = {k.split("/")[1]: len(d.replicas) for k, d in result.lock.deployments.items()}
    assert got == placed
    total = sum(
        replica_gpus(f.deployments[k]) * len(d.replicas) for k, d in result.lock.deployments.items()
    )
    assert total == gpus > before
    opt = schedule(f, None, optimize=True)
    assert opt.optimize is not None and opt.optimize.objective_gpus == gpus
    assert schedule(f, result.lock) == result  # sticky: the written lock changes nothing
