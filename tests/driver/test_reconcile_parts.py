"""The parts of failover that need no dev fleet: which endpoint records the gateway routes,
the gateway's fingerprint, the routing and orphan records, orphan deletion on a real
kube-apiserver, exec credential plugins (GKE/EKS kubeconfigs)."""

from __future__ import annotations

import json
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.driver.fingerprint import stack_fingerprint
from modelplane.driver.orphans import KubeDeleter, Orphan, delete_orphans, orphan_of
from modelplane.driver.state import RuntimeState
from modelplane.observe import observe_fleet
from modelplane.observe.kube import KubeError, KubeReader, parse_kubeconfig
from modelplane.stacks import StackUnit, Tier
from tests.factories import cluster, deployment, draining, fleet, inference_class, lock, pool

# -- the gateway program's record filter ------------------------------------------------------


def _record(name: str, cluster_name: str | None) -> dict[str, Any]:
    return {"name": name, "namespace": "ml", "cluster": cluster_name, "url": f"http://x/{name}"}


PLACED = lock(
    {"ml/m": [("m-a0", "a", 0, {"unified": "gpu"}), ("m-b0", "b", 0, {"unified": "gpu"})]}
)


@pytest.mark.parametrize(
    ("records", "unroutable", "kept"),
    [
        ([_record("m-a0", "a"), _record("m-b0", "b")], set(), ["m-a0", "m-b0"]),
        ([_record("m-a0", "a"), _record("m-b0", "b")], {"b"}, ["m-a0"]),
        # the deployment stack has not run since m-c0 left the lock: not routed
        ([_record("m-a0", "a"), _record("m-c0", "c")], set(), ["m-a0"]),
        # same name on another cluster than the lock says: not routed
        ([_record("m-a0", "c")], set(), []),
        # a record without a cluster (not a placed replica) is left alone
        ([_record("static", None)], {"a"}, ["static"]),
        # a replica not Ready yet (reconcile's `replica:<name>`) waits outside the routes
        ([_record("m-a0", "a"), _record("m-b0", "b")], {"replica:m-b0"}, ["m-a0"]),
    ],
    ids=["all-placed", "unroutable-cluster", "no-longer-placed", "moved", "no-cluster", "unready"],
)
def test_the_gateway_routes_only_placed_replicas_on_routable_clusters(
    records: list[dict[str, Any]], unroutable: set[str], kept: list[str]
) -> None:
    from modelplane.program import routable_records

    out = routable_records(records, PLACED, "ml/m", frozenset(unroutable))
    assert [r["name"] for r in out] == kept


def test_unroutable_clusters_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from modelplane.program import UNROUTABLE_ENV, unroutable_clusters

    monkeypatch.setenv(UNROUTABLE_ENV, "dev-3, dev-2,")
    assert unroutable_clusters() == frozenset({"dev-2", "dev-3"})
    monkeypatch.setenv(UNROUTABLE_ENV, "")
    assert unroutable_clusters() == frozenset()


def test_unroutable_clusters_are_an_input_of_the_gateway_stack_only() -> None:
    f = fleet(
        [inference_class("h100", 8)], [cluster("a", [pool("gpu", "h100")])], [deployment("m", 1)]
    )
    gateway = StackUnit("gateway", Tier.GATEWAY, "InferenceGateway", "default", ())
    deploy = StackUnit("deploy-ml-m", Tier.DEPLOYMENTS, "ModelDeployment", "ml/m", ())

    def fp(unit: StackUnit, unroutable: tuple[str, ...]) -> str:
        return stack_fingerprint(
            f, PLACED, unit, {}, environ={}, program="p", unroutable=unroutable
        )

    assert fp(gateway, ("b",)) != fp(gateway, ())
    assert fp(gateway, ("b",)) != fp(gateway, ("a",))
    assert fp(deploy, ("b",)) == fp(deploy, ())


def _seen(**replicas: tuple[int, int, int, int] | None) -> Any:
    """An observation of clusters a (answering) and b (not), replicas as (pods, ready pods,
    groups, ready groups); None: not listed."""
    from modelplane.health.observation import (
        ClusterObservation,
        Observation,
        ReplicaObservation,
    )

    listed = {n: ReplicaObservation(*v[:2], 0, 0, *v[2:]) for n, v in replicas.items() if v}
    return Observation(
        0.0,
        {
            "a": ClusterObservation("a", reachable=True, replicas=listed),
            "b": ClusterObservation("b", reachable=False, error="API unreachable"),
        },
    )


UNREADY_LOCK = lock(
    {"ml/m": [("m-a0", "a", 0, {"unified": "gpu"}), ("m-a1", "a", 1, {"unified": "gpu"})]}
)


