"""The fleet's runtime state: the one owner of ``.modelplane/*.json``.

What ``reconcile`` remembers between rounds, and what ``up``/``preview``/``status`` read
back, as named JSON documents in a :class:`StateStore`:

- ``health``: since when each cluster has been unhealthy (``unhealthySince``);
- ``autoscale``: the autoscaler's memory (:class:`~modelplane.autoscale.AutoscaleState`);
- ``routing``: the clusters whose endpoints the gateway leaves out of the routes
  (``unroutable``) and the replicas not Ready yet (``unready``);
- ``cordons``: the clusters `modelplane drain` keeps out of new placements, each with
  since when (``modelplane uncordon`` forgets it; :mod:`modelplane.driver.drain`);
- ``orphans``: objects dropped from a stack's state while their cluster was unreachable,
  deleted when it answers again (:mod:`modelplane.driver.orphans`);
- ``rollout``: per deployment, the rollout in progress (target and stable revision, phase,
  reason, pause, when each replica being updated started) and the pod templates of the
  revisions replicas still run (:mod:`modelplane.driver.rollouts`).

:class:`FileStore` keeps each document as ``<dir>/<name>.json``, written atomically
(temporary file, then rename) in one place; a store shared between machines implements
the same three methods: :func:`store_for` picks :class:`~modelplane.driver.pgstore.PostgresStore`
when the fleet's Pulumi backend is ``postgres://`` (the documents then live in the same
database as the stacks, visible to every host and surviving a leader change; see
docs/architecture.md, "Where runtime state lives"). A missing or unreadable document reads
as empty: the state is a memory the next round rebuilds, never an input that can stop a run.

- ``scale``: the autoscaled replica counts `reconcile` last applied (deployment -> count),
  so that an `up` from a checkout whose committed lock predates them does not undo them.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from urllib.parse import urlparse

if TYPE_CHECKING:  # imported when used: `plan` reads the cordons and nothing else here
    from modelplane.autoscale import AutoscaleState
    from modelplane.health.spill import Cooldown

HEALTH = "health"
AUTOSCALE = "autoscale"
ROUTING = "routing"
ORPHANS = "orphans"
CORDONS = "cordons"
ROLLOUT = "rollout"
SCALE = "scale"
PHASES = "phases"
CAPACITY = "capacity"
FLEET_ID_ENV = "MODELPLANE_FLEET_ID"
SHARED_SCHEMES = ("postgres", "postgresql")
REPLICA_PREFIX = "replica:"
ROLLOUT_UNREADY = "rollout: "
"""The reason of a replica a rollout took out of the routes (modelplane.driver.rollouts)."""


class StateStore(Protocol):
    """Named JSON documents."""

    def load(self, name: str) -> Any | None:
        """The document, or None when it is missing or unreadable."""

    def save(self, name: str, document: Any) -> None:
        """Replace the document atomically (readers see the old or the new one)."""

    def delete(self, name: str) -> None:
        """Forget the document (nothing when it is missing)."""


def write_json_atomic(path: Path, document: Any) -> None:
    """``path`` holds ``document`` (indented JSON) or what it held before, never a torn
    file: written to a temporary file in the same directory, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(document, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class FileStore:
    """Documents as ``<root>/<name>.json`` (the fleet's ``.modelplane/``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def load(self, name: str) -> Any | None:
        try:
            return json.loads(self.path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def save(self, name: str, document: Any) -> None:
        from modelplane.secrets import private_dir

        private_dir(self.root)  # 0700, ignoring itself (docs/architecture.md)
        write_json_atomic(self.path(name), document)

    def delete(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)


def fleet_id(fleet_dir: str | Path, environ: Mapping[str, str] | None = None) -> str:
    """The fleet's key in a shared store: ``MODELPLANE_FLEET_ID``, else the fleet's Pulumi
    project (``modelplane.driver.project.fleet_project_name``: the committed ``name`` of its
    ``Pulumi.yaml``, else ``modelplane-<directory name>``)."""
    from modelplane.driver.project import fleet_project_name

    environ = os.environ if environ is None else environ
    return environ.get(FLEET_ID_ENV) or fleet_project_name(Path(fleet_dir).resolve())


def is_shared(backend_url: str | None) -> bool:
    """Whether runtime state lives in the backend (shared between hosts)."""
    return bool(backend_url) and urlparse(str(backend_url)).scheme in SHARED_SCHEMES


def store_for(
    backend_url: str | None,
    state_dir: str | Path,
    fleet_dir: str | Path,
    environ: Mapping[str, str] | None = None,
) -> StateStore:
    """The fleet's store: in the backend's database for ``postgres://``, keyed by
    :func:`fleet_id` and checked against the fleet's uid (``modelplane.fleetUid`` in its
    ``Pulumi.yaml``: another fleet of the same id is refused, modelplane.driver.pgstore), else
    the files of the fleet's ``.modelplane/`` (inside the fleet's folder: no other fleet's, so
    nothing to check)."""
    if is_shared(backend_url):
        from modelplane.driver.pgstore import PostgresStore
        from modelplane.driver.project import PROJECT_FILE, fleet_uid

        folder = Path(fleet_dir).resolve()
        key = (str(backend_url), fleet_id(folder, environ), fleet_uid(folder), str(folder))
        with _SHARED_LOCK:  # one store (one connection) per database and fleet per process
            store = _SHARED.get(key)
            if store is None:
                store = _SHARED[key] = PostgresStore(
                    key[0], key[1], key[2], project_file=str(folder / PROJECT_FILE)
                )
        return store
    return FileStore(Path(state_dir))


_SHARED: dict[tuple[str, str, str | None, str], StateStore] = {}
_SHARED_LOCK = threading.Lock()


@dataclass(frozen=True)
class Orphan:
    """A Kubernetes object left on a cluster that was unreachable (never a secret)."""

    cluster: str
    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str | None = None
    stack: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "stack": self.stack,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Orphan:
        return Orphan(
            str(data["cluster"]),
            str(data["apiVersion"]),
            str(data["kind"]),
            data.get("namespace") or None,
            str(data["name"]),
            data.get("uid") or None,
            str(data.get("stack") or ""),
        )

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.cluster}: {self.kind} {where}{self.name}"


@dataclass(frozen=True)
class Routing:
    """What the gateway leaves out of the ModelService routes."""

    unroutable: dict[str, str]  # cluster -> why its endpoints are out
    unready: dict[str, str]  # replica -> why it is out until Ready

    def exclusions(self) -> tuple[str, ...]:
        """Cluster names and ``replica:<name>`` entries (``MODELPLANE_UNROUTABLE``)."""
        return tuple(sorted(self.unroutable) + sorted(REPLICA_PREFIX + r for r in self.unready))


def _cooldown(data: Any) -> Cooldown:
    from modelplane.health.spill import Cooldown

    try:
        return Cooldown.from_json(data)
    except (KeyError, TypeError) as exc:
        raise ValueError(str(exc)) from None


def _document(data: Any) -> dict[str, Any]:
    """A document that is a JSON object, else an empty one."""
    return data if isinstance(data, dict) else {}


def _strings(section: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (section or {}).items()}


V = TypeVar("V")


@dataclass(frozen=True)
class _Section(Generic[V]):
    """A document that is one mapping under one name, ``{section: {key: value}}``: read with
    ``value`` (missing or unreadable: empty), written sorted by key (empty: the document goes,
    unless ``keep_empty``)."""

    document: str
    section: str
    value: Callable[[Any], V]
    keep_empty: bool = False

    def load(self, store: StateStore) -> dict[str, V]:
        data = _document(store.load(self.document))
        try:
            return {str(k): self.value(v) for k, v in (data.get(self.section) or {}).items()}
        except (AttributeError, TypeError, ValueError):
            return {}

    def save(self, store: StateStore, values: Mapping[str, Any]) -> None:
        if not values and not self.keep_empty:
            store.delete(self.document)
        else:
            store.save(self.document, {self.section: dict(sorted(values.items()))})


_UNHEALTHY = _Section(HEALTH, "unhealthySince", float, keep_empty=True)
_CORDONS = _Section(CORDONS, "cordons", float)
_SCALED = _Section(SCALE, "replicas", int)
_CAPACITY = _Section(CAPACITY, "pools", lambda v: _cooldown(v))
_PHASES = _Section(PHASES, "replicas", lambda v: {str(k): float(t) for k, t in dict(v).items()})


class RuntimeState:
    """The runtime state of one fleet, typed, over a :class:`StateStore`."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    @classmethod
    def at(cls, state_dir: str | Path) -> RuntimeState:
        """The state in a fleet's state directory (``.modelplane/``)."""
        return cls(FileStore(Path(state_dir)))

    @classmethod
    def for_backend(
        cls,
        backend_url: str | None,
        state_dir: str | Path,
        fleet_dir: str | Path,
        environ: Mapping[str, str] | None = None,
    ) -> RuntimeState:
        """The state where the fleet's backend keeps it (:func:`store_for`)."""
        return cls(store_for(backend_url, state_dir, fleet_dir, environ))

    # -- health.json ----------------------------------------------------------------------

    def unhealthy_since(self) -> dict[str, float]:
        """Since when each cluster has been unhealthy (written by `reconcile`)."""
        return _UNHEALTHY.load(self.store)

    def set_unhealthy_since(self, since: Mapping[str, float]) -> None:
        _UNHEALTHY.save(self.store, since)

    # -- autoscale.json -------------------------------------------------------------------

    def autoscale(self) -> AutoscaleState:
        """What `reconcile` remembers for autoscaling (a missing or bad file: nothing)."""
        from modelplane.autoscale import AutoscaleState

        data = self.store.load(AUTOSCALE)
        return AutoscaleState() if data is None else AutoscaleState.from_json(data)

    def set_autoscale(self, state: AutoscaleState) -> None:
        self.store.save(AUTOSCALE, state.as_json())

    # -- routing.json ---------------------------------------------------------------------

    def routing(self) -> Routing:
        """The recorded routing exclusions; empty when none or unreadable."""
        data = _document(self.store.load(ROUTING))
        try:
            return Routing(_strings(data.get("unroutable")), _strings(data.get("unready")))
        except (AttributeError, TypeError, ValueError):
            return Routing({}, {})

    def set_routing(
        self, unroutable: Mapping[str, str], unready: Mapping[str, str] | None = None
    ) -> bool:
        """Record the unroutable clusters (and the replicas not Ready); True when the set of
        clusters changed. Nothing to say and nothing recorded: nothing is written."""
        before = self.store.load(ROUTING)
        if not unroutable and not unready and before is None:
            return False
        data: dict[str, dict[str, str]] = {"unroutable": dict(sorted(unroutable.items()))}
        if unready:
            data["unready"] = dict(sorted(unready.items()))
        was = self.routing().unroutable if before is not None else {}
        self.store.save(ROUTING, data)
        return sorted(was) != sorted(unroutable)

    def clear_unready(self) -> bool:
        """Forget the replicas not Ready (reconcile stopping), keeping the unroutable
        clusters and the replicas a rollout took out (the next `up` resumes it); True when
        some were forgotten."""
        routing = self.routing()
        keep = {k: v for k, v in routing.unready.items() if v.startswith(ROLLOUT_UNREADY)}
        if len(keep) == len(routing.unready):
            return False
        self.set_routing(routing.unroutable, keep)
        return True

    # -- orphans.json ---------------------------------------------------------------------

    def orphans(self) -> list[Orphan]:
        data = _document(self.store.load(ORPHANS))
        try:
            return [Orphan.from_json(o) for o in data.get("orphans") or []]
        except (AttributeError, TypeError, KeyError, ValueError):
            return []

    def set_orphans(self, orphans: Iterable[Orphan]) -> None:
        """Record exactly these (one per object, sorted); none: the document goes."""
        unique = {(o.cluster, o.api_version, o.kind, o.namespace or "", o.name): o for o in orphans}
        if not unique:
            self.store.delete(ORPHANS)
            return
        self.store.save(ORPHANS, {"orphans": [unique[k].as_json() for k in sorted(unique)]})

    def record_orphans(self, orphans: Iterable[Orphan]) -> None:
        """Add to the recorded orphans."""
        self.set_orphans([*self.orphans(), *orphans])

    # -- cordons.json ---------------------------------------------------------------------

    def cordons(self) -> dict[str, float]:
        """The cordoned clusters, each with since when (`modelplane drain`)."""
        return _CORDONS.load(self.store)

    def cordon(self, cluster: str, at: float) -> bool:
        """Keep `cluster` out of new placements; False when it already was."""
        cordons = self.cordons()
        if cluster in cordons:
            return False
        cordons[cluster] = at
        _CORDONS.save(self.store, cordons)
        return True

    def uncordon(self, cluster: str) -> bool:
        """Let `cluster` take new replicas again; False when it was not cordoned."""
        cordons = self.cordons()
        if cordons.pop(cluster, None) is None:
            return False
        _CORDONS.save(self.store, cordons)
        return True

    # -- rollout.json ---------------------------------------------------------------------

    def rollouts(self) -> dict[str, RolloutRecord]:
        """Every deployment's remembered rollout (missing or unreadable: none)."""
        return _rollouts(self.store.load(ROLLOUT))

    def set_rollouts(self, records: Mapping[str, RolloutRecord]) -> None:
        """Record exactly these rollouts (none: the document goes)."""
        _ROLLOUTS.save(self.store, {k: r.as_json() for k, r in records.items()})

    # -- capacity.json -------------------------------------------------------------------

    def capacity(self) -> dict[str, Cooldown]:
        """The pools cooling down after a stockout (`cluster/pool`; health.spill)."""
        return _CAPACITY.load(self.store)

    def set_capacity(self, pools: Mapping[str, Cooldown]) -> None:
        _CAPACITY.save(self.store, {k: c.as_json() for k, c in pools.items()})

    # -- phases.json ---------------------------------------------------------------------

    def replica_phases(self) -> dict[str, dict[str, float]]:
        """When `reconcile` first saw each replica placed and routed (`placed`, `routed`)."""
        return _PHASES.load(self.store)

    def set_replica_phases(self, phases: Mapping[str, Mapping[str, float]]) -> None:
        _PHASES.save(self.store, {k: dict(sorted(v.items())) for k, v in phases.items()})

    # -- scale.json ----------------------------------------------------------------------

    def scaled(self) -> dict[str, int]:
        """The autoscaled counts last applied (deployment key -> replicas)."""
        return _SCALED.load(self.store)

    def set_scaled(self, counts: Mapping[str, int]) -> None:
        """Record exactly these counts (none: the document goes)."""
        _SCALED.save(self.store, counts)


