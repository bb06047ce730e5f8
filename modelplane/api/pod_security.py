"""A spec author is not a cluster admin (docs/api.md "Pod Security and namespaces"; security
finding M8): reserved namespaces refused for every namespaced kind, every pod template checked
against Kubernetes' Pod Security "baseline" unless a cluster's allowlist
(`InferenceCluster.spec.podSecurity.exemptDeployments`) names the deployment, a template's
service account and the Secrets it reads allowed only where the cluster's allowlist names
them (`serviceAccounts`, `secrets`), and the level the namespaces modelplane creates enforce.

Pure: the fleet in, errors out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from modelplane.api.base import Strict
from modelplane.api.errors import SpecError

if TYPE_CHECKING:
    from modelplane.api.fleet import FleetSpec
    from modelplane.api.inference_cluster import InferenceCluster
    from modelplane.api.pod_template import PodTemplate

# Kubernetes' own (every `kube-*`), modelplane's and its serving stack's (components/charts.py,
# modelplane/components/gateway.py; tests/api/test_security_pod_security.py keeps them in step).
RESERVED_NAMESPACES = frozenset(
    {
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "modelplane-system",
        "traefik-system",
        "envoy-gateway-system",
        "envoy-ai-gateway-system",
        "monitoring",
        "lws-system",
        "cert-manager",
        "node-feature-discovery",
        "dra-driver-nvidia-gpu",
        "keda",
    }
)

# Pod Security Standards, "baseline" (kubernetes.io/docs/concepts/security/pod-security-standards).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
BASELINE, PRIVILEGED = "baseline", "privileged"

_DEPLOYMENT_KEY = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


DeploymentKey = Annotated[str, Field(pattern=_DEPLOYMENT_KEY, max_length=127)]


NamespacedName = Annotated[str, Field(pattern=_DEPLOYMENT_KEY, max_length=127)]


class PodSecurityOptions(Strict):
    """The platform's allowlist on one cluster (docs/api.md "Pod Security and namespaces")."""

    exempt_deployments: list[DeploymentKey] = Field(default_factory=list, max_length=1000)
    """ModelDeployments (`<namespace>/<name>`) whose pods may run outside Pod Security
    "baseline" on this cluster; their namespaces there enforce `privileged`."""
    service_accounts: list[NamespacedName] = Field(default_factory=list, max_length=1000)
    """Service accounts (`<namespace>/<name>`) a pod template may run as on this cluster
    (`default` needs no entry)."""
    secrets: list[NamespacedName] = Field(default_factory=list, max_length=1000)
    """Secrets (`<namespace>/<name>`) a pod template may read on this cluster: as a volume,
    an `env` `secretKeyRef` or an `envFrom` `secretRef`."""


def reserved_namespace(namespace: str) -> bool:
    return namespace in RESERVED_NAMESPACES or namespace.startswith("kube-")


def namespace_level(cluster: InferenceCluster | None, namespace: str) -> str:
    """What the namespace enforces on that cluster: `privileged` where the cluster's allowlist
    names a deployment of it, else `baseline` (None: a cluster outside the fleet)."""
    exempt = exempt_deployments(cluster) if cluster is not None else []
    return PRIVILEGED if any(k.split("/", 1)[0] == namespace for k in exempt) else BASELINE


def namespace_labels(level: str) -> dict[str, str]:
    return {ENFORCE_LABEL: level, ENFORCE_VERSION_LABEL: "latest"}


