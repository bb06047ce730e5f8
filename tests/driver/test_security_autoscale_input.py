"""Security M9 (docs/api.md "Autoscaling", where the metrics come from): autoscaling input a
pod can spoof counts for nothing. A negative or non-finite value is no value; a Prometheus
sample counts for a replica's pod only from that pod's namespace, and a pod name the replica's
label carries in two namespaces counts from neither (the pod proxy, in the replica's own
namespace, is read instead). A pod counts for a replica only when the replica's own Deployment
(its ReplicaSet) or LeaderWorkerSet (its StatefulSets) controls it: the observation ignores
any other labelled pod (its metrics through the pod proxy, its readiness, its phases: security
H2's last part), and the serving stack's scrape job does not scrape it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from modelplane.api.names import workload_name
from modelplane.autoscale import parse_metrics
from modelplane.observe.cluster import ClusterReader, owned_by_workload, replica_pod_owned
from modelplane.observe.prometheus import (
    ENGINE_JOB,
    PROMETHEUS_PROXY,
    PodSamples,
    engine_scrape_job,
    metrics_query,
    parse_samples,
)
from tests.driver.test_autoscale_prometheus import (
    NOW,
    PROXY_TEXT,
    RUNNING,
    WAITING,
    Reader,
    answer,
    pod,
    series,
)
from tests.relabel import target_labels


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{WAITING} 3\n", {WAITING: 3.0}),
        (f"{WAITING} 1e9\n", {WAITING: 1e9}),  # large is a value (bounded by maxReplicas)
        (f"{WAITING} -5\n", {}),
        (f"{WAITING} -1e9\n{RUNNING} 2\n", {RUNNING: 2.0}),
        (f"{WAITING} +Inf\n", {}),
        (f"{WAITING} -Inf\n", {}),
        (f"{WAITING} NaN\n", {}),
        (f'{WAITING}{{a="1"}} 2\n{WAITING}{{a="2"}} -2\n', {WAITING: 2.0}),
    ],
    ids=[
        "plain",
        "large",
        "negative",
        "negative-beside",
        "inf",
        "minus-inf",
        "nan",
        "one-label-set",
    ],
)
def test_security_pod_metrics_refuse_negative_and_infinite(text: str, expected: dict) -> None:
    assert parse_metrics(text) == expected


def _in(namespace: str, *args: object) -> dict:
    made = series(*args)  # type: ignore[arg-type]
    made["metric"]["namespace"] = namespace
    return made


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ([_in("demo", RUNNING, "r1", "p1", (NOW - 1, "-3"))], {}),
        ([_in("demo", RUNNING, "r1", "p1", (NOW - 1, "+Inf"))], {}),
        # The replica's pod, and one of its name and label in another namespace: neither.
        (
            [
                _in("demo", RUNNING, "r1", "p1", (NOW - 1, "2")),
                _in("evil", WAITING, "r1", "p1", (NOW - 1, "1e9")),
            ],
            {},
        ),
        ([_in("demo", RUNNING, "r1", "p1", (NOW - 1, "2"))], {"r1": {"p1": {RUNNING: 2.0}}}),
    ],
    ids=["negative", "inf", "same-pod-name-two-namespaces", "plain"],
)
def test_security_prometheus_samples_refused(result: list[dict], expected: dict) -> None:
    got = parse_samples(answer(*result), NOW, 30)
    assert {r: {p: dict(s.values) for p, s in pods.items()} for r, pods in got.items()} == expected


def test_security_prometheus_sample_of_another_namespace_not_counted() -> None:
    """A fresh sample named like the replica's pod, but of another namespace: not the pod's;
    the pod proxy reads the pod itself."""
    spoofed = {"p1": PodSamples("evil", {RUNNING: 0.0, WAITING: 1e9}, NOW - 1)}
    reader = Reader(answer(), {"p1": PROXY_TEXT})
    values, _why, source, fallback = ClusterReader(reader).replica_metrics(  # type: ignore[arg-type]
        [pod("p1")], spoofed, ""
    )
    assert (values, source) == ({"runningRequests": 7.0, "queueDepth": 0.0}, "pod-proxy")
    assert fallback == "prometheus: no fresh sample of p1"


# --- a pod counts only when the replica's own workload controls it ---------------------------

HASH = "5d4b8c9f7"  # a pod-template-hash (apimachinery's safe alphabet)


def _owned(name: str, kind: str = "ReplicaSet", api: str = "apps/v1", **more: Any) -> dict:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": "u", "controller": True, **more}


def _pod(*owners: dict, replica: str = "r1", role: str = "unified") -> dict:
    meta: dict[str, Any] = {
        "labels": {"modelplane.ai/replica": replica, "modelplane.ai/role": role}
    }
    if owners:
        meta["ownerReferences"] = list(owners)
    return {"metadata": meta}


DEPLOY = ["r1-unified"]
LWS = ["r1-decode"]
LONG_REPLICA = "a" * 57 + "-abcde"  # the longest replica name: its workloads' names are cut
LONG = workload_name(LONG_REPLICA, "decode")


@pytest.mark.parametrize(
    ("pod", "deployments", "leader_worker_sets", "owned"),
    [
        # a Deployment's pods: its ReplicaSet `<deployment>-<pod-template-hash>`
        (_pod(_owned(f"r1-unified-{HASH}")), DEPLOY, [], True),
        (_pod(_owned("r1-unified-b")), DEPLOY, [], True),
        (_pod(_owned("r1-unified-bcdfghjklm")), DEPLOY, [], True),  # 10: the longest hash
        (_pod(), DEPLOY, [], False),  # a bare pod
        (_pod(_owned(f"r1-unified-{HASH}", controller=False)), DEPLOY, [], False),
        (_pod(_owned(f"r1-unified-{HASH}", controller=None)), DEPLOY, [], False),
        (_pod(_owned(f"r1-unified-{HASH}"), _owned(f"r1-unified-{HASH}")), DEPLOY, [], False),
        (_pod(_owned(f"other-{HASH}")), DEPLOY, [], False),  # another Deployment's
        (_pod(_owned(f"r1-unified-x-{HASH}")), DEPLOY, [], False),  # Deployment r1-unified-x
        (_pod(_owned(f"r1-unified2-{HASH}")), DEPLOY, [], False),
        (_pod(_owned("r1-unified")), DEPLOY, [], False),  # no hash
        (_pod(_owned("r1-unified-")), DEPLOY, [], False),
        (_pod(_owned("r1-unified-abc")), DEPLOY, [], False),  # `a` is in no hash
        (_pod(_owned("r1-unified-bcdfghjklmn")), DEPLOY, [], False),  # 11 characters
        (_pod(_owned(f"r1-unified-{HASH}", kind="Job", api="batch/v1")), DEPLOY, [], False),
        (_pod(_owned(f"r1-unified-{HASH}", api="example.com/v1")), DEPLOY, [], False),
        (_pod(_owned("r1-unified", kind="StatefulSet")), DEPLOY, [], False),
        (_pod(_owned("r1-unified", kind="Deployment")), DEPLOY, [], False),
        (
            _pod(_owned("r1-unified", kind="LeaderWorkerSet", api="leaderworkerset.x-k8s.io/v1")),
            DEPLOY,
            LWS,
            False,
        ),
        # a LeaderWorkerSet's pods: leaders its StatefulSet `<lws>`, workers `<lws>-<group>`
        (_pod(_owned("r1-decode", kind="StatefulSet")), [], LWS, True),
        (_pod(_owned("r1-decode-0", kind="StatefulSet")), [], LWS, True),
        (_pod(_owned("r1-decode-12", kind="StatefulSet")), [], LWS, True),
        (_pod(_owned("r1-decode-01", kind="StatefulSet")), [], LWS, False),
        (_pod(_owned("r1-decode-x", kind="StatefulSet")), [], LWS, False),
        (_pod(_owned("r1-decode-0-0", kind="StatefulSet")), [], LWS, False),
        (_pod(_owned("other", kind="StatefulSet")), [], LWS, False),
        (_pod(_owned(f"r1-decode-{HASH}")), [], LWS, False),  # a ReplicaSet of that name
        (_pod(_owned("r1-decode", kind="StatefulSet", controller=False)), [], LWS, False),
        (_pod(_owned("r1-decode", kind="Pod", api="v1")), [], LWS, False),
        # names cut and hashed past 63 characters
        (_pod(_owned(f"{LONG}-{HASH}")), [LONG], [], True),
        (_pod(_owned(f"{LONG}-3", kind="StatefulSet")), [], [LONG], True),
    ],
    ids=[
        "replicaset",
        "replicaset-1-char-hash",
        "replicaset-10-char-hash",
        "bare-pod",
        "not-controller",
        "controller-absent",
        "two-controllers",
        "other-deployment",
        "deployment-named-longer",
        "deployment-name-prefix",
        "replicaset-without-hash",
        "replicaset-empty-hash",
        "replicaset-not-a-hash",
        "replicaset-hash-too-long",
        "job",
        "other-api-group",
        "statefulset-for-a-deployment",
        "deployment-itself",
        "lws-itself",
        "lws-leader",
        "lws-worker-group-0",
        "lws-worker-group-12",
        "lws-group-leading-zero",
        "lws-group-not-a-number",
        "lws-group-of-group",
        "other-statefulset",
        "replicaset-for-an-lws",
        "lws-not-controller",
        "owned-by-a-pod",
        "long-name-replicaset",
        "long-name-lws-worker",
    ],
)
def test_security_pod_counts_only_when_its_workload_owns_it(
    pod: dict, deployments: list[str], leader_worker_sets: list[str], owned: bool
) -> None:
    assert owned_by_workload(pod, deployments, leader_worker_sets) is owned


@pytest.mark.parametrize(
    ("pod", "leader_worker_sets", "owned"),
    [
        (_pod(_owned(f"r1-unified-{HASH}")), set(), True),
        (_pod(_owned(f"r1-unified-{HASH}"), role="prefill"), set(), False),  # prefill's own
        (_pod(_owned(f"r1-prefill-{HASH}"), role="prefill"), set(), True),
        (_pod(_owned(f"r2-unified-{HASH}")), set(), False),  # another replica's pod
        (_pod(_owned("r1-decode", kind="StatefulSet"), role="decode"), {"r1-decode"}, True),
        (_pod(_owned("r1-decode-1", kind="StatefulSet"), role="decode"), {"r1-decode"}, True),
        # no LeaderWorkerSet of that name: the role is a Deployment's
        (_pod(_owned("r1-decode", kind="StatefulSet"), role="decode"), set(), False),
        (_pod(_owned(f"r1-decode-{HASH}"), role="decode"), {"r1-decode"}, False),
        (_pod(_owned(f"{LONG}-{HASH}"), replica=LONG_REPLICA, role="decode"), set(), True),
        ({"metadata": {"labels": {"modelplane.ai/replica": "r1"}}}, set(), False),  # no role
    ],
    ids=[
        "unified",
        "role-of-another-workload",
        "prefill",
        "another-replica",
        "lws-leader",
        "lws-worker",
        "statefulset-without-lws",
        "replicaset-with-lws",
        "long-name",
        "no-role",
    ],
)
def test_security_replica_pod_is_its_roles_workloads(
    pod: dict, leader_worker_sets: set[str], owned: bool
) -> None:
    assert replica_pod_owned(pod, leader_worker_sets) is owned


def _serving(
    name: str, replica: str, role: str, owner: dict | None, ready: bool = True, **labels: str
) -> dict:
    pod = _pod(*([owner] if owner else []), replica=replica, role=role)
    pod["metadata"] |= {
        "name": name,
        "namespace": "demo",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    pod["metadata"]["labels"] |= labels
    pod["spec"] = {
        "containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}]
    }
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return pod


QUIET = "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"
LOUD = "vllm:num_requests_running 0\nvllm:num_requests_waiting 1e9\n"


class Cluster:
    """An API server with pods, LeaderWorkerSets, a Prometheus that has no sample (so every
    replica is read through the pod proxy) and each pod's `/metrics`. Records the reads."""

    def __init__(self, pods: list[dict], lws: list[dict], metrics: dict[str, str]) -> None:
        self.pods, self.lws, self.metrics = pods, lws, metrics
        self.asked: list[str] = []

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        if path.endswith("/pods"):
            return json.loads(json.dumps(self.pods))
        if path.endswith("/leaderworkersets"):
            return json.loads(json.dumps(self.lws))
        return []

    def get(self, path: str, **query: str) -> dict[str, Any]:
        self.asked.append(path)
        assert path == PROMETHEUS_PROXY
        assert 'namespace=~"demo"' in query["query"]
        return {"status": "success", "data": {"resultType": "matrix", "result": []}}

    def get_text(self, path: str) -> str:
        self.asked.append(path)
        return self.metrics[path.split("/pods/")[1].split(":")[0]]


