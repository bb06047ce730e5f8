"""Stack fingerprints: a digest of everything a stack's program reads (pure).

A stack is skipped by ``up`` when its fingerprint equals the one recorded with its last
successful update. The fingerprint covers:

- the spec objects the stack owns and the ones its components read (classes of its pools,
  the clusters a deployment is placed on, ...), in canonical JSON;
- its placement in the lock (a deployment's replicas; the gateway reads the whole lock);
- the outputs of the stacks it depends on, as the digest of their plain values (secrets
  included, only hashed: :func:`modelplane.driver.stack_cache.outputs_digest`);
- the secrets it resolves outside the state (``MODELPLANE_SECRET_*`` variables and
  ``file:`` references), hashed, and its own extra stack config (``pulumi config set``);
- the program itself: the source and vendored files of the ``stacks``, ``components``,
  ``crds`` and ``modelplane`` packages, and the versions of the Pulumi SDKs (and so of the
  providers) it registers resources with;
- for the gateway, the clusters whose endpoints it leaves out of routes (``reconcile``);
- for the stacks that read the front-door key while it is rotated, which keys the workload
  gateways accept and which one the front door sends *now* (modelplane/front_door_keys.py:
  the first `up` after a key's switch or end runs them);
- for the cluster and gateway stacks, the start of the fleet CA's certificate period
  (modelplane/fleet_pki.py: the first `up` of a period rotates the gateways' certificates);
- the Pulumi ESC environments its stack config imports (``environment:``), by name. Their
  values are resolved by the engine, at run time, from a service the driver does not read:
  a stack that imports any is never skipped (:func:`can_skip`), so a changed ESC value is
  always applied.

The digest is recorded in the update's message (``modelplane-inputs: <digest>``), which
every Pulumi backend keeps in the stack history, so skipping works from any checkout.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from modelplane import fleet_pki
from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import PlacementLock
from modelplane.stacks import StackUnit, cache_clusters, mounting

MESSAGE_PREFIX = "modelplane-inputs: "
_MESSAGE = re.compile(r"modelplane-inputs: ([0-9a-f]{16,64})")


def _dump(model: BaseModel | None) -> Any:
    return None if model is None else model.model_dump(mode="json", by_alias=True)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def secret_env_name(name: str, key: str) -> str:
    """``MODELPLANE_SECRET_<NAME>_<KEY>`` (the stack program's rule, modelplane.secrets)."""
    from modelplane.secrets import env_var

    return env_var(name, key)


def secret_refs(fleet: FleetSpec, unit: StackUnit) -> list[tuple[str, str]]:
    """The ``(name, key)`` secret references a stack resolves itself."""
    refs: list[tuple[str, str]] = []
    if unit.kind == "InferenceCluster":
        existing = fleet.clusters[unit.key].spec.cluster.existing
        if existing is not None:
            if existing.secret_ref is not None:
                refs.append((existing.secret_ref.name, existing.secret_ref.key))
    elif unit.kind == "ModelCache":
        hf = fleet.caches[unit.key].spec.hugging_face
        if hf is not None and hf.auth_secret is not None:
            refs.append((hf.auth_secret.name, hf.auth_secret.key))
    elif unit.kind == "InferenceGateway" and fleet.gateway is not None:
        existing_gw = fleet.gateway.spec.cluster.existing
        if existing_gw is not None:
            refs.append((existing_gw.secret_ref.name, existing_gw.secret_ref.key))
        # Callers' keys and the TLS certificate: a rotated key is a changed stack.
        spec = fleet.gateway.spec
        for caller in spec.auth.callers if spec.auth is not None else []:
            refs.append((caller.secret_ref.name, caller.secret_ref.key))
        if spec.tls is not None:
            refs.append((spec.tls.certificate.name, spec.tls.certificate.key))
            refs.append((spec.tls.private_key.name, spec.tls.private_key.key))
    return refs


def secret_digests(
    fleet: FleetSpec,
    unit: StackUnit,
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> dict[str, str | None]:
    """Hashes of the secret values a stack reads from the environment or from files.

    (Secrets in stack config are covered by the stack's config, hashed as stored.)
    """
    from modelplane.secrets import SecretNotFound, resolve_secret

    environ = os.environ if environ is None else environ
    gateway = fleet.gateway if unit.kind == "InferenceGateway" else None
    auth = gateway.spec.auth if gateway is not None else None
    callers = {(c.secret_ref.name, c.secret_ref.key) for c in auth.callers} if auth else set()
    out: dict[str, str | None] = {}
    for name, key in secret_refs(fleet, unit):
        try:
            value = resolve_secret(
                name, key, config=lambda _k: None, env=environ, base_dir=base_dir
            ).value
        except SecretNotFound:
            out[f"{name}/{key}"] = None
            continue
        if (name, key) in callers:
            # A caller's key that ended since (notAfter) changes the gateway's inputs: the
            # next `up` leaves its hash out of the table (authz refuses it already).
            value += _expired_note(value)
        out[f"{name}/{key}"] = hashlib.sha256(value.encode()).hexdigest()
    return out


def _expired_note(text: str) -> str:
    """``"\0expired:<n>"`` when ``n`` of a caller's keys have ended, else nothing (so a
    fingerprint without an ended key is what it always was)."""
    from datetime import UTC, datetime

    from modelplane.caller_keys import KeyFormatError, parse_keys

    try:
        keys = parse_keys(text)
    except KeyFormatError:
        return ""
    now = datetime.now(UTC)
    expired = sum(k.expired(now) for k in keys)
    return f"\0expired:{expired}" if expired else ""


def owned_inputs(fleet: FleetSpec, lock: PlacementLock, unit: StackUnit) -> dict[str, Any]:
    """The spec objects and placement a stack's program reads, as canonical JSON data."""
    if unit.kind == "InferenceCluster":
        cluster = fleet.clusters[unit.key]
        classes = sorted({p.class_name for p in cluster.spec.node_pools})
        data: dict[str, Any] = {
            "cluster": _dump(cluster),
            "classes": {n: _dump(fleet.classes.get(n)) for n in classes},
        }
        gw = fleet.gateway
        if gw is not None and unit.key in gw.spec.front_door_clusters:
            data["gateway"] = _dump(gw)
        # The ranges the fleet address plan gives it (a changed entry changes the network).
        entry = lock.network.clusters.get(unit.key) if lock.network is not None else None
        if entry is not None:
            data["addresses"] = entry.model_dump(mode="json", exclude_none=True)
        return data
    if unit.kind == "ClusterPath":
        ends = unit.key.split("/")
        return {"clusters": {c: _dump(fleet.clusters.get(c)) for c in ends}}
    if unit.kind == "ModelCache":
        # The revisions replicas run decide which sources the volume keeps.
        return {
            "cache": _dump(fleet.caches[unit.key]),
            "clusters": cache_clusters(fleet, unit.key),
            "revisions": {
                key: sorted({r.revision or "" for r in lock.replicas_of(key)})
                for key in mounting(fleet, unit.key)
            },
        }
    if unit.kind == "ModelDeployment":
        dep = fleet.deployments[unit.key]
        replicas = lock.replicas_of(unit.key)
        clusters = sorted({r.cluster for r in replicas})
        pool_classes: set[str] = set()
        for r in replicas:
            cluster = fleet.clusters.get(r.cluster)
            for pool_name in r.pools.values():
                pool = cluster.spec.pool(pool_name) if cluster else None
                if pool is not None:
                    pool_classes.add(pool.class_name)
        cache_ref = dep.spec.model_cache_ref
        cache_key = f"{dep.metadata.namespace}/{cache_ref.name}" if cache_ref else None
        return {
            "deployment": _dump(dep),
            # `draining` changes the routes (the gateway stack), not the workloads; the footprint
            # and `surge` are the scheduler's record.
            "replicas": [
                r.model_dump(mode="json", by_alias=True, exclude={"draining", "footprint", "surge"})
                for r in replicas
            ],
            "clusters": {c: _dump(fleet.clusters.get(c)) for c in clusters},
            "classes": {n: _dump(fleet.classes.get(n)) for n in sorted(pool_classes)},
            "cache": _dump(fleet.caches.get(cache_key)) if cache_key else None,
        }
    if unit.kind == "InferenceGateway":
        return {
            "gateway": _dump(fleet.gateway),
            "services": {k: _dump(v) for k, v in fleet.services.items()},
            "endpoints": {k: _dump(v) for k, v in fleet.endpoints.items()},
            "deployments": {k: _dump(v.metadata) for k, v in fleet.deployments.items()},
            # Footprints, revisions and removed deployments are not the routes' business.
            "lock": lock.model_dump(
                mode="json",
                by_alias=True,
                exclude={
                    "removed": True,
                    "deployments": {
                        "__all__": {"replicas": {"__all__": {"footprint", "revision"}}}
                    },
                },
            ),
        }
    if unit.kind == "FleetAddress" and fleet.gateway is not None:
        # The front doors' addresses are upstream outputs; which doors, in order, and how.
        return {
            "fleetAddress": _dump(fleet.gateway.spec.fleet_address),
            "frontDoors": fleet.gateway.spec.front_door_clusters,
            "https": fleet.gateway.spec.tls is not None,
        }
    raise ValueError(f"unknown stack kind {unit.kind!r}")


#: What a stack's program is made of: its package (the program, the components, the vendored
#: CRDs and manifests, and modelplane's own modules it imports: all in ``modelplane``), by
#: these file kinds.
PROGRAM_PACKAGES = ("modelplane",)
PROGRAM_FILES = ("*.py", "*.yaml", "*.yml", "*.json")
#: The Python SDKs the program registers resources with (their version is each provider's).
SDK_DISTRIBUTIONS = ("pulumi", "pulumi-kubernetes", "pulumi-gcp", "pulumi-aws", "pulumi-eks")


def tree_digest(roots: Mapping[str, Sequence[Path]]) -> str:
    """A digest of the program files under each named package's folders (path and bytes)."""
    h = hashlib.sha256()
    for package, locations in roots.items():
        if not locations:
            h.update(f"{package}:missing".encode())
            continue
        for location in locations:
            root = Path(location)
            paths = {p for pattern in PROGRAM_FILES for p in root.rglob(pattern)}
            for path in sorted(paths):
                if "__pycache__" in path.parts or not path.is_file():
                    continue
                h.update(f"{package}/{path.relative_to(root)}".encode())
                h.update(b"\0")
                h.update(path.read_bytes())
                h.update(b"\0")
    return h.hexdigest()


def sdk_versions() -> dict[str, str | None]:
    """The installed versions of the Pulumi SDKs the program uses (None: not installed)."""
    import importlib.metadata

    out: dict[str, str | None] = {}
    for dist in SDK_DISTRIBUTIONS:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


@cache
def program_digest() -> str:
    """A digest of the Pulumi program: the source and vendored files of its packages and the
    versions of the provider SDKs (a provider or SDK upgrade is a changed program)."""
    roots: dict[str, list[Path]] = {}
    for package in PROGRAM_PACKAGES:
        spec = importlib.util.find_spec(package)
        locations = spec.submodule_search_locations if spec is not None else None
        roots[package] = [Path(p) for p in locations or []]
    return digest({"files": tree_digest(roots), "sdks": sdk_versions()})


def stack_fingerprint(
    fleet: FleetSpec,
    lock: PlacementLock,
    unit: StackUnit,
    upstream_outputs: Mapping[str, Any],
    *,
    extra_config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
    program: str | None = None,
    unroutable: Sequence[str] = (),
    project: str = "",
    hold: Mapping[str, Any] | None = None,
    environments: Sequence[str] = (),
) -> str:
    """The digest of every input of one stack (see the module docstring); ``unroutable``:
    the clusters the gateway leaves out of routes (an input of the gateway stack only);
    ``project``: the fleet's Pulumi project (its stack references name it)."""
    data: dict[str, Any] = {
        "stack": unit.name,
        "inputs": owned_inputs(fleet, lock, unit),
        "upstream": {name: upstream_outputs.get(name) for name in sorted(unit.upstream)},
        "secrets": secret_digests(fleet, unit, environ, base_dir),
        "config": dict(extra_config or {}),
        "program": program if program is not None else program_digest(),
    }
    if unit.kind == "InferenceGateway" and unroutable:
        data["unroutable"] = sorted(unroutable)
    front_door = front_door_phase(unit.kind, {**(extra_config or {}), **(hold or {})}, environ)
    if front_door is not None:
        data["frontDoor"] = front_door
    if unit.kind in ("InferenceCluster", "InferenceGateway"):
        # Each period's `up` derives the gateways' next certificates (fleet_pki.py): the
        # period's start is an input, so the first `up` of a period runs these stacks.
        data["certificates"] = fleet_pki.period_start(datetime.now(UTC)).isoformat()
    if project:
        data["project"] = project
    if environments:
        data["environments"] = list(environments)
    return digest(data)


def front_door_phase(
    kind: str,
    config: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> dict[str, Any] | None:
    """What a stack of ``kind`` renders from the front-door keys at ``now`` (a deployment:
    the users its workload gateways accept; the gateway: those and the user it sends), from
    the environment's key text when it is set, else from the schedule in the stack's config,
    with the driver's hold (``config``: the stack's whole config); None for other kinds and
    for keys without times (a fingerprint as it always was)."""
    from modelplane import front_door_keys
    from modelplane.caller_keys import KeyFormatError

    if kind not in ("ModelDeployment", "InferenceGateway"):
        return None
    environ = os.environ if environ is None else environ
    text = environ.get(secret_env_name("modelplane-front-door", "key"))
    schedule = config.get(front_door_keys.SCHEDULE_CONFIG)
    if text:
        try:
            schedule = front_door_keys.schedule(front_door_keys.parse(text))
        except KeyFormatError:
            return None
    keep = config.get(front_door_keys.KEEP_CONFIG)
    only = config.get(front_door_keys.ACCEPTED_CONFIG)
    phase = front_door_keys.phase(
        schedule if isinstance(schedule, str) else None,
        now or datetime.now(UTC),
        keep=keep if isinstance(keep, str) else None,
        only=json.loads(only) if isinstance(only, str) else None,
    )
    if phase is not None and kind == "ModelDeployment":
        phase.pop("sent")  # a deployment's workload gateways check keys, never send one
    return phase


def update_message(fingerprint: str, subject: str | None = None) -> str:
    """The update's message: the commit subject a plain `pulumi up` records (when there is
    one), then the fingerprint, which :func:`recorded_fingerprint` finds anywhere in it."""
    tag = f"{MESSAGE_PREFIX}{fingerprint}"
    return f"{subject} ({tag})" if subject else tag


def recorded_fingerprint(message: str | None) -> str | None:
    """The fingerprint recorded in an update message, if any."""
    if not message:
        return None
    found = _MESSAGE.findall(message)  # the last: a commit subject before it may quote one
    return found[-1] if found else None


def can_skip(
    fingerprint: str,
    last_kind: str | None,
    last_result: str | None,
    last_message: str | None,
    environments: Sequence[str] = (),
) -> bool:
    """True when the last operation on the stack was a successful update with these inputs
    (never for a stack importing ESC ``environments``: their values are unseen here)."""
    return (
        not environments
        and last_kind == "update"
        and last_result == "succeeded"
        and recorded_fingerprint(last_message) == fingerprint
    )