def _security_context(context: Mapping[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """(path, problem) for each way ``context`` (a container's securityContext) leaves
    baseline."""
    if context.get("privileged") is True:
        yield f"{where}.privileged", "a privileged container"
    windows = context.get("windowsOptions")
    if isinstance(windows, Mapping) and windows.get("hostProcess") is True:
        yield f"{where}.windowsOptions.hostProcess", "a Windows HostProcess container"
    capabilities = context.get("capabilities")
    added = capabilities.get("add") if isinstance(capabilities, Mapping) else None
    for cap in added if isinstance(added, list) else []:
        name = str(cap).upper().removeprefix("CAP_")
        if name not in BASELINE_CAPABILITIES:
            yield f"{where}.capabilities.add", f"adds the capability {cap}"
    if context.get("procMount") not in (None, "Default"):
        yield f"{where}.procMount", f"procMount {context.get('procMount')}"
    for field in ("seccompProfile", "appArmorProfile"):
        profile = context.get(field)
        if isinstance(profile, Mapping) and profile.get("type") == "Unconfined":
            yield f"{where}.{field}.type", f"an Unconfined {field}"
    selinux = context.get("seLinuxOptions")
    if isinstance(selinux, Mapping):
        if selinux.get("type", "") not in SELINUX_TYPES:
            yield f"{where}.seLinuxOptions.type", f"the SELinux type {selinux.get('type')}"
        for field in ("user", "role"):
            if selinux.get(field):
                yield f"{where}.seLinuxOptions.{field}", f"a custom SELinux {field}"


def _probe_hosts(container: Any, where: str) -> Iterator[tuple[str, str]]:
    for field, alias in (
        ("readiness_probe", "readinessProbe"),
        ("liveness_probe", "livenessProbe"),
        ("startup_probe", "startupProbe"),
    ):
        probe = getattr(container, field)
        for handler in ("httpGet", "tcpSocket"):
            spec = probe.get(handler) if isinstance(probe, Mapping) else None
            if isinstance(spec, Mapping) and spec.get("host"):
                yield f"{where}.{alias}.{handler}.host", "a probe of another host"


def baseline_problems(template: PodTemplate, where: str) -> list[tuple[str, str]]:
    """(path, problem) for each way the pod template leaves Pod Security "baseline"."""
    out: list[tuple[str, str]] = []
    for key, value in template.metadata.annotations.items():
        if (
            key.startswith(APPARMOR_ANNOTATION)
            and value not in ("runtime/default",)
            and not (value.startswith("localhost/"))
        ):
            out.append((f"{where}.metadata.annotations", f"AppArmor {value} ({key})"))
    for field, containers in (
        ("containers", template.spec.containers),
        ("initContainers", template.spec.init_containers),
    ):
        for i, container in enumerate(containers):
            at = f"{where}.spec.{field}[{i}]"
            if container.security_context:
                out += _security_context(container.security_context, f"{at}.securityContext")
            out += _probe_hosts(container, at)
    return out


def _grants(template: PodTemplate, where: str) -> Iterator[tuple[str, str, str, str]]:
    """(path, what, allowlist field, its `<name>`) for each service account and Secret the pod
    template uses that a spec author could otherwise take from its namespace."""
    spec = template.spec
    account = spec.service_account_name
    if account and account != "default":
        yield f"{where}.spec.serviceAccountName", "service account", "serviceAccounts", account
    for i, volume in enumerate(spec.volumes):
        if volume.secret is not None:
            path = f"{where}.spec.volumes[{i}].secret.secretName"
            yield path, "Secret", "secrets", str(volume.secret.get("secretName") or "")
    for field, containers in (
        ("containers", spec.containers),
        ("initContainers", spec.init_containers),
    ):
        for c, container in enumerate(containers):
            at = f"{where}.spec.{field}[{c}]"
            for e, env in enumerate(container.env):
                ref = env.value_from.secret_key_ref if env.value_from is not None else None
                if ref is not None:
                    path = f"{at}.env[{e}].valueFrom.secretKeyRef.name"
                    yield path, "Secret", "secrets", ref.name
            for e, source in enumerate(container.env_from):
                if source.secret_ref is not None:
                    path = f"{at}.envFrom[{e}].secretRef.name"
                    yield path, "Secret", "secrets", source.secret_ref.name


def _allowed(cluster: InferenceCluster, field: str, key: str) -> bool:
    options = cluster.spec.pod_security
    if options is None:
        return False
    listed = options.service_accounts if field == "serviceAccounts" else options.secrets
    return key in listed


def exempt_deployments(cluster: InferenceCluster) -> list[str]:
    """The deployments the cluster's allowlist names."""
    options = cluster.spec.pod_security
    return options.exempt_deployments if options is not None else []


def _templates(deployment: Any) -> Iterator[tuple[str, PodTemplate]]:
    spec = deployment.spec
    if spec.workers is not None:
        yield "spec.workers.template", spec.workers.template
    for role in ("prefill", "decode"):
        block = getattr(spec, role)
        if block is not None:
            yield f"spec.{role}.workers.template", block.workers.template


def pod_security_errors(fleet: FleetSpec) -> list[SpecError]:
    """Reserved namespaces and pod templates outside "baseline" that no allowlist covers."""
    errors: list[SpecError] = []

    def error(kind: str, key: str, path: str, message: str) -> None:
        file, doc = fleet.sources.get((kind, key), ("", 0))
        errors.append(SpecError(file, doc, f"{kind} {key}", path, message))

    for kind, objects in (
        ("ModelDeployment", fleet.deployments),
        ("ModelService", fleet.services),
        ("ModelEndpoint", fleet.endpoints),
        ("ModelCache", fleet.caches),
    ):
        for key, obj in objects.items():
            namespace = obj.metadata.namespace or "default"
            if reserved_namespace(namespace):
                error(
                    kind,
                    key,
                    "metadata.namespace",
                    f"{namespace!r} is reserved (Kubernetes' or modelplane's own); use a "
                    "namespace of the workload's",
                )
    for key, deployment in fleet.deployments.items():
        selector = deployment.spec.cluster_selector
        candidates = [n for n, c in fleet.clusters.items() if selector.matches(c.metadata.labels)]
        namespace = deployment.metadata.namespace or "default"
        for where, template in _templates(deployment):
            for path, what, field, name in _grants(template, where):
                wanted = f"{namespace}/{name}"
                missing = [
                    n
                    for n in candidates
                    if key not in exempt_deployments(fleet.clusters[n])
                    and not _allowed(fleet.clusters[n], field, wanted)
                ]
                if missing:
                    error(
                        "ModelDeployment",
                        key,
                        path,
                        f"the {what} {wanted} is not allowed on cluster(s) {', '.join(missing)} "
                        f"(a cluster's spec.podSecurity.{field} lets a pod template use it; a "
                        "spec author is not the namespace's admin)",
                    )
        problems = [p for where, t in _templates(deployment) for p in baseline_problems(t, where)]
        if not problems:
            continue
        missing = [n for n in candidates if key not in exempt_deployments(fleet.clusters[n])]
        if candidates and not missing:
            continue  # every cluster it may land on lets it in
        why = f"not exempt on cluster(s) {', '.join(missing)}" if missing else "no cluster selected"
        for path, problem in problems:
            error(
                "ModelDeployment",
                key,
                path,
                f'{problem}: outside Pod Security "baseline" ({why}; a cluster\'s '
                "spec.podSecurity.exemptDeployments lets a deployment in)",
            )
    return errors