@pytest.mark.parametrize(
    ("observed", "unready"),
    [
        ({"m-a0": (1, 1, 0, 0), "m-a1": (1, 1, 0, 0)}, {}),
        # just placed: no pods yet (the round that adds it sees none)
        ({"m-a0": (1, 1, 0, 0), "m-a1": None}, {"m-a1": "no pods yet"}),
        ({"m-a0": (1, 1, 0, 0), "m-a1": (0, 0, 0, 0)}, {"m-a1": "no pods yet"}),
        ({"m-a0": (2, 1, 0, 0), "m-a1": (1, 1, 0, 0)}, {"m-a0": "1 of 2 pods Ready"}),
        (
            {"m-a0": (2, 2, 1, 0), "m-a1": (1, 1, 0, 0)},
            {"m-a0": "0 of 1 LeaderWorkerSet groups ready"},
        ),
    ],
    ids=["all-ready", "not-listed", "no-pods", "pod-not-ready", "group-not-ready"],
)
def test_replicas_join_the_routes_once_ready(
    observed: dict[str, Any], unready: dict[str, str]
) -> None:
    from modelplane.health.rules import unready_replicas

    assert unready_replicas(UNREADY_LOCK, _seen(**observed)) == unready


def test_unready_replicas_leave_cluster_problems_and_drains_to_their_rules() -> None:
    from modelplane.health.rules import unready_replicas

    elsewhere = lock({"ml/m": [("m-b0", "b", 0, {"unified": "gpu"})]})
    assert unready_replicas(elsewhere, _seen()) == {}  # b does not answer: unroutable rules
    one_draining = draining(UNREADY_LOCK, {"m-a1"})
    assert unready_replicas(one_draining, _seen(**{"m-a0": (1, 1, 0, 0)})) == {}


SPREAD_LOCK = lock(
    {
        "ml/m": [
            ("m-a0", "a", 0, {"unified": "gpu"}),
            ("m-a1", "a", 1, {"unified": "gpu"}),
            ("m-b0", "b", 2, {"unified": "gpu"}),
        ]
    }
)


@pytest.mark.parametrize(
    ("observed", "unroutable", "unready"),
    [
        # every replica not Ready: none is left out (no route would serve nothing)
        ({"m-a0": None, "m-a1": (1, 0, 0, 0)}, {"b"}, {}),
        # b's replica cannot take the traffic (cluster unroutable), a0 can: a1 waits
        ({"m-a0": (1, 1, 0, 0), "m-a1": None}, {"b"}, {"m-a1": "no pods yet"}),
        # b not unroutable (yet): its replica is what the routes keep, both a's wait
        (
            {"m-a0": None, "m-a1": (1, 0, 0, 0)},
            set(),
            {"m-a0": "no pods yet", "m-a1": "0 of 1 pods Ready"},
        ),
    ],
    ids=["none-ready", "one-ready-elsewhere-unroutable", "other-cluster-routable"],
)
def test_a_deployment_is_never_left_without_routed_replicas(
    observed: dict[str, Any], unroutable: set[str], unready: dict[str, str]
) -> None:
    from modelplane.health.rules import unready_replicas

    assert unready_replicas(SPREAD_LOCK, _seen(**observed), unroutable) == unready


def test_a_stopping_reconcile_forgets_its_unready_replicas(tmp_path: Path) -> None:
    state = RuntimeState.at(tmp_path / "state")
    assert not state.clear_unready()  # nothing recorded: nothing written
    assert not (tmp_path / "state" / "routing.json").exists()
    state.set_routing({"dev-3": "API unreachable"}, {"m-a1": "no pods yet"})
    assert state.clear_unready()
    assert state.routing().exclusions() == ("dev-3",)  # the clusters stay
    assert not state.clear_unready()


def test_routing_record_keeps_unready_replicas_for_the_gateway(tmp_path: Path) -> None:
    state = RuntimeState.at(tmp_path / "state")
    assert state.set_routing({"dev-3": "API unreachable"})
    assert not state.set_routing({"dev-3": "x"}, {"m-a1": "no pods yet"})
    assert state.routing().unready == {"m-a1": "no pods yet"}
    assert state.routing().exclusions() == ("dev-3", "replica:m-a1")
    state.set_routing({}, {})
    assert state.routing().exclusions() == ()


