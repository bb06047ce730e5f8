"""The modelplane Pulumi program: read the specs and the lock, build what this stack owns.

One program serves every stack of the project (architecture.md, "Stacks"); the
stack's name says what it owns:

- `cluster-<name>`: one InferenceCluster. Exports `kubeconfig` (secret),
  `renderTo`, `gatewayAddress`, `storageClassName`, `poolShapes`.
- `cache-<namespace>-<name>`: one ModelCache on the clusters it covers.
  Exports `claimName`, `clusters`.
- `deploy-<namespace>-<name>`: one ModelDeployment's replicas from the lock.
  Exports `endpoints` (the composed ModelEndpoints), `replicas`.
- `gateway`: the InferenceGateway, every ModelEndpoint backend and every
  ModelService route. Exports `address`, `services`, `endpoints`. Replica endpoints
  are routed only while their replica is in the lock and its cluster is not unroutable.

What `reconcile` and rollouts decide at run time is stack config the driver sets before an
`up`, so a hand-run `pulumi up -s` reads what the driver's last `up` read:
`modelplane:unroutable` on the gateway stack (a JSON list of cluster names and
`replica:<name>` entries) and `modelplane:revisionTemplates` on a deployment stack during a
rollout (JSON {revision: pod template} of the older revisions its replicas still run). The
driver's previews, which write no config, pass the values they show through
`MODELPLANE_UNROUTABLE` and `MODELPLANE_REVISION_TEMPLATES`, which win when set.

Which fleet: `MODELPLANE_FLEET_DIR` (the driver sets it), else config `modelplane:specs`
(relative to the repository root), else the project's: its `stackConfigDir` when it has one
(the root `Pulumi.yaml`'s `specs/local`, so `pulumi up -s gateway` at the root runs the
embedded default fleet with that fleet's stack config), else the project directory when it
is a fleet (each fleet directory holds its own `Pulumi.yaml`, so `cd specs/dev && pulumi up
-s gateway` works), else `specs/local`. The lock: `MODELPLANE_LOCK`, else `modelplane:lock`,
else `<fleet>/modelplane.lock.yaml`.

Config (`pulumi config set -s <stack> modelplane:<key>`, in the fleet directory):

- `organization`: the org part of stack references, default the stack's own organization
  (`pulumi.get_organization()`: `organization` on a self-managed backend, the Pulumi Cloud
  org otherwise);
- `secrets.<name>.<key>`: secret values (see modelplane.secrets);
- `allowMissingSecrets`: `true` turns an unresolvable secret into a warning and a
  placeholder secret value (`modelplane render` sets it; never in production).

Cross-stack inputs come from `StackReference("<org>/<project>/<stack>")` (the fleet's project);
a missing upstream output stops the program naming the stack to run first. A preview may
lay the offline render's outputs of changed upstream stacks over them
(`MODELPLANE_UPSTREAM_OUTPUTS`, a JSON file `{stack: {output: value}}`), so a stack
downstream of a change shows what it will really change.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pulumi
import yaml
from pulumi.runtime.config import get_config, is_config_secret

from modelplane import fleet_pki
from modelplane import front_door_keys as fdk
from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.loader import LOCK_FILE, load_fleet
from modelplane.api.model_cache import ModelCache
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.lock import read_lock
from modelplane.network import addresses_of, with_addresses
from modelplane.rollout import CacheUse
from modelplane.secrets import PlaintextSecret, ResolvedSecret, SecretNotFound, resolve_secret
from modelplane.stacks import (
    GATEWAY_STACK,
    StackUnit,
    cache_clusters,
    cluster_stack,
    deploy_stack,
    gateway_stacks,
    hop_clusters,
    route_namespaces,
    stack_units,
)

if TYPE_CHECKING:
    from modelplane.components.model_service import EndpointInfo
    from modelplane.components.workload.targets import ClusterTarget

CONFIG_NAMESPACE = "modelplane"  # the `modelplane:` config keys, whatever the project
DEFAULT_SPECS = "specs/local"
DEFAULT_ORGANIZATION = "organization"
FLEET_ENV = "MODELPLANE_FLEET_DIR"
LOCK_ENV = "MODELPLANE_LOCK"
UPSTREAM_ENV = "MODELPLANE_UPSTREAM_OUTPUTS"
UNROUTABLE_ENV = "MODELPLANE_UNROUTABLE"  # modelplane.driver.workspace
TEMPLATES_ENV = "MODELPLANE_REVISION_TEMPLATES"  # modelplane.driver.workspace
UNROUTABLE_CONFIG = "unroutable"  # modelplane.driver.workspace.PROGRAM_CONFIG
TEMPLATES_CONFIG = "revisionTemplates"
PLACEHOLDER_SECRET = "modelplane-render-placeholder"


def project_root() -> Path:
    """The directory of the root Pulumi.yaml: the repository root (modelplane/program/..)."""
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Context:
    fleet_dir: Path
    fleet: FleetSpec
    lock: PlacementLock
    units: list[StackUnit]
    unit: StackUnit
    organization: str
    allow_missing_secrets: bool


def _fail(message: str) -> NoReturn:
    raise pulumi.RunError(message)


def _project_fleet() -> Path | None:
    """The fleet of the project being run: its stack config directory (the root project's
    `stackConfigDir: specs/local`), else the project directory when it is a fleet's own (a
    `Pulumi.yaml` next to its specs)."""
    try:
        root = pulumi.get_root_directory()
    except Exception:  # noqa: BLE001 - older engines do not say
        return None
    if not root:
        return None
    path = Path(root).resolve()
    config_dir = stack_config_dir(path)
    if config_dir is not None:
        return config_dir
    return path if path != project_root() else None


def stack_config_dir(project_dir: Path) -> Path | None:
    """The `stackConfigDir` of the project in project_dir, as a path, if it sets one."""
    for name in ("Pulumi.yaml", "Pulumi.yml"):
        path = project_dir / name
        if path.is_file():
            try:
                settings = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                _fail(f"cannot read the project file {path}: {exc}")
            value = settings.get("stackConfigDir") if isinstance(settings, dict) else None
            return (project_dir / str(value)).resolve() if value else None
    return None


def fleet_location(cfg: pulumi.Config) -> tuple[Path, Path]:
    """The fleet directory and the lock file this run reads (see the module docstring)."""
    env_fleet = os.environ.get(FLEET_ENV)
    specs_cfg = cfg.get("specs")
    if env_fleet:
        fleet_dir = Path(env_fleet).expanduser()
    elif specs_cfg:
        specs = Path(specs_cfg).expanduser()
        fleet_dir = specs if specs.is_absolute() else project_root() / specs
    else:
        fleet_dir = _project_fleet() or project_root() / DEFAULT_SPECS
    env_lock = os.environ.get(LOCK_ENV)
    lock_cfg = env_lock or cfg.get("lock")
    if lock_cfg:
        lock_path = Path(lock_cfg).expanduser()
        if not lock_path.is_absolute():
            lock_path = project_root() / lock_path
    else:
        lock_path = fleet_dir / LOCK_FILE
    return fleet_dir, lock_path


def organization(cfg: pulumi.Config) -> str:
    """`modelplane:organization`, else the stack's own organization."""
    configured = cfg.get("organization")
    if configured:
        return configured
    try:
        return pulumi.get_organization() or DEFAULT_ORGANIZATION
    except Exception:  # noqa: BLE001 - an engine that does not pass it: the file backend's
        return DEFAULT_ORGANIZATION


