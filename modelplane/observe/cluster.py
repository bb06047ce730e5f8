"""Observe one cluster: nodes per pool, devices, gateway address, each replica's pods."""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from modelplane.api.names import workload_name
from modelplane.autoscale import parse_metrics, replica_values
from modelplane.cel.quantity import parse_quantity
from modelplane.health.observation import (
    CacheObservation,
    ClusterObservation,
    PoolObservation,
    ReplicaObservation,
    RoutesObservation,
)
from modelplane.network.hop import replica_of_ref
from modelplane.observe.kube import KubeError, KubeReader
from modelplane.observe.prometheus import (
    LWS_GROUP,
    POD_TEMPLATE_HASH,
    PROMETHEUS_NAMESPACE,
    PROMETHEUS_PROXY,
    PROMETHEUS_SERVICE,
    PodSamples,
    PrometheusAnswerError,
    metrics_query,
    parse_samples,
)

PROMETHEUS = "prometheus"
POD_PROXY = "pod-proxy"
PROMETHEUS_SERVICE_REF = f"{PROMETHEUS_NAMESPACE}/{PROMETHEUS_SERVICE}"
DEFAULT_STALE_AFTER = 60.0  # seconds: a Prometheus sample older than this is missing

POOL_LABEL = "modelplane.ai/pool"
REPLICA_LABEL = "modelplane.ai/replica"
CACHE_LABEL = "modelplane.ai/modelcache"
CACHE_CURRENT = "modelplane.ai/cache-current"  # modelplane.components.model_cache.CURRENT
ROLE_LABEL = "modelplane.ai/role"
SERVING_ROLES = ("unified", "prefill", "decode")
GATEWAY_PATH = (
    "/apis/gateway.networking.k8s.io/v1/namespaces/modelplane-system/gateways/inference-gateway"
)
RESOURCE_API = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1")
LWS_API = "leaderworkerset.x-k8s.io/v1"
SERVICE_LABEL = "modelplane.ai/service"
ENDPOINT_LABEL = "modelplane.ai/endpoint"
ROUTE_API = "gateway.networking.k8s.io/v1"
ENVOY_BACKEND_API = "gateway.envoyproxy.io/v1alpha1"


APPS_API = "apps/v1"


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object's controller (its one ownerReference with `controller: true`), else None."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    found = [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True]
    return found[0] if len(found) == 1 else None


def owned_by_workload(
    pod: Mapping[str, Any],
    deployments: Collection[str] = (),
    leader_worker_sets: Collection[str] = (),
) -> bool:
    """Whether the pod's controller is one the named workloads make (pure; security M9/H2):
    a ReplicaSet `<deployment>-<pod-template-hash>` of one of `deployments` (the Deployment
    controller's name for it), or a StatefulSet of one of `leader_worker_sets`: `<lws>`
    (leader pods) or `<lws>-<group>` (a group's workers). A pod without such a controller
    (a bare pod, a Job's, another Deployment's or StatefulSet's) is not the replica's."""
    ref = controller_ref(pod)
    if ref is None or ref.get("apiVersion") != APPS_API:
        return False
    kind, name = ref.get("kind"), str(ref.get("name") or "")
    if kind == "ReplicaSet":
        return any(re.fullmatch(re.escape(d) + "-" + POD_TEMPLATE_HASH, name) for d in deployments)
    if kind == "StatefulSet":
        return any(
            name == lws or re.fullmatch(re.escape(lws) + "-" + LWS_GROUP, name)
            for lws in leader_worker_sets
        )
    return False


def replica_pod_owned(pod: Mapping[str, Any], leader_worker_sets: Collection[str] = ()) -> bool:
    """Whether a pod labelled for a replica and role is owned by that role's workload
    (`workload_name(replica, role)`): its LeaderWorkerSet's StatefulSets when
    `leader_worker_sets` (the LeaderWorkerSets of the pod's namespace) names it, else its
    Deployment's ReplicaSets."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    replica, role = labels.get(REPLICA_LABEL), labels.get(ROLE_LABEL)
    if not replica or not role:
        return False
    workload = workload_name(str(replica), str(role))
    if workload in leader_worker_sets:
        return owned_by_workload(pod, leader_worker_sets=[workload])
    return owned_by_workload(pod, deployments=[workload])


def _ready(obj: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition_time(pod: dict[str, Any], kind: str) -> float | None:
    """When the pod's condition `kind` last became True (None: it is not True)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            if cond.get("status") != "True":
                return None
            return _epoch(cond.get("lastTransitionTime"))
    return None


