"""Load a fleet directory: every YAML document, validated, with every error collected."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from pydantic import BaseModel, ValidationError

from modelplane.api.base import API_VERSION
from modelplane.api.errors import SpecError
from modelplane.api.fleet import FleetSpec
from modelplane.api.kinds import KINDS, NAMESPACED
from modelplane.api.network import declared_overlaps, unreachable
from modelplane.api.notices import fleet_warnings
from modelplane.api.paths import format_path, join_path
from modelplane.api.pod_security import pod_security_errors
from modelplane.api.problems import FieldProblems
from modelplane.api.references import check_references
from modelplane.api.secret_refs import secret_ref_errors
from modelplane.api.yamlread import MAX_FILE_BYTES, YamlDocument, read_yaml

LOCK_FILE = "modelplane.lock.yaml"


@dataclass
class LoadResult:
    fleet: FleetSpec
    errors: list[SpecError] = field(default_factory=list)
    # Valid but almost surely unintended (api.md): reported, errors only with --strict.
    warnings: list[SpecError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Document:
    file: str
    index: int
    body: Any
    source: YamlDocument | None = None  # node marks, when read from a file


def is_pulumi_file(name: str) -> bool:
    """A Pulumi project or stack config file (``Pulumi.yaml``, ``Pulumi.<stack>.yaml``)."""
    return name in ("Pulumi.yaml", "Pulumi.yml") or (
        name.startswith("Pulumi.") and name.endswith((".yaml", ".yml"))
    )


def fleet_files(root: Path, errors: list[SpecError] | None = None) -> list[Path]:
    """Every *.yaml / *.yml below root in path order, skipping hidden folders, the lock and
    the Pulumi project and stack config files.

    Dangling or looping symlinks and unreadable folders are reported into errors
    (when given) rather than skipped: a spec must not vanish without a word.
    """
    if root.is_file():
        return [root]
    files: list[Path] = []
    report = errors if errors is not None else []

    def on_error(exc: OSError) -> None:
        where = exc.filename or str(root)
        report.append(SpecError(str(where), 0, "", "", f"cannot read folder: {exc.strerror}"))

    for folder, dirnames, filenames in os.walk(root, onerror=on_error, followlinks=True):
        here = Path(folder)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for d in list(dirnames):
            target = here / d
            if target.is_symlink():
                try:
                    real = target.resolve(strict=True)
                except (OSError, RuntimeError):
                    report.append(SpecError(str(target), 0, "", "", "symlink loops"))
                    dirnames.remove(d)
                    continue
                if real == root.resolve() or root.resolve().is_relative_to(real):
                    report.append(
                        SpecError(str(target), 0, "", "", "symlink loops back into the fleet")
                    )
                    dirnames.remove(d)
        for name in filenames:
            if name.startswith(".") or name == LOCK_FILE or is_pulumi_file(name):
                continue
            path = here / name
            if not name.endswith((".yaml", ".yml")):
                continue
            if os.path.islink(path) and not os.path.exists(path):
                try:
                    path.resolve(strict=True)
                    problem = "dangling symlink"
                except RuntimeError:
                    problem = "symlink loops"
                except OSError as exc:
                    problem = "symlink loops" if exc.errno == errno.ELOOP else "dangling symlink"
                report.append(SpecError(str(path), 0, "", "", problem))
                continue
            if path.is_file():
                files.append(path)
            else:
                report.append(SpecError(str(path), 0, "", "", "not a regular file"))
    return sorted(files)


def _read_documents(path: Path, display: str, errors: list[SpecError]) -> list[Document]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            errors.append(
                SpecError(display, 0, "", "", f"file is larger than {MAX_FILE_BYTES // 2**20} MiB")
            )
            return []
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        errors.append(SpecError(display, 0, "", "", f"cannot read file: {exc.strerror or exc}"))
        return []
    except UnicodeDecodeError as exc:
        errors.append(
            SpecError(display, 0, "", "", f"not UTF-8 text (byte {exc.start}): {exc.reason}")
        )
        return []
    docs, problems = read_yaml(text)
    for p in problems:
        errors.append(SpecError(display, p.document, "", p.path, p.message, p.line, p.column))
    return [Document(display, d.index, d.body, d) for d in docs]


def _object_label(kind: str, body: dict[str, Any]) -> str:
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else "?"
    if kind in NAMESPACED:
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "default"
        return f"{kind} {ns}/{name}"
    return f"{kind} {name}"


def _got(value: Any) -> str:
    """What a YAML scalar was read as, for a type error: `the string "2"`, `the boolean true`."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"the string {shown!r}"
    if isinstance(value, int):
        try:
            text = str(value)
        except ValueError:  # past Python's int-to-str digit limit
            return "a very long integer"
        return f"the integer {text}" if len(text) <= 24 else f"an integer of {len(text)} digits"
    if isinstance(value, float):
        return f"the number {value!r}"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


