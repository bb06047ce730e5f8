"""Truthful readiness on the dev fleet (issue 21, part 4), live: a serving pod is Ready only once
its stand-in has loaded and answers its readiness probe; the stand-in reports the revision it
serves and misbehaves when its image asks; and the all-at-once baseline: changing a running
deployment's image today fails requests (the number is recorded in docs/benchmarks.md)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from modelplane.devfleet import fleet as devfleet
from modelplane.driver.fleet import Fleet
from modelplane.lock import read_lock
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

IMAGE = "vllm/vllm-openai:v0.11.0"
LOAD_TIME = 3  # seconds: the qwen stand-ins' model load (env MODELPLANE_STANDIN_LOAD_TIME)
NEVER = 100_000  # a model that never loads


def qwen(image: str, load_time: float = LOAD_TIME) -> dict[str, Any]:
    dep = fx.model_deployment("qwen", replicas=3, gpu=fx.GPU_16GI, cpu="2", memory="8Gi")
    engine = dep["spec"]["workers"]["template"]["spec"]["containers"][0]
    engine["image"] = image
    engine["env"] = [{"name": "MODELPLANE_STANDIN_LOAD_TIME", "value": str(load_time)}]
    return dep


def models(image: str) -> str:
    stuck = fx.model_deployment("stuck", gpu=fx.GPU_16GI, cpu="2", memory="8Gi")
    stuck["spec"]["workers"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MODELPLANE_STANDIN_LOAD_TIME", "value": str(NEVER)}
    ]
    return fx.specs_yaml(qwen(image), stuck, fx.model_service("chat", "qwen"))


@pytest.fixture(scope="module")
def served(deployer: fx.Deployer, dev_fleet: devfleet.DevFleet) -> dict[str, Any]:
    fleet_dir = deployer.dev_specs("truthful", models=models(IMAGE))
    fleet = deployer.fleet(fleet_dir)
    fx.check(fleet.up())
    services = fx.wait_for(
        "service URLs", lambda: fleet.status().gateway.get("services") or {}, timeout=60
    )
    return {"dir": fleet_dir, "url": services["demo/chat"], "env": deployer.env()}


def chat(url: str, timeout: float = 10.0) -> tuple[int, str, float]:
    """(status, revision that answered, seconds) of one chat completion through the service."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(fx.chat_request(url), timeout=timeout) as resp:
            resp.read()
            revision = resp.headers.get("x-modelplane-revision", "")
            return resp.status, revision, time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("x-modelplane-revision", ""), time.monotonic() - started
    except OSError:
        return 0, "", time.monotonic() - started


def pods(dev_fleet: devfleet.DevFleet, deployment: str) -> list[Any]:
    out = []
    for cluster in dev_fleet.clusters:
        core = CoreV1Api(fx.api_client(cluster))
        selector = f"modelplane.ai/deployment={deployment}"
        out += core.list_namespaced_pod("demo", label_selector=selector).items
    return out


def condition(pod: Any, kind: str) -> Any:
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def _seconds(stamp: Any) -> float:
    return stamp.timestamp() if isinstance(stamp, datetime) else 0.0


def raw_pod(name: str, ports: list[dict[str, Any]], **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"test": "truthful"}},
        "spec": {
            "nodeSelector": {"modelplane.ai/pool": "system"},
            "containers": [{"name": "engine", "image": IMAGE, "ports": ports, **container}],
        },
    }


def test_kwok_and_the_agent_make_readiness_follow_the_probe(dev_fleet: devfleet.DevFleet) -> None:
    """Straight on the API, no modelplane: a pod with a serving port starts unready and becomes
    Ready once its stand-in answers its probe; without a probe at once; a pod without a
    serving port is Ready at once (kwok's own stage)."""
    cluster = dev_fleet.cluster("dev-1")
    core = CoreV1Api(fx.api_client(cluster))
    http = [{"name": "http", "containerPort": 8000}]
    # an initial delay far beyond the load and the waits below: Ready before it is the load's
    probe = {"httpGet": {"path": "/health", "port": "http"}, "initialDelaySeconds": 300}
    load = [{"name": "MODELPLANE_STANDIN_LOAD_TIME", "value": "4"}]
    pods = [
        raw_pod("loads", http, readinessProbe=probe, env=load),
        raw_pod("no-probe", http, env=load),
        raw_pod("no-serving-port", [{"name": "metrics", "containerPort": 9000}]),
        raw_pod(
            "never",
            http,
            readinessProbe=probe,
            env=[{"name": load[0]["name"], "value": str(NEVER)}],
        ),
    ]
    for pod in pods:
        cluster.rest().apply(pod, field_manager="test")

    def status(name: str) -> tuple[str, str]:
        pod = core.read_namespaced_pod(name, "default")
        ready = condition(pod, "Ready")
        return pod.status.phase, ready.status if ready else ""

    fx.wait_for(
        "the pods Running",
        lambda: all(status(p["metadata"]["name"])[0] == "Running" for p in pods),
        timeout=60,
    )
    started = time.monotonic()
    assert status("loads") == ("Running", "False")  # loading: its probe answers 503
    assert status("never") == ("Running", "False")
    fx.wait_for("no-probe Ready", lambda: status("no-probe") == ("Running", "True"), timeout=10)
    assert status("no-serving-port") == ("Running", "True")
    fx.wait_for("loads Ready", lambda: status("loads") == ("Running", "True"), timeout=120)
    assert time.monotonic() - started >= 2  # about the 4 s load, not the 300 s initial delay
    loaded = core.read_namespaced_pod("loads", "default")
    assert condition(loaded, "ContainersReady").status == "True"
    assert all(c.ready for c in loaded.status.container_statuses)
    time.sleep(2)
    assert status("never") == ("Running", "False")
    assert (
        condition(core.read_namespaced_pod("never", "default"), "Ready").reason
        == "ContainersNotReady"
    )
    for pod in pods:
        core.delete_namespaced_pod(pod["metadata"]["name"], "default", grace_period_seconds=0)


