"""Mock tests of the workload, cache, gateway and service components (and their render)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from modelplane.api.names import replica_name
from modelplane.components.gateway import HEALTH_ROUTE
from modelplane.components.model_cache import ModelCacheComponent, job_name
from modelplane.components.model_deployment import replica_manifests
from modelplane.components.workload.pods import LWS_WORKER_INDEX
from modelplane.components.workload.targets import ClusterTarget
from tests.components.workload_helpers import (
    CACHE,
    CLASSES,
    CLUSTER,
    CODER,
    DEPLOYMENT,
    LWS,
    PD,
    PDB,
    POOL,
    RCT,
    ROOT,
    ROUTE,
    SERVICE,
    SMALL,
    deploy,
    deployment,
    engine,
    env_of,
    replica,
    target,
)
from tests.pulumi_mocks import MockRun, contains_secret
from tests.relabel import target_labels


def test_multi_node_worker_is_a_leader_worker_set_with_claims() -> None:
    run, comp = deploy(CODER, {"unified": "h200"}, cache=CACHE)
    lws = run.one(LWS)
    assert lws.parent_type == "modelplane:deployment:ModelReplica"
    assert lws.get("spec.replicas") == 3
    assert lws.get("spec.leaderWorkerTemplate.size") == 2
    rct = run.one(RCT)
    requests = rct.get("spec.spec.devices.requests")
    # The nic request lands on a Synthetic device: matched, never claimed.
    assert requests == [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "count": 8,
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.capacity["gpu.nvidia.com"].memory'
                            '.compareTo(quantity("140Gi")) >= 0'
                        }
                    }
                ],
            },
        }
    ]
    assert lws.depends_on(rct)
    for template in ("leaderTemplate", "workerTemplate"):
        pod = lws.get(f"spec.leaderWorkerTemplate.{template}.spec")
        assert pod["resourceClaims"] == [
            {"name": "devices", "resourceClaimTemplateName": rct.get("metadata.name")}
        ]
        eng = engine(pod)
        assert eng["resources"]["claims"] == [{"name": "devices"}]
        assert eng["resources"]["requests"] == {"cpu": "96", "memory": "1500Gi"}
        assert "limits" not in eng["resources"]
        for c in pod["containers"]:
            assert "nvidia.com/gpu" not in yaml.safe_dump(c.get("resources", {}))
        assert pod["nodeSelector"] == {"modelplane.ai/pool": "h200"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        assert volumes["model-cache"]["persistentVolumeClaim"] == {
            "claimName": "modelcache-coder",
            "readOnly": True,
        }
        mounts = {m["mountPath"]: m for m in eng["volumeMounts"]}
        assert mounts["/mnt/models"]["readOnly"] is True
        assert mounts["/dev/shm"]["name"] == "dshm"
        assert pod["imagePullSecrets"] == [{"name": "nvcr"}]
        env = env_of(eng)
        assert env["MODELPLANE_LEADER_ADDRESS"] == "$(LWS_LEADER_ADDRESS)"
        assert env["MODELPLANE_RANK"] == {
            "fieldRef": {"fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"}
        }
        assert (env["MODELPLANE_NODES"], env["MODELPLANE_TENSOR"], env["MODELPLANE_PIPELINE"]) == (
            "2",
            "8",
            "2",
        )
        assert (env["MODELPLANE_DATA"], env["MODELPLANE_DATA_LOCAL"]) == ("1", "1")
        assert env["MODELPLANE_REPLICA"] == replica_name("coder", "west", 0)
        assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
        labels = lws.get(f"spec.leaderWorkerTemplate.{template}.metadata.labels")
        assert labels["team"] == "coder"
        assert labels["modelplane.ai/role"] == "unified"
        assert labels["modelplane.ai/deployment"] == "coder"
    leader = engine(lws.get("spec.leaderWorkerTemplate.leaderTemplate.spec"))
    worker = engine(lws.get("spec.leaderWorkerTemplate.workerTemplate.spec"))
    assert leader["ports"][0]["containerPort"] == 8000
    assert leader["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert "readinessProbe" not in worker and "ports" not in worker


def test_device_class_comes_from_the_class_device_the_selector_matches() -> None:
    run, _ = deploy(SMALL, {"unified": "mixed"})
    requests = run.one(RCT).get("spec.spec.devices.requests")
    assert len(requests) == 1
    assert requests[0]["exactly"]["deviceClassName"] == "big-gpu.nvidia.com"
    assert requests[0]["exactly"]["count"] == 2  # GPUs per node by default


def test_synthetic_only_requests_make_no_claim() -> None:
    text = SMALL.replace(
        """    - name: gpu
      selectors:
      - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0
