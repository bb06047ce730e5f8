"""Cross-object checks that need the whole fleet: references, the gateway, CEL."""

from __future__ import annotations

from collections.abc import Iterator

from modelplane.api.errors import SpecError
from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.model_service import ModelEndpoint, ModelService


def _err(fleet: FleetSpec, kind: str, key: str, path: str, message: str) -> SpecError:
    file, doc = fleet.sources.get((kind, key), ("", 0))
    label = f"{kind} {key}"
    return SpecError(file, doc, label, path, message)


def _pool_classes(fleet: FleetSpec) -> Iterator[SpecError]:
    for name, cluster in fleet.clusters.items():
        source = cluster.spec.cluster.source
        for i, pool in enumerate(cluster.spec.node_pools):
            cls = fleet.classes.get(pool.class_name)
            path = f"spec.nodePools[{i}].className"
            if cls is None and fleet.declared("InferenceClass", pool.class_name):
                continue
            if cls is None:
                yield _err(
                    fleet,
                    "InferenceCluster",
                    name,
                    path,
                    f"InferenceClass {pool.class_name!r} does not exist",
                )
                continue
            if source == "Existing":
                continue
            prov = cls.spec.provisioning
            if prov is None or prov.provider != source:
                yield _err(
                    fleet,
                    "InferenceCluster",
                    name,
                    path,
                    f"InferenceClass {pool.class_name!r} has no provisioning recipe for "
                    f"{source}; pools of a provisioned cluster need one",
                )


def _gateway(fleet: FleetSpec) -> Iterator[SpecError]:
    gw = fleet.gateway
    if gw is None:
        if fleet.services:
            key = next(iter(fleet.services))
            yield _err(
                fleet,
                "ModelService",
                key,
                "",
                "ModelServices need an InferenceGateway named 'default' in the fleet",
            )
        return
    if gw.metadata.name != "default":
        yield _err(
            fleet,
            "InferenceGateway",
            gw.metadata.name,
            "metadata.name",
            "the InferenceGateway must be named 'default'",
        )
    known = {c.name for c in gw.spec.auth.callers} if gw.spec.auth is not None else None
    for key, service in fleet.services.items():
        if service.spec.callers is None:
            continue
        if known is None:
            yield _err(
                fleet,
                "ModelService",
                key,
                "spec.callers",
                "callers needs the InferenceGateway's spec.auth (callers with keys)",
            )
            continue
        unknown = [c for c in service.spec.callers if c not in known]
        if unknown:
            yield _err(
                fleet,
                "ModelService",
                key,
                "spec.callers",
                f"no InferenceGateway caller named {', '.join(map(repr, unknown))}",
            )
    yield from _model_names(fleet)
    yield from _scale_to_zero(fleet)
    ref = gw.spec.cluster.inference_cluster_ref
    if ref is not None and not fleet.declared("InferenceCluster", ref):
        yield _err(
            fleet,
            "InferenceGateway",
            gw.metadata.name,
            "spec.cluster.inferenceClusterRef",
            f"InferenceCluster {ref!r} does not exist",
        )
    yield from _front_doors(fleet, gw)


def _front_doors(fleet: FleetSpec, gw: InferenceGateway) -> Iterator[SpecError]:
    """Each further front door on an InferenceCluster of the fleet; a Cloud DNS fleet
    address over front doors whose load balancer has an IP address (not an EKS NLB's name)."""
    for i, door in enumerate(gw.spec.additional_front_doors):
        if not fleet.declared("InferenceCluster", door.inference_cluster_ref):
            yield _err(
                fleet,
                "InferenceGateway",
                gw.metadata.name,
                f"spec.additionalFrontDoors[{i}].inferenceClusterRef",
                f"InferenceCluster {door.inference_cluster_ref!r} does not exist",
            )
    address = gw.spec.fleet_address
    if address is None or address.cloud_dns is None:
        return
    for door in gw.spec.front_door_clusters:
        cluster = fleet.clusters.get(door)
        if cluster is not None and cluster.spec.cluster.source == "EKS":
            yield _err(
                fleet,
                "InferenceGateway",
                gw.metadata.name,
                "spec.fleetAddress.cloudDns",
                f"the front door on EKS cluster {door!r} has a load balancer DNS name, and "
                "Cloud DNS health-checks IP addresses only: use spec.fleetAddress.route53",
            )


