"""The OpenAI router's `/metrics` (modelplane/components/model_router.py), read from each router pod
through the gateway cluster's API server pod proxy: the counts `modelplane usage` shows and
the requests held for models at zero, which `reconcile` wakes (api.md, "Scale to zero")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from modelplane.api.fleet import FleetSpec
from modelplane.observe import kubeconfig_for
from modelplane.observe.kube import KubeError, KubeReader, parse_kubeconfig

ROUTER_NAMESPACE = "modelplane-system"
ROUTER_PORT = 8080  # modelplane.components.model_router.ROUTER_PORT
ROUTER_PODS = (
    f"/api/v1/namespaces/{ROUTER_NAMESPACE}/pods?labelSelector=modelplane.ai%2Frouter%3D"
    "modelplane-router"
)


def router_metrics(
    fleet: FleetSpec,
    fleet_dir: Path,
    env: Mapping[str, str],
    kubeconfigs: Mapping[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[list[str], str | None]:
    """Each running router pod's `/metrics` text, and why none could be read (None: read,
    or no router: no gateway or no service with `models`)."""
    gateway = fleet.gateway
    if gateway is None or not any(s.spec.models for s in fleet.services.values()):
        return [], None
    doors = [d for d in gateway.spec.front_door_clusters if d in fleet.clusters]
    if not doors:
        return [], "the gateway's cluster is not an InferenceCluster of the fleet"
    # Every front door runs its own router: a model's held requests are the sum of theirs.
    texts: list[str] = []
    problems: list[str] = []
    for ref in doors:
        found, why = _router_texts(fleet, ref, fleet_dir, env, kubeconfigs or {}, timeout)
        texts += found
        if why is not None:
            problems.append(why if len(doors) == 1 else f"{ref}: {why}")
    return texts, ("; ".join(problems) if problems and not texts else None)


def _router_texts(
    fleet: FleetSpec,
    ref: str,
    fleet_dir: Path,
    env: Mapping[str, str],
    kubeconfigs: Mapping[str, str],
    timeout: float,
) -> tuple[list[str], str | None]:
    text, why = kubeconfig_for(fleet, ref, fleet_dir, env, kubeconfigs)
    if text is None:
        return [], why
    try:
        reader = KubeReader(parse_kubeconfig(text, str(fleet_dir)), timeout=timeout)
        pods = reader.get(ROUTER_PODS).get("items") or []
        texts = []
        for pod in pods:
            name = (pod.get("metadata") or {}).get("name")
            if (pod.get("status") or {}).get("phase") == "Running" and name:
                texts.append(
                    reader.get_text(
                        f"/api/v1/namespaces/{ROUTER_NAMESPACE}/pods/{name}:{ROUTER_PORT}"
                        "/proxy/metrics"
                    )
                )
    except KubeError as exc:
        return [], f"the OpenAI router's metrics: {exc}"
    return texts, None


__all__ = ["ROUTER_PODS", "router_metrics"]
