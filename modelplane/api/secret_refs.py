"""What a spec's secretRef may reach (docs/architecture.md, "Secrets"; security finding M7).

A spec author picks secretRef names, and `up` copies a ModelCache's token into a namespace
the author reads: without limits, a spec could copy any secret the runner can read there.

- ``file:`` paths are relative to the fleet folder and stay inside it (:func:`file_problem`,
  lexical; :func:`confined_file` follows symlinks when the file is read).
- One secret, one use (:data:`USES`): a secret one use names may not be named by a use listed
  after it; secrets are compared by what they resolve through (the environment variable,
  the file).
- ``modelplane-front-door`` is modelplane's own; ``.modelplane/`` is read for callers' keys
  only, and a model token is not read from the dev fleet's state.

Pure: strings in, errors out; :func:`confined_file` reads the file system (symlinks).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from modelplane.api.errors import SpecError

if TYPE_CHECKING:
    from modelplane.api.fleet import FleetSpec

FILE_PREFIX = "file:"
DEV_FLEET_STATE_ENV = "MODELPLANE_DEV_FLEET_STATE"
DEV_FLEET_STATE = "${" + DEV_FLEET_STATE_ENV + "}/"
STATE_DIR = ".modelplane"  # the fleet's own: state, workspaces, callers' keys
FRONT_DOOR_SECRET = (
    "modelplane-front-door"  # modelplane/components/workload/front_door.py KEY_SECRET
)
_VARIABLE = re.compile(r"\$(?:\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)")

# The uses of a secret, most privileged first: a secret one names, a later one may not.
KUBECONFIG, CALLER_KEY, TLS, MODEL_TOKEN = (
    "kubeconfig",
    "caller key",
    "front-door TLS",
    "model token",
)
USES = (KUBECONFIG, CALLER_KEY, TLS, MODEL_TOKEN)


def env_var(name: str, key: str) -> str:
    """`MODELPLANE_SECRET_<NAME>_<KEY>`: upper-cased, `-` and `.` (and `/`, `:`) as `_`."""
    raw = f"{name}_{key}".upper()
    return "MODELPLANE_SECRET_" + re.sub(r"[-./:]", "_", raw)


def file_problem(raw: str) -> str | None:
    """Why the path of a ``file:`` secretRef is refused (None: it is not), by its text: an
    absolute path, `~`, `..`, a variable other than a leading `${MODELPLANE_DEV_FLEET_STATE}/`."""
    rest = raw[len(DEV_FLEET_STATE) :] if raw.startswith(DEV_FLEET_STATE) else raw
    if not rest.strip():
        return "names no file"
    if _VARIABLE.search(rest) or "$" in rest:
        return f"may use no variable but a leading {DEV_FLEET_STATE!r}"
    if rest.startswith("~"):
        return "must not start with '~' (a path relative to the fleet folder)"
    if PurePosixPath(rest).is_absolute() or PureWindowsPath(rest).is_absolute():
        return "must be a path relative to the fleet folder, not an absolute one"
    if ".." in PurePosixPath(rest).parts or ".." in PureWindowsPath(rest).parts:
        return "must not contain '..' (it stays inside the fleet folder)"
    if "\0" in rest:
        return "must not contain a NUL character"
    return None


def confined_file(raw: str, fleet_dir: str | Path, dev_fleet_state: str | Path) -> Path:
    """The file a ``file:`` secretRef names, resolved (symlinks followed) inside its root: the
    fleet folder, or the dev fleet's state for a leading `${MODELPLANE_DEV_FLEET_STATE}/`.
    Raises ValueError (the reason) when the path is refused or leaves its root."""
    problem = file_problem(raw)
    if problem:
        raise ValueError(problem)
    dev = raw.startswith(DEV_FLEET_STATE)
    root = Path(os.path.realpath(dev_fleet_state if dev else fleet_dir))
    rest = raw[len(DEV_FLEET_STATE) :] if dev else raw
    path = Path(os.path.realpath(root / rest))
    if path == root or not path.is_relative_to(root):
        where = "the dev fleet's state" if dev else "the fleet folder"
        raise ValueError(f"leaves {where} (through a symlink)")
    return path


@dataclass(frozen=True)
class Ref:
    """One secretRef of a spec: its use, where it is written, what it names."""

    use: str
    kind: str
    key: str  # the object's key in the fleet
    path: str  # the field, e.g. spec.auth.callers[0].secretRef
    name: str
    secret_key: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.key}'s {self.path}"

    def identities(self) -> set[str]:
        """What it resolves through: its environment variable, and its file."""
        out = {"env:" + env_var(self.name, self.secret_key)}
        if self.name.startswith(FILE_PREFIX):
            out.add("file:" + posixpath.normpath(self.name[len(FILE_PREFIX) :]))
        return out


def fleet_refs(fleet: FleetSpec) -> Iterator[Ref]:
    """Every secretRef of the fleet's specs, with its use."""
    for name, cluster in fleet.clusters.items():
        existing = cluster.spec.cluster.existing
        ref = existing.secret_ref if existing is not None else None
        if ref is not None:
            path = "spec.cluster.existing.secretRef"
            yield Ref(KUBECONFIG, "InferenceCluster", name, path, ref.name, ref.key)
    gateway = fleet.gateway
    if gateway is not None:
        key = gateway.metadata.name
        if gateway.spec.cluster.existing is not None:
            ref = gateway.spec.cluster.existing.secret_ref
            path = "spec.cluster.existing.secretRef"
            yield Ref(KUBECONFIG, "InferenceGateway", key, path, ref.name, ref.key)
        for i, caller in enumerate(gateway.spec.auth.callers if gateway.spec.auth else []):
            path = f"spec.auth.callers[{i}].secretRef"
            ref2 = caller.secret_ref
            yield Ref(CALLER_KEY, "InferenceGateway", key, path, ref2.name, ref2.key)
        if gateway.spec.tls is not None:
            for field, ref2 in (
                ("certificate", gateway.spec.tls.certificate),
                ("privateKey", gateway.spec.tls.private_key),
            ):
                yield Ref(TLS, "InferenceGateway", key, f"spec.tls.{field}", ref2.name, ref2.key)
    for key, cache in fleet.caches.items():
        hf = cache.spec.hugging_face
        if hf is not None and hf.auth_secret is not None:
            path = "spec.huggingFace.authSecret"
            secret = hf.auth_secret
            yield Ref(MODEL_TOKEN, "ModelCache", key, path, secret.name, secret.key)