def load_context(stack: str | None = None) -> Context:
    cfg = pulumi.Config(CONFIG_NAMESPACE)
    fleet_dir, lock_path = fleet_location(cfg)
    if not fleet_dir.exists():
        _fail(f"modelplane:specs: fleet directory {fleet_dir} does not exist")
    loaded = load_fleet(fleet_dir)
    if loaded.errors:
        _fail(
            f"the fleet in {fleet_dir} is invalid ({len(loaded.errors)} error(s)):\n"
            + "\n".join(f"  {e}" for e in loaded.errors)
        )
    lock = read_lock(lock_path)
    units = stack_units(loaded.fleet, lock)
    stack = stack or pulumi.get_stack()
    unit = next((u for u in units if u.name == stack), None)
    if unit is None:
        names = ", ".join(u.name for u in units) or "(none: the fleet is empty)"
        _fail(
            f"stack {stack!r} matches nothing in the fleet {fleet_dir}; valid stack names: {names}"
        )
    assert unit is not None
    return Context(
        fleet_dir=fleet_dir,
        fleet=loaded.fleet,
        lock=lock,
        units=units,
        unit=unit,
        organization=organization(cfg),
        allow_missing_secrets=cfg.get_bool("allowMissingSecrets") or False,
    )


def secret_value(
    ctx: Context,
    name: str,
    key: str,
    *,
    what: str,
    check: Callable[[ResolvedSecret], str | None] | None = None,
) -> pulumi.Output[str]:
    """A secretRef's value as a secret Output (config, env, then `file:` path); ``check``
    returns why a found value is refused (the run fails naming ``what``), else None."""
    try:
        resolved = resolve_secret(
            name, key, config=get_config, base_dir=ctx.fleet_dir, is_secret=is_config_secret
        )
    except PlaintextSecret as exc:
        _fail(f"{what}: {exc}")
        raise
    except SecretNotFound as exc:
        if not ctx.allow_missing_secrets:
            _fail(f"{what}: {exc}")
        pulumi.log.warn(f"{what}: {exc}; using a placeholder value")
        return pulumi.Output.secret(PLACEHOLDER_SECRET)
    problem = check(resolved) if check is not None else None
    if problem:
        _fail(f"{what}: {problem}")
    return pulumi.Output.secret(resolved.value)


def caller_keys_problem(found: ResolvedSecret) -> str | None:
    """Why a caller's key text is not published: malformed, or an unexpired key shorter than
    the rule (security review L8; the driver refuses the same before any stack runs, but
    stack config is only read here), naming where the text is and its lines, never a key."""
    from datetime import UTC, datetime

    from modelplane.caller_keys import SHORT_KEY_RULE, KeyFormatError, line_numbers, short_key_lines

    try:
        lines = short_key_lines(found.value, datetime.now(UTC), where=found.where)
    except KeyFormatError as exc:
        return str(exc)
    return f"{found.where}, {line_numbers(lines)}: {SHORT_KEY_RULE}" if lines else None


def absolute_render_to(cluster: InferenceCluster, fleet_dir: Path) -> InferenceCluster:
    """The cluster with a relative `renderTo` made relative to the fleet directory."""
    existing = cluster.spec.cluster.existing
    if existing is None or not existing.render_to:
        return cluster
    path = Path(existing.render_to).expanduser()
    if path.is_absolute():
        return cluster
    existing = existing.model_copy(update={"render_to": str((fleet_dir / path).resolve())})
    source = cluster.spec.cluster.model_copy(update={"existing": existing})
    spec = cluster.spec.model_copy(update={"cluster": source})
    return cluster.model_copy(update={"spec": spec})


