"""`plan --observe` and the duration options as a user runs them (no engine, no cluster)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import typer

from modelplane.cli.health import parse_duration
from tests.cli.helpers import run
from tests.spec_docs import as_yaml, gpu_class

FLEET = (
    as_yaml(gpu_class(product=None))
    + """---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata: {name: down}
spec:
  cluster:
    source: Existing
    existing:
      secretRef: {name: "file:kc-down", key: kubeconfig}
  nodePools:
  - {name: l4, className: l4, nodeCount: 2}
---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata: {name: rendered}
spec:
  cluster:
    source: Existing
    existing: {renderTo: out/rendered}
  nodePools:
  - {name: l4, className: l4, nodeCount: 1}
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata: {name: m, namespace: ml}
spec:
  replicas: 2
  workers:
    topology: {tensor: 1}
    resources: {cpu: "1", memory: 1Gi}
    template:
      spec:
        containers:
        - {name: engine, image: vllm/vllm-openai:v0.11.0}
"""
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_plan_observe_keeps_new_replicas_off_an_unreachable_cluster(tmp_path: Path) -> None:
    port = closed_port()
    (tmp_path / "fleet.yaml").write_text(FLEET)
    (tmp_path / "kc-down").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        f"clusters: [{{name: x, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: not-a-real-token}}]\n"
    )
    plain = json.loads(run("plan", str(tmp_path), "-o", "json").stdout)
    assert [r["cluster"] for r in plain["deployments"]["ml/m"]["replicas"]] == ["down", "rendered"]

    result = run("plan", str(tmp_path), "--observe", "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    dep = out["deployments"]["ml/m"]
    assert [r["cluster"] for r in dep["replicas"]] == ["rendered"]
    assert dep["unplaced"] == 1
    assert dep["reasons"][0].startswith(
        f"down: API unreachable (cannot reach https://127.0.0.1:{port}"
    )
    assert dep["reasons"][0].endswith("): no new replicas")
    assert dep["reasons"][1] == "rendered: pool l4 has 0 free nodes, unified needs 1"
    assert list(out["unhealthy"]) == ["down"]
    assert "not-a-real-token" not in result.stdout + result.stderr
    assert not (tmp_path / "modelplane.lock.yaml").exists()  # a dry run
    assert not (tmp_path / ".modelplane" / "health.json").exists()  # plan remembers nothing

    table = run("plan", str(tmp_path), "--observe")
    assert table.returncode == 0 and "unhealthy down: API unreachable" in table.stdout


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("1h", 3600),
        ("1m30s", 90),
        ("250ms", 0.25),
        ("45", 45),
        ("0.5", 0.5),
        ("0s", 0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "x", "5 m", "5d", "-1", "1m-3s", "m5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_duration(text)


def test_reconcile_rejects_a_bad_interval_without_a_traceback() -> None:
    result = run("reconcile", "specs/quickstart", "--interval", "soon")
    assert result.returncode == 2
    assert "'soon' is not a duration" in result.stderr
    assert "Traceback" not in result.stderr


class _Probes:
    """Answers `probe()` from a script (one answer per call); counts the calls."""

    def __init__(self, answers: list[dict[str, bool]]) -> None:
        self.answers = answers
        self.calls = 0

    def probe(self) -> dict[str, bool]:
        self.calls += 1
        return self.answers.pop(0) if self.answers else {}


@pytest.mark.parametrize(
    ("answers", "wait", "every", "expect", "calls"),
    [
        # nothing changes: the whole wait, probing along the way (at most once per `every`)
        ([], 1.0, 0.1, {}, 1),
        # a cluster stops answering at the third probe: the next round starts at once (the
        # third probe is the last: counted, not timed)
        ([{}, {}, {"dev-3": False}], 10.0, 0.05, {"dev-3": False}, 3),
        # probing off: plain wait, no probe
        ([{"dev-3": False}], 0.3, 0.0, {}, 0),
    ],
    ids=["unchanged", "change-starts-round", "probe-off"],
)
def test_reconcile_waits_for_the_next_round_or_a_probed_change(
    answers: list[dict[str, bool]],
    wait: float,
    every: float,
    expect: dict[str, bool],
    calls: int,
) -> None:
    import threading
    import time

    from modelplane.cli.health import _wait_for_next_round

    probes = _Probes(answers)
    started = time.monotonic()
    changed = _wait_for_next_round(probes, threading.Event(), wait, every)
    elapsed = time.monotonic() - started
    assert changed == expect, (changed, elapsed)
    if expect:
        assert probes.calls == calls, (probes.calls, elapsed)
    else:  # the whole wait (a lower bound: the wait is the test's), at most one probe per `every`
        assert elapsed >= wait - 0.01
        assert calls <= probes.calls <= (wait / every if every else 0), (probes.calls, elapsed)


def test_reconcile_wait_ends_when_stopped() -> None:
    import threading
    import time

    from modelplane.cli.health import _wait_for_next_round

    stop = threading.Event()
    wait = 300.0  # far beyond the stop (0.2 s): ending before it is the stop's doing
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    assert _wait_for_next_round(_Probes([]), stop, wait, 0.05) == {}
    elapsed = time.monotonic() - started
    assert stop.is_set(), "the wait ended before the stop"
    assert elapsed < wait, f"the stop did not end the wait: it ran its {wait:g} s"