def test_pods_are_ready_only_once_their_model_loaded(
    served: dict[str, Any], dev_fleet: devfleet.DevFleet
) -> None:
    fx.wait_for(
        "3 Ready qwen pods",
        lambda: (
            sum(1 for p in pods(dev_fleet, "qwen") if condition(p, "Ready").status == "True") == 3
        ),
        timeout=180,
    )
    for pod in pods(dev_fleet, "qwen"):
        ready = condition(pod, "Ready")
        loaded = _seconds(ready.last_transition_time) - _seconds(pod.status.start_time)
        # timestamps have whole seconds: the Ready transition comes >= LOAD_TIME - 1 s after
        # kwok started the pod
        assert loaded >= LOAD_TIME - 1, (pod.metadata.name, loaded)
        assert all(c.ready for c in pod.status.container_statuses)
    # a model that never loads: Running with an IP, never Ready, with the kubelet's reason
    stuck = fx.wait_for(
        "the stuck pod Running",
        lambda: [p for p in pods(dev_fleet, "stuck") if p.status.phase == "Running"],
        timeout=120,
    )
    time.sleep(LOAD_TIME + 2)
    for pod in pods(dev_fleet, "stuck"):
        ready = condition(pod, "Ready")
        assert ready.status == "False" and ready.reason == "ContainersNotReady", ready
        assert not any(c.ready for c in pod.status.container_statuses)
        assert pod.status.pod_ip
    assert stuck


def test_answers_carry_the_revision(served: dict[str, Any]) -> None:
    url = served["url"]
    fx.wait_for("demo/chat answering", lambda: chat(url)[0] == 200, timeout=120)
    seen = Counter(chat(url)[1] for _ in range(20))
    assert seen == {IMAGE: 20}


class Clients(fx.Clients):
    """``n`` clients sending chat completions back to back through the service."""

    def __init__(self, url: str, n: int = 4) -> None:
        super().__init__(n)
        self.url = url
        self.results: list[tuple[float, int, str, float]] = []

    def once(self) -> None:
        status, revision, seconds = chat(self.url)
        self.results.append((time.monotonic(), status, revision, seconds))

    def recent(self, n: int) -> list[tuple[float, int, str, float]]:
        return self.results[-n:]


def change_image(served: dict[str, Any], image: str) -> None:
    """All at once, the rollout turned off (the baseline; tests/devfleet/test_devfleet_rollout.py
    rolls the same change without a failed request)."""
    (served["dir"] / "models.yaml").write_text(models(image))
    fx.check(Fleet.load(served["dir"], env=served["env"]).up(strategy="AllAtOnce"))


def test_all_at_once_image_change_fails_requests(
    served: dict[str, Any], dev_fleet: devfleet.DevFleet
) -> None:
    """The baseline a rollout must beat: `up` replaces every replica at once (Recreate), so
    while the new pods load nothing serves the model. The proof of difference for
    tests/devfleet/test_devfleet_rollout.py, whose rolling change of the same setup fails no
    request (issue 21, "Done when")."""
    url = served["url"]
    fx.wait_for("demo/chat answering", lambda: chat(url)[0] == 200, timeout=120)
    lock = read_lock(served["dir"] / "modelplane.lock.yaml")
    clusters = sorted(r.cluster for r in lock.replicas_of("demo/qwen"))
    new = "vllm/vllm-openai:v0.11.1"
    with Clients(url) as clients:
        time.sleep(2)
        started = time.monotonic()
        change_image(served, new)
        fx.wait_for(
            "every answer from the new revision",
            lambda: (
                (r := clients.recent(40))
                and len(r) == 40
                and all(s == 200 and rev == new for _, s, rev, _ in r)
            ),
            timeout=180,
        )
        time.sleep(1)
    results = [r for r in clients.results if r[0] >= started]
    failed = [r for r in results if r[1] != 200]
    statuses = Counter(r[1] for r in failed)
    print(
        f"\nall-at-once image change, 3 replicas on {clusters}, load time {LOAD_TIME}s: "
        f"{len(failed)} of {len(results)} requests failed {dict(statuses)}"
    )
    assert failed, "an all-at-once change of every replica should fail requests"
    assert all(rev == new for _, s, rev, _ in results[-20:])


def test_misbehaving_revisions(served: dict[str, Any]) -> None:
    """An image tag asks the stand-in to fail (500) or to be slow to the first token, so an
    analysis gate has something to catch; the answers say which revision misbehaved."""
    url = served["url"]
    failing = "vllm/vllm-openai:v0.11.2-standin-errors"
    change_image(served, failing)
    fx.wait_for(
        "the failing revision answering",
        lambda: chat(url)[1] == failing and all(chat(url)[1] == failing for _ in range(10)),
        timeout=180,
    )
    answers = [chat(url) for _ in range(20)]
    assert {(s, rev) for s, rev, _ in answers} == {(500, failing)}
    slow = "vllm/vllm-openai:v0.11.3-standin-slow"
    change_image(served, slow)
    fx.wait_for(
        "the slow revision answering",
        lambda: all(chat(url, 15)[1] == slow for _ in range(3)),
        timeout=180,
    )
    answers = [chat(url, 15) for _ in range(5)]
    assert all(s == 200 and rev == slow and seconds >= 2.0 for s, rev, seconds in answers), answers