# Strict scalars (base.Strict): what a wrong YAML type gets told, by pydantic error type.
_TYPE_MESSAGES = {
    "int_type": 'must be an integer, written as a YAML integer (2, not "2", 2.0 or yes)',
    "bool_type": "must be a boolean, written as YAML true or false (unquoted)",
    "float_type": "must be a number, written unquoted (0.5, 2)",
    "finite_number": "must be a finite number",
    "string_type": 'must be a string (quote it: "1.30", "yes")',
}


_RANGE_ERRORS = frozenset({"less_than_equal", "less_than", "greater_than_equal", "greater_than"})


def validation_errors(doc: Document, obj: str, exc: ValidationError) -> list[SpecError]:
    out = []
    for err in exc.errors(include_url=False):
        path = format_path(err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, FieldProblems):
            for rel, message in cause.problems:
                out.append(SpecError(doc.file, doc.index, obj, join_path(path, rel), message))
            continue
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] in _TYPE_MESSAGES:
            message = f"{_TYPE_MESSAGES[err['type']]}; got {_got(err.get('input'))}"
        elif err["type"] in _RANGE_ERRORS and isinstance(err.get("input"), int | float):
            message = f"{message}; got {_got(err['input'])}"
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "required field is missing"
        out.append(SpecError(doc.file, doc.index, obj, path, message))
    return out


def _parse(
    doc: Document, errors: list[SpecError], invalid: set[tuple[str, str]] | None = None
) -> tuple[str, BaseModel] | None:
    body = doc.body
    if not isinstance(body, dict):
        errors.append(SpecError(doc.file, doc.index, "", "", "document is not a mapping"))
        return None
    kind = body.get("kind")
    if kind == "PlacementLock" and body.get("apiVersion") == API_VERSION:
        return None  # a lock kept beside the specs is not a spec
    if body.get("apiVersion") != API_VERSION:
        errors.append(
            SpecError(
                doc.file,
                doc.index,
                str(kind or ""),
                "apiVersion",
                f"must be {API_VERSION} (got {body.get('apiVersion')!r})",
            )
        )
        return None
    if kind not in KINDS:
        errors.append(
            SpecError(
                doc.file,
                doc.index,
                "",
                "kind",
                f"unknown kind {kind!r}; expected one of {', '.join(sorted(KINDS))}",
            )
        )
        return None
    obj = _object_label(kind, body)
    meta = body.get("metadata")
    if isinstance(meta, dict):
        if kind in NAMESPACED:
            body = {**body, "metadata": {**meta, "namespace": meta.get("namespace") or "default"}}
        elif "namespace" in meta:
            errors.append(
                SpecError(
                    doc.file,
                    doc.index,
                    obj,
                    "metadata.namespace",
                    f"{kind} is cluster-scoped and takes no namespace",
                )
            )
            return None
    try:
        model = KINDS[kind].model_validate(body)
    except ValidationError as exc:
        errors.extend(validation_errors(doc, obj, exc))
        if invalid is not None:
            invalid.add((kind, obj.split(" ", 1)[1]))
        return None
    return obj, model