def _model_names(fleet: FleetSpec) -> Iterator[SpecError]:
    """A model name routes to one service: the first (in key order) keeps it, every later
    one is an error naming the service that has it."""
    owner: dict[str, str] = {}
    for key in sorted(fleet.services):
        service = fleet.services[key]
        for i, name in enumerate(service.spec.models or ()):
            if name in owner:
                yield _err(
                    fleet,
                    "ModelService",
                    key,
                    f"spec.models[{i}]",
                    f"model name {name!r} is already served by ModelService {owner[name]}",
                )
            else:
                owner[name] = key
    gw = fleet.gateway
    why = None
    if gw is not None and gw.spec.backend != "Traefik" and gw.spec.cluster.existing is not None:
        # Envoy AI Gateway comes with an InferenceCluster's serving stack (or its platform).
        why = (
            "on the EnvoyGateway backend needs Envoy AI Gateway, which comes with an "
            "InferenceCluster's serving stack: put the InferenceGateway on one "
            "(spec.cluster.inferenceClusterRef), or use the service's path"
        )
    if gw is not None and gw.spec.backend != "Traefik":
        for key, service in sorted(fleet.services.items()):
            for i, entry in enumerate(service.spec.endpoints):
                if entry.tier != 1:
                    yield _err(
                        fleet,
                        "ModelService",
                        key,
                        f"spec.endpoints[{i}].tier",
                        "endpoint tiers need the InferenceGateway's backend Traefik for now",
                    )
    if why:
        for key, service in sorted(fleet.services.items()):
            if service.spec.models:
                yield _err(
                    fleet, "ModelService", key, "spec.models", f"routing by model name {why}"
                )


def _scale_to_zero(fleet: FleetSpec) -> Iterator[SpecError]:
    """`minReplicas: 0` needs something that wakes the deployment: the OpenAI base URL of a
    service with `models` that serves it, on a Traefik front door (api.md, "Autoscaling")."""
    from modelplane.api.notices import scalable_to_zero, serves

    clusters = sorted(fleet.clusters)
    gw = fleet.gateway
    for key, dep in sorted(fleet.deployments.items()):
        if not scalable_to_zero(dep):
            continue
        why = None
        if gw is None:
            why = "needs an InferenceGateway (its OpenAI base URL wakes the deployment)"
        elif gw.spec.backend != "Traefik":
            why = (
                "needs the InferenceGateway's backend Traefik for now (its OpenAI router holds "
                "requests while the deployment wakes)"
            )
        elif not any(s.spec.models and serves(s, dep, clusters) for s in fleet.services.values()):
            why = (
                "needs a ModelService with `models` whose endpoints select this deployment "
                "(a request for one of those names wakes it)"
            )
        if why:
            yield _err(fleet, "ModelDeployment", key, "spec.autoscaling.minReplicas", f"0 {why}")


def _deployments(fleet: FleetSpec) -> Iterator[SpecError]:
    from modelplane.cel import CelCompileError, compile_selector

    for key, dep in fleet.deployments.items():
        ref = dep.spec.model_cache_ref
        cache_key = f"{dep.metadata.namespace}/{ref.name}" if ref else ""
        if ref is not None and not fleet.declared("ModelCache", cache_key):
            yield _err(
                fleet,
                "ModelDeployment",
                key,
                "spec.modelCacheRef.name",
                f"ModelCache {ref.name!r} does not exist in namespace {dep.metadata.namespace!r}",
            )
        for role_name, role in dep.spec.roles.items():
            if role.node_selector is None:
                continue
            prefix = "spec." if role_name == "unified" else f"spec.{role_name}."
            for i, req in enumerate(role.node_selector.devices):
                for j, sel in enumerate(req.selectors):
                    try:
                        compile_selector(sel.cel)
                    except CelCompileError as exc:
                        yield _err(
                            fleet,
                            "ModelDeployment",
                            key,
                            f"{prefix}nodeSelector.devices[{i}].selectors[{j}].cel",
                            f"CEL expression {sel.cel!r} does not compile: {exc}",
                        )


