"""The root ``Pulumi.yaml`` and the fleet projects derived from it.

The root ``Pulumi.yaml`` is the one hand-written project file: the program in ``stacks/``,
the repository's ``.venv``, and the embedded default fleet's stack config and state
(``stackConfigDir: specs/local``, ``backend.url: file://./specs/local/.modelplane/state``,
the driver's default backend of that fleet), so ``pulumi up -s <stack>`` at the root runs
what ``modelplane up specs/local`` runs.

A fleet's own project, ``<fleet>/Pulumi.yaml`` (``cd <fleet> && pulumi up -s <stack>``), is
the root project seen from the fleet: its paths re-anchored to the fleet directory, its stack
config next to the file (no ``stackConfigDir``) and its state the fleet's own
(``file://./.modelplane/state``). ``modelplane project DIR`` writes it; the tests check that
every committed ``specs/*/Pulumi.yaml`` is exactly this derivation.

Every fleet is a Pulumi project of its own name, so that fleets sharing one backend (a
Pulumi Cloud organization, a bucket, a PostgreSQL database) never share a stack: the
``name`` of ``<fleet>/Pulumi.yaml`` when the fleet has one (set it there to choose), else
``modelplane-<directory name>`` (:func:`fleet_project_name`). The root project is the
embedded default fleet's, ``modelplane-local``. Stacks of the one project every fleet used
before, ``modelplane``, move to the fleet's own with ``modelplane migrate DIR``.

A name can be shared by mistake (two directories of one name, a copied ``Pulumi.yaml``), so
the file also records the fleet's identity: ``modelplane.fleetUid``, a random UUID that
``modelplane project DIR`` writes once when the file has none and keeps from then on, the
same on every checkout (:func:`fleet_uid`). A ``postgres://`` runtime store refuses a fleet
whose id another uid claimed (modelplane.driver.pgstore; docs/architecture.md, "Where
runtime state lives"). Pulumi carries top-level keys it does not know (the project schema
allows them, ``Project.AdditionalKeys``) without a warning, and no stack sees it as config.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from modelplane.driver.errors import DriverError
from modelplane.driver.settings import STATE_DIR

PROJECT_FILE = "Pulumi.yaml"
# The fields that name the fleet (the root's are the embedded default's): re-derived per fleet.
FLEET_FIELDS = ("stackConfigDir", "backend")
FLEET_BACKEND = f"file://./{STATE_DIR}/state?create_dir=true"  # made when missing
# The project every fleet's stacks belonged to before fleets had names of their own.
LEGACY_PROJECT = "modelplane"
NAME_PREFIX = "modelplane-"
# Pulumi's rule for project names (pkg/workspace: alphanumerics, `-`, `_`, `.`; 100 at most).
_PROJECT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
# The fleet's identity in its Pulumi.yaml: `modelplane: {fleetUid: <uuid>}`, a top-level key
# of modelplane's own (Pulumi keeps unknown top-level keys; a `config:` entry would become
# stack config, and one namespaced `modelplane:` may not carry a `default`).
OWN_KEY = "modelplane"
UID_FIELD = "fleetUid"
UID_COMMENT = (
    "# The fleet's identity, generated once by `modelplane project` and kept: a postgres://\n"
    "# runtime store refuses another fleet of the same `name` (a copy of this file for another\n"
    "# fleet must drop this and set its own `name`).\n"
)


class ProjectError(DriverError):
    """No usable root project, or a fleet directory that cannot hold a derived one."""


def repository_root() -> Path:
    """The checkout holding the program (``modelplane/program``) and the root ``Pulumi.yaml``."""
    from modelplane.driver.workspace import program_dir

    root = program_dir().parents[1]
    if not (root / PROJECT_FILE).is_file():
        raise ProjectError(
            f"no {PROJECT_FILE} at {root}, above the Pulumi program (an installed "
            "modelplane has none): run this from a checkout of the repository; "
            "`modelplane up DIR` needs no Pulumi.yaml"
        )
    return root


def read_project(root_dir: Path) -> dict[str, Any]:
    path = root_dir / PROJECT_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ProjectError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not data.get("name") or not data.get("main"):
        raise ProjectError(f"{path}: not a Pulumi project (needs `name` and `main`)")
    return data


def derived_project_name(fleet_dir: Path) -> str:
    """``modelplane-<directory name>``, every character Pulumi refuses in a project name
    replaced by ``-``."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "-", fleet_dir.resolve().name).strip("-.") or "fleet"
    return (NAME_PREFIX + base)[:100]


