"""Fleet rollouts, the pure core: revisions, the next step of a rollout, the analysis gate.

A ModelDeployment's *revision* is a hash of what its pods are made of (every role's pod template,
resources, topology, worker count and node selector, and the model cache): a change of any of
them is a new revision, which reaches the replicas one step at a time (docs/scheduling.md,
"Rollouts"). This module decides the steps; it does no I/O. The driver (next) executes them:
takes replicas out of the ModelService routes, waits for in-flight requests, updates them, waits
for Readiness, routes them again, and records each replica's revision in the placement lock
(`LockedReplica.revision`), so an interrupted rollout resumes where it stopped.

`plan_step` is called with the fleet as observed (each replica's revision, readiness, whether it
is routed) and returns what to do now; calling it again after the world moved gives the next
step. It never takes a replica out of the routes when that would leave fewer than
`replicas - maxUnavailable` routable ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from modelplane.api.model_cache import ModelCache, cache_source
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import LockedReplica
from modelplane.api.rollout import Rollout, RolloutAnalysis, RolloutWave

REVISION_CHARS = 10
TTFT_NOISE_FLOOR = 0.05
"""Seconds: a slower first token by less than this is never a regression (stand-ins and
healthy engines differ by milliseconds)."""

Phase = Literal["Complete", "Progressing", "Paused", "RolledBack"]


def cache_of(
    deployment: ModelDeployment, caches: Mapping[str, ModelCache] | None
) -> ModelCache | None:
    """The ModelCache the deployment's pods mount (``caches``: the fleet's, by `ns/name`)."""
    ref = deployment.spec.model_cache_ref
    if ref is None or not caches:
        return None
    return caches.get(f"{deployment.metadata.namespace or 'default'}/{ref.name}")


def template(
    deployment: ModelDeployment, caches: Mapping[str, ModelCache] | None = None
) -> dict[str, Any]:
    """What the deployment's pods are made of, as JSON data: every role (pod template,
    resources, topology, workers, node selector) and the model cache, with the source it
    holds (`repo@revision`: a new cache revision is a new revision of every deployment that
    mounts it, rolled out one step at a time). A replica at an older revision is rendered
    from that revision's template (`at_revision`), kept in the driver's runtime state while
    replicas run it."""
    spec = deployment.spec
    made_of: dict[str, Any] = {
        "roles": {
            name: role.model_dump(mode="json", by_alias=True, exclude_none=True)
            for name, role in spec.roles.items()
        },
        "modelCacheRef": spec.model_cache_ref.name if spec.model_cache_ref else None,
    }
    cache = cache_of(deployment, caches)
    source = cache_source(cache) if cache is not None else None
    if source is not None:
        made_of["modelCache"] = source
    return made_of


def revision_of(made_of: Mapping[str, Any]) -> str:
    text = json.dumps(made_of, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:REVISION_CHARS]


def revision(deployment: ModelDeployment, caches: Mapping[str, ModelCache] | None = None) -> str:
    """The deployment's revision: 10 hex characters of a hash of what its pods are made of
    (``caches``: the fleet's, whose sources count).

    Replicas, cluster selection, tolerations, priority, autoscaling and the rollout settings
    are not in it: changing them moves or counts replicas, it does not change a pod.
    """
    return revision_of(template(deployment, caches))


def source_of(made_of: Mapping[str, Any]) -> str | None:
    """The cache source a revision's pods read (`template`'s `modelCache`); None: no cache,
    or a template from before sources were recorded (its pods read the volume's root)."""
    source = made_of.get("modelCache")
    return source if isinstance(source, str) else None


def at_revision(deployment: ModelDeployment, made_of: Mapping[str, Any]) -> ModelDeployment:
    """``deployment`` with its pods made of ``made_of`` (a `template` of an older spec):
    what a replica still at that revision renders. Everything else is the current spec
    (the cache source it reads: `source_of`)."""
    spec = deployment.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    for field_name in ("nodeSelector", "workers", "prefill", "decode"):
        spec.pop(field_name, None)
    roles = dict(made_of.get("roles") or {})
    if set(roles) == {"unified"}:
        spec.update(roles["unified"])  # nodeSelector + workers
    else:
        spec.update(roles)
    cache = made_of.get("modelCacheRef")
    if cache:
        spec["modelCacheRef"] = {"name": cache}
    else:
        spec.pop("modelCacheRef", None)
    data = deployment.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"] = spec
    return type(deployment).model_validate(data)


@dataclass(frozen=True)
class CacheUse:
    """What a cache's volume must keep: the sources replicas read or are rolled to, and
    whether a replica from before sources were recorded still reads the volume's root."""

    sources: tuple[str, ...]
    root: bool


def cache_use(
    cache: ModelCache,
    deployments: Mapping[str, ModelDeployment],
    revisions: Mapping[str, Sequence[str | None]],
    templates: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> CacheUse:
    """The sources of ``cache`` in use: its own, and per deployment mounting it the source of
    each revision its replicas run (``revisions``: the lock's, per deployment; ``templates``:
    the recorded templates of those revisions). A revision without a recorded template
    renders from the current spec, so it reads the current source."""
    current = cache_source(cache)
    used: set[str] = {current} if current is not None else set()
    root = False
    caches = {cache.key: cache}
    for key, deployment in deployments.items():
        if cache_of(deployment, caches) is None:
            continue
        known = templates.get(key) or {}
        for rev in revisions.get(key) or ():
            made_of = known.get(rev or "")
            if made_of is None or made_of.get("modelCacheRef") != cache.metadata.name:
                continue
            source = source_of(made_of)
            if source is None:
                root = True
            else:
                used.add(source)
    return CacheUse(tuple(sorted(used)), root)


def wave_of(cluster: str, labels: Mapping[str, str], waves: Sequence[RolloutWave]) -> int:
    """The index of the first wave naming or selecting ``cluster``; unmatched: after the last."""
    for i, wave in enumerate(waves):
        if cluster in wave.clusters:
            return i
        if wave.cluster_selector is not None and wave.cluster_selector.matches(dict(labels)):
            return i
    return len(waves)


# --------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
class ServingHealth:
    """What the engines' metrics say about a set of replicas over the analysis window:
    requests answered and failed (`http_requests_total`, 5xx), and time to first token
    (`vllm:time_to_first_token_seconds` sum and count)."""

    requests: int = 0
    errors: int = 0
    ttft_sum: float = 0.0
    ttft_count: int = 0

    @property
    def error_ratio(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    @property
    def ttft(self) -> float | None:
        return self.ttft_sum / self.ttft_count if self.ttft_count else None

    def __add__(self, other: ServingHealth) -> ServingHealth:
        return ServingHealth(
            self.requests + other.requests,
            self.errors + other.errors,
            self.ttft_sum + other.ttft_sum,
            self.ttft_count + other.ttft_count,
        )


@dataclass(frozen=True)
class Verdict:
    outcome: Literal["pass", "fail", "wait"]
    reason: str = ""


def analyse(new: ServingHealth, old: ServingHealth, gate: RolloutAnalysis) -> Verdict:
    """The new revision's health against the old one's: fail when its error ratio is higher by
    more than `maxErrorRatioIncrease`, or its mean TTFT more than `maxTtftRatio` times the old
    one's (and slower by at least TTFT_NOISE_FLOOR); wait until it answered `minRequests`."""
    if new.requests < gate.min_requests:
        return Verdict("wait", f"{new.requests}/{gate.min_requests} requests on the new revision")
    increase = new.error_ratio - old.error_ratio
    if increase > gate.max_error_ratio_increase:
        return Verdict(
            "fail",
            f"error ratio {new.error_ratio:.1%} against {old.error_ratio:.1%} on the old "
            f"revision (more than +{gate.max_error_ratio_increase:.1%})",
        )
    new_ttft, old_ttft = new.ttft, old.ttft
    if new_ttft is not None and old_ttft is not None:
        if new_ttft > old_ttft * gate.max_ttft_ratio and new_ttft - old_ttft >= TTFT_NOISE_FLOOR:
            return Verdict(
                "fail",
                f"time to first token {new_ttft:.3f}s against {old_ttft:.3f}s on the old "
                f"revision (more than {gate.max_ttft_ratio:g}x)",
            )
    return Verdict("pass")


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class ReplicaState:
    """One replica as observed."""

    name: str
    cluster: str
    revision: str | None
    """The revision its pods run (the lock's record once the driver updated it; None: unknown,
    a replica placed before rollouts, treated as outdated)."""
    ready: bool
    """Every pod Ready at that revision."""
    routed: bool
    """In the ModelService routes now."""
    wave: int = 0
    role_revisions: Mapping[str, str] = field(default_factory=dict)
    """Prefill/decode: the revision each role's pods run, when they differ from ``revision``
    mid-update (empty: every role runs ``revision``)."""

    def mixed(self) -> bool:
        return len(set(self.role_revisions.values())) > 1


@dataclass(frozen=True)
class RolloutState:
    """What a rollout remembers between steps (runtime state, kept by the driver)."""

    target: str
    """The revision being rolled out (after a rollback: the last good one)."""
    stable: str | None = None
    """The last revision every replica ran: where a failed rollout goes back to."""
    phase: Phase = "Progressing"
    reason: str = ""
    failed: str | None = None
    """The revision that failed its analysis: not tried again until the spec changes."""


@dataclass(frozen=True)
class Step:
    """What to do now. Replica names; the driver does them in this order."""

    state: RolloutState
    route: list[str] = field(default_factory=list)
    """Ready at the target: back into the routes."""
    unroute: list[str] = field(default_factory=list)
    """Out of the routes now, and wait for their in-flight requests."""
    update: list[str] = field(default_factory=list)
    """Out of the routes and drained: change their pods to the target revision."""
    retire: list[str] = field(default_factory=list)
    """Surplus outdated replicas (maxSurge): remove once out of the routes and drained."""
    place: int = 0
    """Extra replicas to place at the target revision on spare capacity (maxSurge)."""
    hold: list[str] = field(default_factory=list)
    """Outdated replicas that wait (budget, wave, analysis or pause)."""
    waiting: list[str] = field(default_factory=list)
    """At the target but not Ready yet."""
    min_routable: int = 0
    """Never fewer routable replicas than this."""

    @property
    def done(self) -> bool:
        return self.state.phase in ("Complete", "RolledBack") and not (
            self.route or self.unroute or self.update or self.retire or self.place
        )

    def progress(self, replicas: Sequence[ReplicaState]) -> str:
        """`rollout: 1/3 replicas at revision abc123` (what plan and the PR preview show)."""
        at = sum(1 for r in replicas if r.revision == self.state.target and not r.mixed())
        return f"rollout: {at}/{len(replicas)} replicas at revision {self.state.target}"


def _available(r: ReplicaState, compatible: bool) -> bool:
    return r.routed and r.ready and (compatible or not r.mixed())


def plan_step(
    desired: str,
    replicas: Sequence[ReplicaState],
    spec: Rollout,
    count: int,
    *,
    state: RolloutState | None = None,
    verdict: Verdict | None = None,
    paused: bool = False,
) -> Step:
    """The next step of rolling ``replicas`` to revision ``desired``.

    ``count`` is the deployment's replica count (spec or autoscaled); ``state`` the previous
    step's state (None: no rollout yet); ``verdict`` the analysis of the routed new replicas
    against the old ones since the last step (None: no gate, or nothing to compare yet);
    ``paused``: `modelplane rollout pause` (no new replica leaves the routes).
    """
    state = _next_state(desired, replicas, state, verdict)
    target = state.target
    compatible = spec.prefill_decode_compatible
    max_unavailable, max_surge = spec.budget(count)
    if spec.strategy == "AllAtOnce":
        max_unavailable, max_surge = max(count, len(replicas)), 0
    min_routable = max(0, count - max_unavailable)
    step = Step(state=state, min_routable=min_routable)
    ordered = sorted(replicas, key=lambda r: (r.wave, r.cluster, r.name))
    current = [r for r in ordered if r.revision == target and not r.mixed()]
    outdated = [r for r in ordered if r not in current]

    # Replicas at the target: route the Ready ones, wait for the others.
    for r in current:
        if r.ready and not r.routed:
            step.route.append(r.name)
        elif not r.ready:
            step.waiting.append(r.name)
    # A prefill/decode replica running two revisions must not serve (unless compatible).
    unsafe = [r.name for r in outdated if r.routed and r.mixed() and not compatible]
    step.unroute.extend(unsafe)

    # Replicas counted as routable after this step: what is available now, plus what this
    # step routes, minus what it takes out.
    available = sum(1 for r in ordered if _available(r, compatible) and r.name not in unsafe)
    available += len(step.route)
    surplus = len(replicas) - count  # surge replicas placed beyond the count
    # Outdated replicas already out of the routes: update them (or retire surplus ones).
    for r in outdated:
        if r.routed and r.name not in unsafe:
            continue
        if surplus > 0:
            step.retire.append(r.name)
            surplus -= 1
        else:
            step.update.append(r.name)
    # Which outdated routed replicas may leave the routes now.
    candidates = [r for r in outdated if r.routed and r.name not in unsafe]
    if not candidates:
        # Surge replicas left over (their old replicas went another way): back to the count.
        for r in reversed(current):
            if surplus <= 0 or available - 1 < min_routable:
                break
            if _available(r, compatible):
                step.unroute.append(r.name)
                step.retire.append(r.name)
                available, surplus = available - 1, surplus - 1
        return _finish(step, replicas, target, state)
    gated = _gate_reason(state, verdict, paused, current)
    wave = min(r.wave for r in ordered if not (r.revision == target and _available(r, compatible)))
    if max_surge and not gated:
        in_flight = len(step.waiting) + len(step.update) + len([r for r in current if not r.routed])
        room = count + max_surge - len(replicas)
        step = replace(step, place=max(0, min(room, len(candidates) - in_flight)))
    for r in candidates:
        if gated:
            step.hold.append(r.name)
        elif r.wave != wave:
            step.hold.append(r.name)
        elif available - 1 >= min_routable:
            available -= 1
            step.unroute.append(r.name)
            if surplus > 0:  # a surge replica took its place: this one goes away
                step.retire.append(r.name)
                surplus -= 1
            else:
                step.update.append(r.name)
        else:
            step.hold.append(r.name)
    if gated:
        step = replace(step, state=replace(state, reason=gated))
    return step


def _gate_reason(
    state: RolloutState, verdict: Verdict | None, paused: bool, current: Sequence[ReplicaState]
) -> str:
    """Why no further replica may leave the routes now ("" when one may)."""
    if paused:
        return "paused"
    if state.phase == "Paused":
        return state.reason or "paused"
    if state.phase == "RolledBack":
        return ""  # going back to the stable revision: no gate on the way back
    if verdict is not None and verdict.outcome == "wait" and any(r.routed for r in current):
        return f"analysis: {verdict.reason}"
    return ""


def _next_state(
    desired: str,
    replicas: Sequence[ReplicaState],
    state: RolloutState | None,
    verdict: Verdict | None,
) -> RolloutState:
    revisions = {r.revision for r in replicas}
    if state is None or (state.target != desired and state.failed != desired):
        # A new rollout: the stable revision is the one every replica ran (if they agreed).
        stable = state.stable if state is not None else None
        if len(revisions) == 1:
            stable = next(iter(revisions))
        elif state is not None and state.phase == "Complete":
            stable = state.target
        phase: Phase = "Progressing" if revisions != {desired} else "Complete"
        return RolloutState(target=desired, stable=stable, phase=phase)
    if state.failed == desired:
        return state  # rolled back: stay on the stable revision until the spec changes
    if verdict is not None and verdict.outcome == "fail" and state.phase == "Progressing":
        if state.stable is None or state.stable == desired:
            reason = (
                f"revision {desired} halted: {verdict.reason} (no stable revision to go back to)"
            )
            return replace(state, phase="Paused", reason=reason)
        return RolloutState(
            target=state.stable,
            stable=state.stable,
            phase="RolledBack",
            reason=f"revision {desired} rolled back: {verdict.reason}",
            failed=desired,
        )
    return state


def _finish(step: Step, replicas: Sequence[ReplicaState], target: str, state: RolloutState) -> Step:
    everyone = all(r.revision == target and r.ready and r.routed for r in replicas)
    if everyone and not (step.route or step.update or step.retire or step.unroute):
        if state.phase == "RolledBack":
            return replace(step, state=replace(state, stable=target))
        return replace(step, state=replace(state, phase="Complete", stable=target, reason=""))
    return step


@dataclass(frozen=True)
class Progress:
    """Where a deployment's rollout stands by the lock (plan, preview): how many replicas
    run the spec's revision and which change next."""

    target: str
    at: int
    total: int
    next: tuple[str, ...]

    @property
    def line(self) -> str:
        text = f"rollout: {self.at}/{self.total} replicas at revision {self.target}"
        return text + (f"; next: {', '.join(self.next)}" if self.next else "")

    def as_json(self) -> dict[str, Any]:
        return {"target": self.target, "at": self.at, "total": self.total, "next": list(self.next)}


def lock_progress(
    deployment: ModelDeployment,
    replicas: Sequence[LockedReplica],
    labels: Mapping[str, Mapping[str, str]] | None = None,
    caches: Mapping[str, ModelCache] | None = None,
) -> Progress | None:
    """The rollout the lock shows for ``deployment`` (None: every replica at the spec's
    revision, or none recorded yet). Next: the first outdated replicas in rollout order
    (wave, cluster, name), as many as maxUnavailable allows."""
    target = revision(deployment, caches)
    recorded = [r for r in replicas if r.revision is not None]
    if not recorded or all(r.revision == target for r in replicas):
        return None
    rollout = deployment.spec.rollout
    waves, labels = rollout.waves, labels or {}
    order = sorted(
        (r for r in replicas if r.revision != target),
        key=lambda r: (wave_of(r.cluster, labels.get(r.cluster, {}), waves), r.cluster, r.name),
    )
    unavailable, _ = rollout.budget(len(replicas))
    at = sum(1 for r in replicas if r.revision == target)
    return Progress(target, at, len(replicas), tuple(r.name for r in order[: max(1, unavailable)]))


__all__ = [
    "CacheUse",
    "Progress",
    "cache_of",
    "cache_use",
    "source_of",
    "lock_progress",
    "ReplicaState",
    "RolloutState",
    "ServingHealth",
    "Step",
    "Verdict",
    "analyse",
    "at_revision",
    "plan_step",
    "revision",
    "revision_of",
    "template",
    "wave_of",
]