def _lws_names(fleet: FleetSpec) -> Iterator[SpecError]:
    """Multi-node roles become LeaderWorkerSets whose derived names must leave room for
    the worker StatefulSets' revision labels (api.md, "ModelDeployment")."""
    from modelplane.api.names import lws_name_budget, lws_name_length

    for key, dep in fleet.deployments.items():
        for role_name, role in dep.spec.roles.items():
            if role.workers.topology.shape.nodes_per_worker <= 1:
                continue
            length = lws_name_length(dep.metadata.name, role_name)
            budget = lws_name_budget(role.workers.count)
            if length > budget:
                yield _err(
                    fleet,
                    "ModelDeployment",
                    key,
                    "metadata.name",
                    f"name too long for a multi-node {role_name} role: its LeaderWorkerSets "
                    f"would be named with {length} characters, at most {budget} leave room "
                    f"for the worker pods' revision label; shorten the name by "
                    f"{length - budget} characters",
                )


def _selected(
    fleet: FleetSpec, svc: ModelService
) -> tuple[list[ModelEndpoint], list[ModelDeployment]]:
    """The hand-written endpoints and the (replicated) deployments a service's entries can
    select: same namespace, labels matched (a deployment's replicas carry its template's
    labels and `modelplane.ai/deployment`)."""
    from modelplane.api.names import DEPLOYMENT_LABEL

    ns = svc.metadata.namespace or "default"
    endpoints: dict[str, ModelEndpoint] = {}
    deployments: dict[str, ModelDeployment] = {}
    for entry in svc.spec.endpoints:
        for key, ep in fleet.endpoints.items():
            if (ep.metadata.namespace or "default") == ns and entry.selector.matches(
                dict(ep.metadata.labels)
            ):
                endpoints[key] = ep
        for key, dep in fleet.deployments.items():
            labels = {**dep.template_labels(), DEPLOYMENT_LABEL: dep.metadata.name}
            if (
                (dep.metadata.namespace or "default") == ns
                and dep.spec.replicas > 0
                and entry.selector.matches(labels)
            ):
                deployments[key] = dep
    return [endpoints[k] for k in sorted(endpoints)], [deployments[k] for k in sorted(deployments)]


def _envoy_splits(fleet: FleetSpec) -> Iterator[SpecError]:
    """On EnvoyGateway a service is one weighted rule with one path rewrite (api.md,
    "InferenceGateway"): the endpoints it can select must agree on it, replicas as '/'."""
    if fleet.gateway is None or fleet.gateway.spec.backend != "EnvoyGateway":
        return
    for key, svc in fleet.services.items():
        paths: dict[str, str] = {}
        endpoints, deployments = _selected(fleet, svc)
        for ep in endpoints:
            paths.setdefault(ep.spec.rewrite_path, f"ModelEndpoint {ep.metadata.name}")
        for dep in deployments:
            paths.setdefault("/", f"ModelDeployment {dep.metadata.name}")
        if len(paths) > 1:
            listed = ", ".join(f"{p!r} ({who})" for p, who in sorted(paths.items()))
            yield _err(
                fleet,
                "ModelService",
                key,
                "spec.endpoints",
                "the EnvoyGateway backend routes a service as one weighted rule with one "
                f"rewritePath, but its endpoints need {listed} (replicas count as '/'); "
                "use the Traefik backend or one rewritePath",
            )


# Gateway API: 16 backendRefs per HTTPRoute rule; Traefik shards a larger service in at most
# 16 shards (api.md "Large services"; modelplane/components/workload/routes.py).
RULE_BACKENDS = 16
SHARDED_BACKENDS = RULE_BACKENDS * 16


def most_endpoints(fleet: FleetSpec, svc: ModelService) -> tuple[int, list[str]]:
    """The most endpoints a service can route at once, and where they come from: its
    hand-written endpoints, and per deployment its replicas (autoscaling: `maxReplicas`) plus
    the surge replicas a rollout or a drain adds (`spec.rollout.maxSurge`)."""
    endpoints, deployments = _selected(fleet, svc)
    parts = [f"{len(endpoints)} ModelEndpoint(s)"] if endpoints else []
    total = len(endpoints)
    for dep in deployments:
        auto = dep.spec.autoscaling
        replicas = max(dep.spec.replicas, auto.max_replicas if auto is not None else 0)
        _, surge = dep.spec.rollout.budget(replicas)
        total += replicas + surge
        parts.append(
            f"ModelDeployment {dep.metadata.name}: {replicas}"
            + (f" + {surge} surge" if surge else "")
        )
    return total, parts