""",
        "    - name: gpu\n",
    )
    run, _ = deploy(text, {"unified": "synthetic"})
    assert run.of_type(RCT) == []
    pod = run.one(DEPLOYMENT).get("spec.template.spec")
    assert "resourceClaims" not in pod
    assert "claims" not in engine(pod)["resources"]


def test_single_node_worker_is_a_deployment_with_service_and_route() -> None:
    run, comp = deploy(SMALL, {"unified": "mixed"})
    dep = run.one(DEPLOYMENT)
    assert dep.get("spec.replicas") == 1
    pod = dep.get("spec.template.spec")
    env = env_of(engine(pod))
    assert env["MODELPLANE_RANK"] == "0"
    assert env["MODELPLANE_LEADER_ADDRESS"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert run.of_type(LWS) == []
    name = replica_name("small", "west", 0)
    route = run.one(ROUTE)
    assert route.get("metadata.namespace") == "ml-team"
    assert route.get("spec.parentRefs") == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference-gateway",
            "namespace": "modelplane-system",
        }
    ]
    rule = route.get("spec.rules.0")
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": f"/ml-team/{name}/"}}]
    assert rule["filters"] == [
        # The front door's credentials (checked by the SecurityPolicy) go no further.
        {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["Authorization"]}},
        {
            "type": "URLRewrite",
            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
        },
    ]
    svc = run.one(SERVICE)
    assert rule["backendRefs"][0]["name"] == svc.get("metadata.name")
    assert svc.get("spec.selector") == {
        "modelplane.ai/replica": name,
        "modelplane.ai/role": "unified",
    }
    for r in run.resources:
        if r.type.startswith("kubernetes:") and r.type != "pulumi:providers:kubernetes":
            labels = r.get("metadata.labels") or {}
            if r.get("kind") != "Namespace":
                assert labels["modelplane.ai/deployment"] == "small"
            # A budget, the network policy and the front-door check (Secret, SecurityPolicy)
            # span the replicas.
            spans = (
                r.type in (PDB, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
                or r.get("metadata.name") == "small-front-door"
            )
            if not spans and r.get("kind") != "Namespace":
                assert labels["modelplane.ai/replica"] == name
    [namespace] = run.of_type("kubernetes:core/v1:NamespacePatch")
    assert namespace.get("metadata.name") == "ml-team"
    assert dep.depends_on(namespace) or run.by_urn(dep.parent).depends_on(namespace)
    [endpoint] = run.value(comp.endpoints)
    assert endpoint["url"] == f"https://gw.west.example.com/ml-team/{name}/"
    assert endpoint["rewritePath"] == f"/ml-team/{name}/"
    assert endpoint["cluster"] == "west"
    assert endpoint["labels"] == {
        "modelplane.ai/deployment": "small",
        "modelplane.ai/cluster": "west",
        "modelplane.ai/replica-index": "0",
    }


def test_names_fit_63_characters() -> None:
    long_name = "a-very-long-model-deployment-name-that-goes-on-and-on-x"
    text = SMALL.replace("name: small", f"name: {long_name}")
    run, _ = deploy(text, {"unified": "mixed"}, replicas=3)
    names = [r.get("metadata.name") for r in run.resources if r.get("metadata.name")]
    assert names and all(len(n) <= 63 for n in names)
    assert len(run.of_type(DEPLOYMENT)) == 3


def test_prefill_decode_routes_to_decode_which_reaches_prefill() -> None:
    run, _ = deploy(PD, {"prefill": "h200", "decode": "h200"})
    name = replica_name("kimi", "west", 0)
    prefill = run.one(DEPLOYMENT, f"west/ml-team/{name}-prefill")
    decode = run.one(LWS)
    assert prefill.get("spec.replicas") == 2
    assert decode.get("spec.leaderWorkerTemplate.size") == 2
    p_labels = prefill.get("spec.template.metadata.labels")
    d_leader = decode.get("spec.leaderWorkerTemplate.leaderTemplate")
    d_worker = decode.get("spec.leaderWorkerTemplate.workerTemplate")
    assert p_labels["modelplane.ai/role"] == "prefill" and p_labels["llm-d.ai/role"] == "prefill"
    assert d_leader["metadata"]["labels"]["modelplane.ai/role"] == "decode"
    assert d_leader["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    # LWS worker pods do not serve: they stay out of the pool.
    assert "llm-d.ai/inference-serving" not in d_worker["metadata"]["labels"]
    assert d_worker["metadata"]["labels"]["modelplane.ai/role"] == "decode"
    # The decode leader's routing sidecar owns the pool port; the engine moves to 8001.
    containers = {c["name"]: c for c in d_leader["spec"]["containers"]}
    assert containers["pd-sidecar"]["ports"][0]["containerPort"] == 8000
    # one port named `http` (the engine's: what Prometheus scrapes), the sidecar's has its own
    names = [p["name"] for c in containers.values() for p in c.get("ports", [])]
    assert (
        sorted(names) == ["http", "pd-proxy"] and containers["engine"]["ports"][0]["name"] == "http"
    )
    assert "--vllm-port=8001" in containers["pd-sidecar"]["args"]
    assert containers["engine"]["args"][-1] == "--port=8001"
    assert "VLLM_NIXL_SIDE_CHANNEL_HOST" in env_of(containers["engine"])
    assert [c["name"] for c in prefill.get("spec.template.spec.containers")] == ["engine"]
    pool = run.one(POOL)
    assert pool.get("spec.selector.matchLabels") == {
        "modelplane.ai/replica": name,
        "llm-d.ai/inference-serving": "true",
    }
    assert pool.get("spec.targetPorts") == [{"number": 8000}]
    epp_name = pool.get("spec.endpointPickerRef.name")
    epp = run.one(DEPLOYMENT, f"west/ml-team/{epp_name}")
    args = epp.get("spec.template.spec.containers.0.args")
    assert f"--pool-name={pool.get('metadata.name')}" in args
    config = yaml.safe_load(run.one("kubernetes:core/v1:ConfigMap").get("data")["epp-config.yaml"])
    assert {p["name"] for p in config["schedulingProfiles"]} == {"prefill", "decode"}
    producer = next(p for p in config["plugins"] if p["type"] == "approx-prefix-cache-producer")
    assert producer["parameters"]["blockSizeTokens"] == 32
    route = run.one(ROUTE)
    assert route.get("spec.rules.0.backendRefs") == [
        {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": pool.get("metadata.name"),
        }
    ]
    assert len(run.of_type(RCT)) == 2


# --- ModelCache ---------------------------------------------------------------------------


def test_cache_pvc_job_and_secret() -> None:
    run = MockRun()

    def program() -> ModelCacheComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return ModelCacheComponent(
            "coder", CACHE, {"west": target(provider)}, token=pulumi.Output.secret("hf_s3cret")
        )

    run.run(program)
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim")
    assert pvc.get("spec") == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "rwx",
        "resources": {"requests": {"storage": "1100Gi"}},
    }
    assert pvc.parent_type == "modelplane:cache:ModelCache"
    secret = run.one("kubernetes:core/v1:Secret")
    assert contains_secret(secret.inputs["stringData"])
    assert secret.get("stringData") == {"HF_TOKEN": "hf_s3cret"}
    jobs = {j.get("metadata.name"): j for j in run.of_type("kubernetes:batch/v1:Job")}
    # The download of the cache's source, and the prune of what no replica reads.
    hydrate = job_name(CACHE, "Qwen/Qwen3-Coder-480B-A35B-Instruct@v1")
    assert hydrate in jobs and len(jobs) == 2
    assert next(n for n in jobs if n != hydrate).startswith("modelcache-coder-prune-")
    job = jobs[hydrate]
    container = job.get("spec.template.spec.containers.0")
    script = container["command"][-1]
    assert ".modelplane-hydrated" in script and "hf download" in script
    env = env_of(container)
    assert env["MODELPLANE_REPO"] == "Qwen/Qwen3-Coder-480B-A35B-Instruct"
    assert env["MODELPLANE_REVISION"] == "v1"
    assert env["HF_TOKEN"] == {
        "secretKeyRef": {"name": secret.get("metadata.name"), "key": "HF_TOKEN"}
    }
    assert job.get("spec.template.spec.volumes.0.persistentVolumeClaim.claimName") == pvc.get(
        "metadata.name"
    )
    assert job.depends_on(pvc) and job.depends_on(secret)


# --- ModelService / ModelEndpoint / InferenceGateway -------------------------------------------


def test_replica_manifests_are_pure_dicts() -> None:
    dep = deployment(SMALL)
    manifests = replica_manifests(
        dep,
        replica(dep, {"unified": "mixed"}),
        ClusterTarget.from_spec(CLUSTER, CLASSES, None, front_door_key="k"),  # type: ignore[arg-type]
    )
    assert [m["kind"] for m in manifests] == [
        "ResourceClaimTemplate",
        "Deployment",
        "Service",
        "HTTPRoute",
    ]


# --- the stack program and render ---------------------------------------------------------

SECRETS_FLEET = ROOT / "tests" / "fleets" / "secrets"
FAKE = {
    "MODELPLANE_SECRET_ONPREM_KUBECONFIG_KUBECONFIG": "kind: Config\n# fake-kube-7f3a9c",
    "MODELPLANE_SECRET_GATEWAY_KUBECONFIG_KUBECONFIG": "fake-gateway-kube-51d2e8",
    "MODELPLANE_SECRET_HF_TOKEN_HF_TOKEN": "hf_fakeToken0c4b1d",
}


def test_no_secret_in_plaintext_in_the_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelplane.render import render_fleet

    for key, value in FAKE.items():
        monkeypatch.setenv(key, value)
    result = render_fleet(SECRETS_FLEET, tmp_path)
    assert [s.name for s in result.stacks] == [
        "cluster-onprem",
        "cache-lab-mistral",
        "deploy-lab-mistral",
        "gateway",
    ]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        text = path.read_text()
        for marker in ("fake-kube-7f3a9c", "fake-gateway-kube-51d2e8", "hf_fakeToken0c4b1d"):
            assert marker not in text, f"{marker} leaked into {path}"
    # ... and the secrets were there, redacted.
    cluster = yaml.safe_load((tmp_path / "cluster-onprem" / "outputs.yaml").read_text())
    assert cluster["kubeconfig"] == "[secret]"
    secret = next((tmp_path / "cache-lab-mistral" / "manifests").glob("*_secret_*.yaml"))
    assert yaml.safe_load(secret.read_text())["stringData"] == {"HF_TOKEN": "[secret]"}
    resources = (tmp_path / "gateway" / "resources.yaml").read_text()
    assert "kubeconfig: '[secret]'" in resources
    [route] = [
        r
        for r in (
            yaml.safe_load(p.read_text())
            for p in (tmp_path / "gateway" / "manifests").glob("*_httproute_*.yaml")
        )
        if r["metadata"]["name"] != HEALTH_ROUTE  # the front door's own health answer
    ]
    # EnvoyGateway: one weighted rule (a rule per rewritePath let the first take 100 %);
    # replicas are named by header; the IPv6 endpoint is a Service + slice.
    [rule] = route["spec"]["rules"]
    assert len(rule["backendRefs"]) > 1 and all(r["weight"] >= 1 for r in rule["backendRefs"])
    slice_ = next((tmp_path / "gateway" / "manifests").glob("*_endpointslice_*.yaml"))
    assert yaml.safe_load(slice_.read_text())["addressType"] == "IPv6"


def render_error(stack: str, lock_path: Path) -> str:
    """The RenderError of rendering ``stack`` of specs/local alone (no upstream outputs)."""
    from modelplane.render import RenderError, render_stack

    with pytest.raises(RenderError) as exc:
        render_stack(
            stack, fleet_dir=ROOT / "specs" / "local", lock_path=lock_path, upstream=lambda _: None
        )
    return str(exc.value)


def test_unknown_stack_lists_valid_names(tmp_path: Path) -> None:
    message = render_error("cluster-nope", tmp_path / "none.lock.yaml")
    assert "matches nothing" in message
    assert "cluster-local" in message and "deploy-demo-qwen" in message and "gateway" in message


def test_missing_upstream_output_names_the_stack_to_run_first(tmp_path: Path) -> None:
    from modelplane.render import render_fleet

    render_fleet(ROOT / "specs" / "local", tmp_path, stacks=["cluster-local"])
    message = render_error("deploy-demo-qwen", tmp_path / "modelplane.lock.yaml")
    assert "cluster-local" in message and "first" in message


def test_render_layout(tmp_path: Path) -> None:
    from modelplane.render import render_fleet

    result = render_fleet(ROOT / "specs" / "local", tmp_path)
    assert (tmp_path / "modelplane.lock.yaml").exists()
    for stack in result.stacks:
        resources = yaml.safe_load((tmp_path / stack.name / "resources.yaml").read_text())
        assert all({"type", "name", "parent", "inputs"} <= set(r) for r in resources)
    deploy = yaml.safe_load((tmp_path / "deploy-demo-qwen" / "resources.yaml").read_text())
    replica = next(r for r in deploy if r["type"] == "kubernetes:apps/v1:Deployment")
    assert replica["parent"] == "modelplane:deployment:ModelReplica"
    component = next(r for r in deploy if r["type"] == "modelplane:deployment:ModelReplica")
    assert component["parent"] == "modelplane:deployment:ModelDeployment"
    for path in (tmp_path / "deploy-demo-qwen" / "manifests").glob("*.yaml"):
        manifest = yaml.safe_load(path.read_text())
        assert list(manifest)[:3] == ["apiVersion", "kind", "metadata"]
    outputs = yaml.safe_load((tmp_path / "gateway" / "outputs.yaml").read_text())
    assert outputs["services"]["demo/qwen"].endswith("/demo/qwen/")
    # The renderTo cluster has no workload gateway; the inference gateway is on the same
    # cluster, so the ModelService routes straight to the replica's Service.
    route = yaml.safe_load(
        next((tmp_path / "gateway" / "manifests").glob("*_httproute_demo_qwen.yaml")).read_text()
    )
    [ref] = route["spec"]["rules"][0]["backendRefs"]
    replica = yaml.safe_load((tmp_path / "modelplane.lock.yaml").read_text())["deployments"][
        "demo/qwen"
    ]["replicas"][0]["name"]
    assert (ref["kind"], ref["name"], ref["port"]) == ("Service", replica, 8000)
    assert ref["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] == "/"


# --- the serving stack's Prometheus scrapes exactly the serving engines ------------------------


def _sanitize(name: str) -> str:
    """Prometheus' label-name sanitizing of a pod label (kubernetes_sd)."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


