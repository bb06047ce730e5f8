"""ModelDeployment and ModelReplica: a model's replicas, realised on their clusters.

`ModelDeploymentComponent` takes the validated deployment, its replicas from
the placement lock and the clusters they are on; it creates one
`ModelReplica` per replica on that cluster's provider. Per role a replica has:

- a ResourceClaimTemplate (`resource.k8s.io/v1`) with one request per DRA device
  request (none when every request lands on a Synthetic device);
- a Deployment (one-node worker) or a LeaderWorkerSet (`size` = nodes per
  worker, `replicas` = `workers.count`);
- unified: a Service over the serving pods, and an HTTPRoute on the cluster's
  `inference-gateway` matching `/<ns>/<replica>/`, rewritten to `/`;
- prefill/decode: the same route, to a GAIE InferencePool over both roles'
  serving pods with an llm-d endpoint picker, and a routing sidecar in decode
  pods (modelplane/components/workload/disaggregation.py), plus a Service over decode. On a
  cluster whose workload gateway is the platform's own (`servingStack.gateway`),
  which cannot route to an InferencePool, the route goes to the decode Service.

Per cluster hosting replicas, one NetworkPolicy over the deployment's serving pods (ingress
only from its workload gateway, the front door on the front door's cluster, Prometheus on the
metrics ports, and its own pods; components/workload/network_policies.py, security M4), and
one PodDisruptionBudget per role (`maxUnavailable: 0` over
the role's pods, every pod of a LeaderWorkerSet's groups; components/workload/budgets.py):
voluntary disruption of serving pods goes through modelplane, which keeps the fleet's budget.

Namespaces: the deployment's namespace is ensured on each cluster as a
`NamespacePatch` (created when missing, shared with other stacks, never deleted
by one of them -- see `ensure_namespace`). Every object carries
`modelplane.ai/deployment` and `modelplane.ai/replica`; pods also
`modelplane.ai/role`. Names are derived with `child_name` (at most 63).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi

from modelplane.api.model_cache import ModelCache, source_dir
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.names import child_name, workload_name
from modelplane.api.placement_lock import LockedReplica
from modelplane.components.model_cache import cache_claim_name, hydrated_marker
from modelplane.components.workload import disaggregation as pd
from modelplane.components.workload import front_door, network_policies
from modelplane.components.workload.budgets import disruption_budgets
from modelplane.components.workload.claims import claim_requests, claim_template, extended_resources
from modelplane.components.workload.objects import (
    CLUSTER,
    DEPLOYMENT,
    REPLICA,
    REPLICA_INDEX,
    ROLE,
    Manifest,
    app_labels,
    dns1035,
    ensure_namespace,
    labels,
    register,
)
from modelplane.components.workload.pods import (
    LWS_WORKER_INDEX,
    ROLE_COMPONENT,
    PodContext,
    deployment_manifest,
    engine_container,
    engine_port,
    lws_manifest,
    pod_template,
    selector_labels,
)
from modelplane.components.workload.routes import (
    REMOVE_AUTHORIZATION,
    replica_route,
    service_backend,
    service_manifest,
)
from modelplane.components.workload.targets import ClusterTarget

__all__ = [
    "ClusterTarget",
    "ModelDeploymentComponent",
    "ModelReplica",
    "endpoint_record",
    "replica_manifests",
]


def replica_prefix(namespace: str, replica: str) -> str:
    return f"/{namespace}/{replica}/"


def endpoint_record(
    deployment: ModelDeployment,
    replica: LockedReplica,
    gateway_address: str | None,
    routable: bool = True,
) -> dict[str, Any]:
    """The replica's composed ModelEndpoint (api.md): name, url, rewritePath, labels, cluster."""
    ns = deployment.metadata.namespace or "default"
    prefix = replica_prefix(ns, replica.name)
    return {
        "name": replica.name,
        "namespace": ns,
        "cluster": replica.cluster,
        # Unknown until the cluster's gateway has an address (a renderTo cluster never has one).
        # None too where its cluster gateway cannot check the front door (no route there).
        "url": f"https://{gateway_address}{prefix}" if gateway_address and routable else None,
        "rewritePath": prefix,
        # The replica's own Service: what a gateway on the same cluster can route to directly.
        "service": {
            "name": dns1035(replica.name, "decode")
            if deployment.spec.disaggregated
            else dns1035(replica.name),
            "port": 8000,
        },
        "labels": {
            **deployment.template_labels(),
            DEPLOYMENT: deployment.metadata.name,
            CLUSTER: replica.cluster,
            REPLICA_INDEX: str(replica.index),
        },
    }