class Upstream:
    """Outputs of the stacks this one reads, through StackReferences."""

    def __init__(self, organization: str) -> None:
        self.organization = organization
        self._refs: dict[str, pulumi.StackReference] = {}
        self._overrides = upstream_overrides()

    def prefetch(self, stacks: Iterable[str]) -> None:
        """Start reading these stacks' outputs now, all at once: the engine reads each
        reference as a step of its own (a backend read and, on a passphrase stack, a key
        derivation of about 0.2 s), in parallel, where awaiting them one after another
        serialised them (bench/engine_phases.py, "stack references")."""
        for stack in stacks:
            self.ref(stack)

    def ref(self, stack: str) -> pulumi.StackReference:
        if stack not in self._refs:
            name = f"{self.organization}/{pulumi.get_project()}/{stack}"  # the fleet's project
            self._refs[stack] = pulumi.StackReference(name)
        return self._refs[stack]

    async def get(self, stack: str, name: str) -> Any:
        override = self._overrides.get(stack)
        if override is not None and name in override:
            self.ref(stack)  # the same resources as `up` registers (no spurious discard)
            return override[name]
        details = await self.ref(stack).get_output_details(name)
        return details.secret_value if details.secret_value is not None else details.value

    async def require(self, stack: str, name: str) -> Any:
        value = await self.get(stack, name)
        if value is None:
            _fail(
                f"stack {stack!r} has no output {name!r}: run that stack first "
                f"(`modelplane up`, or `pulumi up -s {stack}`)"
            )
        return value


def upstream_overrides() -> dict[str, dict[str, Any]]:
    """Upstream outputs a preview lays over the deployed ones (see the module docstring)."""
    path = os.environ.get(UPSTREAM_ENV)
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        _fail(f"{UPSTREAM_ENV}: cannot read {path}: {exc}")
    return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}


@dataclass(frozen=True)
class ClusterConnection:
    kubeconfig: str | None
    render_to: str | None
    gateway_address: str | None
    storage_class_name: str | None


async def cluster_connection(up: Upstream, cluster: str) -> ClusterConnection:
    stack = cluster_stack(cluster)
    render_to = await up.get(stack, "renderTo")
    kubeconfig = await up.get(stack, "kubeconfig")
    if not render_to and not kubeconfig:
        _fail(
            f"cluster {cluster!r}: stack {stack!r} has no kubeconfig or renderTo output: "
            f"run that stack first (`modelplane up`, or `pulumi up -s {stack}`)"
        )
    return ClusterConnection(
        kubeconfig=None if render_to else kubeconfig,
        render_to=render_to or None,
        gateway_address=await up.get(stack, "gatewayAddress") or None,
        storage_class_name=await up.get(stack, "storageClassName") or None,
    )


def provider_for(name: str, conn: ClusterConnection) -> pulumi.ProviderResource:
    from modelplane.components.providers import cluster_provider

    return cluster_provider(
        name,
        kubeconfig=pulumi.Output.secret(conn.kubeconfig) if conn.kubeconfig else None,
        render_to=conn.render_to,
        opts=None,
    )


# --- the five kinds of stack ------------------------------------------------------------


def cluster_target(
    ctx: Context,
    name: str,
    conn: ClusterConnection,
    *,
    front_door_key: pulumi.Output[str] | None = None,
    render_only: bool = False,
) -> ClusterTarget:
    """Where a cache or deployment stack puts its objects on cluster ``name``."""
    from modelplane.components.images import model_cache_image
    from modelplane.components.workload.targets import ClusterTarget

    gateway = ctx.fleet.gateway
    here = gateway is not None and name in gateway.spec.front_door_clusters
    return ClusterTarget.from_spec(
        ctx.fleet.clusters[name],
        ctx.fleet.classes,
        provider_for(f"{name}-k8s", conn),
        gateway_address=conn.gateway_address or "",
        storage_class_name=conn.storage_class_name,
        front_door_key=front_door_key,
        render_only=render_only,
        front_door_here=gateway.spec.backend if gateway is not None and here else None,
        model_cache_image=model_cache_image(gateway),
    )


def run_cluster(ctx: Context) -> None:
    from modelplane.components.inference_cluster import InferenceClusterComponent

    cluster = absolute_render_to(ctx.fleet.clusters[ctx.unit.key], ctx.fleet_dir)
    cluster = with_addresses(cluster, addresses_of(ctx.fleet, ctx.lock, ctx.unit.key))
    kubeconfig = None
    existing = cluster.spec.cluster.existing
    if existing is not None and existing.secret_ref is not None:
        ref = existing.secret_ref
        kubeconfig = secret_value(
            ctx, ref.name, ref.key, what=f"InferenceCluster {cluster.metadata.name} kubeconfig"
        )
    stack = cluster.spec.serving_stack
    has_gateway = stack.install or stack.gateway is not None
    comp = InferenceClusterComponent(
        cluster.metadata.name,
        cluster,
        ctx.fleet.classes,
        kubeconfig=kubeconfig,
        # The workload gateway's server certificate comes from the fleet CA (a renderTo
        # cluster's folder holds no key: its platform makes the certificate).
        fleet_ca=fleet_ca(ctx)
        if has_gateway and not (existing is not None and existing.render_to)
        else None,
        certificate_generation=certificate_generation(),
    )
    pulumi.export("kubeconfig", pulumi.Output.secret(comp.kubeconfig))
    # As the provider records it: relative to the program's folder, where every stack of the
    # fleet runs, so a downstream stack's provider records the same string.
    pulumi.export("renderTo", comp.render_to)
    pulumi.export("gatewayAddress", comp.gateway_address)
    pulumi.export("storageClassName", comp.storage_class_name)
    pulumi.export("poolShapes", comp.pool_shapes)
    if comp.network is not None:
        pulumi.export("network", comp.network)


