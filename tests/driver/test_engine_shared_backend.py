"""Fleets on one shared backend, on the real engine (issue 34, "Fleets apart"): each fleet is a
Pulumi project of its own, so two fleets on one `file://` directory or one PostgreSQL
database never take each other's stacks, and `destroy` / `up --prune` of one leaves every
stack of the other as it was. A fleet whose stacks are still in the one project every
fleet shared before (`modelplane`) is refused on a shared backend until `modelplane
migrate` moves them, after which nothing is created or deleted."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelplane.driver.fleet import Fleet
from modelplane.driver.observer import Observer
from modelplane.driver.results import Outcome
from modelplane.driver.workspace import LegacyStacks
from tests.fixtures.engine import LOCAL, check, copy_fleet, engine_env
from tests.fixtures.postgres import new_database

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
LOCAL_STACKS = {"cluster-local", "deploy-demo-qwen", "gateway"}


@pytest.fixture(params=["file", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path, engine_root: Path) -> Iterator[str]:
    """One backend for every fleet of the test."""
    if request.param == "file":
        yield (tmp_path / "shared-state").as_uri()
    else:
        yield new_database(request.getfixturevalue("postgres_url"))


def fleet_copy(
    tmp_path: Path, name: str, project: str | None, organization: str | None = None
) -> Path:
    """specs/local copied to `name`; its Pulumi.yaml naming `project`, or none (derived),
    and the organization its stacks live in."""
    target = copy_fleet(LOCAL, tmp_path / name)
    (target / "Pulumi.yaml").unlink()
    if project is not None:
        text = f"name: {project}\nruntime: python\nmain: x\n"
        if organization is not None:
            text += f"modelplane:\n  organization: {organization}\n"
        (target / "Pulumi.yaml").write_text(text)
    return target


def projects(fleet: Fleet) -> dict[str, set[str]]:
    """Every stack in the fleet's backend, by project."""
    with fleet.session() as session:
        listed = session.all_stacks()
    out: dict[str, set[str]] = {}
    for _org, project, stack in listed:
        out.setdefault(project, set()).add(stack)
    return out


def versions(fleet: Fleet) -> dict[str, tuple[str, str]]:
    """Each stack's last update (time and result) as the backend records it."""
    status = fleet.status()
    return {s.stack: (str(s.last_time), str(s.last_result)) for s in status.stacks}


def test_shared_backend_two_fleets_never_touch_each_other(tmp_path: Path, shared: str) -> None:
    env = engine_env(tmp_path, PULUMI_BACKEND_URL=shared)
    one = fleet_copy(tmp_path, "one", None)  # derived: modelplane-one
    # Set in its Pulumi.yaml, with its organization: the engine gets org-qualified names
    # (a self-managed backend's one organization; on Pulumi Cloud the team's own).
    two = fleet_copy(tmp_path, "two", "team-two", organization="organization")
    first = Fleet.load(one, env=env)
    second = Fleet.load(two, env=env)
    assert (first.project, second.project) == ("modelplane-one", "team-two")
    assert (first.organization, second.organization) == (None, "organization")
    for fleet in (first, second):
        run = check(fleet.up())
        # The second fleet builds its own stacks: it does not take the first one's for its own.
        assert {r.outcome for r in run.results} == {Outcome.SUCCEEDED}, run.as_json()
        assert all(r.changes.get("create") for r in run.results), run.as_json()
        assert any((fleet.path / "rendered").rglob("*.yaml"))
    assert projects(first) == {"modelplane-one": LOCAL_STACKS, "team-two": LOCAL_STACKS}
    kept = versions(Fleet.load(two, env=env))

    # Destroying one fleet, then pruning the other: the other's stacks are as they were.
    destroyed = check(Fleet.load(one, env=env).destroy())
    assert {r.stack for r in destroyed.results} == LOCAL_STACKS
    pruned = check(Fleet.load(two, env=env).prune())
    assert pruned.results == []
    again = check(Fleet.load(two, env=env).up())
    assert {r.outcome for r in again.results} == {Outcome.UNCHANGED}, again.as_json()
    assert versions(Fleet.load(two, env=env)) == kept
    assert projects(second).get("team-two") == LOCAL_STACKS
    gone = Fleet.load(one, env=env)
    assert all(not gone.resources(stack) for stack in LOCAL_STACKS)  # destroyed, still listed


def test_shared_backend_legacy_stacks_are_refused_then_migrated(
    tmp_path: Path, engine_root: Path, postgres_url: str
) -> None:
    shared = new_database(postgres_url)
    env = engine_env(tmp_path, PULUMI_BACKEND_URL=shared, PYTHONPATH=str(REPO))
    fleet_dir = fleet_copy(tmp_path, "prod", "modelplane")  # how every fleet was named before
    check(Fleet.load(fleet_dir, env=env).up())
    (fleet_dir / "Pulumi.yaml").unlink()  # now the fleet's own: modelplane-prod

    with pytest.raises(LegacyStacks) as refused:
        Fleet.load(fleet_dir, env=env).up()
    text = str(refused.value)
    assert "project `modelplane`" in text and "`modelplane-prod`" in text
    assert f"modelplane migrate {fleet_dir}" in text
    assert projects(Fleet.load(fleet_dir, env=env)) == {"modelplane": LOCAL_STACKS}

    done = subprocess.run(
        [sys.executable, "-m", "modelplane", "migrate", str(fleet_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "moved from project modelplane to modelplane-prod" in done.stdout, done.stdout
    fleet = Fleet.load(fleet_dir, env=env)
    assert projects(fleet) == {"modelplane-prod": LOCAL_STACKS}
    # Its resources kept their state (URNs rewritten): nothing is created or deleted; the
    # stack references now name the new project, which only they change.
    run = check(fleet.up())
    for result in run.results:
        assert not result.changes.get("create") and not result.changes.get("delete"), (
            result.as_json()
        )
        changed = {r.type for r in result.resources}
        assert changed <= {"pulumi:pulumi:StackReference"}, result.as_json()
    again = check(Fleet.load(fleet_dir, env=env).up())
    assert {r.outcome for r in again.results} == {Outcome.UNCHANGED}, again.as_json()


def test_shared_backend_not_shared_the_fleets_own_state_moves_by_itself(
    tmp_path: Path, engine_root: Path
) -> None:
    """The fleet's own default state (`.modelplane/state`) holds no other fleet: `up` moves
    its legacy stacks to the fleet's project, saying so, and changes no resource."""
    env = engine_env(tmp_path)
    fleet_dir = fleet_copy(tmp_path, "mine", "modelplane")
    check(Fleet.load(fleet_dir, env=env).up())
    (fleet_dir / "Pulumi.yaml").unlink()
    said: list[str] = []

    class Listen(Observer):
        def message(self, text: str) -> None:
            said.append(text)

    run = check(Fleet.load(fleet_dir, env=env).up(observer=Listen()))
    assert any("from project `modelplane` to `modelplane-mine`" in m for m in said), said
    assert all(not r.changes.get("create") and not r.changes.get("delete") for r in run.results)
    assert projects(Fleet.load(fleet_dir, env=env)) == {"modelplane-mine": LOCAL_STACKS}