def _ancestors(path: str) -> list[str]:
    """path and every folder above it (`/a/b` -> `/a/b`, `/a`, `/`)."""
    out = [path]
    while (up := os.path.dirname(path)) != path:
        out.append(up)
        path = up
    return out


def _inside(file: str, dirs: dict[str, Any]) -> bool:
    return any(folder in dirs for folder in _ancestors(os.path.realpath(file)))


RENDER_TO_PATH = "spec.cluster.existing.renderTo"


def _real(path: str, folders: dict[str, str]) -> str:
    """path (as pathlib spells it) resolved, its parent folder's real path looked up once
    (`folders` caches)."""
    if os.path.islink(path):
        return os.path.realpath(path)
    parent, name = os.path.split(os.path.normpath(path))
    real = folders.get(parent)
    if real is None:
        real = folders[parent] = os.path.realpath(parent or ".")
    return os.path.join(real, name) if name not in ("", ".") else real


def _render_dirs(
    base: Path, parsed: list[tuple[Document, str, BaseModel]], errors: list[SpecError]
) -> dict[str, tuple[Document, str]]:
    """Each cluster's renderTo folder (its real path), confined to a dedicated folder
    inside the fleet.

    Rejected: an absolute path, `..`, the fleet folder itself, a path that leaves
    the fleet through a symlink, and a folder that holds specs. Paths are strings here:
    a thousand clusters and their spec files make pathlib's overhead count.
    """
    root = os.path.realpath(base)
    inside = root if root.endswith(os.sep) else root + os.sep
    folders: dict[str, str] = {}  # a folder's real path, resolved once for all below it
    dirs: dict[str, tuple[Document, str]] = {}
    for doc, obj, m in parsed:
        existing = getattr(getattr(getattr(m, "spec", None), "cluster", None), "existing", None)
        raw = getattr(existing, "render_to", None) if m.kind == "InferenceCluster" else None  # type: ignore[attr-defined]
        if not raw:
            continue
        pure = PurePosixPath(raw)
        problem = None
        if pure.is_absolute() or PureWindowsPath(raw).is_absolute():
            problem = "must be a relative path inside the fleet folder"
        elif ".." in pure.parts:
            problem = "must not contain '..'"
        else:
            target = _real(str(base / raw), folders)
            if target == root:
                problem = "must be a folder of its own, not the fleet folder itself"
            elif not target.startswith(inside):
                problem = "leaves the fleet folder (through a symlink)"
        if problem:
            errors.append(SpecError(doc.file, doc.index, obj, RENDER_TO_PATH, f"{raw!r} {problem}"))
            continue
        dirs[target] = (doc, obj)
    if not dirs:
        return dirs  # nothing to confine: no path lookups per spec file
    holding: dict[str, list[str]] = {}  # a spec file's real folder -> the renderTo dirs above
    for spec_doc, _, _ in parsed:
        path = _real(spec_doc.file, folders)
        parent = os.path.dirname(path)
        hits = holding.get(parent)
        if hits is None:
            hits = holding[parent] = [f for f in _ancestors(parent) if f in dirs]
        for folder in hits:
            doc, obj = dirs[folder]
            errors.append(
                SpecError(
                    doc.file,
                    doc.index,
                    obj,
                    RENDER_TO_PATH,
                    f"{os.path.relpath(folder, root)} holds specs ({spec_doc.file}); "
                    "renderTo must be a folder of its own",
                )
            )
    return dirs


def _name_error(doc: Document, obj: str, message: str) -> SpecError:
    return SpecError(doc.file, doc.index, obj, "metadata.name", message)