@dataclass
class RolloutRecord:
    """One deployment's rollout, as remembered between steps and runs."""

    target: str
    stable: str | None = None
    phase: str = "Progressing"
    reason: str = ""
    failed: str | None = None
    paused: bool = False
    updating: dict[str, float] = field(default_factory=dict)
    """Replica -> when its update to the target was applied (its pods must be newer)."""
    templates: dict[str, Any] = field(default_factory=dict)
    """Revision -> what its pods are made of (`modelplane.rollout.template`)."""
    started: float | None = None
    updated: float | None = None
    watching: float | None = None
    """When the last step's replicas joined the routes (the analysis window starts)."""
    previous: dict[str, str] = field(default_factory=dict)
    """Replica being updated -> the revision it was updated from (which roles changed)."""
    retiring: list[str] = field(default_factory=list)
    """Old replicas a surge step marked draining in the lock (their replacements serve):
    removed once drained, also by the next run when this one was interrupted."""

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "stable": self.stable,
            "phase": self.phase,
            "reason": self.reason,
            "failed": self.failed,
            "paused": self.paused,
            "updating": dict(sorted(self.updating.items())),
            "templates": dict(sorted(self.templates.items())),
            "started": self.started,
            "updated": self.updated,
            "watching": self.watching,
            "previous": dict(sorted(self.previous.items())),
            "retiring": sorted(self.retiring),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RolloutRecord:
        return RolloutRecord(
            target=str(data["target"]),
            stable=data.get("stable") or None,
            phase=str(data.get("phase") or "Progressing"),
            reason=str(data.get("reason") or ""),
            failed=data.get("failed") or None,
            paused=bool(data.get("paused")),
            updating={str(k): float(v) for k, v in (data.get("updating") or {}).items()},
            templates={str(k): v for k, v in (data.get("templates") or {}).items()},
            started=data.get("started"),
            updated=data.get("updated"),
            watching=data.get("watching"),
            previous={str(k): str(v) for k, v in (data.get("previous") or {}).items()},
            retiring=[str(n) for n in (data.get("retiring") or [])],
        )


_ROLLOUTS = _Section(ROLLOUT, "deployments", dict)


def _rollouts(data: Any) -> dict[str, RolloutRecord]:
    out = {}
    for key, value in (_document(data).get(_ROLLOUTS.section) or {}).items():
        try:
            out[str(key)] = RolloutRecord.from_json(value)
        except (AttributeError, KeyError, TypeError, ValueError):
            continue  # a damaged record: that deployment's rollout starts afresh
    return out
