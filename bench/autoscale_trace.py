"""Benchmark: an autoscaled deployment against a fixed peak-sized one on the same load trace.

Run: .venv/bin/python bench/autoscale_trace.py [--interval 30] [--ready 60] [--json]
     .venv/bin/python bench/autoscale_trace.py --zero [--idle-window 600] [--price 2.5]
     .venv/bin/python bench/autoscale_trace.py --classes [--cheap-price 1.0] [--cheap-gpus 8]

The decision is modelplane's own (`modelplane.autoscale.decide`, the code `reconcile`
runs), fed by a queueing model of vLLM-like replicas: each replica has `--slots` request
slots and `--service` seconds per request, so at a load of L req/s the deployment keeps
L x service requests in flight (Little's law), spread evenly; a replica runs at most
`slots` of them and the rest wait (`queueDepth`). A replica the decision adds serves
`--ready` seconds later (placement, `up`, start-up), and joins the routes as reconcile
routes it: at the first round that sees it Ready, plus `--route` seconds (that round's
gateway `up`). One it removes stops at once (its drain is not counted as capacity).

The trace (one day, seconds): nights at 10% of peak, a morning ramp, a working day at
60-100%, an evening fall, and a 10x step at 03:00 (from the night level to the peak for
10 minutes). Reported: the reaction time to that step (step start -> enough serving
capacity again), GPU-minutes of the autoscaled deployment against a fixed deployment
sized for the peak, and the seconds in which demand exceeded serving capacity.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modelplane.api.autoscaling import Autoscaling  # noqa: E402
from modelplane.api.fleet import FleetSpec  # noqa: E402
from modelplane.api.inference_class import InferenceClass  # noqa: E402
from modelplane.api.inference_cluster import InferenceCluster  # noqa: E402
from modelplane.api.model_deployment import ModelDeployment  # noqa: E402
from modelplane.api.placement_lock import PlacementLock  # noqa: E402
from modelplane.autoscale import decide, idle_for  # noqa: E402
from modelplane.scheduler import schedule  # noqa: E402

DAY = 86400
STEP_AT, STEP_LEN = 3 * 3600 + 7, 600  # 7 s after a round: the step lands mid-interval


def trace(peak: float, t: float) -> float:
    """Requests per second at second t of the day."""
    hour = t / 3600
    if STEP_AT <= t < STEP_AT + STEP_LEN:
        return peak
    if hour < 7 or hour >= 22:
        return 0.1 * peak
    if hour < 9:
        return peak * (0.1 + 0.5 * (hour - 7) / 2)
    if hour < 18:
        return peak * (0.6 + 0.4 * math.sin(math.pi * (hour - 9) / 9))
    return peak * (0.6 - 0.5 * (hour - 18) / 4)


class Placer:
    """The replicas a count asks for, placed by modelplane's scheduler over two clusters:
    `cheap` (a class of `--cheap-gpus` GPUs on one node at `--cheap-price` per GPU-hour) and
    `dear` (`--price` per GPU-hour, room for any count), under `policy`. `rate` is what the
    placed replicas cost per hour (the scheduler's `costPerHour`); a replica it drains is
    gone at once, as in the rest of this model."""

    def __init__(self, args: argparse.Namespace, policy: str, low: int, start: int) -> None:
        def doc(kind: str, name: str, spec: dict[str, object]) -> dict[str, object]:
            meta = (
                {"name": name, "namespace": "ml"} if kind == "ModelDeployment" else {"name": name}
            )
            return {
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": kind,
                "metadata": meta,
                "spec": spec,
            }

        gpu = {"name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com"}
        classes = {
            name: InferenceClass.model_validate(
                doc(
                    "InferenceClass",
                    name,
                    {"devices": [{**gpu, "count": 8}], "pricePerNodeHour": 8 * price},
                )
            )
            for name, price in (("cheap", args.cheap_price), ("dear", args.price))
        }
        dear_nodes = math.ceil(1000 * args.gpus / 8)
        clusters = {
            name: InferenceCluster.model_validate(
                doc(
                    "InferenceCluster",
                    name,
                    {
                        "cluster": {"source": "Existing", "existing": {"renderTo": f"out/{name}"}},
                        "nodePools": [{"name": "p", "className": name, "nodeCount": nodes}],
                    },
                )
            )
            for name, nodes in (("cheap", max(1, args.cheap_gpus // 8)), ("dear", dear_nodes))
        }
        dep = ModelDeployment.model_validate(
            doc(
                "ModelDeployment",
                "m",
                {
                    "replicas": start,
                    "placementPolicy": policy,
                    "autoscaling": {
                        "minReplicas": low,
                        "maxReplicas": 1000,
                        "metrics": [{"type": "runningRequests", "target": 3}],
                    },
                    "workers": {
                        "topology": {"tensor": args.gpus},
                        "resources": {"cpu": "1", "memory": "1Gi"},
                        "template": {"spec": {"containers": [{"name": "engine", "image": "vllm"}]}},
                    },
                },
            )
        )
        self.fleet = FleetSpec(classes=classes, clusters=clusters, deployments={dep.key: dep})
        self.lock: PlacementLock | None = None
        self.rate = 0.0
        self.cheap = 0  # replicas on the cheap class now
        self.set(start)

    def set(self, count: int) -> None:
        previous = self.lock
        if previous is not None:
            entry = previous.deployments["ml/m"]
            entry = entry.model_copy(
                update={
                    "autoscaled_replicas": count,
                    "replicas": [r for r in entry.replicas if not r.draining],
                }
            )
            previous = previous.model_copy(update={"deployments": {"ml/m": entry}})
        result = schedule(self.fleet, previous)
        entry = result.lock.deployments["ml/m"]
        entry = entry.model_copy(update={"replicas": [r for r in entry.replicas if not r.draining]})
        self.lock = result.lock.model_copy(update={"deployments": {"ml/m": entry}})
        self.rate = schedule(self.fleet, self.lock).report["ml/m"].cost_per_hour or 0.0
        self.cheap = sum(1 for r in entry.replicas if r.cluster == "cheap")


def simulate(args: argparse.Namespace, placer: Placer | None = None) -> dict[str, object]:
    auto = Autoscaling.model_validate(
        {
            "minReplicas": 1,
            "maxReplicas": 1000,
            "metrics": [
                {"type": "runningRequests", "target": args.target},
                {"type": "queueDepth", "target": args.queue_target},
            ],
            "scaleUp": {"stabilizationWindow": 0, "maxStep": args.up_step},
            "scaleDown": {"stabilizationWindow": args.down_window, "maxStep": args.down_step},
        }
    )
    per_replica = args.slots / args.service  # req/s one replica serves
    fixed = math.ceil(args.peak / (per_replica * args.target / args.slots))
    count, history = 1, ()
    pending: list[tuple[float, int]] = []  # (ready at, replicas)
    routing: list[tuple[float, int]] = []  # seen Ready: (routed at, replicas)
    serving = 1
    gpu_seconds = 0.0
    cost = 0.0
    most_cheap = 0
    short_seconds = 0
    reaction = None
    t = 0.0
    next_round = 0.0
    while t < DAY:
        load = trace(args.peak, t)
        # replicas whose route is applied begin to serve
        serving += sum(n for at, n in routing if at <= t)
        routing = [(at, n) for at, n in routing if at > t]
        if t >= next_round:
            # the round sees the replicas whose start-up is over: its gateway `up` routes them
            routing += [(t + args.route, n) for at, n in pending if at <= t]
            pending = [(at, n) for at, n in pending if at > t]
            in_flight = load * args.service
            names = [f"r{i}" for i in range(serving)]
            each = in_flight / max(1, serving)
            running = min(args.slots, each)
            values = {n: {"runningRequests": running, "queueDepth": each - running} for n in names}
            d = decide(auto, count, names, values, history, t)
            history = d.history
            if d.desired > count:
                pending.append((t + args.ready, d.desired - count))
            elif d.desired < count:
                drop = count - d.desired
                cut = min(drop, serving)
                serving -= cut
                drop -= cut
                for waiting in (pending, routing):  # not serving yet: cancelled
                    while drop and waiting:
                        at, n = waiting.pop()
                        take = min(n, drop)
                        drop -= take
                        if n > take:
                            waiting.append((at, n - take))
            if placer is not None and d.desired != count:
                placer.set(d.desired)
                most_cheap = max(most_cheap, placer.cheap)
            count = d.desired
            next_round += args.interval
        if placer is not None:
            cost += placer.rate / 3600
        capacity = serving * per_replica
        if load > capacity + 1e-9:
            short_seconds += 1
        if reaction is None and t >= STEP_AT and load <= capacity + 1e-9:
            reaction = t - STEP_AT
        gpu_seconds += (serving + sum(n for _, n in [*pending, *routing])) * args.gpus
        t += 1.0
    auto_gpu_min = gpu_seconds / 60
    fixed_gpu_min = fixed * args.gpus * DAY / 60
    if placer is not None:
        return {
            "gpuHours": round(gpu_seconds / 3600, 1),
            "cost": round(cost, 2),
            "mostOnCheap": most_cheap,
            "fixedReplicas": fixed,
        }
    return {
        "interval": args.interval,
        "readyDelay": args.ready,
        "routeDelay": args.route,
        "scaleDownWindow": args.down_window,
        "fixedReplicas": fixed,
        "reactionSeconds": reaction,
        "autoscaledGpuMinutes": round(auto_gpu_min),
        "fixedGpuMinutes": round(fixed_gpu_min),
        "saved": round(1 - auto_gpu_min / fixed_gpu_min, 3),
        "secondsShortOfCapacity": short_seconds,
    }


def sparse_trace(peak: float, t: float) -> float:
    """A model a team calls in bursts: 20 minutes at `peak` at 09:30, 11:00, 14:00 and 16:30,
    nothing else (evenings, nights and between bursts)."""
    for start in (9.5, 11.0, 14.0, 16.5):
        if start * 3600 <= t < start * 3600 + 1200:
            return peak
    return 0.0


def simulate_zero(args: argparse.Namespace, policy: str | None = None) -> dict[str, object]:
    """The sparse trace three ways: a fixed deployment sized for the peak, autoscaled from
    1, and autoscaled from 0 (`idleWindow`; a request at zero is held while a replica is
    placed and loads). Uses modelplane's own rules (`decide`, `idle_for`)."""
    per_replica = args.slots / args.service
    fixed = math.ceil(args.zero_peak / (per_replica * args.target / args.slots))
    out: dict[str, object] = {"fixedReplicas": fixed, "idleWindow": args.idle_window}
    for low in (1, 0):
        auto = Autoscaling.model_validate(
            {
                "minReplicas": low,
                "maxReplicas": 1000,
                "metrics": [{"type": "runningRequests", "target": args.target}],
                "scaleUp": {"stabilizationWindow": 0, "maxStep": args.up_step},
                "scaleDown": {"stabilizationWindow": args.down_window, "maxStep": args.down_step},
                "idleWindow": args.idle_window,
            }
        )
        count, serving, history = low, low, ()
        placer = Placer(args, policy, low, low) if policy is not None else None
        pending: list[tuple[float, int]] = []
        active = 0.0
        gpu_seconds = 0.0
        cost = 0.0
        held_seconds = 0.0  # request-seconds spent held at the router (a wake)
        longest_wait = 0.0
        waiting_since: float | None = None
        t, next_round = 0.0, 0.0
        while t < DAY:
            load = sparse_trace(args.zero_peak, t)
            serving += sum(n for at, n in pending if at <= t)
            pending = [(at, n) for at, n in pending if at > t]
            if load > 0:
                active = t
            if serving == 0 and load > 0:
                held_seconds += load
                waiting_since = t if waiting_since is None else waiting_since
                if count == 0:  # the probe (1 s) starts a round that wakes it
                    count = 1
                    pending.append((t + 1 + args.ready, 1))
                    if placer is not None:
                        placer.set(1)
            elif waiting_since is not None:
                longest_wait = max(longest_wait, t - waiting_since)
                waiting_since = None
            if t >= next_round:
                names = [f"r{i}" for i in range(serving)]
                each = load * args.service / max(1, serving)
                values = {n: {"runningRequests": min(args.slots, each)} for n in names}
                d = decide(auto, count, names, values, history, t)
                history, desired = d.history, d.desired
                idle = idle_for(auto, count, names, values, active, t)
                if idle is not None and serving == count:
                    desired = 0
                if desired > count:
                    pending.append((t + args.ready, desired - count))
                elif desired < count:
                    serving = max(0, serving - (count - desired))
                if placer is not None and desired != count:
                    placer.set(desired)
                count = desired
                next_round += args.interval
            if placer is not None:
                cost += placer.rate / 3600
            gpu_seconds += (serving + sum(n for _, n in pending)) * args.gpus
            t += 1.0
        name = "fromOne" if low else "fromZero"
        out[name] = {
            "gpuHours": round(gpu_seconds / 3600, 1),
            "cost": round(cost if placer is not None else gpu_seconds / 3600 * args.price, 2),
            "heldRequestSeconds": round(held_seconds),
            "longestWaitSeconds": round(longest_wait),
        }
    rate = (
        Placer(args, "Spread", fixed, fixed).rate
        if policy is not None
        else fixed * args.gpus * args.price
    )
    out["fixed"] = {
        "gpuHours": round(fixed * args.gpus * DAY / 3600, 1),
        "cost": round(DAY / 3600 * rate, 2),
    }
    return out


def simulate_classes(args: argparse.Namespace) -> dict[str, object]:
    """Both traces with replicas placed by modelplane's scheduler over a cheap and a dear
    class (`Placer`): the daily trace fixed (peak-sized, Spread), autoscaled with Spread and
    with Cheapest; the sparse trace fixed, from one and from zero, with Cheapest."""
    per_replica = args.slots / args.service
    fixed = math.ceil(args.peak / (per_replica * args.target / args.slots))
    daily: dict[str, object] = {
        "fixed": {
            "replicas": fixed,
            "gpuHours": round(fixed * args.gpus * DAY / 3600, 1),
            "cost": round(DAY / 3600 * Placer(args, "Spread", 1, fixed).rate, 2),
        }
    }
    for policy in ("Spread", "Cheapest"):
        daily[policy.lower()] = simulate(args, Placer(args, policy, 1, 1))
    return {
        "cheapGpus": args.cheap_gpus,
        "cheapPrice": args.cheap_price,
        "dearPrice": args.price,
        "daily": daily,
        "sparse": simulate_zero(args, "Cheapest"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peak", type=float, default=200.0, help="peak load, req/s")
    parser.add_argument("--service", type=float, default=0.2, help="seconds per request")
    parser.add_argument("--slots", type=int, default=4, help="concurrent requests per replica")
    parser.add_argument("--target", type=float, default=3.0, help="runningRequests target")
    parser.add_argument("--queue-target", type=float, default=1.0, help="queueDepth target")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per replica")
    parser.add_argument("--interval", type=float, default=30.0, help="reconcile interval, s")
    parser.add_argument("--ready", type=float, default=60.0, help="new replica start-up, s")
    parser.add_argument(
        "--route", type=float, default=15.0, help="the gateway `up` that routes it, s"
    )
    parser.add_argument("--down-window", type=float, default=300.0)
    parser.add_argument("--down-step", type=int, default=1)
    parser.add_argument("--up-step", type=int, default=8)
    parser.add_argument("--price", type=float, default=2.5, help="$ per GPU-hour")
    parser.add_argument(
        "--zero", action="store_true", help="the sparse trace: fixed, from 1, from 0"
    )
    parser.add_argument("--zero-peak", type=float, default=20.0, help="sparse trace peak")
    parser.add_argument("--idle-window", type=float, default=600.0, help="scale to zero after")
    parser.add_argument(
        "--classes",
        action="store_true",
        help="both traces, placed by the scheduler over a cheap and a dear class",
    )
    parser.add_argument("--cheap-price", type=float, default=1.0, help="$ per cheap GPU-hour")
    parser.add_argument("--cheap-gpus", type=int, default=8, help="GPUs of the cheap class")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.classes:
        result = simulate_classes(args)
    else:
        result = simulate_zero(args) if args.zero else simulate(args)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>24}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
