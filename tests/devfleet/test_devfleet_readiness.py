"""Truthful readiness on the dev fleet, its pure parts (issue 21, part 4): what a pod asks of
its stand-in, kwok's split pod-ready stage, readiness probes and the status patch."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from modelplane.devfleet.agent import (
    DEFAULT_LOAD_TIME,
    SLOW_TAG_DELAY,
    StandinLoad,
    _standin_load,
    pod_servers,
)
from modelplane.devfleet.probes import (
    Probe,
    held_unready,
    pod_probes,
    readiness_patch,
    run_probe,
)
from modelplane.devfleet.stages import (
    HYDRATE_SECONDS,
    PORT_NAMES_KEY,
    UNREADY_STAGE,
    StageError,
    pod_complete_stages,
    pod_ready_stages,
)
from modelplane.devfleet.standin import StandinConfig, StandinHostThread, StandinIdentity
from modelplane.gobuild.fleet import cached_fleet_binaries

IMAGE = "vllm/vllm-openai:v0.11.0"


def env(**values: str) -> list[dict[str, str]]:
    return [{"name": f"MODELPLANE_STANDIN_{k.upper()}", "value": v} for k, v in values.items()]


LOADS = [
    # (name, container, pod annotations, expected)
    ("defaults", {"image": IMAGE}, {}, StandinLoad()),
    (
        "env-load-time",
        {"image": IMAGE, "env": env(load_time="7.5")},
        {},
        StandinLoad(load_time=7.5),
    ),
    (
        "annotation-load-time",
        {"image": IMAGE},
        {"modelplane.ai/standin-load-time": "0"},
        StandinLoad(load_time=0.0),
    ),
    (
        "env-beats-annotation",
        {"image": IMAGE, "env": env(load_time="1")},
        {"modelplane.ai/standin-load-time": "9"},
        StandinLoad(load_time=1.0),
    ),
    ("bad-load-time", {"image": IMAGE, "env": env(load_time="soon")}, {}, StandinLoad()),
    ("negative-load-time", {"image": IMAGE, "env": env(load_time="-3")}, {}, StandinLoad()),
    (
        "errors-tag",
        {"image": "vllm/vllm-openai:v2-standin-errors"},
        {},
        StandinLoad(error_ratio=1.0),
    ),
    (
        "slow-tag",
        {"image": "registry:5000/vllm:v2-standin-slow"},
        {},
        StandinLoad(first_token_delay=SLOW_TAG_DELAY),
    ),
    ("registry-port-is-no-tag", {"image": "registry:5000/standin-errors"}, {}, StandinLoad()),
    (
        "env-beats-tag",
        {"image": "vllm:standin-errors", "env": env(error_ratio="0.25", first_token_delay="0.5")},
        {},
        StandinLoad(error_ratio=0.25, first_token_delay=0.5),
    ),
    ("ratio-out-of-range", {"image": IMAGE, "env": env(error_ratio="2")}, {}, StandinLoad()),
    (
        "service-and-concurrency",
        {"image": IMAGE, "env": env(service_time="0.2", concurrency="4")},
        {},
        StandinLoad(service_time=0.2, concurrency=4),
    ),
]


@pytest.mark.parametrize(
    ("container", "annotations", "expected"), [c[1:] for c in LOADS], ids=[c[0] for c in LOADS]
)
def test_standin_load(
    container: dict[str, Any], annotations: dict[str, str], expected: Any
) -> None:
    assert _standin_load(container, annotations) == expected


def test_default_load_time_is_a_few_seconds() -> None:
    assert 1.0 <= DEFAULT_LOAD_TIME <= 5.0


def serving_pod(**meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "qwen-0", "namespace": "demo", "resourceVersion": "41", **meta},
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "image": IMAGE,
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "readinessProbe": {
                        "httpGet": {"path": "/health", "port": 8000},
                        "initialDelaySeconds": 30,
                        "periodSeconds": 10,
                    },
                },
                {
                    "name": "pd-sidecar",
                    "ports": [{"name": "pd-proxy", "containerPort": 8001}],
                    "readinessProbe": {"tcpSocket": {"port": "pd-proxy"}, "periodSeconds": 5},
                },
                {"name": "epp", "readinessProbe": {"grpc": {"port": 9003}}},
                {"name": "logger"},
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.101.1.5",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
            ],
            "containerStatuses": [
                {"name": n, "ready": False} for n in ("engine", "pd-sidecar", "epp", "logger")
            ],
        },
    }


@pytest.mark.parametrize(
    ("meta", "revision"),
    [
        ({}, IMAGE),
        ({"annotations": {"modelplane.ai/revision": "abc123"}}, "abc123"),
        ({"labels": {"modelplane.ai/revision": "def456"}}, "def456"),
    ],
)
def test_pod_servers_carry_revision_and_load(meta: dict[str, Any], revision: str) -> None:
    engine = next(s for s in pod_servers("dev-1", serving_pod(**meta)) if s.port == 8000)
    assert engine.revision == revision
    assert engine.load_time == DEFAULT_LOAD_TIME


def test_pod_probes() -> None:
    probes = pod_probes(serving_pod())
    assert probes["engine"] == Probe("engine", "http", 8000, "/health", period=10.0)
    assert probes["pd-sidecar"] == Probe("pd-sidecar", "tcp", 8001, "/", period=5.0)
    assert probes["epp"] is not None and probes["epp"].kind == "other"
    assert probes["logger"] is None


NOW = datetime(2026, 11, 25, 21, 0, 0, tzinfo=UTC)


def test_readiness_patch_marks_ready_once_every_container_is() -> None:
    pod = serving_pod()
    half = readiness_patch(pod, {"engine": False, "pd-sidecar": True, "epp": True, "logger": True})
    assert half is not None
    ready = {c["type"]: c["status"] for c in half["status"]["conditions"]}
    assert ready == {"Initialized": "True", "Ready": "False", "ContainersReady": "False"}
    assert [c["ready"] for c in half["status"]["containerStatuses"]] == [False, True, True, True]
    full = readiness_patch(pod, dict.fromkeys(("engine", "pd-sidecar", "epp", "logger"), True), NOW)
    assert full is not None
    assert full["metadata"] == {"resourceVersion": "41"}
    conditions = {c["type"]: c for c in full["status"]["conditions"]}
    assert conditions["Ready"] == {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": "2026-11-25T21:00:00Z",
    }
    assert conditions["ContainersReady"]["status"] == "True"
    assert all(c["ready"] for c in full["status"]["containerStatuses"])


def test_readiness_patch_is_none_when_the_status_already_says_so() -> None:
    pod = serving_pod()
    assert (
        readiness_patch(pod, dict.fromkeys(("engine", "pd-sidecar", "epp", "logger"), False))
        is None
    )
    patch = readiness_patch(pod, dict.fromkeys(("engine", "pd-sidecar", "epp", "logger"), True))
    assert patch is not None
    pod["status"] = patch["status"]
    assert readiness_patch(pod, {"engine": True}) is None
    # one container failing makes the pod unready again, with the kubelet's reason
    down = readiness_patch(pod, {"engine": False}, NOW)
    assert down is not None
    ready = next(c for c in down["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["message"] == "containers with unready status: [engine]"


def test_run_probe_follows_the_standins_health() -> None:
    with StandinHostThread(grace=0.1) as host:
        ident = StandinIdentity(replica="r0")
        port = host.add("s", "127.0.0.1", 0, ident, StandinConfig(ready=False))
        http = Probe("engine", "http", port, "/health")
        tcp = Probe("engine", "tcp", port)
        assert run_probe("127.0.0.1", http) is False  # 503 while loading
        assert run_probe("127.0.0.1", tcp) is True  # the port accepts all the same
        assert run_probe("127.0.0.1", Probe("engine", "http", port, "/no-such-path")) is False
        host.set_ready("s", True)
        assert run_probe("127.0.0.1", http) is True
        host.remove("s", 0.0)
        assert run_probe("127.0.0.1", http) is False
        assert run_probe("127.0.0.1", tcp) is False


# --------------------------------------------------------------------------- kwok stages


def test_stage_split_on_kwoks_pod_ready_stage() -> None:
    binaries = cached_fleet_binaries()
    if binaries is None:
        pytest.skip("kwok's stages are vendored by `make setup` (not built yet)")
    text = (binaries.stages_dir / "pod-ready.yaml").read_text()
    ready, unready = pod_ready_stages(text)
    assert ready["metadata"]["name"] == "pod-ready"
    assert unready["metadata"]["name"] == UNREADY_STAGE
    names = ["http", "pd-proxy"]
    assert ready["spec"]["selector"]["matchExpressions"][-1] == {
        "key": PORT_NAMES_KEY,
        "operator": "NotIn",
        "values": names,
    }
    assert unready["spec"]["selector"]["matchExpressions"][-1]["operator"] == "In"
    # the same phase transition (Running, pod IP), but not Ready
    template = yaml.safe_load(
        unready["spec"]["next"]["statusTemplate"]
        .replace("{{ $now := Now }}", "")
        .replace("{{ $now | Quote }}", "now")
        .split("initContainerStatuses")[0]
        .replace("{{ range .spec.readinessGates }}", "")
        .replace("{{ range .spec.containers }}", "")
        .replace("{{ end }}", "")
        .replace("{{ .image | Quote }}", "img")
        .replace("{{ .name | Quote }}", "c")
        .replace("{{ .conditionType | Quote }}", "Gate")
    )
    conditions = {c["type"]: c["status"] for c in template["conditions"]}
    assert conditions == {
        "Initialized": "True",
        "Ready": "False",
        "ContainersReady": "False",
        "Gate": "True",
    }
    assert template["containerStatuses"][0]["ready"] is False
    assert "phase: Running" in unready["spec"]["next"]["statusTemplate"]
    assert ready["spec"]["next"] == yaml.safe_load(text)["spec"]["next"]


def test_stage_split_delays_only_a_model_caches_download() -> None:
    binaries = cached_fleet_binaries()
    if binaries is None:
        pytest.skip("kwok's stages are vendored by `make setup` (not built yet)")
    text = (binaries.stages_dir / "pod-complete.yaml").read_text()
    others, download = pod_complete_stages(text)
    assert (others["metadata"]["name"], download["metadata"]["name"]) == (
        "pod-complete",
        "pod-complete-model-cache",
    )
    label = '.metadata.labels["modelplane.ai/modelcache"]'
    assert others["spec"]["selector"]["matchExpressions"][-1] == {
        "key": label,
        "operator": "DoesNotExist",
    }
    assert download["spec"]["selector"]["matchExpressions"][-1] == {
        "key": label,
        "operator": "Exists",
    }
    assert "delay" not in others["spec"]
    assert download["spec"]["delay"] == {"durationMilliseconds": int(HYDRATE_SECONDS * 1000)}
    # Both still only for a Job's pods, and the same transition (Succeeded).
    assert (
        others["spec"]["next"] == download["spec"]["next"] == yaml.safe_load(text)["spec"]["next"]
    )
    with pytest.raises(StageError, match="pod-complete"):
        pod_complete_stages("metadata: {name: pod-ready}\n")


def test_stage_split_refuses_another_stage() -> None:
    with pytest.raises(StageError, match="pod-ready"):
        pod_ready_stages("metadata: {name: pod-delete}\n")
    changed = yaml.safe_dump(
        {
            "metadata": {"name": "pod-ready"},
            "spec": {
                "selector": {"matchExpressions": []},
                "next": {"statusTemplate": "phase: Running"},
            },
        }
    )
    with pytest.raises(StageError, match="status template changed"):
        pod_ready_stages(changed)


@pytest.mark.parametrize(
    ("condition", "held"),
    [
        ({"type": "Ready", "status": "False", "reason": "ContainersNotReady"}, False),
        ({"type": "Ready", "status": "False"}, False),
        ({"type": "Ready", "status": "True"}, False),
        ({"type": "Ready", "status": "False", "reason": "ForcedUnready"}, True),
    ],
)
def test_a_pod_made_unready_by_someone_else_is_left_alone(
    condition: dict[str, str], held: bool
) -> None:
    pod = serving_pod()
    pod["status"]["conditions"] = [condition]
    assert held_unready(pod) is held