def _started_time(pod: dict[str, Any]) -> float | None:
    """When the last of the pod's containers started running (None: one is not running)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    times = [
        _epoch(((cs.get("state") or {}).get("running") or {}).get("startedAt")) for cs in statuses
    ]
    if not statuses or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def _claims(pod: dict[str, Any]) -> list[str]:
    """The PersistentVolumeClaims the pod mounts."""
    return [
        str(v["persistentVolumeClaim"].get("claimName"))
        for v in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(v.get("persistentVolumeClaim"), dict)
    ]


def _weights_time(pod: dict[str, Any], hydrated: Mapping[str, float]) -> float | None:
    """When the pod's weights were on its node: a ModelCache's claim it mounts hydrated (or
    the pod's creation, if later); else, a pod with init containers (a download step), its
    `Initialized`; else None (the engine loads them itself, between started and ready)."""
    at = [hydrated[c] for c in _claims(pod) if c in hydrated]
    if at:
        born = _epoch((pod.get("metadata") or {}).get("creationTimestamp"))
        return max([*at, born]) if born is not None else max(at)
    if (pod.get("spec") or {}).get("initContainers"):
        return _condition_time(pod, "Initialized")
    return None


def start_phases(
    pods: list[dict[str, Any]], hydrated: Mapping[str, float] | None = None
) -> dict[str, float]:
    """A replica's start phases from its pods: each the time the last pod reached it, and only
    once every pod did (`created`: the first pod's creation). `hydrated`: per ModelCache
    claim name, when its hydration Job completed (`weights`)."""
    if not pods:
        return {}
    out: dict[str, float] = {}
    born = [_epoch((p.get("metadata") or {}).get("creationTimestamp")) for p in pods]
    if all(t is not None for t in born):
        out["created"] = min(t for t in born if t is not None)
    cached = hydrated or {}
    for phase, reached in (
        ("scheduled", lambda p: _condition_time(p, "PodScheduled")),
        ("weights", lambda p: _weights_time(p, cached)),
        ("started", _started_time),
        ("ready", lambda p: _condition_time(p, "Ready")),
    ):
        times = [reached(p) for p in pods]
        if all(t is not None for t in times):
            out[phase] = max(t for t in times if t is not None)
    return out


def unschedulable(pods: list[dict[str, Any]]) -> tuple[float | None, str]:
    """Since when some pod cannot be placed by the scheduler (PodScheduled False with
    reason Unschedulable: no node fits, or a cloud scale-up that failed or has not come), and
    the scheduler's message; (None, "") when every pod is placed or being placed."""
    since: float | None = None
    message = ""
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                at = _epoch(cond.get("lastTransitionTime")) or _epoch(
                    (pod.get("metadata") or {}).get("creationTimestamp")
                )
                if at is not None and (since is None or at < since):
                    since, message = at, str(cond.get("message") or "")[:240]
    return since, message


def _pod_reason(pod: dict[str, Any]) -> str | None:
    """Why a pod is not Ready, in one line (None when it is)."""
    if _ready(pod):
        return None
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return f"{name}: {waiting['reason']}"
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" and cond.get("type") in ("PodScheduled", "Ready"):
            text = cond.get("reason") or f"{cond.get('type')} False"
            if cond.get("message"):
                text += f" ({str(cond['message'])[:160]})"
            return f"{name}: {text}"
    return f"{name}: {status.get('phase') or 'not Ready'}"


GPU_DRIVER = "gpu.nvidia.com"


def _smallest_memory(into: dict[str, str], pool: str, devices: list[dict[str, Any]]) -> None:
    """Keep, per pool, the smallest published `memory` capacity (ResourceSlice devices[])."""
    for device in devices:
        memory = ((device.get("capacity") or {}).get("memory") or {}).get("value")
        if not isinstance(memory, str):
            continue
        try:
            value = parse_quantity(memory)
        except ValueError:
            continue
        current = into.get(pool)
        if current is None or value < parse_quantity(current):
            into[pool] = memory


class ClusterReader:
    """Everything `observe` reads from one cluster, through one `KubeReader`."""

    def __init__(self, reader: KubeReader) -> None:
        self.reader = reader
        self._resource_api: str | None = None

    def resource_api(self) -> str | None:
        """The served resource.k8s.io version (None: no DRA on this cluster)."""
        if self._resource_api is None:
            for version in RESOURCE_API:
                try:
                    self.reader.get(f"/apis/{version}")
                except KubeError as exc:
                    if exc.status == 404:
                        continue
                    raise
                self._resource_api = version
                break
        return self._resource_api

    def pools(self) -> dict[str, PoolObservation]:
        nodes = self.reader.items("/api/v1/nodes")
        pool_of: dict[str, str] = {}
        counts: dict[str, list[int]] = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            pool = (meta.get("labels") or {}).get(POOL_LABEL)
            if not pool:
                continue
            pool_of[str(meta.get("name"))] = pool
            entry = counts.setdefault(pool, [0, 0, 0])
            entry[0] += 1
            entry[1] += 1 if _ready(node) else 0
        gpu_memory: dict[str, str] = {}
        api = self.resource_api()
        if api is not None:
            for rs in self.reader.items(f"/apis/{api}/resourceslices"):
                spec = rs.get("spec") or {}
                pool = pool_of.get(str(spec.get("nodeName")))
                if pool is None:
                    continue
                devices = spec.get("devices") or []
                counts[pool][2] += len(devices)
                if spec.get("driver") == GPU_DRIVER:
                    _smallest_memory(gpu_memory, pool, devices)
        return {
            p: PoolObservation(*c, gpu_memory=gpu_memory.get(p)) for p, c in sorted(counts.items())
        }

    def gateway_address(self) -> tuple[bool, str | None]:
        """Whether the workload Gateway exists, and its first address."""
        try:
            gw = self.reader.get(GATEWAY_PATH)
        except KubeError as exc:
            if exc.status == 404:
                return False, None
            raise
        for address in (gw.get("status") or {}).get("addresses") or []:
            if address.get("value"):
                return True, str(address["value"])
        return True, None

    def pod_metrics(self, pod: dict[str, Any]) -> dict[str, float]:
        """One serving pod's `/metrics` through the API server's pod proxy (its container
        port named `http`, else 8000), parsed."""
        meta = pod.get("metadata") or {}
        port = 8000
        for container in (pod.get("spec") or {}).get("containers") or []:
            for p in container.get("ports") or []:
                if p.get("name") == "http" and p.get("containerPort"):
                    port = int(p["containerPort"])
        ns, name = meta.get("namespace", "default"), meta.get("name", "")
        text = self.reader.get_text(f"/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/metrics")
        return parse_metrics(text)

    def prometheus_samples(
        self,
        replicas: Iterable[str],
        now: float,
        stale_after: float,
        namespaces: Iterable[str] | None = None,
    ) -> dict[str, dict[str, PodSamples]]:
        """The cluster's Prometheus (the serving stack's), through the API server's service
        proxy: the newest samples per replica and pod within `stale_after` seconds of `now`
        (`namespaces`: of pods in these only). Raises KubeError (absent, unreachable) or
        PrometheusAnswerError."""
        query = metrics_query(replicas, stale_after, namespaces)
        try:
            body = self.reader.get(PROMETHEUS_PROXY, query=query, time=f"{now:.3f}")
        except KubeError as exc:
            if exc.status == 404:
                raise KubeError(404, f"no Service {PROMETHEUS_SERVICE_REF}") from None
            if exc.status:
                raise KubeError(exc.status, f"service proxy: HTTP {exc.status}") from None
            raise
        return parse_samples(body, now, stale_after)

    def replica_metrics(
        self,
        pods: list[dict[str, Any]],
        scraped: dict[str, PodSamples] | None = None,
        unscraped: str = "prometheus not asked",
    ) -> tuple[dict[str, float] | None, str | None, str | None, str | None]:
        """A replica's metric values over its serving pods, or None and why; the source
        and why it is not Prometheus. `scraped`: the replica's pods' Prometheus samples
        (None: Prometheus did not answer, `unscraped` says why); a pod without a fresh
        sample there sends the whole replica through the pod proxy."""
        if not pods:
            return None, "no pods", None, None
        for pod in pods:
            if not _ready(pod):
                name = (pod.get("metadata") or {}).get("name", "?")
                return None, f"{name} not Ready", None, None
        names = [str((p.get("metadata") or {}).get("name", "?")) for p in pods]
        fallback = unscraped
        if scraped is not None:
            # A sample counts only from the pod's own namespace (a pod of that name and label
            # elsewhere is not this replica's: security M9).
            spaces = [str((p.get("metadata") or {}).get("namespace", "")) for p in pods]
            scraped = {
                n: scraped[n]
                for n, ns in zip(names, spaces, strict=True)
                if n in scraped and scraped[n].namespace == ns
            }
            absent = [n for n in names if n not in scraped]
            if not absent:
                values = replica_values([scraped[n].values for n in names])
                if values:
                    return values, None, PROMETHEUS, None
                fallback = "prometheus: no vLLM metrics"
            else:
                fallback = "prometheus: no fresh sample of " + ", ".join(absent)
        samples = []
        for pod, name in zip(pods, names, strict=True):
            try:
                samples.append(self.pod_metrics(pod))
            except KubeError as exc:
                return None, f"{name}: /metrics unreadable ({exc})", None, fallback
        values = replica_values(samples)
        if not values:
            return None, "no vLLM metrics in /metrics", None, fallback
        return values, None, POD_PROXY, fallback

    def replicas(
        self,
        namespaces: Iterable[str],
        metrics_for: Iterable[str] = (),
        now: float | None = None,
        stale_after: float = DEFAULT_STALE_AFTER,
        hydrated: Mapping[str, float] | None = None,
    ) -> dict[str, ReplicaObservation]:
        """Every replica in `namespaces` by its pods (`hydrated`: ModelCache claims' hydration
        times, for the `weights` phase)."""
        pods: dict[str, list[dict[str, Any]]] = {}
        claims: dict[str, list[bool]] = {}
        groups: dict[str, list[int]] = {}
        api = None
        spaces = sorted(set(namespaces))
        for ns in spaces:
            labelled = self.reader.items(
                f"/api/v1/namespaces/{ns}/pods", labelSelector=REPLICA_LABEL
            )
            api = api or self.resource_api()
            if api is not None:
                for claim in self.reader.items(
                    f"/apis/{api}/namespaces/{ns}/resourceclaims", labelSelector=REPLICA_LABEL
                ):
                    replica = claim["metadata"]["labels"][REPLICA_LABEL]
                    allocated = bool((claim.get("status") or {}).get("allocation"))
                    claims.setdefault(replica, []).append(allocated)
            leader_worker_sets: set[str] = set()
            for lws in self.reader.items(
                f"/apis/{LWS_API}/namespaces/{ns}/leaderworkersets", labelSelector=REPLICA_LABEL
            ):
                replica = lws["metadata"]["labels"][REPLICA_LABEL]
                leader_worker_sets.add(str(lws["metadata"].get("name")))
                want = int((lws.get("spec") or {}).get("replicas") or 1)
                ready = int((lws.get("status") or {}).get("readyReplicas") or 0)
                entry = groups.setdefault(replica, [0, 0])
                entry[0] += want
                entry[1] += ready
            # A pod counts for its replica only when the replica's own Deployment or
            # LeaderWorkerSet owns it: a labelled pod of another owner (a bare pod, a Job's,
            # another workload's) is not read, Ready or counted (security M9, H2).
            for pod in labelled:
                labels = (pod.get("metadata") or {}).get("labels") or {}
                if labels.get(ROLE_LABEL) in SERVING_ROLES and replica_pod_owned(
                    pod, leader_worker_sets
                ):
                    pods.setdefault(labels[REPLICA_LABEL], []).append(pod)
        out = {}
        wanted = set(metrics_for)
        scraped: dict[str, dict[str, PodSamples]] | None = None
        unscraped = "prometheus not asked"
        if wanted & set(pods):
            try:
                scraped = self.prometheus_samples(
                    sorted(wanted), time.time() if now is None else now, stale_after, spaces
                )
            except (KubeError, PrometheusAnswerError) as exc:
                unscraped = f"prometheus: {exc}"
        for replica in sorted({*pods, *claims, *groups}):
            mine = pods.get(replica, [])
            reasons = tuple(sorted(r for r in (_pod_reason(p) for p in mine) if r))
            created = [
                t for t in (_epoch(p["metadata"].get("creationTimestamp")) for p in mine) if t
            ]
            by_role: dict[str, float] = {}
            for p in mine:
                role = ((p.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL)
                born = _epoch(p["metadata"].get("creationTimestamp"))
                if role and born:
                    by_role[role] = min(born, by_role.get(role, born))
            c = claims.get(replica, [])
            g = groups.get(replica, [0, 0])
            stuck = unschedulable(mine)
            values, why, source, fallback = None, None, None, None
            if replica in wanted:
                values, why, source, fallback = self.replica_metrics(
                    mine, None if scraped is None else scraped.get(replica, {}), unscraped
                )
            out[replica] = ReplicaObservation(
                pods=len(mine),
                ready_pods=sum(1 for p in mine if _ready(p)),
                claims=len(c),
                allocated_claims=sum(c),
                groups=g[0],
                ready_groups=g[1],
                reasons=reasons,
                created=min(created) if created else None,
                role_created=by_role,
                phases=start_phases(mine, hydrated),
                unschedulable_since=stuck[0],
                unschedulable=stuck[1],
                running_pods=sum(
                    1 for p in mine if (p.get("status") or {}).get("phase") == "Running"
                ),
                metrics=values,
                metrics_error=why,
                metrics_source=source,
                metrics_fallback=fallback,
            )
        return out


def _job_state(job: dict[str, Any]) -> CacheObservation:
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") == "Failed":
            return CacheObservation("Failed", str(cond.get("reason") or cond.get("message") or ""))
    if int(status.get("succeeded") or 0) > 0:
        return CacheObservation("Hydrated")
    return CacheObservation("Hydrating", f"{int(status.get('failed') or 0)} failed attempt(s)")


def _current_last(job: dict[str, Any]) -> tuple[int, str]:
    meta = job.get("metadata") or {}
    current = (meta.get("labels") or {}).get(CACHE_CURRENT)
    # "true": the cache's own source; absent: a Job from before sources had Jobs of their own.
    rank = {"true": 2, None: 1}.get(current, 0)
    return rank, str(meta.get("name") or "")


def observe_caches(reader: KubeReader, caches: Iterable[str]) -> dict[str, CacheObservation]:
    """Each cache (`ns/name`) by its hydration Job (labelled `modelplane.ai/modelcache`)."""
    return read_caches(reader, caches)[0]


def read_caches(
    reader: KubeReader, caches: Iterable[str]
) -> tuple[dict[str, CacheObservation], dict[str, float]]:
    """`observe_caches`, and per claim a completed hydration Job fills, when it completed."""
    out: dict[str, CacheObservation] = {}
    hydrated: dict[str, float] = {}
    wanted = sorted(set(caches))
    for ns in sorted({key.split("/", 1)[0] for key in wanted}):
        jobs = reader.items(f"/apis/batch/v1/namespaces/{ns}/jobs", labelSelector=CACHE_LABEL)
        # A cache's own source's Job last (`modelplane.ai/cache-current`), so it is the one
        # reported; the Jobs of sources replicas still read, and its prune Job, before it.
        jobs = sorted(jobs, key=_current_last)
        by_cache = {f"{ns}/{j['metadata']['labels'][CACHE_LABEL]}": _job_state(j) for j in jobs}
        for job in jobs:
            done = _epoch((job.get("status") or {}).get("completionTime"))
            if done is not None and int((job.get("status") or {}).get("succeeded") or 0) > 0:
                for claim in _claims(((job.get("spec") or {}).get("template")) or {}):
                    hydrated[claim] = done
        for key in wanted:
            if key.startswith(f"{ns}/"):
                out[key] = by_cache.get(key, CacheObservation("Missing", "no hydration Job"))
    return out, hydrated


def observe_cluster(
    name: str,
    reader: KubeReader,
    namespaces: Iterable[str],
    caches: Iterable[str] = (),
    metrics_for: Iterable[str] = (),
    now: float | None = None,
    stale_after: float = DEFAULT_STALE_AFTER,
    only_replicas: bool = False,
) -> ClusterObservation:
    """One cluster; an unreachable one is an observation with the error, never a raise.
    ``only_replicas``: the replicas alone (no pools, gateway address or caches): what a
    rollout step waits on, read several times a second, and half the requests."""
    started = time.monotonic()
    cluster = ClusterReader(reader)
    if only_replicas:
        try:
            replicas = cluster.replicas(namespaces, metrics_for, now, stale_after)
        except KubeError as exc:
            return ClusterObservation(
                name, reachable=False, error=str(exc), duration=time.monotonic() - started
            )
        except (KeyError, TypeError, ValueError) as exc:
            return ClusterObservation(
                name,
                reachable=True,
                error=f"replicas: {exc}",
                duration=time.monotonic() - started,
            )
        return ClusterObservation(
            name, reachable=True, replicas=replicas, duration=time.monotonic() - started
        )
    try:
        pools = cluster.pools()
    except KubeError as exc:
        return ClusterObservation(
            name, reachable=False, error=str(exc), duration=time.monotonic() - started
        )
    # The API answers: what cannot be read below is reported, the cluster stays reachable.
    problems = []
    found, address = True, None
    replicas: dict[str, ReplicaObservation] = {}
    try:
        found, address = cluster.gateway_address()
    except KubeError as exc:
        problems.append(f"gateway: {exc}")
    cache_states: dict[str, CacheObservation] = {}
    hydrated: dict[str, float] = {}
    try:
        cache_states, hydrated = read_caches(reader, caches)
    except (KubeError, KeyError, TypeError, ValueError) as exc:
        problems.append(f"caches: {exc}")
    try:
        replicas = cluster.replicas(namespaces, metrics_for, now, stale_after, hydrated)
    except (KubeError, KeyError, TypeError, ValueError) as exc:
        problems.append(f"replicas: {exc}")
    return ClusterObservation(
        name,
        reachable=True,
        error="; ".join(problems) or None,
        pools=pools,
        gateway_address=address,
        gateway_found=found,
        replicas=replicas,
        caches=cache_states,
        duration=time.monotonic() - started,
    )


def observe_routes(reader: KubeReader, namespaces: Iterable[str]) -> RoutesObservation:
    """The ModelService HTTPRoutes (labelled `modelplane.ai/service`) on the gateway cluster:
    per service, the endpoints its backends reach. A backend Service or Envoy Backend names
    its endpoint in `modelplane.ai/endpoint`; a replica's own Service (a replica on the
    gateway's cluster) in `modelplane.ai/replica`; a replica through a Traefik front door's
    second pass (mutual TLS to its workload gateway) in the path its backendRef rewrites to."""
    services: dict[str, tuple[str, ...]] = {}
    try:
        for ns in sorted(set(namespaces)):
            routes = reader.items(
                f"/apis/{ROUTE_API}/namespaces/{ns}/httproutes", labelSelector=SERVICE_LABEL
            )
            if not routes:
                continue
            named: dict[tuple[str, str], str] = {}
            for svc in reader.items(f"/api/v1/namespaces/{ns}/services"):
                meta = svc.get("metadata") or {}
                lab = meta.get("labels") or {}
                who = lab.get(ENDPOINT_LABEL) or lab.get(REPLICA_LABEL)
                if who:
                    named[("Service", str(meta.get("name")))] = str(who)
            for backend in reader.items(
                f"/apis/{ENVOY_BACKEND_API}/namespaces/{ns}/backends",
                labelSelector=ENDPOINT_LABEL,
            ):
                meta = backend.get("metadata") or {}
                named[("Backend", str(meta.get("name")))] = str(meta["labels"][ENDPOINT_LABEL])
            for route in routes:
                meta = route.get("metadata") or {}
                key = f"{ns}/{meta['labels'][SERVICE_LABEL]}"
                reached: list[str] = []
                for rule in (route.get("spec") or {}).get("rules") or []:
                    for ref in rule.get("backendRefs") or []:
                        kind = str(ref.get("kind") or "Service")
                        name = replica_of_ref(ref) or named.get(
                            (kind, str(ref.get("name"))), str(ref.get("name"))
                        )
                        if name not in reached:
                            reached.append(name)
                services[key] = tuple(services.get(key, ()) + tuple(reached))
    except (KubeError, KeyError, TypeError, ValueError) as exc:
        return RoutesObservation(observed=False, error=f"gateway routes: {exc}")
    return RoutesObservation(services=services)