def _own_problem(ref: Ref) -> str | None:
    """What one secretRef may not name, whatever the others name."""
    if ref.name == FRONT_DOOR_SECRET or "env:" + env_var(FRONT_DOOR_SECRET, "key") in (
        ref.identities()
    ):
        return f"{FRONT_DOOR_SECRET!r} is modelplane's own front-door key"
    if not ref.name.startswith(FILE_PREFIX):
        return None
    raw = ref.name[len(FILE_PREFIX) :]
    problem = file_problem(raw)
    if problem:
        return f"{ref.name!r} {problem}"
    rest = PurePosixPath(raw[len(DEV_FLEET_STATE) :] if raw.startswith(DEV_FLEET_STATE) else raw)
    in_state = not raw.startswith(DEV_FLEET_STATE) and rest.parts[:1] == (STATE_DIR,)
    if in_state and ref.use != CALLER_KEY:
        return (
            f"{ref.name!r}: {STATE_DIR}/ holds modelplane's state; only callers' keys are "
            "read there"
        )
    if raw.startswith(DEV_FLEET_STATE) and ref.use == MODEL_TOKEN:
        return (
            f"{ref.name!r}: a model token is not read from the dev fleet's state (its kubeconfigs)"
        )
    return None


def secret_ref_errors(fleet: FleetSpec) -> list[SpecError]:
    """Every secretRef that reaches beyond what its use may: errors naming file, object and
    field (the fleet's `validate` and `up` refuse them before anything runs)."""
    refs = list(fleet_refs(fleet))
    owner: dict[str, Ref] = {}  # identity -> the most privileged ref naming it
    for ref in sorted(refs, key=lambda r: USES.index(r.use)):
        for identity in ref.identities():
            owner.setdefault(identity, ref)
    errors: list[SpecError] = []
    for ref in refs:
        problem = _own_problem(ref)
        if problem is None:
            first = next(
                (
                    owner[i]
                    for i in sorted(ref.identities())
                    if USES.index(owner[i].use) < USES.index(ref.use)
                ),
                None,
            )
            if first is not None:
                problem = (
                    f"names the secret of {first.label} (a {first.use}): a {ref.use} may not "
                    "use it (one secret, one use)"
                )
        if problem:
            file, doc = fleet.sources.get((ref.kind, ref.key), ("", 0))
            errors.append(SpecError(file, doc, f"{ref.kind} {ref.key}", ref.path, problem))
    return errors