async def run_path(ctx: Context) -> None:
    """The private path between two provisioned clusters, from their stacks' `network`."""
    from modelplane.components.network.path import ClusterPath
    from modelplane.components.network.sides import side_of

    ends = ctx.unit.key.split("/")
    up = Upstream(ctx.organization)
    up.prefetch(cluster_stack(name) for name in ends)
    sides = []
    for name in ends:
        exported = await up.get(cluster_stack(name), "network")
        if not exported:
            _fail(
                f"cluster {name!r}: stack {cluster_stack(name)!r} has no network output: run "
                f"that stack first (`modelplane up`, or `pulumi up -s {cluster_stack(name)}`)"
            )
        sides.append(side_of(name, exported))
    comp = ClusterPath(ctx.unit.name, sides[0], sides[1])
    pulumi.export("kind", comp.kind)


async def run_cache(ctx: Context) -> None:
    from modelplane.components.model_cache import ModelCacheComponent

    cache = ctx.fleet.caches[ctx.unit.key]
    up = Upstream(ctx.organization)
    targets: dict[str, ClusterTarget] = {}
    up.prefetch(cluster_stack(name) for name in cache_clusters(ctx.fleet, ctx.unit.key))
    for name in cache_clusters(ctx.fleet, ctx.unit.key):
        conn = await cluster_connection(up, name)
        targets[name] = cluster_target(ctx, name, conn, render_only=bool(conn.render_to))
    token = None
    hf = cache.spec.hugging_face
    if hf is not None and hf.auth_secret is not None:
        token = secret_value(
            ctx, hf.auth_secret.name, hf.auth_secret.key, what=f"ModelCache {cache.key} authSecret"
        )
    comp = ModelCacheComponent(
        cache.metadata.name, cache, targets, token=token, use=cache_in_use(ctx, cache)
    )
    pulumi.export("claimName", comp.claim_name)
    pulumi.export("clusters", comp.clusters)


def no_gateway_address_warning(
    cluster: str, gateway_address: str | None, gateway: InferenceGateway | None
) -> str | None:
    """The warning that a cluster's replicas are left out of routes, only when that is true:
    the cluster has no gateway address and is not a front door's cluster (whose replicas
    that front door routes straight to their Services)."""
    if gateway_address:
        return None
    if gateway is not None and cluster in gateway.spec.front_door_clusters:
        return None
    return (
        f"cluster {cluster!r} has no gateway address (yet): its replicas' endpoints "
        "carry no url and are left out of ModelService routes until it has one"
    )


def front_door_key(
    ctx: Context, *, keep: str | None = None, only: list[str] | None = None
) -> pulumi.Output[str]:
    """The fleet's front-door keys (components/workload/front_door.py): the driver generates
    them and keeps them as a config secret of every deployment and gateway stack. ``keep``:
    the user the front door sent last, accepted even when its key ended; ``only``: the
    users every workload gateway accepted in an earlier `up`, the only ones the front door
    may send (modelplane/front_door_keys.py, the driver's hold)."""
    from modelplane.components.workload.front_door import KEY_SECRET

    text = secret_value(ctx, *KEY_SECRET, what="the fleet's front-door key")
    return text.apply(lambda t: fdk.restricted(fdk.keeping(t, keep), only))


def fleet_ca(ctx: Context) -> pulumi.Output[str]:
    """The fleet CA (modelplane/fleet_pki.py): the driver makes it once and keeps it as a
    config secret of every cluster and gateway stack."""
    text = secret_value(ctx, *fleet_pki.SECRET, what="the fleet CA", check=_fleet_ca_problem)
    # `render` (missing secrets allowed): a throwaway CA, every certificate shown as a secret.
    return text.apply(
        lambda t: fleet_pki.new_ca(datetime.now(UTC)) if t == PLACEHOLDER_SECRET else t
    )


def certificate_generation() -> int:
    """How many times `modelplane keys rotate --certificates` renewed this stack's
    certificate before its period's end (plain stack config; fleet_pki.leaf)."""
    value = _plain_config(fleet_pki.GENERATION_CONFIG)
    try:
        return max(int(value or 0), 0)
    except ValueError:
        _fail(f"stack config {fleet_pki.GENERATION_CONFIG}: {value!r} is not a number")


def _fleet_ca_problem(found: ResolvedSecret) -> str | None:
    try:
        fleet_pki.parse_ca(found.value)
    except fleet_pki.PKIFormatError as exc:
        return str(exc)
    return None


def _plain_config(key: str) -> str | None:
    """A plain config value of the stack (a full ``namespace:name`` key)."""
    namespace, _, name = key.partition(":")
    return pulumi.Config(namespace).get(name)


def _plain(text: pulumi.Output[str], what: Callable[[str, datetime], Any]) -> pulumi.Output[Any]:
    """Something about the keys that holds no key, as a plain output."""
    return pulumi.Output.unsecret(text.apply(lambda t: what(t, datetime.now(UTC))))


