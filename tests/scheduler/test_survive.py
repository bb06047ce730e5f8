"""`plan --survive N`, `--survive-label KEY` and `--explain`: what-if losses by failover's
rules, and the evidence behind every placement (docs/scheduling.md, "Surviving a loss",
"Evidence")."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modelplane.api.fleet import FleetSpec
from modelplane.scheduler import schedule
from modelplane.scheduler import survive as sv
from modelplane.scheduler.evidence import explain_plan
from tests.factories import (
    cluster,
    deployment,
    fleet,
    inference_class,
    model_cache,
    pool,
    request,
    taint,
)

ROOT = Path(__file__).resolve().parents[2]
G8 = inference_class("g8", 8)
G1 = inference_class("g1", 1)


def three(nodes: int = 1, **labels: str) -> list:
    """Three clusters of one 8-GPU pool with `nodes` nodes, in zones a, a, b."""
    return [
        cluster(f"c{i}", [pool("p", "g8", nodes)], labels={"zone": z}) for i, z in enumerate("aab")
    ]


def report(f: FleetSpec, **kw):  # noqa: ANN003, ANN201
    return sv.survive(f, schedule(f, None), **kw)


CASES = [
    # (id, fleet, kwargs, survives, failing scenario names, {deployment: (short, devices)} of the worst)
    (
        "room-left-survives",
        fleet([G8], three(), [deployment("m", 2, tensor=8)]),
        {"losses": 1},
        True,
        [],
        {},
    ),
    (
        "full-fleet-one-loss-short",
        fleet([G8], three(), [deployment("m", 3, tensor=8)]),
        {"losses": 1},
        False,
        ["c0", "c1", "c2"],
        {"ml/m": (1, {"g8": 8})},
    ),
    (
        "two-losses",
        fleet([G8], three(nodes=2), [deployment("m", 3, tensor=8)]),
        {"losses": 2},
        False,
        ["c0, c1", "c0, c2", "c1, c2"],
        {"ml/m": (1, {"g8": 8})},
    ),
    (
        "region-label",
        fleet([G8], three(nodes=2), [deployment("m", 3, tensor=8)]),
        {"label": "zone"},
        False,
        ["zone=a (c0, c1)"],
        {"ml/m": (1, {"g8": 8})},
    ),
    (
        "region-label-survives",
        fleet([G8], three(nodes=3), [deployment("m", 3, tensor=8)]),
        {"label": "zone"},
        True,
        [],
        {},
    ),
    (
        # c0 hosts hi and lo; losing it, the one free node goes to hi (priority), lo is short.
        "priorities-respected",
        fleet(
            [G8],
            [
                cluster("c0", [pool("p", "g8", 2)]),
                cluster("c1", [pool("p", "g8", 1)]),
                cluster("c2", [pool("p", "g8", 2)]),
            ],
            [
                deployment("hi", 2, tensor=8, priority=10),
                deployment("lo", 2, tensor=8),
            ],
        ),
        {"losses": 1},
        False,
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("f", "kw", "survives", "names", "worst"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_survive_table(f, kw, survives, names, worst):
    got = report(f, **kw)
    assert got.survives is survives
    if names is not None:
        assert [s.name for s in got.failing] == names
    if worst is not None and got.worst is not None:
        assert {k: (s.replicas, s.devices) for k, s in got.worst.short.items()} == worst


def test_survive_priorities_respected():
    f = CASES[-1][1]
    plan = schedule(f, None)
    got = sv.survive(f, plan, losses=1)
    # Whatever cluster is lost, hi keeps both replicas: only lo is ever short.
    assert not got.survives
    for scenario in got.failing:
        assert set(scenario.short) == {"ml/lo"}, scenario


def test_survive_matches_the_full_replan_failover_does():
    """The fast path (one charged run, evict, fill, undo) gives exactly what failover's
    re-plan gives: the lost clusters tainted NoExecute, the plan's lock as previous."""
    checked = 0
    sys.path.insert(0, str(ROOT / "bench"))
    import packing_quality

    for seed in range(40):
        f = packing_quality.random_fleet(random.Random(seed))
        plan = schedule(f, None)
        whatif = sv.WhatIf(f, plan.lock)
        for lost, _ in sv.scenarios_of(f, plan.lock, 1, None) + sv.scenarios_of(
            f, plan.lock, 2, None
        ):
            assert whatif.scenario(lost, sv._unplaced) == sv._replanned(f, plan.lock, lost)
            checked += 1
        assert sv._unplaced(whatif.run) == {k: r.unplaced for k, r in plan.report.items()}
    assert checked > 100


def test_survive_a_deployment_tolerating_the_loss_stays():
    """A deployment that tolerates every taint stays on a lost cluster, as in failover
    (the full re-plan path)."""
    f = fleet(
        [G8],
        three(),
        [deployment("m", 3, tensor=8, tolerations=[{"operator": "Exists"}])],
    )
    assert report(f, losses=1).survives