def _route_sizes(fleet: FleetSpec) -> Iterator[SpecError]:
    """What the front door can route: one rule on EnvoyGateway, 16 shards on Traefik (whose
    second pass goes through the `web` entrypoint, kept inside the cluster on `tls.http:
    Refuse`: api.md "Large services")."""
    gateway = fleet.gateway
    if gateway is None:
        return
    envoy = gateway.spec.backend == "EnvoyGateway"
    for key, svc in fleet.services.items():
        total, parts = most_endpoints(fleet, svc)
        if total <= RULE_BACKENDS:
            continue
        if envoy:
            why = f"the EnvoyGateway backend routes at most {RULE_BACKENDS} (use Traefik)"
        elif total > SHARDED_BACKENDS:
            why = f"a service routes at most {SHARDED_BACKENDS}"
        else:
            continue
        yield _err(
            fleet,
            "ModelService",
            key,
            "spec.endpoints",
            f"can select up to {total} endpoints ({'; '.join(parts)}), but {why}",
        )


def _filestore_fits(fleet: FleetSpec) -> Iterator[SpecError]:
    """On a GKE cluster a cache is one Filestore instance sized for its bytes and its
    throughput hint: above the tier's maximum it would never provision (api.md
    "ModelCache")."""
    from modelplane.api.cache_storage import CacheTooLarge, filestore_volume

    gke = {n: c for n, c in fleet.clusters.items() if c.spec.cluster.source == "GKE"}
    if not gke:
        return
    for key, cache in fleet.caches.items():
        spec = cache.spec
        covered = [
            n for n, c in gke.items() if spec.cluster_selector.matches(dict(c.metadata.labels))
        ]
        if not covered:
            continue
        try:
            filestore_volume(spec.size_gib, spec.throughput_mibps, spec.filestore.tier)
        except CacheTooLarge as exc:
            field = "spec.throughputMiBps" if spec.throughput_mibps is not None else "spec.sizeGiB"
            yield _err(
                fleet,
                "ModelCache",
                key,
                field,
                f"on GKE cluster(s) {', '.join(covered[:5])} the cache is one Filestore "
                f"instance and {exc}; lower it, or narrow the clusterSelector",
            )


def _cache_storage(fleet: FleetSpec) -> Iterator[SpecError]:
    """Every cluster a ModelCache covers needs RWX storage (api.md "ModelCache"): GKE and
    EKS clusters get theirs; an Existing cluster names it in `existing.cache`."""
    yield from _filestore_fits(fleet)
    bare = {
        name: cluster for name, cluster in fleet.clusters.items() if not cluster.has_rwx_storage
    }
    if not bare:
        return
    for key, cache in fleet.caches.items():
        covered = [
            name
            for name, cluster in bare.items()
            if cache.spec.cluster_selector.matches(dict(cluster.metadata.labels))
        ]
        if not covered:
            continue
        shown = [
            f"{n} ({fleet.sources.get(('InferenceCluster', n), ('?', 0))[0]})" for n in covered[:5]
        ]
        more = f" and {len(covered) - 5} more" if len(covered) > 5 else ""
        yield _err(
            fleet,
            "ModelCache",
            key,
            "spec.clusterSelector",
            f"covers Existing cluster(s) with no RWX StorageClass for the cache volume: "
            f"{', '.join(shown)}{more}; set spec.cluster.existing.cache.storageClassName on "
            "each, or narrow the clusterSelector",
        )


def check_references(fleet: FleetSpec) -> list[SpecError]:
    return [
        *_cache_storage(fleet),
        *_pool_classes(fleet),
        *_gateway(fleet),
        *_deployments(fleet),
        *_lws_names(fleet),
        *_envoy_splits(fleet),
        *_route_sizes(fleet),
    ]