async def run_deployment(ctx: Context) -> None:
    from modelplane.components.model_deployment import ModelDeploymentComponent
    from modelplane.components.workload.targets import workload_controller

    deployment = ctx.fleet.deployments[ctx.unit.key]
    replicas = ctx.lock.replicas_of(ctx.unit.key)
    up = Upstream(ctx.organization)
    targets: dict[str, ClusterTarget] = {}
    hop_key: pulumi.Output[str] | None = None
    up.prefetch(
        cluster_stack(name)
        for name in sorted({r.cluster for r in replicas})
        if name in ctx.fleet.clusters
    )
    for name in sorted({r.cluster for r in replicas}):
        if name not in ctx.fleet.clusters:
            _fail(
                f"the lock places {deployment.key} on cluster {name!r}, which the fleet no "
                "longer has: run `modelplane plan --write`"
            )
        conn = await cluster_connection(up, name)
        # The front-door check only where the front door can come through the cluster's
        # workload gateway: a controller modelplane configures, and an address (a renderTo
        # cluster's gateway has none modelplane learns: its hand-off keeps the check, not the
        # key -- modelplane/components/workload/targets.py).
        hop = None
        if not conn.render_to and workload_controller(ctx.fleet.clusters[name]) is not None:
            hop_key = hop_key or front_door_key(ctx, keep=_plain_config(fdk.KEEP_CONFIG))
            hop = hop_key
        targets[name] = cluster_target(
            ctx, name, conn, front_door_key=hop, render_only=bool(conn.render_to)
        )
        warning = no_gateway_address_warning(name, conn.gateway_address, ctx.fleet.gateway)
        if warning:
            pulumi.log.warn(warning)
    cache = None
    ref = deployment.spec.model_cache_ref
    if ref is not None:
        cache = ctx.fleet.caches.get(f"{deployment.metadata.namespace}/{ref.name}")
    older, sources = replicas_at_revision(deployment, replicas, ctx.fleet.caches)
    comp = ModelDeploymentComponent(
        deployment.metadata.name,
        deployment,
        replicas,
        targets,
        cache=cache,
        at_revision=older,
        sources=sources,
    )
    pulumi.export("endpoints", comp.endpoints)
    if hop_key is not None:
        # Which front-door users the workload gateways take (no key): the driver lets the
        # front door send only a key every deployment took in an earlier `up`.
        pulumi.export("frontDoorUsers", _plain(hop_key, fdk.users_accepted))
    pulumi.export(
        "replicas",
        [
            {"name": r.name, "cluster": r.cluster, "index": r.index, "pools": dict(r.pools)}
            for r in sorted(replicas, key=lambda r: (r.cluster, r.index))
        ],
    )