def test_survive_headroom_and_free_devices():
    f = fleet([G8, G1], three(nodes=2), [deployment("m", 3, tensor=8)])
    got = report(f, losses=1)
    assert got.headroom == {"ml/m": 3}
    assert got.free == {"g8": 24}
    # survives: after the worst loss is "now"
    assert got.survives and got.headroom_after == got.headroom


# -- explain -----------------------------------------------------------------------------


def _rules(f: FleetSpec, key: str) -> dict[str, tuple[str | None, str]]:
    plan = schedule(f, None)
    evidence = explain_plan(f, plan, None, [key])[key]
    return {c["cluster"]: (c["rule"], c["message"]) for c in evidence["clusters"]}


def test_explain_names_the_first_failing_rule_per_cluster():
    f = fleet(
        [G8, G1],
        [
            cluster("a-selector", [pool("p", "g8")], labels={"zone": "b"}),
            cluster("b-taint", [pool("p", "g8")], labels={"zone": "a"}, taints=[taint("x")]),
            cluster(
                "c-health",
                [pool("p", "g8")],
                labels={"zone": "a"},
                taints=[taint("modelplane.ai/unhealthy", "unreachable", "NoExecute")],
            ),  # fmt: skip
            cluster("d-devices", [pool("p", "g1")], labels={"zone": "a"}),
            cluster("e-full", [pool("p", "g8")], labels={"zone": "a"}),
            cluster("f-cache", [pool("p", "g8")], labels={"zone": "a", "cache": "no"}),
        ],
        [
            deployment("m", 3, tensor=8, selector={"matchLabels": {"zone": "a"}}, cache="w"),
            deployment(
                "filler", 1, tensor=8, selector={"matchLabels": {"zone": "a"}}, priority=5
            ),  # fmt: skip
        ],
        [
            model_cache(
                "w", selector={"matchExpressions": [{"key": "cache", "operator": "DoesNotExist"}]}
            )
        ],  # fmt: skip
    )
    rules = _rules(f, "ml/m")
    assert rules["a-selector"][0] == "clusterSelector"
    assert rules["b-taint"] == ("taints", "taint x:NoSchedule not tolerated")
    assert rules["c-health"][0] == "health"
    assert rules["d-devices"][0] == "devices"
    assert rules["f-cache"] == ("cache", "not covered by ModelCache ml/w")
    assert rules["e-full"][0] == "capacity"
    assert "0 free nodes" in rules["e-full"][1]


def test_explain_capacity_has_the_numbers():
    f = fleet([G8], [cluster("c0", [pool("p", "g8", 2)])], [
        deployment("small", 1, tensor=4, priority=1), deployment("big", 3, tensor=8)])  # fmt: skip
    plan = schedule(f, None)
    ev = explain_plan(f, plan, None, ["ml/big"])["ml/big"]
    (c0,) = ev["clusters"]
    assert c0["rule"] == "capacity"
    assert c0["pools"] == [
        {
            "role": "unified",
            "pool": "p",
            "freeNodes": 0,
            "neededNodes": 1,
            "freeDevices": 4,
            "neededDevices": 8,
        }  # fmt: skip
    ]
    assert ev["unplaced"] == 2
    assert [r["why"] for r in ev["replicas"]] == ["spread"]


def test_explain_selector_names_the_selectors():
    cel = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1000Gi")) >= 0'
    f = fleet([G8], [cluster("c0", [pool("p", "g8")])],
              [deployment("m", 1, tensor=8, devices=[request("gpu", None, cel)])])  # fmt: skip
    ev = explain_plan(f, schedule(f, None), None, ["ml/m"])["ml/m"]
    (c0,) = ev["clusters"]
    assert c0["rule"] == "devices"
    assert c0["selectors"] == [cel]


def test_explain_replicas_sticky_spread_pack():
    f = fleet([G8], [cluster("c0", [pool("p", "g8", 2)]), cluster("c1", [pool("p", "g8", 1)])],
              [deployment("m", 3, tensor=8)])  # fmt: skip
    first = schedule(f, None)
    ev = explain_plan(f, first, None, ["ml/m"])["ml/m"]
    assert sorted(r["why"] for r in ev["replicas"]) == ["pack", "pack", "spread"]
    again = schedule(f, first.lock)
    ev = explain_plan(f, again, first.lock, ["ml/m"])["ml/m"]
    assert {r["why"] for r in ev["replicas"]} == {"sticky"}


# -- the CLI -----------------------------------------------------------------------------


