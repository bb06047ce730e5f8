"""The front door's OpenAI endpoint: routing by model name, when a ModelService names
`spec.models`.

On an Envoy Gateway front door: Envoy AI Gateway's objects (components/ai_gateway.py). On a
Traefik front door: modelplane's router (`modelplane/router.py`), that is the routing table
and the code (a ConfigMap run by the same stock Python image as `modelplane-authz`), a
Deployment of 2, its Service and PodDisruptionBudget, and the HTTPRoute `modelplane-openai`
sending the base URL's `/v1/` to it. The router sends each request on to the front door's
own Service at the model's service path, so the service's route keeps doing the key check,
the caller list, the weights and the retries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import pulumi

import modelplane.authz as authz_module
import modelplane.router as router_module
from modelplane.api.fleet import FleetSpec
from modelplane.api.model_service import ModelService
from modelplane.api.notices import scalable_to_zero, serves
from modelplane.components.ai_gateway import ai_gateway_manifests
from modelplane.components.gateway import AUTHZ_IMAGE, LOCKED_DOWN
from modelplane.components.workload.objects import (
    SKIP_AWAIT,
    SYSTEM_NAMESPACE,
    Manifest,
    app_labels,
    hand_off,
    labels,
    metadata,
    register,
)
from modelplane.components.workload.routes import GATEWAY_GROUP, MAX_PINNED

ROUTER_NAME = "modelplane-router"
ROUTE_NAME = "modelplane-openai"
ROUTER_PORT = 8080
ROUTER_PORT_NAME = "openai"
ROUTER_IMAGE = AUTHZ_IMAGE  # one image for the auth path; `spec.images.frontDoor` pins it
ROUTER_SELECTOR = {"modelplane.ai/router": ROUTER_NAME}  # never a recommended label
ROUTER_LABELS = labels(app_labels("inference-gateway", ROUTER_NAME, "router"))
OPENAI_PREFIX = "/v1/"
ROUTER_REPLICAS = 2


def routing_table(
    services: Sequence[ModelService],
    endpoints: Mapping[str, Sequence[tuple[str, int]]],
    tiers: Mapping[str, Sequence[int]] | None = None,
    limits: Mapping[str, Mapping[str, int]] | None = None,
    waking: Collection[str] = (),
) -> str:
    """models.json: every model name of every service, with where it goes and who may use
    it; ``endpoints``: per service, the endpoints its route has now and their weights
    (`ready`: at least one), which a conversation can be kept on (`x-modelplane-pin`) when
    the route has a rule for each (at most MAX_PINNED, tier rules included); ``tiers``: per
    service, its overflow tiers; ``limits``: per caller, its budgets (api.md "Callers");
    ``waking``: the services a deployment scaled to zero may leave without an endpoint, whose
    requests are held while it wakes (`wake`: the deadline and the queue)."""
    models: dict[str, dict[str, object]] = {}
    for service in sorted(services, key=lambda s: s.key):
        selected = list(endpoints.get(service.key) or ())
        # The overflow tiers below the serving one (`x-modelplane-tier`).
        overflow = list((tiers or {}).get(service.key) or ())
        pinnable = (
            [[key, weight] for key, weight in selected] if len(selected) <= MAX_PINNED else []
        )
        for name in service.spec.models or ():
            models[name] = {
                "service": service.key,
                "path": service.path_prefix,
                "owner": service.metadata.namespace or "default",
                "callers": list(service.spec.callers) if service.spec.callers else None,
                "ready": bool(selected),
                "endpoints": pinnable if len(pinnable) + len(overflow) <= MAX_PINNED else [],
                "tiers": overflow,
                "firstByte": service.spec.timeouts.first_byte,
                "idle": service.spec.timeouts.idle,
            }
            if service.key in waking:
                models[name]["wake"] = {
                    "deadline": service.spec.wake.deadline,
                    "queue": service.spec.wake.queue,
                }
    # Each replica enforces its share of a caller's limits (router.Budgets).
    table = {"models": models, "limits": dict(limits or {}), "replicas": ROUTER_REPLICAS}
    return json.dumps(table, sort_keys=True)


def waking_services(fleet: FleetSpec) -> list[str]:
    """The services with a deployment scalable to zero behind them (api.md, "Scale to
    zero"): their model names' requests are held while it wakes."""
    clusters = sorted(fleet.clusters)
    return sorted(
        key
        for key, service in fleet.services.items()
        if service.spec.models
        and any(
            scalable_to_zero(d) and serves(service, d, clusters) for d in fleet.deployments.values()
        )
    )


def router_sources() -> dict[str, str]:
    return {
        "authz.py": Path(authz_module.__file__).read_text(),
        "router.py": Path(router_module.__file__).read_text(),
    }


def router_manifests(
    table: str,
    front_door_url: str,
    *,
    keys_secret: str | None,
    gateway: tuple[str, str],
    listener: str | None,
    tls_secret: str | None = None,
    image: str = ROUTER_IMAGE,
) -> list[Manifest]:
    """The router's objects in the order they must exist (the route last). ``image``: the
    router's (`modelplane.components.gateway.front_door_image`). ``keys_secret``:
    the Secret holding `callers.json` (None: every request is let in, as `anonymous`);
    ``tls_secret``: the front door's TLS Secret, whose certificate alone (never its key) the
    router mounts to trust the front door it sends requests on to over https."""
    code = router_sources()
    digest = hashlib.sha256("\0".join(code[k] for k in sorted(code)).encode()).hexdigest()
    command = ["python", "/app/router.py", "--models", "/app/models.json"]
    command += ["--keys", "/keys/callers.json"] if keys_secret else ["--open"]
    command += ["--front-door", front_door_url]
    if tls_secret:
        command += ["--front-door-ca", "/tls/front-door.crt"]
    command += ["--listen", f"0.0.0.0:{ROUTER_PORT}"]
    mounts = [{"name": "code", "mountPath": "/app", "readOnly": True}]
    volumes: list[dict[str, object]] = [{"name": "code", "configMap": {"name": ROUTER_NAME}}]
    if keys_secret:
        mounts.append({"name": "keys", "mountPath": "/keys", "readOnly": True})
        volumes.append({"name": "keys", "secret": {"secretName": keys_secret}})
    if tls_secret:
        mounts.append({"name": "front-door-tls", "mountPath": "/tls", "readOnly": True})
        volumes.append(
            {
                "name": "front-door-tls",
                # Only the certificate is projected: the private key never reaches the pod.
                "secret": {
                    "secretName": tls_secret,
                    "items": [{"key": "tls.crt", "path": "front-door.crt"}],
                },
            }
        )
    gateway_name, gateway_namespace = gateway
    parent: dict[str, object] = {
        "group": GATEWAY_GROUP,
        "kind": "Gateway",
        "name": gateway_name,
        "namespace": gateway_namespace,
    }
    if listener:
        parent["sectionName"] = listener
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(ROUTER_NAME, SYSTEM_NAMESPACE, ROUTER_LABELS),
            "data": {**code, "models.json": table},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata(ROUTER_NAME, SYSTEM_NAMESPACE, ROUTER_LABELS),
            "spec": {
                "replicas": ROUTER_REPLICAS,
                "selector": {"matchLabels": ROUTER_SELECTOR},
                "template": {
                    "metadata": {
                        "labels": {**ROUTER_LABELS, **ROUTER_SELECTOR},
                        # New code rolls the pods; a new table does not (the mounted
                        # ConfigMap is re-read).
                        "annotations": {"modelplane.ai/router-sha256": digest},
                    },
                    "spec": {
                        "automountServiceAccountToken": False,
                        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [
                            {
                                "name": "router",
                                "image": image,
                                "command": command,
                                "ports": [{"name": ROUTER_PORT_NAME, "containerPort": ROUTER_PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/healthz", "port": ROUTER_PORT}
                                },
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "64Mi"},
                                    "limits": {"memory": "256Mi"},
                                },
                                "securityContext": dict(LOCKED_DOWN),
                                "volumeMounts": mounts,
                            }
                        ],
                        "volumes": volumes,
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            # Not awaited, as modelplane-authz's (components/gateway.py): its Deployment is.
            "metadata": metadata(ROUTER_NAME, SYSTEM_NAMESPACE, ROUTER_LABELS, SKIP_AWAIT),
            "spec": {
                "type": "ClusterIP",
                "selector": ROUTER_SELECTOR,
                "ports": [
                    {
                        "name": ROUTER_PORT_NAME,
                        "port": ROUTER_PORT,
                        "targetPort": ROUTER_PORT,
                        "protocol": "TCP",
                    }
                ],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": metadata(ROUTER_NAME, SYSTEM_NAMESPACE, ROUTER_LABELS),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": ROUTER_SELECTOR}},
        },
        {
            "apiVersion": f"{GATEWAY_GROUP}/v1",
            "kind": "HTTPRoute",
            "metadata": metadata(ROUTE_NAME, SYSTEM_NAMESPACE, ROUTER_LABELS),
            "spec": {
                "parentRefs": [parent],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": OPENAI_PREFIX}}],
                        "backendRefs": [
                            {
                                "group": "",
                                "kind": "Service",
                                "name": ROUTER_NAME,
                                "port": ROUTER_PORT,
                            }
                        ],
                    }
                ],
            },
        },
    ]