def _lws(name: str, replica: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"modelplane.ai/replica": replica}},
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1},
    }


@pytest.mark.parametrize(
    ("spoof", "label"),
    [
        (None, "bare-pod"),
        (_owned("evil-5d4b8c9f7"), "another-deployments-pod"),
        (_owned("r1-unified-x-5d4b8c9f7"), "deployment-named-like-the-replicas"),
        (_owned("evil-1", kind="Job", api="batch/v1"), "a-jobs-pod"),
        (_owned("r1-unified", kind="StatefulSet"), "a-statefulset-named-like-the-deployment"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_security_labelled_pod_of_another_owner_is_not_the_replicas(
    spoof: dict | None, label: str
) -> None:
    """A Ready pod labelled for replica r1, exporting a queue of 1e9, beside r1's own pod: r1
    has one pod, read alone; a replica with only such pods is not observed at all."""
    cluster = Cluster(
        [
            _serving("r1-unified-5d4b8c9f7-abcde", "r1", "unified", _owned(f"r1-unified-{HASH}")),
            _serving("spoof", "r1", "unified", spoof),
            _serving("spoof-slow", "r1", "unified", spoof, ready=False),
            _serving("ghost", "r9", "unified", spoof),
        ],
        [],
        {"r1-unified-5d4b8c9f7-abcde": QUIET, "spoof": LOUD, "ghost": LOUD},
    )
    reader = ClusterReader(cluster)  # type: ignore[arg-type]
    reader._resource_api = "resource.k8s.io/v1"
    seen = reader.replicas(["demo"], ["r1", "r9"], now=1_000.0, stale_after=20.0)
    assert set(seen) == {"r1"}, label
    r1 = seen["r1"]
    assert (r1.pods, r1.ready_pods, r1.running_pods, r1.reasons) == (1, 1, 1, ()), label
    assert r1.metrics == {"runningRequests": 1.0, "queueDepth": 0.0}, label
    assert r1.metrics_source == "pod-proxy", label
    assert [p for p in cluster.asked if "/pods/" in p] == [
        "/api/v1/namespaces/demo/pods/r1-unified-5d4b8c9f7-abcde:8000/proxy/metrics"
    ], label


def test_security_leader_worker_set_pods_count_for_their_replica() -> None:
    """A LeaderWorkerSet replica: its leader (StatefulSet `<lws>`) and worker (StatefulSet
    `<lws>-0`) pods count; a labelled pod of a StatefulSet `<lws>-x` does not."""
    cluster = Cluster(
        [
            _serving("r2-unified-0", "r2", "unified", _owned("r2-unified", kind="StatefulSet")),
            _serving("r2-unified-0-1", "r2", "unified", _owned("r2-unified-0", kind="StatefulSet")),
            _serving("r2-unified-x-0", "r2", "unified", _owned("r2-unified-x", kind="StatefulSet")),
            # a Deployment-style owner for an LWS role: not its
            _serving("r2-unified-bcd-abcde", "r2", "unified", _owned("r2-unified-bcd")),
        ],
        [_lws("r2-unified", "r2")],
        {"r2-unified-0": QUIET, "r2-unified-0-1": QUIET},
    )
    reader = ClusterReader(cluster)  # type: ignore[arg-type]
    reader._resource_api = "resource.k8s.io/v1"
    seen = reader.replicas(["demo"], ["r2"], now=1_000.0, stale_after=20.0)["r2"]
    assert (seen.pods, seen.ready_pods, seen.groups, seen.ready_groups) == (2, 2, 1, 1)
    assert sorted(p.rsplit("/pods/", 1)[1] for p in cluster.asked if "/pods/" in p) == [
        "r2-unified-0-1:8000/proxy/metrics",
        "r2-unified-0:8000/proxy/metrics",
    ]


def test_security_prometheus_query_asks_only_the_observed_namespaces() -> None:
    query = metrics_query(["r1"], 20.0, ["demo", "ml-team", "demo"])
    assert query.endswith(',namespace=~"demo|ml\\\\-team"}[20s]'), query
    assert "namespace" not in metrics_query(["r1"], 20.0)


# --- the serving stack's scrape job keeps only the replica's own pods ---------------------------


def _meta(
    kind: str | None,
    controller: str | None,
    replica: str = "r1",
    role: str = "unified",
    worker_index: str | None = None,
    port: str = "http",
) -> dict[str, str]:
    """kubernetes_sd's labels of one pod port (role pod)."""
    meta = {
        "__address__": "10.0.0.1:8000",
        "__meta_kubernetes_namespace": "demo",
        "__meta_kubernetes_pod_name": "p",
        "__meta_kubernetes_pod_container_port_name": port,
        "__meta_kubernetes_pod_label_modelplane_ai_replica": replica,
        "__meta_kubernetes_pod_label_modelplane_ai_role": role,
    }
    if worker_index is not None:
        meta["__meta_kubernetes_pod_label_leaderworkerset_sigs_k8s_io_worker_index"] = worker_index
    if kind is not None:
        meta["__meta_kubernetes_pod_controller_kind"] = kind
    if controller is not None:
        meta["__meta_kubernetes_pod_controller_name"] = controller
    return meta


# The longest replica name and roles past the cut: the workload's name ends in a hash; and
# a replica name whose 54th character is `-` (the cut drops it).
LONG_UNIFIED = workload_name(LONG_REPLICA, "unified")
DASH_REPLICA = "b" * 53 + "-c-abcde"
DASH = workload_name(DASH_REPLICA, "prefill")


@pytest.mark.parametrize(
    ("meta", "kept"),
    [
        (_meta("ReplicaSet", f"r1-unified-{HASH}"), True),
        (_meta("ReplicaSet", f"r1-prefill-{HASH}", role="prefill"), True),
        (_meta("StatefulSet", "r1-decode", role="decode", worker_index="0"), True),
        (_meta("StatefulSet", "r1-decode-0", role="decode", worker_index="1"), True),
        (_meta("StatefulSet", "r1-decode-11", role="decode", worker_index="3"), True),
        (_meta("ReplicaSet", f"{LONG_UNIFIED}-{HASH}", replica=LONG_REPLICA), True),
        (_meta("StatefulSet", LONG, replica=LONG_REPLICA, role="decode", worker_index="0"), True),
        (
            _meta(
                "StatefulSet", f"{LONG}-2", replica=LONG_REPLICA, role="decode", worker_index="1"
            ),
            True,
        ),
        (_meta("ReplicaSet", f"{DASH}-{HASH}", replica=DASH_REPLICA, role="prefill"), True),
        (_meta(None, None), False),  # a bare pod
        (_meta("Job", "r1-unified-x"), False),
        (_meta("ReplicaSet", f"other-{HASH}"), False),  # another Deployment's
        (_meta("ReplicaSet", f"r2-unified-{HASH}"), False),  # another replica's
        (_meta("ReplicaSet", f"r1-prefill-{HASH}"), False),  # another role's
        (_meta("ReplicaSet", f"r1-unified-x-{HASH}"), False),
        (_meta("ReplicaSet", "r1-unified"), False),
        (_meta("ReplicaSet", "r1-unified-abc"), False),
        (_meta("StatefulSet", "r1-unified", worker_index=None), False),  # not an LWS's pod
        (_meta("StatefulSet", "r1-decode", role="decode", worker_index="1"), False),
        (_meta("StatefulSet", "r1-decode-0", role="decode", worker_index="0"), False),
        (_meta("StatefulSet", "other-0", role="decode", worker_index="1"), False),
        (_meta("DaemonSet", "r1-unified"), False),
        (_meta("ReplicaSet", f"{LONG_UNIFIED[:-1]}x-{HASH}", replica=LONG_REPLICA), False),
        (_meta("ReplicaSet", f"{'a' * 54}-{HASH}", replica=LONG_REPLICA), False),
        (_meta("ReplicaSet", f"{'b' * 40}-{HASH}", replica=DASH_REPLICA, role="prefill"), False),
        (_meta("ReplicaSet", f"r1-unified-{HASH}", port="metrics"), False),
        (_meta("ReplicaSet", f"r1-unified-{HASH}", role="endpoint-picker"), False),
    ],
    ids=[
        "deployment",
        "deployment-prefill",
        "lws-leader",
        "lws-worker",
        "lws-worker-group-11",
        "long-deployment",
        "long-lws-leader",
        "long-lws-worker",
        "cut-at-a-dash",
        "bare-pod",
        "job",
        "other-deployment",
        "other-replica",
        "other-role",
        "deployment-named-longer",
        "replicaset-without-hash",
        "replicaset-not-a-hash",
        "statefulset-without-worker-index",
        "leader-statefulset-for-a-worker",
        "worker-statefulset-for-a-leader",
        "other-statefulset",
        "daemonset",
        "long-other-workload",
        "long-not-hashed",
        "cut-other-workload",
        "not-the-http-port",
        "not-a-serving-role",
    ],
)
def test_security_scrape_job_keeps_only_the_replicas_own_pods(
    meta: dict[str, str], kept: bool
) -> None:
    """The job's relabeling, run on kubernetes_sd's labels (tests/relabel.py): a pod is scraped
    only when its controller is a ReplicaSet or StatefulSet of the workload modelplane names
    for its replica label and role."""
    job = engine_scrape_job()
    assert job["job_name"] == ENGINE_JOB
    got = target_labels(meta, job["relabel_configs"])
    assert (got is not None) is kept
    if got is not None:
        assert got == {
            "__address__": "10.0.0.1:8000",
            "modelplane_ai_replica": meta["__meta_kubernetes_pod_label_modelplane_ai_replica"],
            "pod": "p",
            "namespace": "demo",
        }


def test_security_scrape_job_names_are_modelplanes() -> None:
    """The cut past 63 characters the job mirrors is `workload_name`'s: the first 54
    characters (a trailing `-` dropped), `-` and 8 hex digits."""
    assert len(LONG) == 63 and LONG.startswith("a" * 54 + "-")
    assert DASH.startswith("b" * 53 + "-") and len(DASH) == 62
    assert workload_name("r1", "unified") == "r1-unified"
