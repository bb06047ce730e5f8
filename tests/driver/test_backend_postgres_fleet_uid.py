"""Fleet identity on a shared ``postgres://`` runtime store (security review L11), against a
real PostgreSQL server (tests/fixtures/postgres.py): the fleet id (``MODELPLANE_FLEET_ID``,
else the fleet's Pulumi project name) is claimed by the fleet's uid (``modelplane.fleetUid``
in its ``Pulumi.yaml``); another fleet of the same id is refused before anything is read or
written, the same fleet from another checkout shares its documents, and a fleet written
before fleets had a uid keeps working until a uid claims its id."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from modelplane.driver.errors import FleetIdTaken
from modelplane.driver.pgstore import FLEETS, TABLE, PostgresStore, connect_args
from modelplane.driver.project import derived_project_name, fleet_uid, write_fleet_project
from modelplane.driver.state import FLEET_ID_ENV, RuntimeState
from tests.fixtures.postgres import new_database

REPO = Path(__file__).resolve().parents[2]
REFUSED = "refused"
NO_FILE = "no Pulumi.yaml"
LEGACY = "no uid"


def _write_project(fleet: Path, uid: str) -> None:
    """``<fleet>/Pulumi.yaml`` as `modelplane project` writes it: the name derived from the
    directory, and ``uid`` (or none: ``LEGACY``; no file at all: ``NO_FILE``)."""
    fleet.mkdir(parents=True, exist_ok=True)
    if uid == NO_FILE:
        (fleet / "Pulumi.yaml").unlink(missing_ok=True)
        return
    text = f"name: {derived_project_name(fleet)}\nruntime: python\nmain: stacks/\n"
    if uid != LEGACY:
        text += f"modelplane:\n  fleetUid: {uid}\n"
    (fleet / "Pulumi.yaml").write_text(text)


def _snapshot(url: str) -> list[tuple[Any, ...]]:
    """Every row of the runtime documents and the claims (what a refused fleet must not
    change)."""
    import pg8000.native

    conn = pg8000.native.Connection(**connect_args(url))
    try:
        docs = conn.run(f"select fleet, name, document::text from {TABLE} order by 1, 2")
        claims = conn.run(f"select fleet, uid from {FLEETS} order by 1")
    finally:
        conn.close()
    return [("doc", *r) for r in docs] + [("claim", *r) for r in claims]


# A step: the fleet's folder, its uid (a label: U1, U2; LEGACY or NO_FILE), MODELPLANE_FLEET_ID
# (or None), and what it sees: the step whose document it reads back (-1: none), or REFUSED.
Step = tuple[str, str, str | None, int | str]

SCENARIOS: dict[str, list[Step]] = {
    "two directories of one name in two parent folders, each its own uid": [
        ("a/prod", "U1", None, -1),
        ("b/prod", "U2", None, REFUSED),  # the same id, another fleet
        ("a/prod", "U1", None, 0),  # the owner is untouched and keeps working
    ],
    "the same fleet from two checkouts (one Pulumi.yaml, one uid)": [
        ("checkout-1/prod", "U1", None, -1),
        ("checkout-2/prod", "U1", None, 0),
        ("checkout-1/prod", "U1", None, 1),
    ],
    "a fleet without a uid adopts, then a copy of another uid is refused": [
        ("x/prod", LEGACY, None, -1),  # written before fleets had a uid: claims nothing
        ("x/prod", LEGACY, None, 0),
        ("x/prod", "U1", None, 1),  # `modelplane project` added its uid: it claims the id
        ("y/prod", "U2", None, REFUSED),
        ("z/prod", LEGACY, None, REFUSED),  # no uid cannot use a claimed id either
        ("x/prod", "U1", None, 2),
    ],
    "MODELPLANE_FLEET_ID overrides the id; the uid is still checked": [
        ("p/eu", "U1", "shared", -1),
        ("q/us", "U2", "shared", REFUSED),
        ("q/us", "U2", None, -1),  # its own id, modelplane-us
        ("r/elsewhere", "U1", "shared", 0),  # the same fleet (uid) under the same id
        ("p/eu", "U1", None, -1),  # modelplane-eu: another id, unclaimed
    ],
    "fleets without a Pulumi.yaml share by directory name, as before": [
        ("m/prod", NO_FILE, None, -1),
        ("n/prod", NO_FILE, None, 0),
    ],
}


@pytest.mark.parametrize("steps", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_backend_fleet_uid_claims_the_fleet_id(
    postgres_url: str, tmp_path: Path, steps: list[Step]
) -> None:
    url = new_database(postgres_url)
    uids = {"U1": str(uuid.uuid4()), "U2": str(uuid.uuid4()), LEGACY: LEGACY, NO_FILE: NO_FILE}
    for i, (folder, uid, env_id, sees) in enumerate(steps):
        fleet = tmp_path / folder
        _write_project(fleet, uids[uid])
        env = {FLEET_ID_ENV: env_id} if env_id else {}
        state = RuntimeState.for_backend(url, fleet / ".modelplane", fleet, env)
        if sees == REFUSED:
            before = _snapshot(url)
            with pytest.raises(FleetIdTaken) as read:
                state.unhealthy_since()
            with pytest.raises(FleetIdTaken) as write:
                state.set_unhealthy_since({f"step-{i}": float(i)})
            assert str(read.value) == str(write.value)
            assert "\n" not in str(read.value)
            assert (
                f"fleet id {env_id or derived_project_name(fleet)!r} belongs to another fleet on this database"
                in str(read.value)
            )
            assert _snapshot(url) == before, f"step {i}: a refused fleet changed the database"
            continue
        seen = state.unhealthy_since()
        assert seen == ({f"step-{sees}": float(sees)} if sees != -1 else {}), f"step {i}"
        state.set_unhealthy_since({f"step-{i}": float(i)})
    assert not list(tmp_path.glob("*/*/.modelplane")), "nothing on the local disk"


def test_backend_refusal_is_one_line_with_the_id_and_the_fix(
    postgres_url: str, tmp_path: Path
) -> None:
    """Two fleet directories of one name, each written by `modelplane project` (its own uid):
    the second is refused by every verb that loads the fleet, with one line naming the id,
    that it is another fleet's on this database, and the fix."""
    url = new_database(postgres_url)
    first, second = tmp_path / "team-a" / "prod", tmp_path / "team-b" / "prod"
    for fleet in (first, second):
        fleet.mkdir(parents=True)
        write_fleet_project(REPO, fleet)
    owner = RuntimeState.for_backend(url, first / ".modelplane", first, {})
    owner.set_scaled({"demo/qwen": 3})
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    done = CliRunner().invoke(
        app, ["status", str(second), "--backend", url], env={"COLUMNS": "500"}
    )
    assert done.exit_code == 1, done.output
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert lines == [
        f"error: fleet id 'modelplane-prod' belongs to another fleet on this database ({url}: "
        f"fleet uid {fleet_uid(first)}; this fleet's is {fleet_uid(second)}): set a distinct "
        f"`name` in {second / 'Pulumi.yaml'}, or MODELPLANE_FLEET_ID"
    ]
    assert owner.scaled() == {"demo/qwen": 3}
    # The fix: a distinct name (`modelplane project` keeps it, and the uid).
    text = (second / "Pulumi.yaml").read_text()
    (second / "Pulumi.yaml").write_text(text.replace("name: modelplane-prod", "name: team-b-prod"))
    fixed = RuntimeState.for_backend(url, second / ".modelplane", second, {})
    assert fixed.scaled() == {}
    fixed.set_scaled({"demo/qwen": 1})
    assert owner.scaled() == {"demo/qwen": 3}


