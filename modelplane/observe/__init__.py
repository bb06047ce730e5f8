"""Observe the fleet's clusters: the only modelplane code (besides Pulumi) that reads them.

    observation = observe_fleet(fleet_spec, fleet_dir)

Every cluster is read in its own thread, each request bounded by ``timeout`` seconds and
the whole cluster by ``deadline``; a cluster that is down is an observation with its error
(never a traceback). Kubeconfigs come from each InferenceCluster's ``secretRef`` (resolved
as the stacks do: ``MODELPLANE_SECRET_*``, then ``file:``) or from ``kubeconfigs`` (a cloud
cluster's stack output, which the driver reads: this package never talks to Pulumi); they
are secrets, never logged. The ModelService routes are read on the gateway's cluster.
What `reconcile` remembers between rounds is the driver's (`modelplane.driver.state`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import PlacementLock
from modelplane.health.observation import ClusterObservation, Observation, RoutesObservation
from modelplane.observe.cluster import DEFAULT_STALE_AFTER, observe_cluster, observe_routes
from modelplane.observe.kube import KubeError, KubeReader, parse_kubeconfig
from modelplane.secrets import SecretNotFound, resolve_secret
from modelplane.stacks import cache_clusters

DEFAULT_TIMEOUT = 5.0

__all__ = [
    "kubeconfig_for",
    "observe_fleet",
    "probe_reachable",
]


def kubeconfig_for(
    fleet: FleetSpec,
    name: str,
    fleet_dir: Path,
    env: Mapping[str, str],
    kubeconfigs: Mapping[str, str],
) -> tuple[str | None, str]:
    """The cluster's kubeconfig text, or None and why not."""
    if name in kubeconfigs:
        return kubeconfigs[name], ""
    source = fleet.clusters[name].spec.cluster
    existing = source.existing
    if existing is None:
        return None, f"{source.source} cluster: no kubeconfig (its cluster stack has not run)"
    if existing.secret_ref is None:
        return None, "renderTo cluster: nothing to observe"
    ref = existing.secret_ref
    try:
        found = resolve_secret(
            ref.name, ref.key, config=lambda _k: None, env=env, base_dir=fleet_dir
        )
    except SecretNotFound as exc:
        return None, f"no kubeconfig: {exc}"
    return found.value, ""


def _namespaces(fleet: FleetSpec, lock: PlacementLock | None, cluster: str) -> list[str]:
    if lock is None:
        return sorted({d.metadata.namespace or "default" for d in fleet.deployments.values()})
    out = set()
    for key, dep in lock.deployments.items():
        if any(r.cluster == cluster for r in dep.replicas):
            out.add(key.split("/", 1)[0])
    return sorted(out)


