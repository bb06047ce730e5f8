"""Runtime state in a shared ``postgres://`` backend, against a real PostgreSQL server started
by the tests (tests/fixtures/postgres.py): written by one process, read by another; the
autoscaled counts survive an `up` from a checkout; the store's round-trip cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.placement_lock import LockedDeployment, PlacementLock
from modelplane.driver.errors import BackendError
from modelplane.driver.fleet import _with_scaled
from modelplane.driver.pgstore import PostgresStore, connect_args, redact
from modelplane.driver.state import FileStore, RuntimeState, fleet_id, is_shared, store_for
from tests.fixtures.postgres import new_database

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("url", "shared"),
    [
        ("postgres://u:p@db:5432/pulumi", True),
        ("postgresql://db/pulumi", True),
        ("file:///tmp/x", False),
        ("s3://bucket", False),
        (None, False),
    ],
)
def test_backend_which_urls_share_runtime_state(url: str | None, shared: bool) -> None:
    assert is_shared(url) is shared


def test_backend_url_parts_and_no_password_in_messages() -> None:
    args = connect_args("postgres://mp:s3cret%21@db.example:6543/state?sslmode=disable")
    assert (args["user"], args["password"], args["host"], args["port"], args["database"]) == (
        "mp",
        "s3cret!",
        "db.example",
        6543,
        "state",
    )
    assert "s3cret" not in redact("postgres://mp:s3cret@db/state")
    assert "s3cret" not in repr(PostgresStore("postgres://mp:s3cret@db/state", "f"))
    with pytest.raises(BackendError):
        connect_args("file:///tmp")


def test_backend_unreachable_database_reads_empty_and_fails_writes_clearly() -> None:
    store = PostgresStore("postgres://mp:hidden@127.0.0.1:1/none?sslmode=disable", "f")
    assert store.load("health") is None  # a memory: unreadable reads as empty
    with pytest.raises(BackendError) as caught:
        store.save("health", {})
    assert "cannot connect" in str(caught.value) and "hidden" not in str(caught.value)


def test_backend_fleet_id(tmp_path: Path) -> None:
    assert fleet_id(tmp_path / "prod", {}) == "modelplane-prod"  # the fleet's project
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "Pulumi.yaml").write_text("name: eu-fleet\nruntime: python\n")
    assert fleet_id(tmp_path / "named", {}) == "eu-fleet"
    assert fleet_id(tmp_path / "prod", {"MODELPLANE_FLEET_ID": "eu"}) == "eu"
    assert isinstance(store_for("file:///x", tmp_path, tmp_path, {}), FileStore)


def test_backend_runtime_state_written_by_one_process_read_by_another(
    postgres_url: str, tmp_path: Path
) -> None:
    url = new_database(postgres_url)
    here = RuntimeState.for_backend(url, tmp_path / "a" / ".modelplane", tmp_path / "fleet", {})
    here.set_unhealthy_since({"dev-2": 1700000000.0})
    here.set_routing({"dev-2": "API unreachable"}, {"r-1": "not Ready"})
    here.set_scaled({"demo/qwen": 3})
    # Another host: another process, another state directory, the same fleet id.
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from modelplane.driver.state import RuntimeState\n"
        "s = RuntimeState.for_backend(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), {})\n"
        "print(json.dumps({'health': s.unhealthy_since(), 'unroutable': s.routing().unroutable,"
        " 'scaled': s.scaled()}))\n"
        "s.set_scaled({'demo/qwen': 4})\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            url,
            str(tmp_path / "b" / ".modelplane"),
            str(tmp_path / "x" / "fleet"),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert seen == {
        "health": {"dev-2": 1700000000.0},
        "unroutable": {"dev-2": "API unreachable"},
        "scaled": {"demo/qwen": 3},
    }
    assert here.scaled() == {"demo/qwen": 4}  # and back
    assert not (tmp_path / "a" / ".modelplane").exists()  # nothing on the local disk
    # Another fleet in the same database sees none of it.
    other = RuntimeState.for_backend(url, tmp_path / "o", tmp_path / "other", {})
    assert other.scaled() == {} and other.unhealthy_since() == {}
    assert isinstance(here.store, PostgresStore)
    assert here.store.names() == ["health", "routing", "scale"]


def test_backend_store_round_trip_cost(postgres_url: str, tmp_path: Path) -> None:
    """The cost of one document write and read (docs/benchmarks.md): printed, not bounded
    (a benchmark; a loaded machine is slower, not wrong). What is asserted: each write reads
    back intact, all on one kept connection (the first version opened one per call: a
    connection is a server process)."""
    store = PostgresStore(new_database(postgres_url), "bench")
    connects = 0
    connect = store._connect

    def counted() -> Any:
        nonlocal connects
        connects += 1
        return connect()

    store._connect = counted  # type: ignore[method-assign]
    document = {
        "history": {f"ns/d{i}": [[1700000000.0 + j, 3] for j in range(20)] for i in range(20)}
    }
    store.save("autoscale", document)  # creates the table
    n = 20
    start = time.perf_counter()
    for _ in range(n):
        store.save("autoscale", document)
        assert store.load("autoscale") == document
    each = (time.perf_counter() - start) / n
    print(
        f"\npostgres runtime state: save+load of a {len(json.dumps(document))}-byte document: {each * 1000:.1f} ms"
    )
    assert connects == 1, f"{connects} connections for {n + 1} saves and {n} loads"


def _lock(**counts: int | None) -> PlacementLock:
    return PlacementLock(
        deployments={
            k.replace("_", "/"): LockedDeployment(autoscaled_replicas=v) for k, v in counts.items()
        }
    )


@pytest.mark.parametrize(
    ("committed", "runtime", "expected"),
    [
        (_lock(a_x=2), {"a/x": 5}, {"a/x": 5}),  # reconcile scaled out since the commit
        (_lock(a_x=2), {}, {"a/x": 2}),  # nothing recorded
        (_lock(a_x=None), {"a/x": 5}, {"a/x": None}),  # no longer autoscaled: the spec wins
        (_lock(a_x=2), {"b/y": 5}, {"a/x": 2}),  # another deployment's count
    ],
)
def test_backend_autoscaled_counts_survive_an_up_from_a_checkout(
    committed: PlacementLock, runtime: dict[str, int], expected: dict[str, int | None]
) -> None:
    merged = _with_scaled(committed, runtime)
    assert {k: d.autoscaled_replicas for k, d in merged.deployments.items()} == expected