async def run_gateway(ctx: Context) -> None:
    from modelplane.api.pod_security import namespace_level
    from modelplane.components.ai_gateway import loop_parent
    from modelplane.components.gateway import (
        AUTHZ_ADDRESS,
        CALLERS_SECRET,
        ENVOY,
        GATEWAY_NAME,
        TLS_SECRET,
        WEB,
        InferenceGatewayComponent,
        service_listener,
    )
    from modelplane.components.images import front_door_image
    from modelplane.components.model_router import ModelRouterComponent, waking_services
    from modelplane.components.model_service import (
        LOOP_INTERNAL_SERVICE,
        LOOP_SERVICE,
        LOOP_TLS_URL,
        LOOP_URL,
        EndpointInfo,
        FrontDoor,
        ModelEndpointComponent,
        ModelServiceComponent,
        overflow_backends,
        service_backends,
    )
    from modelplane.components.workload.front_door import basic_credentials, htpasswd
    from modelplane.components.workload.objects import SYSTEM_NAMESPACE, ensure_namespace
    from modelplane.components.workload.routes import MAX_BACKENDS

    gateway = ctx.fleet.gateway
    assert gateway is not None
    up = Upstream(ctx.organization)
    # This stack's front door: `spec.cluster` (stack `gateway`) or a further one
    # (`gateway-<cluster>`); each is complete, with the same routes, callers and keys.
    ref = ctx.unit.key if ctx.unit.key in ctx.fleet.clusters else None
    # The first front door's provider keeps its name (`gateway-k8s`); a further front door's
    # is named after its cluster, as a deployment stack's (driver/hosting.py reads both).
    provider_name = "gateway-k8s" if ctx.unit.name == GATEWAY_STACK or ref is None else f"{ref}-k8s"
    gateway_cluster = [cluster_stack(ref)] if ref is not None else []
    # A Traefik front door keeps its second pass to every workload gateway (network/hop.py),
    # its own cluster's too: a replica there with a url goes through its workload gateway.
    hops = hop_clusters(ctx.fleet) if gateway.spec.backend == "Traefik" else []
    up.prefetch(
        [
            *gateway_cluster,
            *map(cluster_stack, hops),
            *map(deploy_stack, ctx.fleet.deployments),
        ]
    )
    install = True
    render_only = False  # the gateway's cluster only renders manifests (renderTo)
    # Wait for the Gateway's address when something is known to program it: the controller
    # modelplane installs, or a cluster whose platform declares its gateway controller.
    await_address = True
    # The cloud whose load balancer the front door's Service gets (idle timeout, teardown).
    cloud: str | None = None
    if ref is not None:
        conn = await cluster_connection(up, ref)
        provider = provider_for(provider_name, conn)
        cluster = ctx.fleet.clusters[ref]
        if cluster.spec.cluster.source in ("GKE", "EKS") and not conn.render_to:
            cloud = cluster.spec.cluster.source
        if not cluster.spec.serving_stack.install:
            await_address = cluster.spec.serving_stack.gateway is not None
        if conn.render_to:
            install = False
            await_address = False
            render_only = True
        elif gateway.spec.backend == "EnvoyGateway" and cluster.spec.serving_stack.install:
            install = False  # the serving stack's mp-envoy-gateway is already there
        elif not cluster.spec.serving_stack.install:
            install = False  # the platform team runs the cluster's stack, gateway controller too
    else:
        existing = gateway.spec.cluster.existing
        assert existing is not None
        kubeconfig = secret_value(
            ctx,
            existing.secret_ref.name,
            existing.secret_ref.key,
            what="InferenceGateway default kubeconfig",
        )
        from modelplane.components.providers import cluster_provider

        provider = cluster_provider(provider_name, kubeconfig=kubeconfig, render_to=None, opts=None)
    caller_keys = None
    if gateway.spec.auth is not None:
        keys = {
            c.name: secret_value(
                ctx,
                c.secret_ref.name,
                c.secret_ref.key,
                what=f"InferenceGateway {gateway.metadata.name} spec.auth caller {c.name}",
                check=caller_keys_problem,
            )
            for c in gateway.spec.auth.callers
        }
        caller_keys = pulumi.Output.all(**keys)
    tls_material = None
    if gateway.spec.tls is not None:
        tls = gateway.spec.tls
        what = f"InferenceGateway {gateway.metadata.name} spec.tls"
        tls_material = (
            secret_value(ctx, tls.certificate.name, tls.certificate.key, what=what),
            secret_value(ctx, tls.private_key.name, tls.private_key.key, what=what),
        )
    backend = gateway.spec.backend
    endpoints = [EndpointInfo.from_spec(e) for e in ctx.fleet.endpoints.values()]
    # Replicas being drained (autoscaling scale-in) leave every route before their
    # workload is deleted (scheduling.md, "Autoscaling").
    draining = ctx.lock.draining()
    unroutable = unroutable_clusters()
    for key in ctx.fleet.deployments:
        records = await up.require(deploy_stack(key), "endpoints")
        for record in routable_records(records or [], ctx.lock, key, unroutable):
            if record.get("name") in draining:
                continue
            info = EndpointInfo.from_record(record, gateway_cluster=ref)
            if info is None:
                pulumi.log.warn(
                    f"endpoint {record.get('namespace')}/{record.get('name')} on cluster "
                    f"{record.get('cluster')!r} has no url (its cluster gateway has no address "
                    "yet): left out of ModelService routes"
                )
            else:
                endpoints.append(info)
    # The fleet's front-door key, where the front door goes through a workload gateway, or
    # may shard a service over more endpoints than one route rule holds (it guards shards).
    traefik = gateway.spec.backend == "Traefik"
    may_shard = traefik and len(endpoints) > MAX_BACKENDS
    routed = [s for s in ctx.fleet.services.values() if s.spec.models]
    accepted = _plain_config(fdk.ACCEPTED_CONFIG)
    hop_key = (
        front_door_key(ctx, only=json.loads(accepted) if accepted else None)
        if may_shard or hops or any(e.replica for e in endpoints)
        else None
    )
    if hop_key is not None:
        # The user the front door sends (no key): the deployments keep accepting it until
        # the front door sends another.
        pulumi.export("frontDoorUser", _plain(hop_key, fdk.user_sent))
    # Traefik keeps `web` on Refuse, on the internal Service only (api.md "Large services").
    loop_service = (
        LOOP_INTERNAL_SERVICE
        if gateway.spec.tls is not None and gateway.spec.tls.http == "Refuse"
        else LOOP_SERVICE
    )
    # Mutual TLS to the workload gateways (components/workload/gateway_tls.py): the front
    # door's client certificate from the fleet CA; a Traefik front door reaches each replica's
    # gateway through its own Service once more.
    workload_gateways = await hop_addresses(up, hops)
    for ep in endpoints:  # a replica's cluster whose stack has no address output (yet)
        if traefik and ep.replica and ep.url is not None and ep.cluster is not None:
            workload_gateways.setdefault(ep.cluster, (ep.parsed.host, ep.parsed.port))
    ca = fleet_ca(ctx) if workload_gateways or any(e.replica for e in endpoints) else None
    if ca is not None and traefik:
        endpoints = through_second_pass(endpoints, loop_service)
    igw = InferenceGatewayComponent(
        gateway.metadata.name,
        gateway,
        provider,
        install_controller=install,
        await_address=await_address,
        caller_keys=caller_keys,
        front_door_key=hop_key,
        tls_material=tls_material,
        cloud=cloud,
        render_only=render_only,
        namespaces=route_namespaces(ctx.fleet),
        fleet_ca=ca,
        workload_gateways=workload_gateways,
        certificate_generation=certificate_generation(),
    )
    front_door = FrontDoor(
        listener=service_listener(gateway),
        scheme="https" if gateway.spec.tls is not None else "http",
        # Traefik asks authz: it adds the front door's credentials (and checks keys).
        authz_address=AUTHZ_ADDRESS
        if traefik and (hop_key is not None or gateway.spec.auth is not None)
        else None,
        credential=None
        if traefik or hop_key is None
        else pulumi.Output.secret(hop_key.apply(basic_credentials)),
        shard_users=pulumi.Output.secret(hop_key.apply(htpasswd))
        if may_shard and hop_key is not None
        else None,
        shard_listener=WEB,
        loop_service=loop_service,
        render_only=render_only,
        openai_loop=loop_parent() if not traefik and routed else None,
    )
    in_namespace = pulumi.ResourceOptions(provider=provider)
    namespaces: dict[str, pulumi.Resource | None] = {}
    for ns in sorted(
        {e.namespace for e in endpoints}
        | {s.metadata.namespace or "default" for s in ctx.fleet.services.values()}
    ):
        if ns != SYSTEM_NAMESPACE:
            # The level every stack co-owning the namespace on this cluster says (M8).
            level = namespace_level(ctx.fleet.clusters.get(ref or ""), ns)
            namespaces[ns] = ensure_namespace(ns, in_namespace, scope="gateway", pod_security=level)
    providers = [provider]
    # Envoy Gateway verifies each replica's workload gateway against the fleet CA.
    ca_cert = (
        ca.apply(lambda t: fleet_pki.parse_ca(t).cert_pem)
        if ca is not None and not traefik
        else None
    )
    ep_components: dict[str, ModelEndpointComponent] = {}
    for ep in sorted(endpoints, key=lambda e: e.key):
        ns_res = namespaces.get(ep.namespace)
        ep_components[ep.key] = ModelEndpointComponent(
            ep.key,
            ep,
            backend=backend,
            fleet_ca_cert=ca_cert,
            opts=pulumi.ResourceOptions(
                providers=providers, depends_on=[ns_res] if ns_res else None
            ),
        )
    addresses: dict[str, pulumi.Output[Any]] = {}
    for key, service in ctx.fleet.services.items():
        ns_res = namespaces.get(service.metadata.namespace or "default")
        deps: list[pulumi.Resource] = [igw, *ep_components.values()]
        if ns_res is not None:
            deps.append(ns_res)
        svc = ModelServiceComponent(
            key,
            service,
            endpoints,
            backend=backend,
            gateway_address=igw.address,
            gateway=(GATEWAY_NAME, SYSTEM_NAMESPACE),
            front_door=front_door,
            depends_on=deps,
            opts=pulumi.ResourceOptions(providers=providers),
        )
        addresses[key] = svc.address
    if routed:
        ModelRouterComponent(
            "openai",
            routed,
            {
                s.key: [(b.key, b.weight) for b in service_backends(s, endpoints, backend)]
                for s in routed
            },
            {s.key: [n for n, _ in overflow_backends(s, endpoints, backend)] for s in routed},
            {
                c.name: c.limits.model_dump(by_alias=True, exclude_none=True)
                for c in (gateway.spec.auth.callers if gateway.spec.auth else [])
                if c.limits is not None
            },
            waking=waking_services(ctx.fleet),
            front_door_url=LOOP_TLS_URL if gateway.spec.tls is not None else LOOP_URL,
            keys_secret=CALLERS_SECRET if front_door.authz_address else None,
            tls_secret=TLS_SECRET if gateway.spec.tls is not None else None,
            gateway=(GATEWAY_NAME, SYSTEM_NAMESPACE),
            listener=service_listener(gateway),
            render_only=render_only,
            envoy_class=None if traefik else str(ENVOY["class"]),
            image=front_door_image(gateway),
            depends_on=[igw],
            opts=pulumi.ResourceOptions(providers=providers),
        )
        pulumi.export(
            "openai", igw.address.apply(lambda a: f"{front_door.scheme}://{a}/v1/" if a else None)
        )
    pulumi.export("address", igw.address)
    pulumi.export("frontDoor", ref)
    pulumi.export("services", addresses)
    pulumi.export(
        "endpoints", [_endpoint_export(e) for e in sorted(endpoints, key=lambda e: e.key)]
    )


