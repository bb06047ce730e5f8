"""`modelplane drain` / `uncordon` as a user runs them, without an engine or a cluster: the
confirmation, unknown clusters, the cordon in the runtime state and in `plan`."""

from __future__ import annotations

import json
from pathlib import Path

from modelplane.driver.state import RuntimeState
from tests.cli.helpers import run
from tests.spec_docs import base_fleet, existing_cluster, write_fleet


def _fleet(tmp_path: Path) -> Path:
    docs = base_fleet()
    docs.insert(2, existing_cluster("c2"))
    return write_fleet(tmp_path / "fleet", docs)


def test_drain_names_the_unknown_cluster_and_changes_nothing(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    done = run("drain", str(fleet), "nope", "--yes")
    assert done.returncode == 2
    assert "no InferenceCluster nope (clusters: c1, c2)" in done.stderr
    assert "Traceback" not in done.stderr
    assert RuntimeState.at(fleet / ".modelplane").cordons() == {}


def test_drain_and_uncordon_confirm_like_up(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    drain = run("drain", str(fleet), "c1")
    assert drain.returncode == 2 and "pass --yes" in drain.stderr
    assert RuntimeState.at(fleet / ".modelplane").cordons() == {}
    RuntimeState.at(fleet / ".modelplane").cordon("c1", 0.0)
    uncordon = run("uncordon", str(fleet), "c1")
    assert uncordon.returncode == 2 and "pass --yes" in uncordon.stderr
    assert "c1" in RuntimeState.at(fleet / ".modelplane").cordons()


def test_plan_honours_the_cordon_until_uncordon(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)

    def placed() -> tuple[list[str], list[str], list[str]]:
        done = run("plan", str(fleet), "-o", "json")
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        rep = out["deployments"]["team/m"]
        return out["cordoned"], [r["cluster"] for r in rep["replicas"]], rep["reasons"]

    assert placed()[1] == ["c1"]  # the name sorting first
    RuntimeState.at(fleet / ".modelplane").cordon("c1", 0.0)
    cordoned, clusters, _ = placed()
    assert (cordoned, clusters) == (["c1"], ["c2"])
    table = run("plan", str(fleet))
    assert "cordoned c1" in table.stdout
    done = run("uncordon", str(fleet), "c1", "--yes")
    assert done.returncode == 0 and "uncordoned c1" in done.stdout
    assert placed()[:2] == ([], ["c1"])
    again = run("uncordon", str(fleet), "c1", "--yes")
    assert again.returncode == 0 and "not cordoned" in again.stdout


def test_drain_says_which_deployments_have_no_room_elsewhere() -> None:
    from modelplane.cli.maintenance import stuck
    from modelplane.scheduler import schedule
    from modelplane.scheduler.cordon import cordoned_fleet
    from tests.factories import cluster, deployment, fleet, inference_class, pool

    def spec(nodes_b: int) -> object:
        return fleet(
            [inference_class("h100", 8)],
            [cluster("a", [pool("p", "h100", 2)]), cluster("b", [pool("p", "h100", nodes_b)])],
            [deployment("m", 2, tensor=8)],
        )

    previous = schedule(spec(0), None).lock  # both on a
    full = schedule(cordoned_fleet(spec(0), ["a"]), previous)
    assert list(stuck(full, "a")) == ["ml/m"]
    assert any("b:" in why for why in stuck(full, "a")["ml/m"])
    roomy = schedule(cordoned_fleet(spec(2), ["a"]), previous)
    assert stuck(roomy, "a") == {}
    assert stuck(None, "a") == {}
