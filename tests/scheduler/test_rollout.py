"""Fleet rollouts, the pure core (issue 21, part 1): spec.rollout, revisions, the lock's record,
the step planner and the analysis gate. Table tests plus a simulated fleet the planner drives
to the end (interrupted, with surge, with prefill/decode), checking its invariants each step."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.api.loader import load_fleet
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import LockedReplica
from modelplane.api.rollout import Rollout, RolloutAnalysis
from modelplane.lock import dump_lock, read_lock
from modelplane.rollout import (
    ReplicaState,
    RolloutState,
    ServingHealth,
    Verdict,
    analyse,
    plan_step,
    revision,
    wave_of,
)
from tests.spec_docs import base_fleet, deployment, error_paths, write_fleet

OLD, NEW, BAD = "aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"


def model(doc: dict[str, Any]) -> ModelDeployment:
    return ModelDeployment.model_validate(doc)


# --------------------------------------------------------------------------- spec.rollout


def test_rollout_defaults_are_safe() -> None:
    spec = model(deployment()).spec.rollout
    assert (spec.strategy, spec.max_unavailable, spec.max_surge) == ("Rolling", 1, 0)
    assert spec.waves == [] and spec.analysis is None
    assert spec.prefill_decode_compatible is False


BUDGETS = [
    # (name, maxUnavailable, maxSurge, replicas, expected (unavailable, surge))
    ("defaults", 1, 0, 3, (1, 0)),
    ("percent-rounds-down", "25%", 0, 10, (2, 0)),
    ("surge-percent-rounds-up", 0, "25%", 10, (0, 3)),
    ("percent-down-to-zero-becomes-one", "10%", 0, 3, (1, 0)),
    ("counts", 2, 1, 30, (2, 1)),
    ("hundred-percent", "100%", 0, 4, (4, 0)),
]


@pytest.mark.parametrize(
    ("unavailable", "surge", "replicas", "expected"),
    [b[1:] for b in BUDGETS],
    ids=[b[0] for b in BUDGETS],
)
def test_rollout_budget(
    unavailable: int | str, surge: int | str, replicas: int, expected: tuple[int, int]
) -> None:
    spec = Rollout.model_validate({"maxUnavailable": unavailable, "maxSurge": surge})
    assert spec.budget(replicas) == expected


BAD_ROLLOUTS = [
    # (name, rollout, path, message)
    ("both-zero", {"maxUnavailable": 0, "maxSurge": 0}, "spec.rollout", "cannot both be 0"),
    ("percent-over-100", {"maxUnavailable": "150%"}, "spec.rollout.maxUnavailable", "percentage"),
    ("not-a-percent", {"maxSurge": "two"}, "spec.rollout.maxSurge", "percentage"),
    ("negative", {"maxUnavailable": -1}, "spec.rollout.maxUnavailable", "outside 0..1000"),
    ("boolean", {"maxUnavailable": True}, "spec.rollout.maxUnavailable", "not a boolean"),
    ("strategy", {"strategy": "Blue"}, "spec.rollout.strategy", "Rolling"),
    (
        "wave-both",
        {"waves": [{"clusters": ["a"], "clusterSelector": {}}]},
        "spec.rollout.waves[0]",
        "either",
    ),
    ("wave-neither", {"waves": [{}]}, "spec.rollout.waves[0]", "either"),
    (
        "error-ratio",
        {"analysis": {"maxErrorRatioIncrease": 2}},
        "spec.rollout.analysis.maxErrorRatioIncrease",
        "1",
    ),
    ("ttft-ratio", {"analysis": {"maxTtftRatio": 0.5}}, "spec.rollout.analysis.maxTtftRatio", "1"),
    ("window", {"analysis": {"window": "2h"}}, "spec.rollout.analysis.window", "outside"),
    ("unknown-field", {"maxUnavialable": 1}, "spec.rollout.maxUnavialable", ""),
]


@pytest.mark.parametrize(
    ("rollout", "path", "message"), [b[1:] for b in BAD_ROLLOUTS], ids=[b[0] for b in BAD_ROLLOUTS]
)
def test_rollout_validation_names_file_object_and_field(
    tmp_path: Any, rollout: dict[str, Any], path: str, message: str
) -> None:
    docs = base_fleet()
    next(d for d in docs if d["kind"] == "ModelDeployment")["spec"]["rollout"] = rollout
    write_fleet(tmp_path, docs)
    errors = load_fleet(tmp_path).errors
    matching = [
        e
        for e in errors
        if e.object == "ModelDeployment team/m" and e.path == path and message in e.message
    ]
    assert matching, "\n".join(map(str, errors))
    assert all(e.file.endswith("fleet.yaml") for e in matching)


def test_all_rollout_errors_at_once(tmp_path: Any) -> None:
    docs = base_fleet()
    bad = {"maxUnavailable": "x", "maxSurge": -2, "analysis": {"maxTtftRatio": 0}}
    next(d for d in docs if d["kind"] == "ModelDeployment")["spec"]["rollout"] = bad
    paths = error_paths(tmp_path, docs)
    assert {
        "spec.rollout.maxUnavailable",
        "spec.rollout.maxSurge",
        "spec.rollout.analysis.maxTtftRatio",
    } <= paths


def test_rollout_full_spec() -> None:
    spec = model(
        deployment(
            rollout={
                "maxUnavailable": "34%",
                "maxSurge": 1,
                "waves": [
                    {"clusters": ["dev-1"]},
                    {"clusterSelector": {"matchLabels": {"tier": "b"}}},
                ],
                "analysis": {
                    "maxErrorRatioIncrease": 0.01,
                    "maxTtftRatio": 2,
                    "minRequests": 50,
                    "window": "1m",
                },
                "prefillDecodeCompatible": True,
            }
        )
    ).spec.rollout
    assert spec.budget(3) == (1, 1)
    assert spec.analysis == RolloutAnalysis(
        max_error_ratio_increase=0.01, max_ttft_ratio=2, min_requests=50, window=60.0
    )
    assert [
        wave_of(c, labels, spec.waves)
        for c, labels in [
            ("dev-1", {}),
            ("dev-2", {"tier": "b"}),
            ("dev-3", {"tier": "c"}),
            ("dev-1", {"tier": "b"}),
        ]
    ] == [0, 1, 2, 0]


# --------------------------------------------------------------------------- revisions


def _with(mutate: Callable[[dict[str, Any]], None]) -> str:
    doc = deployment()
    mutate(doc)
    return revision(model(doc))


def _engine(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["workers"]["template"]["spec"]["containers"][0]


REVISION_CHANGES = [
    # (name, mutation, changes the revision)
    ("image", lambda d: _engine(d).update(image="vllm/vllm-openai:v0.12.0"), True),
    ("args", lambda d: _engine(d).update(args=["--max-model-len=4096"]), True),
    ("env", lambda d: _engine(d).update(env=[{"name": "X", "value": "1"}]), True),
    ("resources", lambda d: d["spec"]["workers"]["resources"].update(cpu="2"), True),
    (
        "probe",
        lambda d: _engine(d).update(
            readinessProbe={"httpGet": {"path": "/v1/models", "port": 8000}}
        ),
        True,
    ),
    ("worker-count", lambda d: d["spec"]["workers"].update(count=2), True),
    ("topology", lambda d: d["spec"]["workers"]["topology"].update(pipeline=2), True),
    ("replicas", lambda d: d["spec"].update(replicas=5), False),
    ("priority", lambda d: d["spec"].update(priority=10), False),
    ("rollout", lambda d: d["spec"].update(rollout={"maxUnavailable": 2}), False),
    (
        "cluster-selector",
        lambda d: d["spec"].update(clusterSelector={"matchLabels": {"a": "b"}}),
        False,
    ),
]


@pytest.mark.parametrize(
    ("mutate", "changes"), [c[1:] for c in REVISION_CHANGES], ids=[c[0] for c in REVISION_CHANGES]
)
def test_revision_changes_with_the_pods_only(
    mutate: Callable[[dict[str, Any]], None], changes: bool
) -> None:
    base = _with(lambda d: None)
    assert len(base) == 10 and all(ch in "0123456789abcdef" for ch in base)
    assert base == _with(lambda d: None)  # deterministic
    assert (_with(mutate) != base) is changes


# --------------------------------------------------------------------------- the lock


def test_lock_records_revisions_and_old_locks_still_load(tmp_path: Any) -> None:
    old = tmp_path / "old.lock.yaml"
    old.write_text(
        "apiVersion: modelplane.ai/v1alpha1\nkind: PlacementLock\ndeployments:\n"
        "  team/m:\n    replicas:\n    - name: m-abcde\n      cluster: c1\n      index: 0\n"
        "      pools: {unified: gpu}\n"
    )
    lock = read_lock(old)
    [r] = lock.replicas_of("team/m")
    assert r.revision is None
    assert "revision" not in dump_lock(lock)
    # revisions that YAML would read as numbers stay strings through a write and a read
    for rev in ("0123456789", "1234567890", "1e34567890", "abcdef0123"):
        lock.deployments["team/m"].replicas[0] = r.model_copy(update={"revision": rev})
        new = tmp_path / f"{rev}.lock.yaml"
        new.write_text(dump_lock(lock))
        assert "revision:" in new.read_text()
        assert read_lock(new).replicas_of("team/m")[0].revision == rev


@pytest.mark.parametrize("bad", ["ABCDEF1234", "abc", "0123456789a"])
def test_lock_rejects_a_malformed_revision(bad: str) -> None:
    with pytest.raises(ValidationError, match="revision"):
        LockedReplica(name="m-abcde", cluster="c1", index=0, pools={"unified": "gpu"}, revision=bad)


# --------------------------------------------------------------------------- analysis

GATE = RolloutAnalysis(max_error_ratio_increase=0.05, max_ttft_ratio=1.5, min_requests=20)
VERDICTS = [
    # (name, new, old, outcome, reason contains)
    ("too-few-requests", ServingHealth(10, 0), ServingHealth(100, 0), "wait", "10/20"),
    ("healthy", ServingHealth(100, 1, 10.0, 100), ServingHealth(100, 0, 10.0, 100), "pass", ""),
    ("errors", ServingHealth(100, 100), ServingHealth(100, 0), "fail", "error ratio 100.0%"),
    ("errors-within-threshold", ServingHealth(100, 6), ServingHealth(100, 2), "pass", ""),
    (
        "errors-over-threshold",
        ServingHealth(100, 8),
        ServingHealth(100, 2),
        "fail",
        "more than +5.0%",
    ),
    (
        "slow",
        ServingHealth(100, 0, 200.0, 100),
        ServingHealth(100, 0, 10.0, 100),
        "fail",
        "2.000s against 0.100s",
    ),
    (
        "slow-within-noise",
        ServingHealth(100, 0, 0.4, 100),
        ServingHealth(100, 0, 0.1, 100),
        "pass",
        "",
    ),
    ("no-old-ttft", ServingHealth(100, 0, 200.0, 100), ServingHealth(0, 0), "pass", ""),
]


@pytest.mark.parametrize(
    ("new", "old", "outcome", "reason"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS]
)
def test_analysis(new: ServingHealth, old: ServingHealth, outcome: str, reason: str) -> None:
    verdict = analyse(new, old, GATE)
    assert verdict.outcome == outcome
    assert reason in verdict.reason


def test_serving_health_adds_up() -> None:
    total = ServingHealth(10, 1, 1.0, 10) + ServingHealth(30, 3, 3.0, 10)
    assert total == ServingHealth(40, 4, 4.0, 20)
    assert total.error_ratio == 0.1 and total.ttft == 0.2


# --------------------------------------------------------------------------- one step


def r(
    name: str,
    rev: str | None = OLD,
    ready: bool = True,
    routed: bool = True,
    wave: int = 0,
    **kw: Any,
) -> ReplicaState:
    return ReplicaState(name, f"c-{name}", rev, ready, routed, wave, **kw)


DEFAULT = Rollout()
STEPS = [
    # (name, replicas, spec, count, kwargs, expected {field: value})
    (
        "first-step-takes-one-out",
        [r("a"), r("b"), r("c")],
        DEFAULT,
        3,
        {},
        {"unroute": ["a"], "update": ["a"], "hold": ["b", "c"], "min_routable": 2},
    ),
    (
        "waits-while-the-updated-one-loads",
        [r("a", NEW, ready=False, routed=False), r("b"), r("c")],
        DEFAULT,
        3,
        {},
        {"unroute": [], "update": [], "waiting": ["a"], "hold": ["b", "c"]},
    ),
    (
        "routes-the-ready-one-and-takes-the-next",
        [r("a", NEW, routed=False), r("b"), r("c")],
        DEFAULT,
        3,
        {},
        {"route": ["a"], "unroute": ["b"], "update": ["b"], "hold": ["c"]},
    ),
    (
        "an-unready-old-replica-is-already-unavailable",
        [r("a", ready=False), r("b"), r("c")],
        DEFAULT,
        3,
        {},
        {"unroute": [], "hold": ["a", "b", "c"]},
    ),
    (
        "a-drained-outdated-replica-is-updated",
        [r("a", routed=False), r("b"), r("c")],
        DEFAULT,
        3,
        {},
        {"update": ["a"], "unroute": [], "hold": ["b", "c"]},
    ),
    (
        "max-unavailable-two",
        [r("a"), r("b"), r("c"), r("d")],
        Rollout(max_unavailable=2),
        4,
        {},
        {"unroute": ["a", "b"], "hold": ["c", "d"], "min_routable": 2},
    ),
    (
        "percentage",
        [r(x) for x in "abcdefghij"],
        Rollout(max_unavailable="30%"),
        10,
        {},
        {"unroute": ["a", "b", "c"], "min_routable": 7},
    ),
    (
        "all-at-once",
        [r("a"), r("b"), r("c")],
        Rollout(strategy="AllAtOnce"),
        3,
        {},
        {"unroute": ["a", "b", "c"], "update": ["a", "b", "c"], "min_routable": 0},
    ),
    (
        "single-replica-goes-down",  # maxUnavailable 1 of 1: the only way without surge
        [r("a")],
        DEFAULT,
        1,
        {},
        {"unroute": ["a"], "min_routable": 0},
    ),
    (
        "surge-places-first",
        [r("a"), r("b"), r("c")],
        Rollout(max_unavailable=0, max_surge=1),
        3,
        {},
        {"place": 1, "unroute": [], "hold": ["a", "b", "c"], "min_routable": 3},
    ),
    (
        "surge-retires-once-the-new-one-is-routed",
        [r("a"), r("b"), r("c"), r("s", NEW)],
        Rollout(max_unavailable=0, max_surge=1),
        3,
        {},
        {"place": 0, "unroute": ["a"], "retire": ["a"], "update": [], "hold": ["b", "c"]},
    ),
    (
        "surge-waits-for-the-new-one",
        [r("a"), r("b"), r("c"), r("s", NEW, ready=False, routed=False)],
        Rollout(max_unavailable=0, max_surge=1),
        3,
        {},
        {"place": 0, "unroute": [], "waiting": ["s"]},
    ),
    (
        "waves-one-cluster-at-a-time",
        [r("a", wave=1), r("b", wave=0), r("c", wave=2)],
        Rollout(max_unavailable=2),
        3,
        {},
        {"unroute": ["b"], "hold": ["a", "c"]},
    ),
    (
        "next-wave-waits-for-the-previous-to-be-ready",
        [r("b", NEW, ready=False, routed=False, wave=0), r("a", wave=1), r("c", wave=1)],
        Rollout(max_unavailable=2),
        3,
        {},
        {"unroute": [], "hold": ["a", "c"], "waiting": ["b"]},
    ),
    (
        "paused",
        [r("a", NEW, routed=False), r("b"), r("c")],
        DEFAULT,
        3,
        {"paused": True},
        {"route": ["a"], "unroute": [], "hold": ["b", "c"]},
    ),
    (
        "analysis-waits",
        [r("a", NEW), r("b"), r("c")],
        DEFAULT,
        3,
        {"verdict": Verdict("wait", "3/20 requests on the new revision")},
        {"unroute": [], "hold": ["b", "c"]},
    ),
    (
        "analysis-passes",
        [r("a", NEW), r("b"), r("c")],
        DEFAULT,
        3,
        {"verdict": Verdict("pass")},
        {"unroute": ["b"], "hold": ["c"]},
    ),
    (
        "pd-mixed-replica-leaves-the-routes",
        [r("a", NEW, role_revisions={"prefill": NEW, "decode": OLD}), r("b"), r("c")],
        DEFAULT,
        3,
        {},
        {"unroute": ["a"], "update": ["a"], "hold": ["b", "c"]},
    ),
    (
        "pd-mixed-replica-stays-when-compatible",
        [r("a", NEW, role_revisions={"prefill": NEW, "decode": OLD}), r("b"), r("c")],
        Rollout(prefill_decode_compatible=True),
        3,
        {},
        {"unroute": ["a"], "update": ["a"], "hold": ["b", "c"]},
    ),
    (
        "pd-mixed-ready-replica-is-not-routed",
        [r("a", NEW, routed=False, role_revisions={"prefill": NEW, "decode": OLD}), r("b"), r("c")],
        DEFAULT,
        3,
        {},
        {"route": [], "update": ["a"], "unroute": []},
    ),
    (
        "complete",
        [r("a", NEW), r("b", NEW), r("c", NEW)],
        DEFAULT,
        3,
        {},
        {"unroute": [], "update": [], "route": []},
    ),
]


@pytest.mark.parametrize(
    ("replicas", "spec", "count", "kwargs", "expected"),
    [s[1:] for s in STEPS],
    ids=[s[0] for s in STEPS],
)
def test_rollout_step(
    replicas: list[ReplicaState],
    spec: Rollout,
    count: int,
    kwargs: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    step = plan_step(NEW, replicas, spec, count, **kwargs)
    for name, value in expected.items():
        assert getattr(step, name) == value, (name, step)


def test_rollout_progress_line() -> None:
    replicas = [r("a", NEW), r("b"), r("c")]
    step = plan_step(NEW, replicas, DEFAULT, 3)
    assert step.progress(replicas) == f"rollout: 1/3 replicas at revision {NEW}"
    assert step.state.phase == "Progressing" and step.state.target == NEW


def test_analysis_failure_rolls_back_the_new_replicas_only() -> None:
    replicas = [r("a", BAD), r("b", OLD), r("c", OLD)]
    state = RolloutState(target=BAD, stable=OLD)
    step = plan_step(
        BAD, replicas, DEFAULT, 3, state=state, verdict=Verdict("fail", "error ratio 100.0%")
    )
    assert step.state.phase == "RolledBack" and step.state.target == OLD
    assert step.state.failed == BAD and "error ratio" in step.state.reason
    assert (step.unroute, step.update, step.hold) == (["a"], ["a"], [])  # b, c are stable
    # the same spec again: no second try of the failed revision
    again = plan_step(BAD, [r("a", OLD), r("b"), r("c")], DEFAULT, 3, state=step.state)
    assert again.state.target == OLD and again.unroute == [] and again.done
    # a fixed spec starts a new rollout from the stable revision
    fixed = plan_step(NEW, [r("a", OLD), r("b"), r("c")], DEFAULT, 3, state=again.state)
    assert fixed.state == RolloutState(target=NEW, stable=OLD)
    assert fixed.unroute == ["a"]


def test_analysis_failure_without_a_stable_revision_halts() -> None:
    replicas = [r("a", NEW), r("b", None), r("c", None)]
    step = plan_step(
        NEW, replicas, DEFAULT, 3, state=RolloutState(target=NEW), verdict=Verdict("fail", "slow")
    )
    assert step.state.phase == "Paused" and "no stable revision" in step.state.reason
    assert step.unroute == [] and step.hold == ["b", "c"]


# --------------------------------------------------------------------------- a simulated fleet


class World:
    """A fleet the planner drives: steps take effect, updated replicas load for ``load`` ticks."""

    def __init__(self, replicas: list[ReplicaState], load: int = 2) -> None:
        self.replicas = {x.name: x for x in replicas}
        self.loading: dict[str, int] = {}
        self.load = load
        self.placed = 0
        self.min_seen = len(replicas)
        self.order: list[str] = []  # replicas in the order they left the old revision

    def routable(self) -> int:
        return sum(1 for x in self.replicas.values() if x.routed and x.ready and not x.mixed())

    def apply(self, step: Any, target: str, roles: tuple[str, ...] = ()) -> None:
        """In the driver's order: route, unroute (and drain), retire, update, place."""
        for name in step.route:
            assert not self.replicas[name].mixed(), "a mixed P/D replica was routed"
            self.replicas[name] = replace(self.replicas[name], routed=True)
        for name in step.unroute:
            self.replicas[name] = replace(self.replicas[name], routed=False)
        self.order += [n for n in [*step.update, *step.retire] if n not in self.order]
        self.min_seen = min(self.min_seen, self.routable())
        for name in step.retire:
            del self.replicas[name]
        for name in step.update:
            # roles change one after the other: mixed for a tick
            mixed = {roles[0]: target, roles[1]: self.replicas[name].revision} if roles else {}
            self.replicas[name] = replace(
                self.replicas[name], revision=target, ready=False, role_revisions=mixed
            )  # type: ignore[arg-type]
            self.loading[name] = self.load
        for _ in range(step.place):
            self.placed += 1
            name = f"s{self.placed}"
            self.replicas[name] = ReplicaState(name, f"c-{name}", target, False, False)
            self.loading[name] = self.load

    def tick(self) -> None:
        for name in list(self.loading):
            self.loading[name] -= 1
            x = self.replicas.get(name)
            if x is None:
                del self.loading[name]
            elif self.loading[name] <= 0:
                self.replicas[name] = replace(x, ready=True, role_revisions={})
                del self.loading[name]