async def run_fleet_address(ctx: Context) -> None:
    """One name in front of every front door (`spec.fleetAddress`), from each front door's
    stack's `address`: Cloud DNS or Route 53 records with health checks."""
    from modelplane.components.fleet_address import DoorAddress, FleetAddressComponent

    gateway = ctx.fleet.gateway
    assert gateway is not None and gateway.spec.fleet_address is not None
    spec = gateway.spec.fleet_address
    up = Upstream(ctx.organization)
    doors = gateway_stacks(ctx.fleet)
    up.prefetch(name for name, _ in doors)
    found: list[DoorAddress] = []
    for stack, door in doors:
        address = await up.get(stack, "address")
        if not address:
            pulumi.log.warn(
                f"the front door on {door!r} (stack {stack!r}) has no address yet: left out of "
                f"{spec.hostname} until it has one"
            )
            continue
        found.append(DoorAddress(door, str(address)))
    if not found:
        _fail(
            f"no front door has an address yet: run the gateway stacks first "
            f"({', '.join(name for name, _ in doors)})"
        )
    comp = FleetAddressComponent("fleet-address", spec, found, https=gateway.spec.tls is not None)
    pulumi.export("hostname", comp.hostname)
    pulumi.export("frontDoors", [d.cluster for d in found])


async def hop_addresses(up: Upstream, clusters: Sequence[str]) -> dict[str, tuple[str, int]]:
    """The workload gateway's address of each of ``clusters`` that has one now (its cluster
    stack's `gatewayAddress`, ``host[:port]``)."""
    from modelplane.api.model_service import parse_endpoint_url

    out: dict[str, tuple[str, int]] = {}
    for cluster in clusters:
        address = await up.get(cluster_stack(cluster), "gatewayAddress")
        if address:
            url = parse_endpoint_url(f"https://{address}/")
            out[cluster] = (url.host, url.port)
    return out


def through_second_pass(endpoints: Sequence[EndpointInfo], loop_service: str) -> list[EndpointInfo]:
    """Each replica endpoint through the Traefik front door's own Service, to
    ``/_gateways/<cluster>/<its path>`` (network/hop.py): the front door's IngressRoute for
    the cluster dials its workload gateway over mutual TLS (gateway_tls.py)."""
    from dataclasses import replace

    from modelplane.components.model_service import LOOP_NAMESPACE, LOOP_PORT
    from modelplane.network.hop import hop_prefix

    return [
        replace(
            ep,
            via=(loop_service, LOOP_NAMESPACE, LOOP_PORT),
            via_prefix=hop_prefix(ep.cluster),
        )
        if ep.replica and ep.url is not None and ep.cluster is not None
        else ep
        for ep in endpoints
    ]


