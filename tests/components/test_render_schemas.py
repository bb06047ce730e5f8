"""Every manifest `modelplane render` writes for every fleet in specs/ is schema-valid."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import pytest
import yaml

pytest.importorskip(
    "kubernetes_validate", reason="needs the kubernetes-validate schemas (dev extra)"
)

from modelplane.render import render_fleet  # noqa: E402
from tests import k8s_schemas  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FLEETS = sorted(
    p.name for p in (ROOT / "specs").iterdir() if p.is_dir() and not p.name.startswith(".")
)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for fleet in FLEETS:
        target = tmp_path_factory.mktemp(f"render-{fleet}")
        render_fleet(ROOT / "specs" / fleet, target)
        out[fleet] = target
    return out


def _manifests(root: Path) -> list[tuple[Path, dict]]:
    found = []
    for path in sorted(root.glob("*/manifests/*.yaml")):
        found.append((path, yaml.safe_load(path.read_text())))
    return found


def test_there_are_fleets() -> None:
    assert {"local", "quickstart", "multicloud", "frontier"} <= set(FLEETS)


@pytest.mark.parametrize("fleet", FLEETS)
def test_every_manifest_validates(fleet: str, rendered: dict[str, Path]) -> None:
    manifests = _manifests(rendered[fleet])
    assert manifests, f"render wrote no manifests for {fleet}"
    problems: list[str] = []
    for path, manifest in manifests:
        try:
            errs = k8s_schemas.errors(manifest)
        except k8s_schemas.SchemaMissing as exc:
            errs = [str(exc)]
        problems.extend(f"{path.relative_to(rendered[fleet])}: {e}" for e in errs)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("fleet", FLEETS)
def test_kinds_covered(fleet: str, rendered: dict[str, Path]) -> None:
    kinds = {(m["apiVersion"], m["kind"]) for _, m in _manifests(rendered[fleet])}
    assert ("gateway.networking.k8s.io/v1", "HTTPRoute") in kinds
    assert ("resource.k8s.io/v1", "ResourceClaimTemplate") in kinds


def test_crd_and_builtin_kinds_in_the_renders(rendered: dict[str, Path]) -> None:
    kinds = {
        (m["apiVersion"], m["kind"]) for fleet in FLEETS for _, m in _manifests(rendered[fleet])
    }
    for expected in [
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
        ("inference.networking.k8s.io/v1", "InferencePool"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "Job"),
        ("v1", "PersistentVolumeClaim"),
        ("policy/v1", "PodDisruptionBudget"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        # The cloud examples' front door: HSTS and the TLS minimum (security review M5).
        ("traefik.io/v1alpha1", "TLSOption"),
        ("traefik.io/v1alpha1", "Middleware"),
    ]:
        assert expected in kinds


# --- the validator is strict enough to catch a wrong field name ---------------------------


def _first(rendered: dict[str, Path], kind: str, label: str = "modelplane.ai/deployment") -> dict:
    """The first rendered object of a kind that carries `label` (composed by modelplane)."""
    for fleet in FLEETS:
        for _, m in _manifests(rendered[fleet]):
            if m["kind"] == kind and label in m["metadata"].get("labels", {}):
                return copy.deepcopy(m)
    raise AssertionError(f"no {kind} rendered")


def test_wrong_field_names_are_caught(rendered: dict[str, Path]) -> None:
    route = _first(rendered, "HTTPRoute")
    assert not k8s_schemas.errors(route)
    route["spec"]["rules"][0]["backendRef"] = route["spec"]["rules"][0].pop("backendRefs")
    assert k8s_schemas.errors(route)

    lws = _first(rendered, "LeaderWorkerSet")
    assert not k8s_schemas.errors(lws)
    lws["spec"]["leaderWorkerTemplate"]["groupSize"] = lws["spec"]["leaderWorkerTemplate"].pop(
        "size"
    )
    assert k8s_schemas.errors(lws)

    rct = _first(rendered, "ResourceClaimTemplate")
    request = rct["spec"]["spec"]["devices"]["requests"][0]
    request["exactly"]["deviceClass"] = request["exactly"].pop("deviceClassName")
    assert k8s_schemas.errors(rct)

    deployment = _first(rendered, "Deployment", "modelplane.ai/role")
    pod = deployment["spec"]["template"]["spec"]
    pod["nodeSelectors"] = pod.pop("nodeSelector")
    assert k8s_schemas.errors(deployment)

    budget = _first(rendered, "PodDisruptionBudget")
    assert not k8s_schemas.errors(budget)
    budget["spec"]["maxUnavailble"] = budget["spec"].pop("maxUnavailable")
    assert k8s_schemas.errors(budget)

    pool = _first(rendered, "InferencePool")
    pool["spec"]["targetPortNumber"] = 8000
    assert k8s_schemas.errors(pool)


# --- recommended labels and a complete renderTo hand-off ------------------------------------

RECOMMENDED = ("name", "instance", "component", "part-of", "managed-by")


def _pod_templates(manifest: dict) -> list[tuple[str, dict]]:
    spec = manifest.get("spec") or {}
    found = []
    if isinstance(spec.get("template"), dict) and manifest["kind"] in ("Deployment", "Job"):
        found.append(("spec.template", spec["template"]))
    lws = spec.get("leaderWorkerTemplate") or {}
    for key in ("leaderTemplate", "workerTemplate"):
        if key in lws:
            found.append((f"spec.leaderWorkerTemplate.{key}", lws[key]))
    return found


def _missing_labels(manifest: dict) -> list[str]:
    problems = []
    places = [("metadata", manifest["metadata"]), *_pod_templates(manifest)]
    for where, meta_owner in places:
        meta = meta_owner if where == "metadata" else meta_owner.get("metadata", {})
        have = meta.get("labels") or {}
        missing = [k for k in RECOMMENDED if not have.get(f"app.kubernetes.io/{k}")]
        if missing:
            problems.append(f"{where}: no app.kubernetes.io/{{{','.join(missing)}}}")
    return problems


@pytest.mark.parametrize("fleet", FLEETS)
def test_every_generated_object_carries_the_recommended_labels(
    fleet: str, rendered: dict[str, Path]
) -> None:
    problems: list[str] = []
    templates = 0
    for path, manifest in _manifests(rendered[fleet]):
        templates += len(_pod_templates(manifest))
        problems += [f"{path.name}: {p}" for p in _missing_labels(manifest)]
        # part-of and managed-by are modelplane's own; selectors never carry the recommended
        # labels (a workload's selector is immutable, so they are metadata only).
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "modelplane", path.name
        assert labels["app.kubernetes.io/managed-by"] == "modelplane", path.name
        selector = (manifest.get("spec") or {}).get("selector") or {}
        selector = selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
        assert not [k for k in selector if k.startswith("app.kubernetes.io/")], path.name
    assert not problems, "\n".join(problems)
    assert templates > 0, f"{fleet}: no pod template rendered"
    # The check itself sees a missing label.
    bare = {"kind": "Job", "metadata": {"labels": {}}, "spec": {"template": {"metadata": {}}}}
    assert len(_missing_labels(bare)) == 2


def test_no_service_with_a_selector_is_awaited(rendered: dict[str, Path]) -> None:
    """pulumi-kubernetes waits for a Service's endpoints and then a fixed 10 s after each
    change of them; every Service that selects pods skips that wait (`up` never waits on a
    Service: the workloads behind it are awaited or reported by `modelplane status`)."""
    names: set[str] = set()
    awaited: list[str] = []
    for fleet in FLEETS:
        for path, m in _manifests(rendered[fleet]):
            if m["kind"] != "Service" or not (m.get("spec") or {}).get("selector"):
                continue
            names.add(m["metadata"]["name"])
            annotations = m["metadata"].get("annotations") or {}
            if annotations.get("pulumi.com/skipAwait") != "true":
                awaited.append(f"{fleet}: {path.name}")
    assert not awaited, awaited
    assert {"modelplane-authz", "modelplane-router"} <= names, sorted(names)


def test_replica_selectors_are_unchanged(rendered: dict[str, Path]) -> None:
    """The selectors of existing workloads cannot change (immutable): only modelplane's keys."""
    for fleet in FLEETS:
        for path, m in _manifests(rendered[fleet]):
            if m["kind"] == "Deployment" and "modelplane.ai/role" in m["metadata"]["labels"]:
                assert set(m["spec"]["selector"]["matchLabels"]) == {
                    "modelplane.ai/replica",
                    "modelplane.ai/role",
                }, path