def _role_workload(
    ctx: PodContext, name: str, object_labels: Mapping[str, str], *, decode_sidecar: bool
) -> Manifest:
    engine = ctx.role.workers.template.spec.engine
    extra_env = pd.nixl_env() if ctx.role_name in ("prefill", "decode") else []
    port: int | None = None
    extra_args: list[str] = []
    sidecars: list[dict[str, Any]] = []
    if decode_sidecar:
        port, extra_args = pd.decode_engine_port(engine)
        sidecars = [pd.routing_sidecar(port)]

    def template(position: Any, serving: bool) -> dict[str, Any]:
        eng = engine_container(ctx, position, port=port, extra_env=extra_env, extra_args=extra_args)
        return pod_template(ctx, position, engine=eng, sidecars=sidecars if serving else None)

    if not ctx.multi_node:
        return deployment_manifest(ctx, name, object_labels, template("single", True))
    return lws_manifest(
        ctx, name, object_labels, template("leader", True), template("worker", False)
    )


ROOT_SOURCE = ""
"""A replica's cache source when its revision's template recorded none: its pods read the
volume's root, as before sources had directories (``replica_manifests``)."""


def replica_manifests(
    deployment: ModelDeployment,
    replica: LockedReplica,
    target: ClusterTarget,
    cache: ModelCache | None = None,
    source: str | None = None,
) -> list[Manifest]:
    """Every Kubernetes object of one replica, in apply order (pure). ``source``: the cache
    source (`repo@revision`) its revision reads, None: the cache's own, ROOT_SOURCE: the
    volume's root (a revision from before sources had directories)."""
    ns = deployment.metadata.namespace or "default"
    model = deployment.metadata.name
    base = labels(
        app_labels(model, replica.name, "routing"), {DEPLOYMENT: model, REPLICA: replica.name}
    )
    disaggregated = deployment.spec.disaggregated
    cache_claim = cache_claim_name(cache.metadata.name) if cache is not None else None
    cache_ready = hydrated_marker(cache) if cache is not None else None
    cache_dir = None
    if cache is not None and source != ROOT_SOURCE:
        cache_ready = source or cache_ready
        cache_dir = source_dir(cache_ready) if cache_ready else None
    out: list[Manifest] = []
    for role_name, role in deployment.spec.roles.items():
        pool = replica.pools[role_name]  # type: ignore[index]
        role_labels = {
            **base,
            **app_labels(model, replica.name, ROLE_COMPONENT[role_name]),
            ROLE: role_name,
        }
        devices = target.pool_devices.get(pool, ())
        requests = claim_requests(role, devices, pool=pool)
        rct = child_name(replica.name, role_name, "devices") if requests else None
        if rct is not None:
            out.append(claim_template(rct, ns, role_labels, requests))
        ctx = PodContext(
            deployment,
            replica,
            role_name,
            role,
            claim_template=rct,
            cache_claim=cache_claim,
            cache_ready=cache_ready,
            cache_dir=cache_dir,
            cache_image=target.model_cache_image,
            extended=extended_resources(role, devices),
            extra_labels=pd.role_labels(role_name) if disaggregated else {},
        )
        out.append(
            _role_workload(
                ctx,
                workload_name(replica.name, role_name),
                role_labels,
                decode_sidecar=role_name == "decode",
            )
        )
    prefix = replica_prefix(ns, replica.name)
    route_name = child_name(replica.name)
    checks = route_checks(deployment, target)
    if not disaggregated:
        role = deployment.spec.roles["unified"]
        ctx = PodContext(deployment, replica, "unified", role)
        selector = selector_labels(ctx)
        if ctx.multi_node:
            selector[LWS_WORKER_INDEX] = "0"  # the leader serves
        svc = dns1035(replica.name)
        out.append(
            service_manifest(
                svc,
                ns,
                base,
                selector,
                port=8000,
                target_port=engine_port(role.workers.template.spec.engine),
            )
        )
        if target.routable:
            out.append(replica_route(route_name, ns, base, prefix, service_backend(svc), checks))
        return out
    # Prefill/decode: InferencePool over both roles' serving pods + endpoint picker.
    pool_name = child_name(replica.name, "pool")
    epp = dns1035(replica.name, "epp")
    serving = {REPLICA: replica.name, pd.LLMD_SERVING: "true"}
    epp_labels = {**base, **app_labels(model, replica.name, "endpoint-picker")}
    out.extend(pd.epp_manifests(epp, ns, epp_labels, pool_name, pd.kv_block_size(deployment)))
    out.append(pd.inference_pool(pool_name, ns, base, serving, epp))
    decode = deployment.spec.roles["decode"]
    decode_selector = {REPLICA: replica.name, ROLE: "decode"}
    if decode.workers.topology.shape.nodes_per_worker > 1:
        decode_selector[LWS_WORKER_INDEX] = "0"
    out.append(
        service_manifest(
            dns1035(replica.name, "decode"),
            ns,
            base,
            decode_selector,
            port=8000,
            target_port=pd.POOL_PORT,
        )
    )
    if not target.routable:
        return out
    if target.inference_pools:
        backend = pd.pool_backend(pool_name)
    else:
        # A gateway without InferencePool support (a platform's own controller): the decode
        # pods' routing sidecars take the traffic directly (docs/architecture.md).
        backend = service_backend(dns1035(replica.name, "decode"))
    out.append(replica_route(route_name, ns, base, prefix, backend, checks))
    return out