def test_routing_record_says_when_the_clusters_change(tmp_path: Path) -> None:
    state = RuntimeState.at(tmp_path / "state")
    assert state.routing().unroutable == {}
    assert not state.set_routing({})  # nothing to say, nothing written
    assert not (tmp_path / "state" / "routing.json").exists()
    assert state.set_routing({"dev-3": "API unreachable"})
    assert not state.set_routing({"dev-3": "no gateway address"})  # same cluster
    assert state.routing().unroutable == {"dev-3": "no gateway address"}
    assert state.set_routing({})
    assert state.routing().unroutable == {}
    (tmp_path / "state" / "routing.json").write_text("{broken")
    assert state.routing().unroutable == {}


# -- orphans --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "orphan"),
    [
        (
            {
                "type": "kubernetes:apps/v1:Deployment",
                "id": "demo/qwen-1",
                "outputs": {"metadata": {"name": "qwen-1", "namespace": "demo", "uid": "u1"}},
            },
            Orphan("dev-3", "apps/v1", "Deployment", "demo", "qwen-1", "u1", "s"),
        ),
        (
            {"type": "kubernetes:core/v1:Service", "id": "demo/qwen-1", "outputs": {}},
            Orphan("dev-3", "v1", "Service", "demo", "qwen-1", None, "s"),
        ),
        (
            {
                "type": "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute",
                "id": "demo/r",
                "outputs": {"metadata": {"name": "r", "namespace": "demo", "uid": "u2"}},
            },
            Orphan("dev-3", "gateway.networking.k8s.io/v1", "HTTPRoute", "demo", "r", "u2", "s"),
        ),
        (
            {"type": "kubernetes:resource.k8s.io/v1:DeviceClass", "id": "gpu", "outputs": {}},
            Orphan("dev-3", "resource.k8s.io/v1", "DeviceClass", None, "gpu", None, "s"),
        ),
        ({"type": "kubernetes:core/v1:Namespace", "id": "demo"}, None),
        ({"type": "pulumi:providers:kubernetes", "id": "x"}, None),
        ({"type": "modelplane:deploy:Replica", "id": ""}, None),
        ({"type": "kubernetes:helm.sh/v3:Release", "id": "ns/x"}, None),
    ],
    ids=[
        "deployment",
        "no-outputs",
        "crd",
        "cluster-scoped",
        "namespace",
        "provider",
        "component",
        "helm",
    ],
)
def test_orphan_of_a_state_resource(resource: dict[str, Any], orphan: Orphan | None) -> None:
    assert orphan_of("dev-3", "s", resource) == orphan


def test_orphan_records_merge_and_round_trip(tmp_path: Path) -> None:
    a = Orphan("dev-3", "v1", "Service", "demo", "a", "u1", "s")
    b = Orphan("dev-2", "apps/v1", "Deployment", "demo", "b", None, "s")
    state = RuntimeState.at(tmp_path)
    state.record_orphans([a])
    state.record_orphans([b, a])
    assert state.orphans() == [b, a]  # sorted by cluster, no duplicates
    assert "u1" in (tmp_path / "orphans.json").read_text()
    assert delete_orphans(state, {}) == ([], [])  # no cluster answers: all kept
    assert state.orphans() == [b, a]
    state.set_orphans([])
    assert not (tmp_path / "orphans.json").exists()  # none left: the file goes


def _configmap(rest: Any, name: str) -> str:
    created = rest.request(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
    )
    return str(created["metadata"]["uid"])


@pytest.mark.apiserver
def test_orphans_are_deleted_but_never_an_object_recreated_since(
    dev_cluster: Any, tmp_path: Path
) -> None:
    rest = dev_cluster.rest()
    path = dev_cluster.kubeconfig_path
    reader = KubeReader(parse_kubeconfig(path.read_text(), str(path.parent)), timeout=5)
    old_uid = _configmap(rest, "orphan-a")
    _configmap(rest, "orphan-b")
    rest.request("DELETE", "/api/v1/namespaces/default/configmaps/orphan-b")
    new_b = _configmap(rest, "orphan-b")  # re-created since it was recorded
    state = RuntimeState.at(tmp_path)
    state.record_orphans(
        [
            Orphan("c1", "v1", "ConfigMap", "default", "orphan-a", old_uid),
            Orphan("c1", "v1", "ConfigMap", "default", "orphan-b", "stale-uid"),
            Orphan("c1", "v1", "ConfigMap", "default", "orphan-gone", None),
            Orphan("c2", "v1", "ConfigMap", "default", "elsewhere", None),
        ],
    )
    done, errors = delete_orphans(state, {"c1": reader})
    assert errors == []
    assert done == [
        "c1: ConfigMap default/orphan-a (deleted)",
        "c1: ConfigMap default/orphan-b (gone)",
        "c1: ConfigMap default/orphan-gone (gone)",
    ]
    names = {
        i["metadata"]["name"]: i["metadata"]["uid"]
        for i in rest.get("/api/v1/namespaces/default/configmaps")["items"]
    }
    assert "orphan-a" not in names
    assert names["orphan-b"] == new_b  # the newer object is untouched
    assert [o.name for o in state.orphans()] == ["elsewhere"]  # c2 did not answer
    rest.request("DELETE", "/api/v1/namespaces/default/configmaps/orphan-b")
    assert KubeDeleter(reader).resource("v1", "NoSuchKind") is None