def test_every_route_of_a_render_to_cluster_attaches_to_a_rendered_gateway(
    rendered: dict[str, Path],
) -> None:
    """specs/local renders its one cluster's hand-off: each HTTPRoute's Gateway is in it."""
    manifests = [m for _, m in _manifests(rendered["local"])]
    gateways = {
        (m["metadata"].get("namespace", "default"), m["metadata"]["name"])
        for m in manifests
        if m["kind"] == "Gateway"
    }
    classes = {m["metadata"]["name"] for m in manifests if m["kind"] == "GatewayClass"}
    routes = [m for m in manifests if m["kind"] == "HTTPRoute"]
    assert len(routes) >= 2  # the replica's route and the ModelService's
    for route in routes:
        for ref in route["spec"]["parentRefs"]:
            assert ref.get("kind", "Gateway") == "Gateway"
            ns = ref.get("namespace", route["metadata"].get("namespace", "default"))
            assert (ns, ref["name"]) in gateways, (route["metadata"]["name"], ref, gateways)
    for m in manifests:
        if m["kind"] == "Gateway":
            assert m["spec"]["gatewayClassName"] in classes, m["metadata"]["name"]


def test_serving_pods_carry_their_disruption_budget_and_safe_to_evict(
    rendered: dict[str, Path],
) -> None:
    """Every rendered serving workload's pods are covered by a PodDisruptionBudget of its
    deployment and role on the same cluster, and say safe-to-evict "false"."""
    for fleet in FLEETS:
        by_cluster: dict[str, list[dict]] = {}
        for path, m in _manifests(rendered[fleet]):
            # <stack>/manifests/<cluster>-k8s_<kind>_<namespace>_<name>.yaml
            where = f"{path.parent.parent.name}/{path.name.split('_')[0]}"
            by_cluster.setdefault(where, []).append(m)
        for cluster, manifests in by_cluster.items():
            budgets = [
                m["spec"]["selector"]["matchLabels"]
                for m in manifests
                if m["kind"] == "PodDisruptionBudget"
            ]
            for m in manifests:
                if m["kind"] == "Deployment" and "modelplane.ai/role" in m["metadata"]["labels"]:
                    templates = [m["spec"]["template"]]
                elif m["kind"] == "LeaderWorkerSet":
                    lwt = m["spec"]["leaderWorkerTemplate"]
                    templates = [lwt["leaderTemplate"], lwt["workerTemplate"]]
                else:
                    continue
                for t in templates:
                    assert (
                        t["metadata"]["annotations"][
                            "cluster-autoscaler.kubernetes.io/safe-to-evict"
                        ]
                        == "false"
                    ), (fleet, cluster, m["metadata"]["name"])
                pod_labels = templates[0]["metadata"]["labels"]
                covering = [
                    b
                    for b in budgets
                    if all(
                        pod_labels.get(k) == v
                        for k, v in b.items()
                        if not k.startswith("leaderworkerset")
                    )
                ]
                assert covering, (fleet, cluster, m["metadata"]["name"])


