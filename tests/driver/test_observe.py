"""`modelplane.observe` against a real kube-apiserver, a closed port and a silent server."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.devcluster import DevCluster
from modelplane.health.observation import PoolObservation
from modelplane.observe import observe_fleet, probe_reachable
from modelplane.observe.kube import KubeError, KubeReader, parse_kubeconfig
from tests.factories import cluster, deployment, fleet, inference_class, pool

NS = "observe-test"


def _fleet_with_secret(name: str, secret: str) -> Any:
    spec = cluster(name, [pool("gpu", "h100", 2), pool("small", "h100", 1)])
    existing = spec.spec.cluster.existing.model_copy(  # type: ignore[union-attr]
        update={"render_to": None, "secret_ref": {"name": secret, "key": "kubeconfig"}}
    )
    existing = type(existing).model_validate(
        {"secretRef": {"name": secret, "key": "kubeconfig"}}, by_alias=True
    )
    spec = spec.model_copy(
        update={
            "spec": spec.spec.model_copy(
                update={"cluster": spec.spec.cluster.model_copy(update={"existing": existing})}
            )
        }
    )
    return fleet([inference_class("h100", 8)], [spec], [deployment("m", 1, namespace=NS)])


def _node(name: str, pool_name: str, ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"modelplane.ai/pool": pool_name}},
    }


def _set_ready(rest: Any, path: str, ready: bool, extra: dict[str, Any] | None = None) -> None:
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    status.update(extra or {})
    rest.request(
        "PATCH",
        path + "/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )


#: The pod of each replica (its ReplicaSet's, so its name is the controller's).
PODS: dict[str, str] = {}


def _labels(replica: str) -> dict[str, str]:
    return {
        "modelplane.ai/replica": replica,
        "modelplane.ai/role": "unified",
        "modelplane.ai/deployment": "m",
    }


def _pod_spec() -> dict[str, Any]:
    # Bound to a node with no kubelet: no scheduler, nobody else writes its status.
    return {
        "nodeName": "obs-s0",
        "automountServiceAccountToken": False,
        "containers": [{"name": "engine", "image": "x"}],
    }


def _owned_pod(rest: Any, replica: str) -> str:
    """A pod of the replica's Deployment as the real controllers make it: owned by a
    ReplicaSet `<deployment>-<pod-template-hash>` (`m-rN-unified-...`). The ReplicaSet
    controller makes it; without kube-controller-manager the test makes it, owned the same."""
    selector = {"modelplane.ai/replica": replica, "modelplane.ai/role": "unified"}
    rs = rest.request(
        "POST",
        f"/apis/apps/v1/namespaces/{NS}/replicasets",
        body={
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": f"{replica}-unified-7b9d5f", "labels": _labels(replica)},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": _labels(replica)}, "spec": _pod_spec()},
            },
        },
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = rest.request(
            "GET",
            f"/api/v1/namespaces/{NS}/pods",
            query=[("labelSelector", f"modelplane.ai/replica={replica},modelplane.ai/role")],
        )["items"]
        if found:
            [pod] = found
            return str(pod["metadata"]["name"])
        time.sleep(0.5)
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": rs["metadata"]["name"],
        "uid": rs["metadata"]["uid"],
        "controller": True,
    }
    name = f"{rs['metadata']['name']}-abcde"
    _create_pod(rest, name, _labels(replica), [owner])
    return name


def _create_pod(rest: Any, name: str, labels: dict[str, str], owners: list[Any]) -> None:
    rest.request(
        "POST",
        f"/api/v1/namespaces/{NS}/pods",
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
            "spec": _pod_spec(),
        },
    )


@pytest.fixture(scope="module")
def objects(dev_cluster: DevCluster) -> Iterator[DevCluster]:
    rest = dev_cluster.rest()
    created = []
    for name, p, ready in (
        ("obs-g0", "gpu", True),
        ("obs-g1", "gpu", False),
        ("obs-s0", "small", True),
    ):
        rest.request("POST", "/api/v1/nodes", body=_node(name, p, ready))
        _set_ready(rest, f"/api/v1/nodes/{name}", ready)
        created.append(f"/api/v1/nodes/{name}")
    rest.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    )
    for replica, ready in (("m-r0", True), ("m-r1", False)):
        pod = _owned_pod(rest, replica)
        PODS[replica] = pod
        _set_ready(rest, f"/api/v1/namespaces/{NS}/pods/{pod}", ready, {"phase": "Running"})
    # Ready pods labelled for m-r0 that no controller of modelplane's owns: not m-r0's
    # (security M9). One of another role (its ReplicaSet's selector, role unified, does not
    # adopt it), one controlled by another object (a ConfigMap here: nobody adopts it).
    other = rest.request(
        "POST",
        f"/api/v1/namespaces/{NS}/configmaps",
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-a-workload"}},
    )
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "not-a-workload",
        "uid": other["metadata"]["uid"],
        "controller": True,
    }
    for name, role, owners in (
        ("m-r0-spoof-prefill", "prefill", []),
        ("m-r0-spoof-owned", "unified", [foreign]),
    ):
        labels = _labels("m-r0") | {"modelplane.ai/role": role}
        _create_pod(rest, name, labels, owners)
        _set_ready(rest, f"/api/v1/namespaces/{NS}/pods/{name}", True, {"phase": "Running"})
    try:
        yield dev_cluster
    finally:
        for path in created:
            rest.request("DELETE", path)


@pytest.mark.apiserver
def test_observe_a_real_cluster(objects: DevCluster, tmp_path: Path) -> None:
    # A `file:` secretRef stays inside the fleet folder (tmp_path here).
    (tmp_path / "kc").write_text(objects.kubeconfig_path.read_text())
    f = _fleet_with_secret("c1", "file:kc")
    private = tmp_path / "tmp"
    private.mkdir()
    saved, tempfile.tempdir = tempfile.tempdir, str(private)
    try:
        observation = observe_fleet(f, tmp_path, env={})
    finally:
        tempfile.tempdir = saved
    seen = observation.clusters["c1"]
    assert seen.reachable, seen.error
    assert seen.pools["gpu"] == PoolObservation(nodes=2, ready_nodes=1, devices=0)
    assert seen.pools["small"] == PoolObservation(nodes=1, ready_nodes=1, devices=0)
    # no Gateway API served: no Gateway, no address, no error
    assert (seen.gateway_found, seen.gateway_address, seen.error) == (False, None, None)
    assert (seen.replicas["m-r0"].pods, seen.replicas["m-r0"].ready_pods) == (1, 1)
    assert (seen.replicas["m-r1"].pods, seen.replicas["m-r1"].ready_pods) == (1, 0)
    assert seen.replicas["m-r1"].reasons == (f"{PODS['m-r1']}: Ready False",)
    assert list(private.iterdir()) == []  # the client key's temp files are gone
    # Replicas are read only in the namespaces the lock has on this cluster.
    empty = observe_fleet(f, tmp_path, env={}, lock=PlacementLock())
    assert empty.clusters["c1"].replicas == {}


@pytest.mark.apiserver
@pytest.mark.parametrize(
    ("hosted_on", "observed"),
    [
        ("c1", ["c1"]),  # the replicas' cluster: replicas alone
        (None, []),  # the deployment has no replica: nothing is read
    ],
)
def test_a_rollout_observation_reads_the_replicas_alone(
    objects: DevCluster, tmp_path: Path, hosted_on: str | None, observed: list[str]
) -> None:
    (tmp_path / "kc").write_text(objects.kubeconfig_path.read_text())
    f = _fleet_with_secret("c1", "file:kc")
    replicas = [
        LockedReplica(name=f"m-r{i}", cluster=hosted_on, index=i, pools={"unified": "gpu"})
        for i in range(2)
        if hosted_on
    ]
    lock = PlacementLock(deployments={f"{NS}/m": LockedDeployment(replicas=replicas)})
    seen = observe_fleet(f, tmp_path, env={}, lock=lock, metrics_of=[f"{NS}/m"], only_replicas=True)
    assert sorted(seen.clusters) == observed
    assert seen.routes is None  # no gateway read either
    for c in seen.clusters.values():
        assert c.reachable, c.error
        assert c.pools == {}  # no node or ResourceSlice listed
        assert (c.replicas["m-r0"].pods, c.replicas["m-r0"].ready_pods) == (1, 1)
        assert (c.replicas["m-r1"].pods, c.replicas["m-r1"].ready_pods) == (1, 0)


@pytest.mark.apiserver
def test_observation_never_contains_the_kubeconfig(objects: DevCluster, tmp_path: Path) -> None:
    f = _fleet_with_secret("c1", "kube-c1")
    secret = objects.kubeconfig_text
    observation = observe_fleet(f, tmp_path, env={"MODELPLANE_SECRET_KUBE_C1_KUBECONFIG": secret})
    assert observation.clusters["c1"].reachable
    text = str(observation.as_json())
    target = parse_kubeconfig(secret)
    assert target.key_data is not None
    for part in (secret, target.key_data.decode()[40:80]):
        assert part not in text
    assert "key" not in repr(target).lower()


def _kubeconfig(server: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        f"clusters: [{{name: x, cluster: {{server: '{server}', insecure-skip-tls-verify: true}}}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: abc}}]\n"
    )


def test_a_cluster_that_is_down_is_an_observation_not_an_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "kc").write_text(_kubeconfig(f"https://127.0.0.1:{port}"))
    f = _fleet_with_secret("c1", "file:kc")
    started = time.monotonic()
    seen = observe_fleet(f, tmp_path, env={}).clusters["c1"]
    print(f"\na closed port observed in {time.monotonic() - started:.2f}s")
    assert (seen.observed, seen.reachable) == (True, False)
    # The refusal is the answer (not the deadline's "no complete answer", not a timeout).
    assert f"cannot reach https://127.0.0.1:{port}" in (seen.error or "")
    assert "refused" in (seen.error or ""), seen.error


def test_a_silent_cluster_is_bounded_by_the_timeout(tmp_path: Path) -> None:
    """A server that never answers ends in an unreachable observation, not a hang: the
    call returns (a generous wait, 20x the deadline: only a call that waits on the silent
    server for good fails it); how long it took is printed."""
    import threading

    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        (tmp_path / "kc").write_text(_kubeconfig(f"https://127.0.0.1:{port}"))
        f = _fleet_with_secret("c1", "file:kc")
        found: list[Any] = []
        started = time.monotonic()
        call = threading.Thread(
            target=lambda: found.append(
                observe_fleet(f, tmp_path, env={}, timeout=0.5, deadline=1.5).clusters["c1"]
            ),
            daemon=True,
        )
        call.start()
        call.join(30)
        elapsed = time.monotonic() - started
    assert found, (
        "observe_fleet did not return in 30 s (deadline 1.5 s): it waits on the silent server"
    )
    print(f"\na silent server observed in {elapsed:.2f}s (timeout 0.5 s, deadline 1.5 s)")
    (seen,) = found
    assert not seen.reachable and seen.error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[", "the kubeconfig is not valid YAML"),
        ("- a", "the kubeconfig is not a YAML mapping"),
        ("current-context: x\ncontexts: []\n", "the kubeconfig has no context named 'x'"),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "clusters: [{name: c, cluster: {server: https://h}}]\n"
            "users: [{name: u, user: {auth-provider: {name: gcp}}}]\n",
            "the kubeconfig uses an auth-provider plugin (not supported)",
        ),
    ],
)
def test_bad_kubeconfigs_say_why(text: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_kubeconfig(text)
    (tmp_path / "kc").write_text(text)
    seen = observe_fleet(_fleet_with_secret("c1", "file:kc"), tmp_path, env={}).clusters["c1"]
    assert (seen.observed, seen.error) == (False, message)


def test_clusters_without_a_kubeconfig_are_not_observed(tmp_path: Path) -> None:
    f = fleet([inference_class("h100", 8)], [cluster("r", [pool("gpu", "h100")])])
    seen = observe_fleet(f, tmp_path, env={}).clusters["r"]
    assert (seen.observed, seen.error) == (False, "renderTo cluster: nothing to observe")
    missing = observe_fleet(_fleet_with_secret("c1", "nope"), tmp_path, env={}).clusters["c1"]
    assert not missing.observed and "MODELPLANE_SECRET_NOPE_KUBECONFIG" in (missing.error or "")


def test_probe_says_which_api_servers_answer(
    dev_cluster: DevCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In parallel: the API server that answers is done before the silent one's request
    times out (probed one after another, in name order, the silent one would end first);
    each bounded by the timeout: the silent one's request ends. Order and outcome, not
    seconds (the time is printed)."""
    import modelplane.observe

    ended: list[str] = []  # the servers, in the order their probe ended

    class Recorded(KubeReader):
        def get(self, path: str, **query: str) -> dict[str, Any]:
            try:
                return super().get(path, **query)
            finally:
                ended.append(self.server)

    monkeypatch.setattr(modelplane.observe, "KubeReader", Recorded)
    with socket.socket() as closed, socket.socket() as silent:
        closed.bind(("127.0.0.1", 0))
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts connections, never answers
        targets = {
            "up": dev_cluster.kubeconfig_path.read_text(),
            "down": _kubeconfig(f"https://127.0.0.1:{closed.getsockname()[1]}"),
            "silent": _kubeconfig(f"https://127.0.0.1:{silent.getsockname()[1]}"),
        }
        name = {parse_kubeconfig(t, str(tmp_path)).server: n for n, t in targets.items()}
        started = time.monotonic()
        answers = probe_reachable(targets, tmp_path, timeout=2.0)
        elapsed = time.monotonic() - started
        deadline = time.monotonic() + 30  # generous: fails only if the request never ends
        while len(ended) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    print(f"\nprobe of 3 API servers (timeout 2 s): {elapsed:.2f}s")
    assert answers == {"down": False, "silent": False, "up": True}
    done = [name[server] for server in ended]
    assert sorted(done) == ["down", "silent", "up"], f"a probe never ended: {done}"
    assert done.index("up") < done.index("silent"), done