class ModelRouterComponent(pulumi.ComponentResource):
    """`modelplane:gateway:ModelRouter`: the fleet's OpenAI base URL (`/v1/`), routing by
    the request's `model` to the ModelService that answers to it. Output `models`: each
    model name's service."""

    models: pulumi.Output[dict[str, str]]

    def __init__(
        self,
        name: str,
        services: Sequence[ModelService],
        endpoints: Mapping[str, Sequence[tuple[str, int]]],
        tiers: Mapping[str, Sequence[int]] | None = None,
        limits: Mapping[str, Mapping[str, int]] | None = None,
        *,
        waking: Collection[str] = (),
        front_door_url: str,
        keys_secret: str | None,
        gateway: tuple[str, str],
        listener: str | None,
        tls_secret: str | None = None,
        render_only: bool = False,
        envoy_class: str | None = None,
        image: str = ROUTER_IMAGE,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``envoy_class``: the front door is Envoy Gateway's, of that GatewayClass: Envoy AI
        Gateway's objects instead of the router (the tables, keys and URLs are Traefik's)."""
        super().__init__("modelplane:gateway:ModelRouter", name, None, opts)
        previous: list[pulumi.Resource] = list(depends_on)
        manifests: list[Manifest]
        if envoy_class is not None:
            manifests = ai_gateway_manifests(
                services, gateway=gateway, listener=listener, gateway_class=envoy_class
            )
        else:
            manifests = router_manifests(
                routing_table(services, endpoints, tiers, limits, waking),
                front_door_url,
                keys_secret=keys_secret,
                gateway=gateway,
                listener=listener,
                tls_secret=tls_secret,
                image=image,
            )
        for manifest in manifests:
            made = register(
                hand_off(manifest) if render_only else manifest,
                pulumi.ResourceOptions(parent=self, depends_on=previous or None),
                scope="gateway",
            )
            previous = [*depends_on, made]
        self.models = pulumi.Output.from_input(
            {m: s.key for s in services for m in (s.spec.models or ())}
        )
        self.register_outputs({"models": self.models})
