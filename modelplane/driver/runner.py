"""Run one operation over a fleet's stacks, tier by tier (no Pulumi here).

Stacks of one tier run concurrently in a thread pool bounded by ``parallel``. A stack that
does not end well (failed, locked, skipped) does not stop its siblings, but every stack that
is blocked by it is skipped and reported. Forward operations (preview, up, refresh) run
clusters → caches → deployments → gateway, and a stack is blocked by the stacks it depends
on; ``destroy`` runs in reverse, and a stack is blocked by the stacks that depend on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby

from modelplane.driver.results import Outcome, StackResult
from modelplane.stacks import FLEET_ADDRESS_STACK, StackUnit, Tier

RunStack = Callable[[StackUnit], StackResult]


def blockers(units: Iterable[StackUnit], reverse: bool) -> dict[str, set[str]]:
    """For each stack, the stacks that must end well before it may run."""
    units = list(units)
    names = {u.name for u in units}
    out: dict[str, set[str]] = {u.name: set() for u in units}
    for u in units:
        for dep in u.depends_on:
            if dep not in names:
                continue
            if reverse:
                out[dep].add(u.name)
            else:
                out[u.name].add(dep)
    return out


def run_tiers(
    units: list[StackUnit],
    run: RunStack,
    *,
    parallel: int = 4,
    reverse: bool = False,
    blocking: Callable[[StackResult], bool] | None = None,
    on_skip: Callable[[StackResult], None] | None = None,
) -> list[StackResult]:
    """Run ``run`` for every unit, tier by tier; results in execution order.

    ``blocking(result)`` says whether a finished stack blocks the stacks after it (default:
    anything that did not end well).
    """
    if parallel < 1:
        raise ValueError("parallel must be at least 1")
    blocking = blocking or (lambda r: not r.ok)
    needs = blockers(units, reverse)
    ordered = sorted(units, key=lambda u: (-u.tier if reverse else u.tier, u.name))
    results: dict[str, StackResult] = {}
    order: list[str] = []
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="stack") as pool:
        for _tier, group in groupby(ordered, key=lambda u: u.tier):
            runnable: list[StackUnit] = []
            for unit in group:
                bad = sorted(n for n in needs[unit.name] if n in results and blocking(results[n]))
                if bad:
                    word = "depends on" if not reverse else "is still used by"
                    skipped = StackResult(
                        unit.name,
                        unit.tier,
                        Outcome.SKIPPED,
                        note=f"{word} {', '.join(bad)}, which did not succeed",
                    )
                    results[unit.name] = skipped
                    order.append(unit.name)
                    if on_skip:
                        on_skip(skipped)
                else:
                    runnable.append(unit)
            futures = {u.name: pool.submit(_guarded, run, u) for u in runnable}
            for u in runnable:
                results[u.name] = futures[u.name].result()
                order.append(u.name)
    return [results[n] for n in order]


def _guarded(run: RunStack, unit: StackUnit) -> StackResult:
    start = time.monotonic()
    try:
        return run(unit)
    except Exception as exc:  # one stack's bug must not take its siblings down
        error = f"{type(exc).__name__}: {exc}"
        return StackResult.failed(unit, error, time.monotonic() - start)


def tier_of_stack_name(name: str) -> Tier:
    """The tier of a stack found in the backend, from its derived name."""
    if name.startswith("cluster-"):
        return Tier.CLUSTERS
    if name.startswith("path-"):
        return Tier.PATHS
    if name.startswith("cache-"):
        return Tier.CACHES
    if name.startswith("deploy-"):
        return Tier.DEPLOYMENTS
    if name == FLEET_ADDRESS_STACK:
        return Tier.ADDRESS
    return Tier.GATEWAY