def drive(
    world: World,
    spec: Rollout,
    count: int,
    *,
    roles: tuple[str, ...] = (),
    forget_at: int = -1,
    limit: int = 200,
) -> int:
    state = None
    for i in range(limit):
        if i == forget_at:
            state = None  # the process died: only the observed fleet (and the lock) remain
        step = plan_step(NEW, list(world.replicas.values()), spec, count, state=state)
        state = step.state
        world.apply(step, step.state.target, roles)
        if step.done:
            return i
        world.tick()
    raise AssertionError(f"no end after {limit} steps: {world.replicas}")


SIMULATIONS = [
    # (name, replicas, spec, load ticks)
    ("3-default", 3, Rollout(), 2),
    ("10-default", 10, Rollout(), 3),
    ("30-quarter", 30, Rollout(max_unavailable="25%"), 3),
    ("5-surge-no-unavailable", 5, Rollout(max_unavailable=0, max_surge=1), 2),
    ("6-surge-and-unavailable", 6, Rollout(max_unavailable=1, max_surge=2), 2),
    ("4-waves", 4, Rollout(waves=[]), 1),
]


@pytest.mark.parametrize(
    ("n", "spec", "load"), [s[1:] for s in SIMULATIONS], ids=[s[0] for s in SIMULATIONS]
)
@pytest.mark.parametrize("forget_at", [-1, 3], ids=["straight", "interrupted"])
def test_rollout_simulation_ends_on_the_new_revision_within_budget(
    n: int, spec: Rollout, load: int, forget_at: int
) -> None:
    world = World([r(f"r{i:02d}", wave=i % 2) for i in range(n)], load=load)
    drive(world, spec, n, forget_at=forget_at)
    unavailable, _ = spec.budget(n)
    assert world.min_seen >= n - unavailable
    assert len(world.replicas) == n
    assert all(x.revision == NEW and x.ready and x.routed for x in world.replicas.values())
    # waves: every odd replica (wave 1) left the old revision after every even one (wave 0)
    waves = [int(name[1:]) % 2 for name in world.order]
    assert waves == sorted(waves) and len(waves) == n
    assert (world.placed > 0) == (spec.budget(n)[1] > 0)  # surge: make-before-break