def revision_templates() -> dict[str, dict[str, Any]]:
    """Per deployment, the templates of the older revisions its replicas run, as the driver
    passed them (`MODELPLANE_REVISION_TEMPLATES`, or the stack's `modelplane:
    revisionTemplates`: a deployment stack's own, a cache stack's for the deployments that
    mount the cache)."""
    from_env = os.environ.get(TEMPLATES_ENV)
    try:
        if from_env is not None:
            known = json.loads(from_env or "{}")
        else:
            known = json.loads(pulumi.Config(CONFIG_NAMESPACE).get(TEMPLATES_CONFIG) or "{}")
    except (ValueError, AttributeError):
        known = {}
    if not isinstance(known, dict):
        return {}
    return {k: v for k, v in known.items() if isinstance(v, dict)}


def _own_templates(deployment: ModelDeployment) -> dict[str, Any]:
    """A deployment stack's templates: its config holds its own (not keyed by deployment)."""
    if os.environ.get(TEMPLATES_ENV) is not None:
        return revision_templates().get(deployment.key) or {}
    try:
        own = json.loads(pulumi.Config(CONFIG_NAMESPACE).get(TEMPLATES_CONFIG) or "{}")
    except (ValueError, AttributeError):
        return {}
    return own if isinstance(own, dict) else {}


def replicas_at_revision(
    deployment: ModelDeployment,
    replicas: Sequence[LockedReplica],
    caches: Mapping[str, ModelCache] | None = None,
) -> tuple[dict[str, ModelDeployment], dict[str, str]]:
    """Replica name -> the deployment as that replica renders it, for replicas the lock keeps
    at an older revision whose template the driver passed (`MODELPLANE_REVISION_TEMPLATES`):
    a rollout updates replicas one step at a time, the others keep their pods; and per such
    replica with a cache, the source it reads (ROOT_SOURCE: the volume's root)."""
    from modelplane.components.model_deployment import ROOT_SOURCE
    from modelplane.rollout import at_revision, revision, source_of

    known = _own_templates(deployment)
    current = revision(deployment, caches)
    out: dict[str, ModelDeployment] = {}
    sources: dict[str, str] = {}
    built: dict[str, ModelDeployment] = {}
    for r in replicas:
        rev = r.revision
        if rev is None or rev == current or not isinstance(known.get(rev), dict):
            continue
        if rev not in built:
            built[rev] = at_revision(deployment, known[rev])
        out[r.name] = built[rev]
        if known[rev].get("modelCacheRef"):
            sources[r.name] = source_of(known[rev]) or ROOT_SOURCE
    return out, sources


def cache_in_use(ctx: Context, cache: ModelCache) -> CacheUse:
    """What the cache's volume keeps: its own source and each source a replica of a
    deployment mounting it reads, by the lock's revisions and their templates."""
    from modelplane.rollout import cache_use

    revisions = {
        key: [r.revision for r in ctx.lock.replicas_of(key)] for key in ctx.fleet.deployments
    }
    return cache_use(cache, ctx.fleet.deployments, revisions, revision_templates())


def unroutable_clusters() -> frozenset[str]:
    """The clusters (and `replica:<name>` entries) whose endpoints stay out of routes: the
    gateway stack's `modelplane:unroutable` (a JSON list the driver sets from the runtime
    state), or `MODELPLANE_UNROUTABLE` (comma separated) when the driver passes it."""
    raw = os.environ.get(UNROUTABLE_ENV)
    if raw is not None:
        return frozenset(c.strip() for c in raw.split(",") if c.strip())
    try:
        listed = json.loads(pulumi.Config(CONFIG_NAMESPACE).get(UNROUTABLE_CONFIG) or "[]")
    except ValueError:
        _fail(f"config {CONFIG_NAMESPACE}:{UNROUTABLE_CONFIG} is not a JSON list")
    if not isinstance(listed, list):
        _fail(f"config {CONFIG_NAMESPACE}:{UNROUTABLE_CONFIG} is not a JSON list")
    return frozenset(str(c) for c in listed)


def routable_records(
    records: list[Mapping[str, Any]],
    lock: PlacementLock,
    deployment: str,
    unroutable: frozenset[str],
) -> list[Mapping[str, Any]]:
    """A deployment stack's endpoint records the routes may use: replicas still in the
    lock (the deployment stack may not have run since they were removed) on clusters that
    are not unroutable, and not listed as `replica:<name>` (not Ready yet)."""
    placed = {(r.name, r.cluster) for r in lock.replicas_of(deployment)}
    out = []
    for record in records:
        cluster = record.get("cluster")
        if cluster in unroutable or f"replica:{record.get('name')}" in unroutable:
            continue
        if cluster and (record.get("name"), cluster) not in placed:
            continue
        out.append(record)
    return out


def _endpoint_export(ep: Any) -> Mapping[str, Any]:
    return {
        "name": ep.name,
        "namespace": ep.namespace,
        "url": ep.url,
        "rewritePath": ep.rewrite_path,
        "service": ep.service,
        "labels": dict(ep.labels),
    }


async def main(stack: str | None = None) -> None:
    """The program: what this stack owns, built from the specs, the lock and upstream outputs."""
    ctx = load_context(stack)
    kind = ctx.unit.kind
    try:
        if kind == "InferenceCluster":
            run_cluster(ctx)
        elif kind == "ClusterPath":
            await run_path(ctx)
        elif kind == "ModelCache":
            await run_cache(ctx)
        elif kind == "ModelDeployment":
            await run_deployment(ctx)
        elif kind == "InferenceGateway":
            await run_gateway(ctx)
        elif kind == "FleetAddress":
            await run_fleet_address(ctx)
        else:  # pragma: no cover - stack_units only yields the six kinds
            _fail(f"stack {ctx.unit.name!r}: unknown kind {kind}")
    except ValueError as exc:
        # What validation cannot see from the specs (a stale lock, upstream outputs) is a
        # program error with a message, not a Python traceback from inside a component.
        _fail(f"stack {ctx.unit.name!r}: {exc}")
