"""Load a fleet directory: every YAML document, validated, with every error collected."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from modelplane.api.base import API_VERSION
from modelplane.api.errors import SpecError
from modelplane.api.fleet import FleetSpec
from modelplane.api.kinds import KINDS, NAMESPACED
from modelplane.api.paths import format_path, join_path
from modelplane.api.problems import FieldProblems
from modelplane.api.references import check_references

LOCK_FILE = "modelplane.lock.yaml"


@dataclass
class LoadResult:
    fleet: FleetSpec
    errors: list[SpecError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Document:
    file: str
    index: int
    body: Any


def is_pulumi_file(name: str) -> bool:
    """A Pulumi project or stack config file (``Pulumi.yaml``, ``Pulumi.<stack>.yaml``)."""
    return name in ("Pulumi.yaml", "Pulumi.yml") or (
        name.startswith("Pulumi.") and name.endswith((".yaml", ".yml"))
    )


def fleet_files(root: Path) -> list[Path]:
    """Every *.yaml / *.yml below root in path order, skipping hidden folders, the lock and
    the Pulumi project and stack config files."""
    if root.is_file():
        return [root]
    files = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if (
            path.is_file()
            and path.suffix in (".yaml", ".yml")
            and path.name != LOCK_FILE
            and not is_pulumi_file(path.name)
        ):
            files.append(path)
    return sorted(files)


def _read_documents(path: Path, display: str, errors: list[SpecError]) -> list[Document]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(SpecError(display, 0, "", "", f"cannot read file: {exc}"))
        return []
    docs: list[Document] = []
    try:
        for i, body in enumerate(yaml.safe_load_all(text)):
            if body is not None:
                docs.append(Document(display, i, body))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        errors.append(SpecError(display, len(docs), "", "", f"invalid YAML{where}: {problem}"))
    return docs


def _object_label(kind: str, body: dict[str, Any]) -> str:
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else "?"
    if kind in NAMESPACED:
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "default"
        return f"{kind} {ns}/{name}"
    return f"{kind} {name}"


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


def _inside(file: str, dirs: list[Path]) -> bool:
    path = Path(file).resolve()
    return any(path.is_relative_to(d) for d in dirs)


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
    for path in fleet_files(root):
        display = str(path)
        for doc in _read_documents(path, display, errors):
            result = _parse(doc, errors, fleet.invalid)
            if result is not None:
                parsed.append((doc, *result))

    # Manifests that modelplane itself rendered into a renderTo folder are not specs.
    render_dirs = [
        (base / m.spec.cluster.existing.render_to).resolve()
        for _, _, m in parsed
        if m.kind == "InferenceCluster"
        and m.spec.cluster.existing is not None  # type: ignore[attr-defined]
        and m.spec.cluster.existing.render_to  # type: ignore[attr-defined]
    ]
    if render_dirs:
        parsed = [p for p in parsed if not _inside(p[0].file, render_dirs)]
        errors = [e for e in errors if not _inside(e.file, render_dirs)]

    seen: dict[tuple[str, str], Document] = {}
    for doc, obj, model in parsed:
        kind = model.kind  # type: ignore[attr-defined]
        meta = model.metadata  # type: ignore[attr-defined]
        key = f"{meta.namespace}/{meta.name}" if kind in NAMESPACED else meta.name
        if (kind, key) in seen:
            first = seen[(kind, key)]
            errors.append(
                SpecError(
                    doc.file,
                    doc.index,
                    obj,
                    "metadata.name",
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
                    SpecError(
                        doc.file,
                        doc.index,
                        obj,
                        "metadata.name",
                        f"a fleet has at most one InferenceGateway; also {other[0]}",
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
    return LoadResult(fleet, sorted(set(errors)))