def test_prefill_decode_rollout_never_routes_mixed_revisions() -> None:
    world = World([r(f"pd{i}") for i in range(4)], load=2)
    drive(world, Rollout(), 4, roles=("prefill", "decode"))
    assert all(x.revision == NEW and not x.mixed() for x in world.replicas.values())
    assert world.min_seen >= 3


def test_rollout_duration_in_steps_grows_with_replicas_over_budget() -> None:
    """Rolling one at a time costs about one load time per replica; a wider budget less."""
    steps = {}
    for n, spec in [(3, Rollout()), (10, Rollout()), (10, Rollout(max_unavailable=5))]:
        world = World([r(f"r{i:02d}") for i in range(n)], load=2)
        steps[(n, spec.max_unavailable)] = drive(world, spec, n)
    assert steps[(3, 1)] < steps[(10, 1)]
    assert steps[(10, 5)] < steps[(10, 1)]


def test_states_are_plain_data() -> None:
    state = RolloutState(target=NEW, stable=OLD)
    assert copy.deepcopy(state) == state


def test_a_plan_keeps_each_replicas_recorded_revision() -> None:
    from modelplane.scheduler import schedule
    from tests.factories import deployment as sched_deployment
    from tests.factories import fleet
    from tests.scheduler.helpers import H100, gpu_clusters

    f = fleet(
        [H100],
        gpu_clusters(("cluster-a", 2), ("cluster-b", 2)),
        [sched_deployment("m", 2, tensor=8)],
    )
    first = schedule(f, None).lock
    assert all(x.revision is None for x in first.replicas_of("ml/m"))  # nothing rolled yet
    kept = first.replicas_of("ml/m")[0].name
    recorded = first.model_copy(deep=True)
    dep = recorded.deployments["ml/m"]
    dep.replicas[0] = dep.replicas[0].model_copy(update={"revision": OLD})
    grown = fleet(
        [H100],
        gpu_clusters(("cluster-a", 2), ("cluster-b", 2)),
        [sched_deployment("m", 3, tensor=8)],
    )
    again = schedule(grown, recorded).lock
    by_name = {x.name: x.revision for x in again.replicas_of("ml/m")}
    assert len(by_name) == 3
    assert by_name.pop(kept) == OLD
    assert set(by_name.values()) == {None}  # new replicas: recorded once the driver rolls them