def project_name_problem(name: object) -> str | None:
    """Why ``name`` is not a usable Pulumi project name, else None."""
    if not isinstance(name, str) or not _PROJECT_NAME.match(name):
        return (
            f"{name!r} is not a Pulumi project name (letters, digits, `-`, `_` and `.`, "
            "at most 100)"
        )
    return None


def fleet_project_name(fleet_dir: Path) -> str:
    """The fleet's Pulumi project: ``name`` in ``<fleet>/Pulumi.yaml`` when the fleet has
    one, else :func:`derived_project_name`. Raises ProjectError naming the file and field."""
    path = fleet_dir / PROJECT_FILE
    if not path.is_file():
        return derived_project_name(fleet_dir)
    data = _read_fleet_project(path)
    name = data.get("name") if isinstance(data, dict) else None
    problem = project_name_problem(name)
    if problem is not None:
        raise ProjectError(f"{path}: field `name`: {problem}")
    assert isinstance(name, str)
    return name


def _read_fleet_project(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ProjectError(f"cannot read {path}: {exc}") from None


def new_fleet_uid() -> str:
    """A fresh fleet identity (a random UUID)."""
    return str(uuid.uuid4())


def fleet_uid(fleet_dir: Path) -> str | None:
    """The fleet's identity: ``modelplane.fleetUid`` in ``<fleet>/Pulumi.yaml`` (a UUID,
    written by ``modelplane project``), else None (no file, or one written before fleets had
    one). Raises ProjectError naming the file and field when it is not a UUID."""
    path = fleet_dir / PROJECT_FILE
    if not path.is_file():
        return None
    data = _read_fleet_project(path)
    own = data.get(OWN_KEY) if isinstance(data, dict) else None
    if own is None:
        return None
    value = own.get(UID_FIELD) if isinstance(own, dict) else own
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise ProjectError(
        f"{path}: field `{OWN_KEY}.{UID_FIELD}`: {value!r} is not a UUID (delete the "
        f"`{OWN_KEY}` block and run `modelplane project {fleet_dir}` to write a new one)"
    )


ORG_FIELD = "organization"
_ORG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
#: The one organization of a self-managed backend (file://, s3://, postgres://, ...).
DIY_ORGANIZATION = "organization"


def fleet_organization(fleet_dir: Path, *, self_managed: bool) -> str | None:
    """The organization the fleet's stacks live in: ``modelplane.organization`` in
    ``<fleet>/Pulumi.yaml``, else None (the backend's default: the user's default Pulumi Cloud
    organization). A self-managed backend has one organization, ``organization``: another is
    refused. Raises ProjectError naming the file and field."""
    path = fleet_dir / PROJECT_FILE
    if not path.is_file():
        return None
    data = _read_fleet_project(path)
    own = data.get(OWN_KEY) if isinstance(data, dict) else None
    value = own.get(ORG_FIELD) if isinstance(own, dict) else None
    if value is None:
        return None
    field = f"{path}: field `{OWN_KEY}.{ORG_FIELD}`"
    if not isinstance(value, str) or not _ORG_NAME.match(value):
        raise ProjectError(f"{field}: {value!r} is not a Pulumi organization name")
    if self_managed and value != DIY_ORGANIZATION:
        raise ProjectError(
            f"{field}: {value!r}: a self-managed backend (file://, s3://, gs://, azblob://, "
            f"postgres://) has one organization, `{DIY_ORGANIZATION}`; set that or remove "
            "the field (organizations are Pulumi Cloud's)"
        )
    return value


def _anchored(value: str, root_dir: Path, fleet_dir: Path) -> str:
    """A path of the root project, as the fleet's project must spell it: relative when the
    fleet is inside the repository (the committed files carry no absolute path), else absolute."""
    if os.path.isabs(value):
        return value
    target = os.path.normpath(root_dir / value)  # not resolved: `.venv` may be a symlink
    if fleet_dir.is_relative_to(root_dir):
        text = os.path.relpath(target, fleet_dir)
    else:
        text = str(target)
    return text + "/" if value.endswith("/") else text


def fleet_label(root_dir: Path, fleet_dir: Path) -> str:
    """How the fleet is named in its project: relative to the repository when inside it."""
    root_dir, fleet_dir = root_dir.resolve(), fleet_dir.resolve()
    return (
        str(fleet_dir.relative_to(root_dir))
        if fleet_dir.is_relative_to(root_dir)
        else str(fleet_dir)
    )


def fleet_project(
    root: Mapping[str, Any], root_dir: Path, fleet_dir: Path, *, new_uid: str | None = None
) -> dict[str, Any]:
    """The fleet's own project settings, derived from the root project's, with the fleet's
    uid (:func:`fleet_uid`) when its file has one, else ``new_uid`` when given."""
    root_dir, fleet_dir = root_dir.resolve(), fleet_dir.resolve()
    if fleet_dir == root_dir:
        raise ProjectError(
            f"{fleet_dir} is the repository root: its {PROJECT_FILE} is the hand-written one"
        )
    out: dict[str, Any] = {}
    for key, value in root.items():
        if key in FLEET_FIELDS or key == OWN_KEY:  # the root's identity is not the fleet's
            continue
        if key == "name":  # the fleet's own: kept when its file names one
            value = fleet_project_name(fleet_dir)
        elif key == "description":
            value = f"modelplane fleet {fleet_label(root_dir, fleet_dir)}"
        elif key == "main":
            value = _anchored(str(value), root_dir, fleet_dir)
        elif key == "runtime" and isinstance(value, Mapping):
            # As the root's, the virtualenv is the project's own (the fleet directory's
            # `.venv`, which `pulumi install` there builds from the program's
            # requirements.txt), not the repository's: nothing ties the fleet to a path.
            value = dict(value)
        out[key] = value
    if "backend" in root:
        out["backend"] = {"url": FLEET_BACKEND}
    own: dict[str, Any] = {}
    uid = fleet_uid(fleet_dir) or new_uid
    if uid is not None:
        own[UID_FIELD] = uid
    organization = fleet_organization(fleet_dir, self_managed=False)
    if organization is not None:  # the fleet's own, kept as its uid is
        own[ORG_FIELD] = organization
    if own:
        out[OWN_KEY] = own
    return out


def header(label: str, main: str) -> str:
    program = main.rstrip("/")
    return (
        f"# The Pulumi project of fleet {label}, derived from the repository's root\n"
        f"# Pulumi.yaml by `modelplane project {label}` (do not edit but `name`: change the\n"
        "# root file and run that again).\n"
        "# `name` is the fleet's Pulumi project, its own on any backend: kept when you set it\n"
        "# (then `modelplane migrate` moves existing stacks to it).\n"
        f"# The modelplane program ({program}) over the specs in this directory, one stack per\n"
        f"# unit (`modelplane stacks {label}`). Each stack's config is Pulumi.<stack>.yaml next\n"
        "# to this file, committed with the specs, and the state is .modelplane/state here, as\n"
        "# for `modelplane up` (PULUMI_BACKEND_URL overrides the backend for both).\n"
        "#\n"
        f"#   cd {label}\n"
        "#   pulumi install          # this fleet's .venv: modelplane from the program's checkout\n"
        "#   pulumi stack select --create <stack>\n"
        "#   pulumi config set -s <stack> --secret modelplane:secrets.<name>.<key> <value>\n"
        "#   pulumi up -s <stack>\n"
    )


def fleet_project_text(root_dir: Path, fleet_dir: Path, *, new_uid: str | None = None) -> str:
    """The text of ``<fleet>/Pulumi.yaml``: the header, the derived settings, and the fleet's
    uid last (kept from the file, else ``new_uid``; none when neither)."""
    settings = fleet_project(read_project(root_dir), root_dir, fleet_dir, new_uid=new_uid)
    own = settings.pop(OWN_KEY, None)
    body: str = yaml.safe_dump(settings, sort_keys=False)
    if own is not None:
        body += UID_COMMENT + yaml.safe_dump({OWN_KEY: own}, sort_keys=False)
    return header(fleet_label(root_dir, fleet_dir), str(settings["main"])) + body


def write_fleet_project(root_dir: Path, fleet_dir: Path) -> bool:
    """Write ``<fleet>/Pulumi.yaml`` with the fleet's uid (a new one when the file has none,
    kept on every later write); True when it changed."""
    if not fleet_dir.is_dir():
        raise ProjectError(f"{fleet_dir}: not a directory")
    text = fleet_project_text(root_dir, fleet_dir, new_uid=new_fleet_uid())
    path = fleet_dir / PROJECT_FILE
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True