# -- exec credential plugins (GKE / EKS kubeconfigs) -------------------------------------------


def _exec_kubeconfig(tmp_path: Path, script: str, server: str = "https://127.0.0.1:1") -> str:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"#!{sys.executable}\n{script}")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "gke",
            "contexts": [{"name": "gke", "context": {"cluster": "gke", "user": "gke"}}],
            "clusters": [
                {"name": "gke", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
            ],
            "users": [
                {
                    "name": "gke",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": str(plugin),
                            "args": ["--flag"],
                            "env": [{"name": "PLUGIN_TOKEN", "value": "tok-123"}],
                        }
                    },
                }
            ],
        }
    )


TOKEN_PLUGIN = """
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential" and sys.argv[1:] == ["--flag"]
print(json.dumps({"kind": "ExecCredential", "status": {"token": os.environ["PLUGIN_TOKEN"]}}))
"""


def test_an_exec_plugin_gives_the_token(tmp_path: Path) -> None:
    target = parse_kubeconfig(_exec_kubeconfig(tmp_path, TOKEN_PLUGIN))
    assert target.token == "tok-123"
    assert "tok-123" not in repr(target)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("import sys; sys.exit(3)", "the kubeconfig's exec plugin plugin.py failed (exit 3)"),
        (
            "print('secret-looking text')",
            "the kubeconfig's exec plugin plugin.py printed no ExecCredential",
        ),
        (
            "print('{\"status\": {}}')",
            "the kubeconfig's exec plugin plugin.py returned no credential",
        ),
    ],
    ids=["fails", "not-json", "no-credential"],
)
def test_exec_plugin_problems_say_why_and_quote_nothing(
    script: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(KubeError) as caught:
        parse_kubeconfig(_exec_kubeconfig(tmp_path, script))
    assert str(caught.value) == message


def test_a_missing_exec_plugin_says_so() -> None:
    text = yaml.safe_dump(
        {
            "current-context": "x",
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": {"server": "https://h"}}],
            "users": [{"name": "u", "user": {"exec": {"command": "no-such-auth-plugin"}}}],
        }
    )
    with pytest.raises(KubeError, match="exec plugin no-such-auth-plugin is not installed"):
        parse_kubeconfig(text)


def _gke_fleet() -> Any:
    from modelplane.api.inference_cluster import InferenceCluster

    gke = InferenceCluster.model_validate(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceCluster",
            "metadata": {"name": "g1"},
            "spec": {
                "cluster": {"source": "GKE", "gke": {"project": "p", "region": "europe-west4"}},
                "nodePools": [
                    {
                        "name": "gpu",
                        "className": "h100",
                        "nodeCount": 1,
                        "zones": ["europe-west4-a"],
                    }
                ],
            },
        }
    )
    return fleet([inference_class("h100", 8)], [gke])


def test_a_cloud_cluster_is_observed_through_the_kubeconfig_the_driver_passes(
    tmp_path: Path,
) -> None:
    f = _gke_fleet()
    alone = observe_fleet(f, tmp_path, env={}).clusters["g1"]
    assert not alone.observed and "its cluster stack has not run" in (alone.error or "")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = _exec_kubeconfig(tmp_path, TOKEN_PLUGIN, f"https://127.0.0.1:{port}")
    seen = observe_fleet(f, tmp_path, env={}, kubeconfigs={"g1": text}, timeout=1).clusters["g1"]
    assert seen.observed and not seen.reachable
    assert f"cannot reach https://127.0.0.1:{port}" in (seen.error or "")
    assert "tok-123" not in json.dumps(seen.as_json())


def test_a_round_says_which_replicas_wait_outside_the_routes() -> None:
    from rich.console import Console

    from modelplane.cli.health import _say_round
    from modelplane.driver.reconcile import Round

    out, err = Console(record=True, width=300), Console(record=True, width=300)
    _say_round(Round(3, 0.0, added=["m-a1"], unready={"m-a1": "no pods yet"}), out, err)
    text = out.export_text()
    assert "round 3: placed replica m-a1" in text
    assert "round 3: replica m-a1 out of the routes until Ready (no pods yet)" in text
    data = Round(3, 0.0, unready={"m-a1": "no pods yet"}).as_json()
    assert data["unready"] == {"m-a1": "no pods yet"}
