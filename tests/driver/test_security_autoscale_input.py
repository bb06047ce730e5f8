"""Security M9 (docs/api.md "Autoscaling", where the metrics come from): autoscaling input a
pod can spoof counts for nothing. A negative or non-finite value is no value; a Prometheus
sample counts for a replica's pod only from that pod's namespace, and a pod name the replica's
label carries in two namespaces counts from neither (the pod proxy, in the replica's own
namespace, is read instead)."""

from __future__ import annotations

import pytest

from modelplane.autoscale import parse_metrics
from modelplane.observe.cluster import ClusterReader
from modelplane.observe.prometheus import PodSamples, parse_samples
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
