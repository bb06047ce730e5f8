"""Security M8 (docs/api.md "Pod Security and namespaces"): a spec author is not a cluster
admin. Reserved namespaces are refused for every namespaced kind; every pod template is
checked against Pod Security "baseline" unless every cluster it may land on names the
deployment in `spec.podSecurity.exemptDeployments`; what a template cannot even say (host
namespaces, host ports, hostPath) is an unknown field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.model_cache import ModelCache
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.model_service import ModelEndpoint, ModelService
from modelplane.api.pod_security import (
    BASELINE,
    PRIVILEGED,
    namespace_level,
    pod_security_errors,
    reserved_namespace,
)
from tests.factories import cluster, document, pool, role

ENGINE = "spec.workers.template.spec.containers[0]"


def _deployment(
    *,
    name: str = "llm",
    namespace: str = "ml",
    context: dict[str, Any] | None = None,
    template: dict[str, Any] | None = None,
    selector: dict[str, Any] | None = None,
) -> ModelDeployment:
    spec = role()
    tpl = spec["workers"]["template"]
    if context is not None:
        tpl["spec"]["containers"][0]["securityContext"] = context
    for path, value in (template or {}).items():  # "spec.initContainers" -> value
        where = tpl
        *parents, last = path.split(".")
        for p in parents:
            where = where.setdefault(p, {})
        where[last] = copy.deepcopy(value)
    if selector is not None:
        spec["clusterSelector"] = selector
    return ModelDeployment.model_validate(
        document("ModelDeployment", {"name": name, "namespace": namespace}, spec)
    )


def _cluster(name: str, exempt: list[str] | None = None, **labels: str) -> InferenceCluster:
    base = cluster(name, [pool("gpu", "h100")], labels=labels)
    if exempt is None:
        return base
    data = base.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["podSecurity"] = {"exemptDeployments": exempt}
    return InferenceCluster.model_validate(data)


def _errors(*deployments: ModelDeployment, clusters: list[InferenceCluster] | None = None):
    spec = FleetSpec(
        clusters={c.metadata.name: c for c in (clusters or [_cluster("c1")])},
        deployments={d.key: d for d in deployments},
    )
    return [(e.object, e.path, e.message) for e in pod_security_errors(spec)]


# --- reserved namespaces -------------------------------------------------------------------

RESERVED = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kube-anything",
    "modelplane-system",
    "traefik-system",
    "envoy-gateway-system",
    "monitoring",
    "lws-system",
    "dra-driver-nvidia-gpu",
]


def _namespaced(kind: str, namespace: str) -> Any:
    meta = {"name": "x", "namespace": namespace}
    if kind == "ModelDeployment":
        return _deployment(name="x", namespace=namespace)
    if kind == "ModelService":
        spec = {"endpoints": [{"selector": {"matchLabels": {"a": "b"}}}]}
        return ModelService.model_validate(document(kind, meta, spec))
    if kind == "ModelEndpoint":
        return ModelEndpoint.model_validate(document(kind, meta, {"url": "https://e.example/"}))
    spec = {"source": "HuggingFace", "huggingFace": {"repo": "org/m"}, "sizeGiB": 1}
    return ModelCache.model_validate(document(kind, meta, spec))


@pytest.mark.parametrize("kind", ["ModelDeployment", "ModelService", "ModelEndpoint", "ModelCache"])
@pytest.mark.parametrize("namespace", RESERVED)
def test_security_reserved_namespaces_refused(kind: str, namespace: str) -> None:
    obj = _namespaced(kind, namespace)
    attr = {
        "ModelDeployment": "deployments",
        "ModelService": "services",
        "ModelEndpoint": "endpoints",
        "ModelCache": "caches",
    }[kind]
    spec = FleetSpec(**{attr: {obj.key: obj}})
    [(label, path, message)] = [(e.object, e.path, e.message) for e in pod_security_errors(spec)]
    assert (label, path) == (f"{kind} {namespace}/x", "metadata.namespace")
    assert "reserved" in message


@pytest.mark.parametrize("namespace", ["ml", "default", "kubeflow", "team-system"])
def test_security_workload_namespaces_accepted(namespace: str) -> None:
    assert not reserved_namespace(namespace)
    assert _errors(_deployment(namespace=namespace)) == []


# --- Pod Security "baseline" ---------------------------------------------------------------

# (securityContext of the engine, the path of the error or None)
CONTEXTS = [
    ({"runAsNonRoot": True, "allowPrivilegeEscalation": False}, None),
    ({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL"]}}, None),
    ({"seccompProfile": {"type": "RuntimeDefault"}}, None),
    ({"seLinuxOptions": {"type": "container_t", "level": "s0:c1"}}, None),
    ({"privileged": True}, "securityContext.privileged"),
    ({"capabilities": {"add": ["SYS_ADMIN"]}}, "securityContext.capabilities.add"),
    ({"capabilities": {"add": ["CAP_NET_ADMIN"]}}, "securityContext.capabilities.add"),
    ({"capabilities": {"add": ["IPC_LOCK"]}}, "securityContext.capabilities.add"),
    ({"procMount": "Unmasked"}, "securityContext.procMount"),
    ({"seccompProfile": {"type": "Unconfined"}}, "securityContext.seccompProfile.type"),
    ({"appArmorProfile": {"type": "Unconfined"}}, "securityContext.appArmorProfile.type"),
    ({"seLinuxOptions": {"type": "spc_t"}}, "securityContext.seLinuxOptions.type"),
    ({"seLinuxOptions": {"user": "system_u"}}, "securityContext.seLinuxOptions.user"),
    ({"windowsOptions": {"hostProcess": True}}, "securityContext.windowsOptions.hostProcess"),
]


@pytest.mark.parametrize(("context", "path"), CONTEXTS, ids=[str(c[0]) for c in CONTEXTS])
def test_security_pod_template_baseline(context: dict[str, Any], path: str | None) -> None:
    errors = _errors(_deployment(context=context))
    if path is None:
        assert errors == []
    else:
        [(label, where, message)] = errors
        assert (label, where) == ("ModelDeployment ml/llm", f"{ENGINE}.{path}")
        assert 'outside Pod Security "baseline"' in message and "c1" in message


@pytest.mark.parametrize(
    ("template", "path"),
    [
        (
            {
                "spec.initContainers": [
                    {"name": "init", "image": "i", "securityContext": {"privileged": True}}
                ]
            },
            "spec.workers.template.spec.initContainers[0].securityContext.privileged",
        ),
        (
            {
                "metadata.annotations": {
                    "container.apparmor.security.beta.kubernetes.io/engine": "unconfined"
                }
            },
            "spec.workers.template.metadata.annotations",
        ),
        (
            {
                "spec.containers": [
                    {
                        "name": "engine",
                        "image": "e",
                        "readinessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}},
                    }
                ]
            },
            f"{ENGINE}.readinessProbe.httpGet.host",
        ),
    ],
    ids=["init-privileged", "apparmor-annotation", "probe-host"],
)
def test_security_pod_template_baseline_elsewhere(template: dict[str, Any], path: str) -> None:
    [(_, where, _)] = _errors(_deployment(template=template))
    assert where == path


@pytest.mark.parametrize(
    "template",
    [
        {"spec.hostNetwork": True},
        {"spec.hostPID": True},
        {"spec.hostIPC": True},
        {"spec.volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
        {
            "spec.containers": [
                {"name": "engine", "image": "e", "ports": [{"containerPort": 80, "hostPort": 80}]}
            ]
        },
        {"spec.securityContext": {"sysctls": [{"name": "kernel.x", "value": "1"}]}},
    ],
    ids=["hostNetwork", "hostPID", "hostIPC", "hostPath", "hostPort", "sysctls"],
)
def test_security_pod_template_cannot_say_host_access(template: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        _deployment(template=template)


# --- the allowlist ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exempt_on", "selector", "not_exempt"),
    [
        ({"c1", "c2"}, None, None),  # every cluster it may land on lets it in
        ({"c1"}, {"matchLabels": {"rdma": "yes"}}, None),  # it can only land on c1
        ({"c1"}, None, "c2"),  # c2 could get it
        (set(), None, "c1, c2"),
    ],
    ids=["exempt-everywhere", "exempt-where-selected", "not-on-c2", "nowhere"],
)
def test_security_allowlist_opts_a_deployment_in(
    exempt_on: set[str], selector: dict[str, Any] | None, not_exempt: str | None
) -> None:
    clusters = [
        _cluster("c1", ["ml/llm"] if "c1" in exempt_on else None, rdma="yes"),
        _cluster("c2", ["ml/llm"] if "c2" in exempt_on else None),
    ]
    errors = _errors(
        _deployment(context={"privileged": True}, selector=selector), clusters=clusters
    )
    if not_exempt is None:
        assert errors == []
    else:
        [(_, _, message)] = errors
        assert f"not exempt on cluster(s) {not_exempt}" in message


def test_security_namespace_levels() -> None:
    exempting = _cluster("c1", ["ml/llm"])
    assert namespace_level(exempting, "ml") == PRIVILEGED
    assert namespace_level(exempting, "other") == BASELINE
    assert namespace_level(_cluster("c2"), "ml") == BASELINE
    assert namespace_level(None, "ml") == BASELINE
    with pytest.raises(ValidationError):
        _cluster("c3", ["not-a-key"])


# --- service accounts and Secrets: only what the platform's allowlist names ---------------

SA = {"spec.serviceAccountName": "deployer"}
VOLUME = {"spec.volumes": [{"name": "creds", "secret": {"secretName": "team-db"}}]}
ENV_REF = {
    "spec.initContainers": [
        {
            "name": "fetch",
            "image": "busybox",
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "team-db", "key": "t"}}}],
        }
    ]
}


def _allowing(name: str, **lists: list[str]) -> InferenceCluster:
    data = _cluster(name).model_dump(by_alias=True, exclude_none=True)
    data["spec"]["podSecurity"] = lists
    return InferenceCluster.model_validate(data)


@pytest.mark.parametrize(
    ("template", "clusters", "expected"),
    [
        (
            SA,
            [_cluster("c1")],
            [("spec.workers.template.spec.serviceAccountName", "ml/deployer", "c1")],
        ),
        ({"spec.serviceAccountName": "default"}, [_cluster("c1")], []),
        (SA, [_allowing("c1", serviceAccounts=["ml/deployer"])], []),
        (
            SA,
            [_allowing("c1", serviceAccounts=["other/deployer"])],
            [("spec.workers.template.spec.serviceAccountName", "ml/deployer", "c1")],
        ),
        (
            VOLUME,
            [_cluster("c1")],
            [("spec.workers.template.spec.volumes[0].secret.secretName", "ml/team-db", "c1")],
        ),
        (VOLUME, [_allowing("c1", secrets=["ml/team-db"])], []),
        (
            ENV_REF,
            [_allowing("c1", serviceAccounts=["ml/team-db"])],
            [
                (
                    "spec.workers.template.spec.initContainers[0].env[0].valueFrom.secretKeyRef.name",
                    "ml/team-db",
                    "c1",
                )
            ],
        ),
        (ENV_REF, [_allowing("c1", secrets=["ml/team-db"])], []),
        # Every cluster the deployment may land on must allow it; the refusal names the others.
        (
            VOLUME,
            [_allowing("c1", secrets=["ml/team-db"]), _cluster("c2")],
            [("spec.workers.template.spec.volumes[0].secret.secretName", "ml/team-db", "c2")],
        ),
        # A deployment the platform exempts is trusted with its namespace's accounts and Secrets.
        ({**SA, **VOLUME}, [_cluster("c1", exempt=["ml/x"])], []),
    ],
    ids=[
        "sa-refused",
        "sa-default",
        "sa-allowed",
        "sa-other-namespace",
        "volume-refused",
        "volume-allowed",
        "env-ref-wrong-list",
        "env-ref-allowed",
        "one-cluster-of-two",
        "exempt",
    ],
)
def test_security_service_accounts_and_secrets_only_from_the_allowlist(
    template: dict[str, Any], clusters: list[InferenceCluster], expected: list[tuple[str, str, str]]
) -> None:
    dep = _deployment(name="x", namespace="ml", template=template)
    found = _errors(dep, clusters=clusters)
    assert [path for _, path, _ in found] == [path for path, _, _ in expected]
    for (_, _, message), (_, name, where) in zip(found, expected, strict=True):
        assert f" {name} is not allowed on cluster(s) {where} " in message, message
        assert "spec.podSecurity." in message


def test_security_a_pod_template_without_accounts_or_secrets_needs_no_allowlist() -> None:
    dep = _deployment(name="x", namespace="ml", template={"spec.serviceAccountName": None})
    assert _errors(dep) == []