def test_backend_claim_on_first_write_not_on_read(postgres_url: str) -> None:
    """A fleet that only reads claims nothing: the first uid to write owns the id."""
    url = new_database(postgres_url)
    reader = PostgresStore(url, "prod", str(uuid.uuid4()))
    assert reader.load("health") is None and reader.names() == []
    writer = PostgresStore(url, "prod", str(uuid.uuid4()))
    writer.save("health", {"a": 1.0})
    with pytest.raises(FleetIdTaken):
        reader.save("health", {"b": 2.0})
    with pytest.raises(FleetIdTaken):
        reader.delete("health")
    assert writer.load("health") == {"a": 1.0}


def test_backend_migrate_leaves_another_fleets_documents(postgres_url: str) -> None:
    """`modelplane migrate` moves the documents of the fleet's old key (the directory's name)
    to its id, unless another fleet uid claimed that key."""
    url = new_database(postgres_url)
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    PostgresStore(url, "prod").save("health", {"old": 1.0})  # before fleets had a uid
    PostgresStore(url, "staging", theirs).save("health", {"theirs": 1.0})
    store = PostgresStore(url, "modelplane-prod", mine)
    assert store.adopt("prod") == 1 and store.load("health") == {"old": 1.0}
    other = PostgresStore(url, "modelplane-staging", mine)
    assert other.adopt("staging") == 0 and other.load("health") is None
    assert PostgresStore(url, "staging", theirs).load("health") == {"theirs": 1.0}