#: A pod-template-hash as the Deployment controller writes it (apimachinery's safe alphabet).
RS_HASH = "5d4b8c9f7"


def owned_templates(run: MockRun) -> list[tuple[dict[str, Any], str, str, str | None]]:
    """Each rendered pod template with the controller its pods get from the real controllers:
    a Deployment's ReplicaSet `<deployment>-<hash>`; a LeaderWorkerSet's leader StatefulSet
    `<lws>` (worker index 0) and a group's worker StatefulSet `<lws>-<group>` (index 1..)."""
    found: list[tuple[dict[str, Any], str, str, str | None]] = []
    for d in run.of_type(DEPLOYMENT):
        found.append(
            (d.get("spec.template"), "ReplicaSet", f"{d.get('metadata.name')}-{RS_HASH}", None)
        )
    for lws in run.of_type(LWS):
        name = lws.get("metadata.name")
        found.append(
            (lws.get("spec.leaderWorkerTemplate.leaderTemplate"), "StatefulSet", name, "0")
        )
        found.append(
            (lws.get("spec.leaderWorkerTemplate.workerTemplate"), "StatefulSet", f"{name}-0", "1")
        )
    return [f for f in found if f[0]]


def scrape_targets(
    job: dict[str, Any],
    pod: dict[str, Any],
    pod_name: str,
    controller: tuple[str, str] | None = None,
    worker_index: str | None = None,
) -> list[dict[str, str]]:
    """kubernetes_sd (role pod: one target per container port) and the job's relabeling
    (tests/relabel.py), evaluated on a rendered pod template: the targets' labels."""
    out = []
    labels = dict((pod.get("metadata") or {}).get("labels") or {})
    if worker_index is not None:
        labels[LWS_WORKER_INDEX] = worker_index
    for container in pod["spec"]["containers"]:
        for port in container.get("ports") or []:
            meta = {f"__meta_kubernetes_pod_label_{_sanitize(k)}": v for k, v in labels.items()}
            meta |= {
                "__meta_kubernetes_pod_name": pod_name,
                "__meta_kubernetes_namespace": "ml-team",
                "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                "__meta_kubernetes_pod_container_name": container["name"],
                "__address__": f"10.0.0.1:{port['containerPort']}",
            }
            if controller is not None:
                meta["__meta_kubernetes_pod_controller_kind"] = controller[0]
                meta["__meta_kubernetes_pod_controller_name"] = controller[1]
            kept = target_labels(meta, job["relabel_configs"])
            if kept is not None:
                out.append(kept | {"container": container["name"]})
    return out