def observe_fleet(
    fleet: FleetSpec,
    fleet_dir: str | Path,
    *,
    lock: PlacementLock | None = None,
    env: Mapping[str, str] | None = None,
    kubeconfigs: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float | None = None,
    now: float | None = None,
    metrics: bool = False,
    stale_after: float = DEFAULT_STALE_AFTER,
    metrics_of: Iterable[str] = (),
    only_replicas: bool = False,
) -> Observation:
    """Observe every cluster in parallel; at most ``deadline`` seconds in all (default
    4 x timeout). ``lock``: whose namespaces to read replicas in (default: every
    deployment's namespace). ``metrics``: also read the serving pods' `/metrics` of the
    autoscaled deployments' replicas and of every draining replica in ``lock``: from the
    cluster's Prometheus through its API server's service proxy (samples older than
    ``stale_after`` seconds count as missing), else each serving pod's `/metrics` through
    the pod proxy. ``metrics_of``: deployments whose replicas' metrics are read too (a
    rollout watching them). ``only_replicas``: the replicas of the deployments in
    ``metrics_of`` alone, on the clusters that host them in ``lock`` (no pools, gateway
    address, caches or routes; the other clusters are left out): a rollout's readiness and
    drain checks."""
    env = os.environ if env is None else env
    fleet_dir = Path(fleet_dir)
    limit = deadline if deadline is not None else 4 * timeout
    at = time.time() if now is None else now
    results: dict[str, ClusterObservation] = {}
    threads: dict[str, threading.Thread] = {}
    wanted: dict[str, list[str]] = {}
    also = set(metrics_of)
    if (metrics or also) and lock is not None:
        for key, dep in lock.deployments.items():
            spec = fleet.deployments.get(key)
            if spec is None:
                continue
            # Draining replicas of any deployment (a drain moving them, driver.drain): is
            # anything still in flight?
            for r in dep.replicas:
                if key in also or (metrics and (spec.spec.autoscaling is not None or r.draining)):
                    wanted.setdefault(r.cluster, []).append(r.name)
    hosts: set[str] | None = None
    if only_replicas:
        hosts = set()
        if lock is not None:
            for key in also:
                dep = lock.deployments.get(key)
                hosts.update(r.cluster for r in (dep.replicas if dep else ()))
    routes: list[RoutesObservation] = []
    gateway_ref = fleet.gateway.spec.cluster.inference_cluster_ref if fleet.gateway else None
    # Every front door holds the same routes: read on each, the first one read counts.
    doors = set(fleet.gateway.spec.front_door_clusters) if fleet.gateway else set()
    service_namespaces = sorted(
        {s.metadata.namespace or "default" for s in fleet.services.values()}
    )

    def read_routes(text: str, where: str) -> None:
        try:
            reader = KubeReader(parse_kubeconfig(text, str(fleet_dir)), timeout=timeout)
        except KubeError as exc:
            routes.append(RoutesObservation(observed=False, error=f"{where}: {exc}"))
            return
        routes.append(observe_routes(reader, service_namespaces))

    def one(name: str, text: str) -> None:
        started = time.monotonic()
        try:
            reader = KubeReader(parse_kubeconfig(text, str(fleet_dir)), timeout=timeout)
        except KubeError as exc:
            results[name] = ClusterObservation(name, observed=False, error=str(exc))
            return
        caches = [k for k in fleet.caches if name in cache_clusters(fleet, k)]
        observed = observe_cluster(
            name,
            reader,
            _namespaces(fleet, lock, name),
            [] if only_replicas else caches,
            wanted.get(name, ()),
            now=at,
            stale_after=stale_after,
            only_replicas=only_replicas,
        )
        if name in doors and not only_replicas:
            if observed.reachable:
                routes.append(observe_routes(reader, service_namespaces))
            else:
                error = f"gateway cluster {name}: {observed.error}"
                routes.append(RoutesObservation(observed=False, error=error))
        if time.monotonic() - started <= limit:
            results[name] = observed

    if fleet.gateway is not None and gateway_ref is None and not only_replicas:
        ref = fleet.gateway.spec.cluster.existing.secret_ref  # type: ignore[union-attr]
        try:
            found = resolve_secret(
                ref.name, ref.key, config=lambda _k: None, env=env, base_dir=fleet_dir
            )
            gw = threading.Thread(
                target=read_routes, args=(found.value, "gateway"), daemon=True, name="observe-gw"
            )
            threads["\0gateway"] = gw
            gw.start()
        except SecretNotFound as exc:
            routes.append(RoutesObservation(observed=False, error=f"gateway: no kubeconfig: {exc}"))
    for name in fleet.clusters:
        if hosts is not None and name not in hosts:
            continue
        text, why = kubeconfig_for(fleet, name, fleet_dir, env, kubeconfigs or {})
        if text is None:
            results[name] = ClusterObservation(name, observed=False, error=why)
            if name in doors:
                routes.append(RoutesObservation(observed=False, error=f"gateway cluster: {why}"))
            continue
        thread = threading.Thread(
            target=one, args=(name, text), daemon=True, name=f"observe-{name}"
        )
        threads[name] = thread
        thread.start()
    end = time.monotonic() + limit
    for name, thread in threads.items():
        thread.join(max(0.0, end - time.monotonic()))
        if name not in results and name in fleet.clusters:
            results[name] = ClusterObservation(
                name,
                reachable=False,
                error=f"no complete answer within {limit:.0f}s",
                duration=limit,
            )
    seen_routes = None
    if fleet.gateway is not None and not only_replicas:
        read = [r for r in routes if r.observed]
        seen_routes = (
            (read or routes)[0]
            if routes
            else RoutesObservation(observed=False, error=f"no complete answer within {limit:.0f}s")
        )
    return Observation(at, {n: results[n] for n in sorted(results)}, seen_routes)


def probe_reachable(
    targets: Mapping[str, str], fleet_dir: str | Path, timeout: float = 2.0
) -> dict[str, bool]:
    """Whether each cluster's API server answers `GET /version` (cluster -> kubeconfig
    text), all in parallel, at most ``timeout`` seconds: the cheap check `reconcile` runs
    between rounds so that a cluster going away (or coming back) starts a round at once."""
    answers: dict[str, bool] = {}

    def one(name: str, text: str) -> None:
        try:
            KubeReader(parse_kubeconfig(text, str(fleet_dir)), timeout=timeout).get("/version")
            answers[name] = True
        except KubeError:
            answers[name] = False

    threads = [
        threading.Thread(target=one, args=item, daemon=True, name=f"probe-{item[0]}")
        for item in sorted(targets.items())
    ]
    for thread in threads:
        thread.start()
    end = time.monotonic() + timeout + 1.0
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    return {name: answers.get(name, False) for name in sorted(targets)}
