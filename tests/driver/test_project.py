"""The root Pulumi.yaml (the design card's) and the per-fleet projects derived from it.

The engine runs of both are in tests/driver/test_engine_root_project.py (root) and
tests/driver/test_engine_local.py (a fleet's own project).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from modelplane.api.loader import load_fleet
from modelplane.driver.project import (
    FLEET_BACKEND,
    OWN_KEY,
    UID_COMMENT,
    UID_FIELD,
    ProjectError,
    derived_project_name,
    fleet_organization,
    fleet_project,
    fleet_project_name,
    fleet_project_text,
    fleet_uid,
    read_project,
    write_fleet_project,
)
from modelplane.driver.settings import default_backend
from modelplane.program import DEFAULT_SPECS, stack_config_dir

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
FLEETS = sorted(p.name for p in SPECS.iterdir() if p.is_dir())


def _cli() -> typer.Typer:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    return app


def test_the_root_project_runs_the_embedded_default_fleet() -> None:
    root = read_project(REPO)
    # The embedded default fleet's project: `modelplane up specs/local` runs the same stacks.
    assert root["name"] == "modelplane-local" == fleet_project_name(SPECS / "local")
    assert root["runtime"]["name"] == "python"
    assert (REPO / root["main"] / "__main__.py").is_file()
    assert (REPO / root["main"]).resolve() == REPO / "stacks"
    venv = root["runtime"]["options"]["virtualenv"]
    assert not os.path.isabs(venv) and Path(os.path.normpath(REPO / venv)) == REPO / ".venv"
    # Its stack config is the default fleet's own, and the program reads that fleet.
    assert root["stackConfigDir"] == DEFAULT_SPECS
    assert stack_config_dir(REPO) == SPECS / "local"
    assert not load_fleet(REPO / root["stackConfigDir"]).errors
    # Its state is the one `modelplane up specs/local` uses by default (the file URL is
    # relative to the working directory: the repository root).
    url, _, query = root["backend"]["url"].partition("?")
    assert url.startswith("file://./") and query == "create_dir=true"  # made when missing
    assert (REPO / url.removeprefix("file://")).resolve().as_uri() == default_backend(
        SPECS / "local"
    )
    text = (REPO / "Pulumi.yaml").read_text()
    assert "/home/" not in text and "/work/" not in text and "/tmp/" not in text


@pytest.mark.parametrize("fleet", FLEETS)
def test_every_fleet_project_is_derived_from_the_root_one(fleet: str) -> None:
    committed = (SPECS / fleet / "Pulumi.yaml").read_text()
    assert committed == fleet_project_text(REPO, SPECS / fleet), (
        f"specs/{fleet}/Pulumi.yaml is not derived: run `modelplane project specs/{fleet}`"
    )
    # ... and reads as a project of that fleet: its own config and state, no stackConfigDir.
    project = yaml.safe_load(committed)
    assert (SPECS / fleet / project["main"]).resolve() == REPO / "stacks"
    assert project["runtime"]["options"] == {"toolchain": "pip", "virtualenv": ".venv"}
    assert project["backend"] == {"url": FLEET_BACKEND}
    assert "stackConfigDir" not in project and stack_config_dir(SPECS / fleet) is None
    assert f"cd specs/{fleet}\n" in committed


@pytest.mark.parametrize(
    ("root", "fleet", "expected"),
    [
        (  # inside the repository: relative paths, the fleet's own config and state
            {
                "name": "modelplane",
                "description": "the root",
                "runtime": {"name": "python", "options": {"toolchain": "pip", "virtualenv": "v"}},
                "main": "stacks/",
                "stackConfigDir": "specs/local",
                "backend": {"url": "file://./specs/local/.modelplane/state?create_dir=true"},
            },
            "repo/fleets/a",
            {
                "name": "modelplane-a",
                "description": "modelplane fleet fleets/a",
                "runtime": {
                    "name": "python",
                    "options": {"toolchain": "pip", "virtualenv": "v"},  # the fleet's own
                },
                "main": "../../stacks/",
                "backend": {"url": "file://./.modelplane/state?create_dir=true"},
            },
        ),
        (  # outside it: absolute paths; no backend in the root, none in the fleet
            {
                "name": "modelplane",
                "runtime": {"name": "python", "options": {"virtualenv": ".venv"}},
                "main": "stacks",
            },
            "elsewhere",
            {
                "name": "modelplane-elsewhere",
                "runtime": {"name": "python", "options": {"virtualenv": ".venv"}},
                "main": "{tmp}/repo/stacks",
            },
        ),
        (  # a bare runtime and absolute paths stay as they are
            {"name": "modelplane", "runtime": "python", "main": "/opt/stacks/"},
            "repo/f",
            {"name": "modelplane-f", "runtime": "python", "main": "/opt/stacks/"},
        ),
    ],
)
def test_fleet_project_derivation(tmp_path: Path, root: dict, fleet: str, expected: dict) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / fleet).mkdir(parents=True, exist_ok=True)
    derived = fleet_project(root, tmp_path / "repo", tmp_path / fleet)
    text = yaml.safe_dump(expected).replace("{tmp}", str(tmp_path.resolve()))
    assert derived == yaml.safe_load(text)


def test_the_root_itself_is_not_a_derived_fleet() -> None:
    with pytest.raises(ProjectError, match="is the repository root"):
        fleet_project(read_project(REPO), REPO, REPO)


def test_a_root_that_is_not_a_project(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("description: no name, no main\n")
    with pytest.raises(ProjectError, match="needs `name` and `main`"):
        read_project(tmp_path)
    with pytest.raises(ProjectError, match="cannot read"):
        read_project(tmp_path / "missing")


def test_the_project_command_writes_checks_and_explains(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    runner = CliRunner()
    app = _cli()
    missing = runner.invoke(app, ["project", str(fleet), "--check"], env={"COLUMNS": "300"})
    assert missing.exit_code == 1 and f"run `modelplane project {fleet}`" in missing.output
    wrote = runner.invoke(app, ["project", str(fleet)], env={"COLUMNS": "300"})
    assert wrote.exit_code == 0 and "wrote" in wrote.output, wrote.output
    project = yaml.safe_load((fleet / "Pulumi.yaml").read_text())
    # A fleet outside the repository: an absolute path to this checkout's program; its own
    # virtualenv (`pulumi install` there), never the repository's.
    assert project["main"] == f"{REPO / 'stacks'}/"
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    assert project["backend"] == {"url": FLEET_BACKEND}
    assert not write_fleet_project(REPO, fleet)  # idempotent
    again = runner.invoke(app, ["project", str(fleet)], env={"COLUMNS": "300"})
    assert again.exit_code == 0 and "unchanged" in again.output
    ok = runner.invoke(app, ["project", str(fleet), "--check"], env={"COLUMNS": "300"})
    assert ok.exit_code == 0 and "up to date" in ok.output
    (fleet / "Pulumi.yaml").write_text((fleet / "Pulumi.yaml").read_text() + "# edited\n")
    stale = runner.invoke(app, ["project", str(fleet), "--check"], env={"COLUMNS": "300"})
    assert stale.exit_code == 1 and "is not derived" in stale.output
    nowhere = runner.invoke(app, ["project", str(tmp_path / "nope")], env={"COLUMNS": "300"})
    assert nowhere.exit_code == 2 and "not a directory" in nowhere.output
    assert "Traceback" not in nowhere.output + stale.output + missing.output


@pytest.mark.parametrize(
    ("directory", "file", "expected"),
    [
        ("local", None, "modelplane-local"),  # derived from the directory's name
        ("eu west/prod#2", None, "modelplane-prod-2"),  # refused characters become `-`
        ("a", "name: team-a-prod\nruntime: python\n", "team-a-prod"),  # set in Pulumi.yaml
        ("b", "name: modelplane\nruntime: python\n", "modelplane"),  # the old name, kept
        ("c", "name: 'no spaces'\n", "error: field `name`: 'no spaces' is not a Pulumi project"),
        ("d", "runtime: python\n", "error: field `name`: None is not a Pulumi project"),
        ("e", "name: [\n", "error: cannot read"),
    ],
)
def test_each_fleet_has_a_project_name_of_its_own(
    tmp_path: Path, directory: str, file: str | None, expected: str
) -> None:
    fleet = tmp_path / directory
    fleet.mkdir(parents=True)
    if file is not None:
        (fleet / "Pulumi.yaml").write_text(file)
    if expected.startswith("error: "):
        with pytest.raises(ProjectError) as caught:
            fleet_project_name(fleet)
        assert expected.removeprefix("error: ") in str(caught.value)
        assert str(fleet / "Pulumi.yaml") in str(caught.value)  # names the file
        return
    assert fleet_project_name(fleet) == expected
    if file is None:
        assert derived_project_name(fleet) == expected


def test_a_fleet_project_keeps_the_name_set_in_it(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    fleet = tmp_path / "repo" / "prod"
    fleet.mkdir()
    root = {"name": "modelplane-local", "runtime": "python", "main": "stacks/"}
    assert fleet_project(root, tmp_path / "repo", fleet)["name"] == "modelplane-prod"
    (fleet / "Pulumi.yaml").write_text("name: payments-llm\nruntime: python\nmain: x\n")
    assert fleet_project(root, tmp_path / "repo", fleet)["name"] == "payments-llm"


def test_writing_the_fleet_project_adds_a_uid_once_and_keeps_it(tmp_path: Path) -> None:
    """The fleet's identity (security review L11): `modelplane project` writes a random uid
    into a file that has none, and every later write keeps it, whatever else changes."""
    fleet = tmp_path / "prod"
    fleet.mkdir()
    assert fleet_uid(fleet) is None  # no file: no uid
    assert write_fleet_project(REPO, fleet)
    uid = fleet_uid(fleet)
    assert uid is not None and str(uuid.UUID(uid)) == uid
    text = (fleet / "Pulumi.yaml").read_text()
    project = yaml.safe_load(text)
    assert project[OWN_KEY] == {UID_FIELD: uid}
    assert list(project)[-1] == OWN_KEY and UID_COMMENT in text  # last, explained
    assert not write_fleet_project(REPO, fleet)  # unchanged: the same uid, not a new one
    # A later write that changes the file (an edit, another `name`) keeps the uid.
    edited = text.replace("name: modelplane-prod", "name: payments") + "# edited\n"
    (fleet / "Pulumi.yaml").write_text(edited)
    assert write_fleet_project(REPO, fleet)
    again = yaml.safe_load((fleet / "Pulumi.yaml").read_text())
    assert (again["name"], fleet_uid(fleet)) == ("payments", uid)
    # Another fleet gets another uid.
    other = tmp_path / "other" / "prod"
    other.mkdir(parents=True)
    write_fleet_project(REPO, other)
    assert fleet_uid(other) not in (None, uid)


def test_a_fleet_project_without_a_uid_stays_derived_until_written(tmp_path: Path) -> None:
    """A file from before fleets had a uid: still derived (`--check` passes, saying how to add
    one), and the next `modelplane project` adds one, keeping its `name`."""
    fleet = tmp_path / "legacy"
    fleet.mkdir()
    legacy = fleet_project_text(REPO, fleet).replace("name: modelplane-legacy", "name: team-a")
    (fleet / "Pulumi.yaml").write_text(legacy)
    assert fleet_uid(fleet) is None and fleet_project_text(REPO, fleet) == legacy
    runner = CliRunner()
    ok = runner.invoke(_cli(), ["project", str(fleet), "--check"], env={"COLUMNS": "300"})
    assert ok.exit_code == 0 and "up to date" in ok.output and "records no fleet uid" in ok.output
    assert (fleet / "Pulumi.yaml").read_text() == legacy  # --check writes nothing
    assert write_fleet_project(REPO, fleet)
    assert fleet_uid(fleet) is not None and fleet_project_name(fleet) == "team-a"
    ok = runner.invoke(_cli(), ["project", str(fleet), "--check"], env={"COLUMNS": "300"})
    assert ok.exit_code == 0 and "records no fleet uid" not in ok.output


def test_the_root_projects_uid_is_not_the_fleets(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    fleet = tmp_path / "repo" / "prod"
    fleet.mkdir()
    root = {"name": "r", "runtime": "python", "main": "s/", OWN_KEY: {UID_FIELD: "x"}}
    assert OWN_KEY not in fleet_project(root, tmp_path / "repo", fleet)
    derived = fleet_project(root, tmp_path / "repo", fleet, new_uid="n")
    assert derived[OWN_KEY] == {UID_FIELD: "n"}


UID = "0b9f5a52-3c1e-4d2b-9a61-5f4c8e7d6a10"


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        (None, None),  # no Pulumi.yaml
        ("name: a\n", None),  # written before fleets had a uid
        (f"name: a\nmodelplane:\n  fleetUid: {UID}\n", UID),
        (f"name: a\nmodelplane:\n  fleetUid: {UID.upper()}\n", UID),  # one spelling
        ("name: a\nmodelplane: {}\n", None),
        ("name: a\nmodelplane:\n  fleetUid: prod\n", "error: `modelplane.fleetUid`: 'prod'"),
        ("name: a\nmodelplane:\n  fleetUid: 7\n", "error: `modelplane.fleetUid`: 7 is not"),
        ("name: a\nmodelplane: prod\n", "error: `modelplane.fleetUid`: 'prod' is not a UUID"),
        ("name: [\n", "error: cannot read"),
    ],
)
def test_the_fleet_uid_in_its_project(
    tmp_path: Path, file: str | None, expected: str | None
) -> None:
    if file is not None:
        (tmp_path / "Pulumi.yaml").write_text(file)
    if expected is not None and expected.startswith("error: "):
        with pytest.raises(ProjectError) as caught:
            fleet_uid(tmp_path)
        assert expected.removeprefix("error: ") in str(caught.value)
        assert str(tmp_path / "Pulumi.yaml") in str(caught.value)  # names the file
        return
    assert fleet_uid(tmp_path) == expected


# --- the fleet's organization ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "self_managed", "expected"),
    [
        (None, False, None),  # no file: the backend's default organization
        ("name: f\n", True, None),
        ("name: f\nmodelplane:\n  organization: acme\n", False, "acme"),  # Pulumi Cloud
        ("name: f\nmodelplane:\n  organization: organization\n", True, "organization"),
        ("name: f\nmodelplane:\n  organization: acme\n", True, "has one organization"),
        ("name: f\nmodelplane:\n  organization: 'a b'\n", False, "not a Pulumi organization"),
        ("name: f\nmodelplane:\n  organization: [x]\n", False, "not a Pulumi organization"),
    ],
    ids=["no-file", "unset", "cloud", "diy-default", "diy-other", "bad-name", "not-a-string"],
)
def test_fleet_organization(
    tmp_path: Path, block: str | None, self_managed: bool, expected: str | None
) -> None:
    if block is not None:
        (tmp_path / "Pulumi.yaml").write_text(block)
    if expected in (None, "acme", "organization"):
        assert fleet_organization(tmp_path, self_managed=self_managed) == expected
        return
    with pytest.raises(ProjectError) as refused:
        fleet_organization(tmp_path, self_managed=self_managed)
    text = str(refused.value)
    assert str(tmp_path / "Pulumi.yaml") in text and "`modelplane.organization`" in text
    assert expected in text


def test_the_engine_gets_org_qualified_names_and_lists_only_the_orgs_stacks(
    tmp_path: Path,
) -> None:
    from modelplane.driver.settings import SecretsSettings
    from modelplane.driver.workspace import EngineSession

    def session(organization: str | None) -> EngineSession:
        secrets = SecretsSettings(provider=None, uses_passphrase=True)
        return EngineSession(
            tmp_path / "ws", "file:///x", secrets, {}, project="p", organization=organization
        )

    plain, acme = session(None), session("acme")
    assert plain.qualified("gateway") == "gateway"
    assert acme.qualified("gateway") == "acme/p/gateway"
    for listed, ours in (("gateway", True), ("acme/p/gateway", True), ("other/p/gateway", False)):
        assert acme.ours(listed) is ours
        assert plain.ours(listed) is True


def test_the_project_command_keeps_the_fleets_organization(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "Pulumi.yaml").write_text("name: team\nmodelplane:\n  organization: acme\n")
    write_fleet_project(REPO, fleet)
    written = yaml.safe_load((fleet / "Pulumi.yaml").read_text())
    assert written["modelplane"]["organization"] == "acme"
    assert written["modelplane"][UID_FIELD]