def test_network_rendered_cluster_stacks_build_the_locks_ranges(rendered: dict[str, Path]) -> None:
    """specs/multicloud as `render` builds it (the stack program over the committed lock):
    the GKE cluster on its planned block, the EKS cluster on its declared VPC."""

    def resources(stack: str) -> list[dict]:
        return yaml.safe_load((rendered["multicloud"] / stack / "resources.yaml").read_text())

    [subnet] = [r for r in resources("cluster-gke-us-central") if r["type"].endswith("Subnetwork")]
    assert subnet["inputs"]["ipCidrRange"] == "10.0.128.0/20"
    assert {s["rangeName"]: s["ipCidrRange"] for s in subnet["inputs"]["secondaryIpRanges"]} == {
        "pods": "10.0.0.0/17",
        "services": "10.0.144.0/20",
    }
    [vpc] = [r for r in resources("cluster-eks-us-west") if r["type"] == "aws:ec2/vpc:Vpc"]
    assert vpc["inputs"]["cidrBlock"] == "10.20.0.0/16"


def test_network_rendered_path_joins_gke_and_eks_with_the_ha_vpn(rendered: dict[str, Path]) -> None:
    """The path stack `render` builds from the two cluster stacks' `network` outputs."""
    stack = rendered["multicloud"] / "path-eks-us-west-gke-us-central"
    resources = yaml.safe_load((stack / "resources.yaml").read_text())
    count = Counter(r["type"] for r in resources)
    assert count["gcp:compute/vPNTunnel:VPNTunnel"] == 4
    assert count["gcp:compute/routerPeer:RouterPeer"] == 4
    assert count["aws:ec2/vpnConnection:VpnConnection"] == 2
    [router] = [r for r in resources if r["type"] == "gcp:compute/router:Router"]
    assert router["inputs"]["network"] == "gke-us-central-net-id"  # the GKE stack's network
    [vgw] = [r for r in resources if r["type"] == "aws:ec2/vpnGateway:VpnGateway"]
    assert vgw["inputs"]["vpcId"] == "eks-us-west-vpc-id"  # the EKS stack's VPC
    tunnels = [r for r in resources if r["type"] == "gcp:compute/vPNTunnel:VPNTunnel"]
    assert {t["inputs"]["sharedSecret"] for t in tunnels} == {"[secret]"}