# Envoy's basicAuth leaves the credentials on the request: the route removes them.
REMOVE_CREDENTIALS = REMOVE_AUTHORIZATION


def route_checks(deployment: ModelDeployment, target: ClusterTarget) -> list[dict[str, Any]]:
    """The filters a replica route runs first: the front door's credentials checked (Traefik's
    Middleware; Envoy Gateway's SecurityPolicy targets the route) and removed."""
    if target.front_door == "Traefik":
        return [front_door.traefik_route_filter(front_door.check_name(deployment.metadata.name))]
    if target.front_door == "EnvoyGateway":
        return [REMOVE_CREDENTIALS]
    return []


def network_policy(
    deployment: ModelDeployment,
    replicas: Sequence[LockedReplica],
    target: ClusterTarget,
    at_revision: Mapping[str, ModelDeployment] | None = None,
) -> Manifest:
    """The NetworkPolicy of the deployment's serving pods on ``target`` (security M4;
    modelplane/components/workload/network_policies.py): its gateways, Prometheus, its own pods."""
    here = [r.name for r in replicas if r.cluster == target.name]
    revisions = [at_revision[n] for n in here if at_revision and n in at_revision]
    return network_policies.deployment_policy(
        deployment,
        target.name,
        installed_gateway=target.inference_pools,
        gateway_namespace=target.gateway_namespace,
        front_door=target.front_door_here,
        revisions=revisions,
    )


def front_door_manifests(
    deployment: ModelDeployment, replicas: Sequence[LockedReplica], target: ClusterTarget
) -> list[Manifest]:
    """The Secret and the check of the deployment's replica routes on one cluster (none
    where the routes cannot be protected: they are not made either)."""
    if not target.routable or target.front_door is None:
        return []
    ns = deployment.metadata.namespace or "default"
    name = deployment.metadata.name
    users: pulumi.Output[str] | None = None
    if target.front_door_key is not None:
        key: pulumi.Output[Any] = pulumi.Output.from_input(target.front_door_key)
        users = pulumi.Output.secret(key.apply(lambda k: front_door.htpasswd(str(k))))
    object_labels = labels(app_labels(name, name, "front-door-check"), {DEPLOYMENT: name})
    routes = [child_name(r.name) for r in replicas if r.cluster == target.name]
    return front_door.check_manifests(
        target.front_door, front_door.check_name(name), ns, object_labels, users, routes
    )


