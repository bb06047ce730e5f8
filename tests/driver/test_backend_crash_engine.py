"""The real engine on a shared ``postgres://`` DIY backend (a PostgreSQL started by the
tests): `modelplane up` of the local fleet, read back by another process; `kill -9` of an
`up` in the middle of a stack update, then the next `up` completes with no manual step;
an `up` beside another update of the same stack waits for it, saying so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modelplane.driver.fleet import Fleet
from modelplane.driver.results import Outcome
from modelplane.lock import read_lock
from tests.fixtures.engine import LOCAL, check, copy_fleet, engine_env
from tests.fixtures.postgres import new_database

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def _locks(url: str) -> list[str]:
    """The stack locks held in the backend's database."""
    import pg8000.native

    from modelplane.driver.pgstore import connect_args

    conn = pg8000.native.Connection(**connect_args(url))
    try:
        rows = conn.run("select key from pulumi_state where key like '%.pulumi/locks/%'")
    except Exception:  # the table is created by the engine's first write
        return []
    finally:
        conn.close()
    return [str(r[0]) for r in rows]


def _cli(fleet_dir: Path, env: dict[str, str], *args: str) -> list[str]:
    return [sys.executable, "-m", "modelplane", *args, str(fleet_dir)]


@pytest.fixture
def pg_env(tmp_path: Path, engine_root: Path, postgres_url: str) -> dict[str, str]:
    url = new_database(postgres_url)
    return engine_env(
        tmp_path, PULUMI_BACKEND_URL=url, PYTHONPATH=str(REPO), MODELPLANE_FLEET_ID="local"
    )


def test_backend_postgres_up_read_by_another_process(
    tmp_path: Path, pg_env: dict[str, str]
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    fleet = Fleet.load(fleet_dir, env=pg_env)
    assert fleet.backend.startswith("postgres://")
    started = time.monotonic()
    first = check(fleet.up())
    first_s = time.monotonic() - started
    started = time.monotonic()
    again = check(Fleet.load(fleet_dir, env=pg_env).up())
    again_s = time.monotonic() - started
    assert {r.outcome for r in again.results} == {Outcome.UNCHANGED}
    print(
        f"\npostgres backend, local fleet ({len(first.results)} stacks): first up {first_s:.1f}s, "
        f"no-op up {again_s:.1f}s ({again_s / len(again.results):.2f}s per stack)"
    )
    # Another process (another host would be the same) reads the stacks' state.
    done = subprocess.run(
        _cli(fleet_dir, pg_env, "status", "-o", "json"),
        env=pg_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads(done.stdout)
    assert status["backend"].startswith("postgres://")
    assert {s["stack"]: s["lastResult"] for s in status["stacks"]} == {
        "cluster-local": "succeeded",
        "deploy-demo-qwen": "succeeded",
        "gateway": "succeeded",
    }
    assert not (fleet_dir / ".modelplane" / "state").exists()  # nothing on the local disk


def test_crash_kill_9_mid_up_then_up_recovers(tmp_path: Path, pg_env: dict[str, str]) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    url = pg_env["PULUMI_BACKEND_URL"]
    # Kill an `up` inside an update. The local fleet's updates are short, so the kill may land
    # after the last one ended (no lock left) or after the whole `up`: then the cluster's spec
    # changes (a label) and the next `up` is killed the same way.
    fleet_yaml = fleet_dir / "fleet.yaml"
    for attempt in range(3):
        if attempt:
            fleet_yaml.write_text(
                fleet_yaml.read_text().replace(
                    "    modelplane.ai/region: local\n",
                    f"    modelplane.ai/region: local\n    attempt: '{attempt}'\n",
                    1,
                )
            )
        up = subprocess.Popen(
            _cli(fleet_dir, pg_env, "up", "--yes"),
            env=pg_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its engine processes die with it
        )
        deadline = time.monotonic() + 300
        while not _locks(url) and time.monotonic() < deadline and up.poll() is None:
            time.sleep(0.1)
        time.sleep(0.3)  # into the update
        try:
            os.killpg(up.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the whole `up` ended first (its updates take a second or two): try again
        up.wait()
        if _locks(url):
            break
    assert _locks(url), "no kill landed inside an update in three tries"
    placed = read_lock(fleet_dir / "modelplane.lock.yaml")  # whole: written atomically
    done = subprocess.run(
        # --all: the kill may land after a stack's update wrote its checkpoint but before it
        # dropped its lock; that stack's inputs are then unchanged and a plain `up` would skip
        # it without meeting the stale lock.
        _cli(fleet_dir, pg_env, "up", "--yes", "--all", "--lock-wait", "0"),
        env=pg_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "was killed; its lock is released" in done.stderr, done.stderr[-3000:]
    assert not _locks(url)
    assert read_lock(fleet_dir / "modelplane.lock.yaml") == placed
    again = check(Fleet.load(fleet_dir, env=pg_env).up())
    assert {r.outcome for r in again.results} == {Outcome.UNCHANGED}, again.as_json()


def test_crash_up_waits_for_a_live_update_with_a_message(
    tmp_path: Path, pg_env: dict[str, str]
) -> None:
    """A CI-style `up` while another update of the same stack runs: it waits, saying who
    holds the lock, and then runs."""
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    check(Fleet.load(fleet_dir, env=pg_env).up(only=["cluster-local"]))
    url = pg_env["PULUMI_BACKEND_URL"]
    first = subprocess.Popen(
        _cli(fleet_dir, pg_env, "up", "--yes", "--all", "--stack", "cluster-local"),
        env=pg_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not _locks(url) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.1)
    second = subprocess.run(
        _cli(fleet_dir, pg_env, "up", "--yes", "--all", "--stack", "cluster-local")
        + ["--lock-wait", "5m"],
        env=pg_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.wait(timeout=300) == 0
    assert second.returncode == 0, second.stderr[-3000:]
    if "is locked by" not in second.stderr:
        pytest.skip("the first update ended before the second asked for the lock (a busy machine)")
    assert "waiting for it" in second.stderr and "(pid " in second.stderr