def load_fleet(root: str | Path) -> LoadResult:
    """Read, validate and cross-check a fleet directory (or a single file)."""
    root = Path(root)
    fleet = FleetSpec()
    errors: list[SpecError] = []
    if not root.exists():
        errors.append(SpecError(str(root), 0, "", "", "no such file or directory"))
        return LoadResult(fleet, errors)
    base = root if root.is_dir() else root.parent
    parsed: list[tuple[Document, str, BaseModel]] = []
    sources: dict[tuple[str, int], YamlDocument] = {}
    for path in fleet_files(root, errors):
        display = str(path)
        for doc in _read_documents(path, display, errors):
            if doc.source is not None:
                sources[(doc.file, doc.index)] = doc.source
            result = _parse(doc, errors, fleet.invalid)
            if result is not None:
                parsed.append((doc, *result))

    # Manifests that modelplane itself rendered into a renderTo folder are not specs.
    confinement: list[SpecError] = []
    render_dirs = _render_dirs(base, parsed, confinement)
    if render_dirs:
        errors = [e for e in errors if not _inside(e.file, render_dirs)]
    errors.extend(confinement)

    seen: dict[tuple[str, str], Document] = {}
    for doc, obj, model in parsed:
        kind = model.kind  # type: ignore[attr-defined]
        meta = model.metadata  # type: ignore[attr-defined]
        key = f"{meta.namespace}/{meta.name}" if kind in NAMESPACED else meta.name
        if (kind, key) in seen:
            first = seen[(kind, key)]
            errors.append(
                _name_error(
                    doc,
                    obj,
                    f"duplicate {kind} {key}: also defined in {first.file} "
                    f"(document {first.index})",
                )
            )
            continue
        seen[(kind, key)] = doc
        fleet.sources[(kind, key)] = (doc.file, doc.index)
        if kind == "InferenceGateway":
            if fleet.gateway is not None:
                other = fleet.sources[("InferenceGateway", fleet.gateway.metadata.name)]
                errors.append(
                    _name_error(
                        doc, obj, f"a fleet has at most one InferenceGateway; also {other[0]}"
                    )
                )
                continue
            fleet.gateway = model  # type: ignore[assignment]
        else:
            attr = {
                "InferenceClass": "classes",
                "InferenceCluster": "clusters",
                "ModelDeployment": "deployments",
                "ModelService": "services",
                "ModelEndpoint": "endpoints",
                "ModelCache": "caches",
            }[kind]
            getattr(fleet, attr)[key] = model
    fleet.sort()
    errors.extend(check_references(fleet))
    errors.extend(declared_overlaps(fleet))  # ranges the front door cannot route (network)
    errors.extend(unreachable(fleet))  # clusters the front door has no path to (network)
    errors.extend(secret_ref_errors(fleet))  # what a secretRef may reach (M7)
    errors.extend(pod_security_errors(fleet))  # reserved namespaces, Pod Security (M8)
    warnings = with_marks(fleet_warnings(fleet), sources)
    return LoadResult(fleet, sorted(set(with_marks(errors, sources))), warnings)


def no_specs(root: str | Path) -> SpecError:
    """The error for a fleet folder without a single spec, where `up` or `plan --write`
    would otherwise make the fleet nothing (every stack an orphan, an empty lock)."""
    return SpecError(
        str(root),
        0,
        "",
        "",
        "the fleet folder has no specs (no *.yaml/*.yml document of a modelplane kind); "
        "`up` and `plan --write` need at least one: to tear a fleet down, run "
        "`modelplane destroy`",
    )


def with_marks(
    errors: list[SpecError], sources: dict[tuple[str, int], YamlDocument]
) -> list[SpecError]:
    """Errors with line and column filled in from the documents' node marks."""
    out = []
    for e in errors:
        src = sources.get((e.file, e.document))
        if src is not None and not e.line:
            line, column = src.mark(e.path)
            e = replace(e, line=line, column=column)
        out.append(e)
    return out