class ModelReplica(pulumi.ComponentResource):
    """`modelplane:deployment:ModelReplica`: one serving instance on one cluster."""

    endpoint: pulumi.Output[dict[str, Any]]

    def __init__(
        self,
        name: str,
        deployment: ModelDeployment,
        replica: LockedReplica,
        target: ClusterTarget,
        *,
        cache: ModelCache | None = None,
        source: str | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            "modelplane:deployment:ModelReplica",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[target.provider])),
        )
        child = pulumi.ResourceOptions(
            parent=self, provider=target.provider, depends_on=list(depends_on) or None
        )
        by_name: dict[tuple[str, str], pulumi.Resource] = {}
        for manifest in replica_manifests(deployment, replica, target, cache, source):
            opts_ = child
            kind = manifest["kind"]
            if kind in ("Deployment", "LeaderWorkerSet"):
                claim = (
                    manifest["spec"].get("template")
                    or manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]
                )
                claims = claim["spec"].get("resourceClaims", [])
                deps = [
                    by_name[("ResourceClaimTemplate", c["resourceClaimTemplateName"])]
                    for c in claims
                    if ("ResourceClaimTemplate", c["resourceClaimTemplateName"]) in by_name
                ]
                if deps:
                    opts_ = pulumi.ResourceOptions.merge(
                        child, pulumi.ResourceOptions(depends_on=deps)
                    )
            by_name[(kind, manifest["metadata"]["name"])] = register(
                manifest, opts_, scope=replica.cluster
            )
        self.endpoint = pulumi.Output.from_input(target.gateway_address).apply(
            lambda address: endpoint_record(deployment, replica, address, target.routable)
        )
        self.register_outputs({"endpoint": self.endpoint})


class ModelDeploymentComponent(pulumi.ComponentResource):
    """`modelplane:deployment:ModelDeployment`: every replica of one deployment.

    `replicas` come from the placement lock; `targets` maps each cluster name a
    replica is on to its `ClusterTarget`; `cache` is the referenced ModelCache.
    Output `endpoints`: one composed ModelEndpoint record per replica.
    """

    endpoints: pulumi.Output[list[dict[str, Any]]]

    def __init__(
        self,
        name: str,
        deployment: ModelDeployment,
        replicas: Sequence[LockedReplica],
        targets: Mapping[str, ClusterTarget],
        *,
        cache: ModelCache | None = None,
        at_revision: Mapping[str, ModelDeployment] | None = None,
        sources: Mapping[str, str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``sources``: per replica at an older revision, the cache source it reads
        (ROOT_SOURCE: the volume's root); the others read the cache's own."""
        super().__init__("modelplane:deployment:ModelDeployment", name, None, opts)
        # Replicas a rollout has not reached yet render from their own revision's spec.
        at_revision = at_revision or {}
        ns = deployment.metadata.namespace or "default"
        missing = sorted({r.cluster for r in replicas} - set(targets))
        if missing:
            raise ValueError(
                f"ModelDeployment {deployment.key}: no target for cluster(s) {', '.join(missing)}"
            )
        namespaces: dict[str, pulumi.Resource | None] = {}
        checks: dict[str, list[pulumi.Resource]] = {}
        for cluster in sorted({r.cluster for r in replicas}):
            target = targets[cluster]
            on_cluster = pulumi.ResourceOptions(parent=self, provider=target.provider)
            ensured = ensure_namespace(
                ns, on_cluster, scope=cluster, pod_security=target.pod_security(ns)
            )
            namespaces[cluster] = ensured
            roles = {role for r in replicas if r.cluster == cluster for role in r.pools}
            budget_opts = pulumi.ResourceOptions.merge(
                on_cluster, pulumi.ResourceOptions(depends_on=[ensured] if ensured else None)
            )
            for budget in disruption_budgets(deployment, roles):
                register(budget, budget_opts, scope=cluster)
            register(
                network_policy(deployment, replicas, target, at_revision),
                budget_opts,
                scope=cluster,
            )
            if not target.routable:
                pulumi.log.warn(
                    f"ModelDeployment {deployment.key}: cluster {cluster!r}'s workload gateway "
                    "cannot require the front door's credentials (set servingStack.gateway."
                    "controller); its replicas get no routes",
                    resource=self,
                )
            checks[cluster] = [
                register(m, budget_opts, scope=cluster)
                for m in front_door_manifests(deployment, replicas, target)
            ]
        children: list[ModelReplica] = []
        for replica in sorted(replicas, key=lambda r: (r.cluster, r.index)):
            target = targets[replica.cluster]
            namespace = namespaces[replica.cluster]
            children.append(
                ModelReplica(
                    replica.name,
                    at_revision.get(replica.name, deployment),
                    replica,
                    target,
                    cache=cache,
                    source=(sources or {}).get(replica.name),
                    # The route never exists without its check (a Traefik route naming a
                    # missing Middleware answers 404; never a request let in unchecked).
                    depends_on=[
                        *([namespace] if namespace is not None else []),
                        *checks[replica.cluster],
                    ],
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        self.endpoints = pulumi.Output.all(*[c.endpoint for c in children]).apply(list)
        self.register_outputs({"endpoints": self.endpoints})