def _write(root: Path, f: FleetSpec) -> Path:
    def doc(m) -> dict:  # noqa: ANN001
        return m.model_dump(mode="json", by_alias=True, exclude_unset=True)

    docs = [doc(m) for group in (f.classes, f.clusters, f.deployments, f.caches)
            for m in group.values()]  # fmt: skip
    (root / "fleet.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return root


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modelplane", "plan", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip


@pytest.mark.parametrize(
    ("replicas", "args", "rc", "words"),
    [
        (
            2,
            ["--survive", "1"],
            0,
            ["survives the loss of any 1 cluster: yes (2 scenarios)"],
        ),  # c2 hosts none
        (3, ["--survive", "1"], 1, ["survives the loss of any 1 cluster: no", "ml/m", "8 g8"]),
        (3, ["--survive-label", "zone"], 1, ["zone=a (c0, c1)", "ml/m"]),
        (3, ["--survive-label", "nope"], 2, ["no InferenceCluster has the label nope"]),
        (3, ["--survive", "1", "--survive-label", "zone"], 2, ["cannot be combined"]),
        (3, ["--explain", "ml/nope"], 2, ["no ModelDeployment ml/nope"]),
        (3, ["--survive", "1", "--observe"], 2, ["not with --observe"]),
        (4, ["--explain", "ml/m"], 0, ["explain ml/m: 3 of 4 placed", "capacity"]),
    ],
)
def test_survive_and_explain_cli(tmp_path, replicas, args, rc, words):
    f = fleet([G8], three(), [deployment("m", replicas, tensor=8)])
    out = _plan(str(_write(tmp_path, f)), "--lock", str(tmp_path / "l.yaml"), *args)
    assert out.returncode == rc, out.stdout + out.stderr
    text = " ".join((out.stdout + out.stderr).split())
    for word in words:
        assert word in text, text


def test_survive_and_explain_json(tmp_path):
    f = fleet([G8], three(), [deployment("m", 4, tensor=8)])
    root = _write(tmp_path, f)
    out = _plan(str(root), "--lock", str(tmp_path / "l.yaml"), "-o", "json",
                "--survive", "1", "--explain", "ml/m")  # fmt: skip
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    survive = data["survive"]
    assert survive["survives"] is False and survive["scenarios"] == 3
    assert survive["worst"]["short"] == {"ml/m": {"replicas": 1, "devices": {"g8": 8}}}
    assert data["explain"]["ml/m"]["unplaced"] == 1
    assert {c["rule"] for c in data["explain"]["ml/m"]["clusters"]} == {"capacity"}


@pytest.mark.parametrize(
    ("replicas", "line"),
    [
        (2, "**Survives the loss of any 1 cluster: yes** (2 scenarios)."),
        (
            3,
            "**Survives the loss of any 1 cluster: no**: 3 of 3 scenarios leave a deployment "
            "short; the worst, losing `c0`: `ml/m` 1 replica(s) short (8 g8 devices).",
        ),
    ],
)
def test_survive_preview_markdown_line(replicas, line):
    from modelplane.driver.markdown import preview_markdown
    from modelplane.driver.plan import Plan
    from modelplane.driver.results import RunResult

    f = fleet([G8], three(), [deployment("m", replicas, tensor=8)])
    plan = schedule(f, None)
    got = sv.survive(f, plan, losses=1)
    text = preview_markdown(
        Plan(plan.lock, plan), RunResult("preview", "file:///x", []), survive=got
    )
    assert line in text
    assert text.index("### Placement") < text.index(line) < text.index("### Stacks")


def test_survive_with_draining_replicas_matches_the_full_replan():
    """Autoscaled deployments mid scale-in (draining replicas, taken back when a loss
    leaves them short): the fast path still gives failover's full re-plan, and undoes."""
    draining = checked = 0
    for seed in range(30):
        rng = random.Random(seed)
        clusters = [cluster(f"c{i}", [pool("p", "g8", rng.randint(1, 3))]) for i in range(3)]
        auto = {"minReplicas": 1, "maxReplicas": 8,
                "metrics": [{"type": "runningRequests", "target": 1}]}  # fmt: skip
        deps = [deployment(f"a{j}", rng.randint(1, 5), tensor=rng.choice([2, 4, 8]),
                           autoscaling=auto) for j in range(3)]  # fmt: skip
        f = fleet([G8], clusters, deps)
        first = schedule(f, None)
        lower = {
            k: d.model_copy(update={"autoscaled_replicas": max(1, d.autoscaled_replicas - 2)})
            for k, d in first.lock.deployments.items()
        }
        plan = schedule(f, first.lock.model_copy(update={"deployments": lower}))
        draining += sum(len(r.draining) for r in plan.report.values())
        whatif = sv.WhatIf(f, plan.lock)
        for lost, _ in sv.scenarios_of(f, plan.lock, 1, None):
            assert whatif.scenario(lost, sv._unplaced) == sv._replanned(f, plan.lock, lost)
            checked += 1
        assert sv._unplaced(whatif.run) == {k: r.unplaced for k, r in plan.report.items()}
    assert draining > 10 and checked > 50