@pytest.mark.parametrize(
    ("text", "pools", "expected"),
    [
        # one unified engine pod: its `http` port (8000), /metrics
        (SMALL, {"unified": "mixed"}, [("small", "unified", "engine", "8000")]),
        # prefill pods and the decode leader's engine (moved to 8001; its routing sidecar's
        # port is `pd-proxy`, it exports no vLLM names); LWS decode workers expose no
        # serving port, the EPP has no role
        (
            PD,
            {"prefill": "h200", "decode": "h200"},
            [
                ("kimi", "decode", "engine", "8001"),
                ("kimi", "prefill", "engine", "8000"),
            ],
        ),
    ],
)
def test_serving_stack_prometheus_scrapes_each_serving_engine(
    text: str, pools: dict[str, str], expected: list[tuple[str, str, str, str]]
) -> None:
    from modelplane.components.serving_stack import chart_values
    from modelplane.observe.prometheus import ENGINE_JOB, REPLICA_TARGET_LABEL

    jobs = chart_values("prometheus")["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]
    [job] = [j for j in jobs if j["job_name"] == ENGINE_JOB]
    assert job["metrics_path"] == "/metrics"
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    run, _ = deploy(text, pools)
    got = []
    for template, kind, controller, index in owned_templates(run):
        role = template["metadata"]["labels"].get("modelplane.ai/role", "none")
        # Without its controller (a bare pod of the same labels) no template is scraped.
        assert scrape_targets(job, template, f"{role}-pod") == []
        for scraped in scrape_targets(job, template, f"{role}-pod", (kind, controller), index):
            container = scraped["container"]
            replica = scraped[REPLICA_TARGET_LABEL]
            assert replica == template["metadata"]["labels"]["modelplane.ai/replica"]
            assert (scraped["pod"], scraped["namespace"]) == (f"{role}-pod", "ml-team")
            got.append(
                (replica.split("-")[0], role, container, scraped["__address__"].split(":")[1])
            )
    assert sorted(got) == sorted(expected), sorted(got)


# --- disruption budgets (issue 21, part 3) ----------------------------------------------------
