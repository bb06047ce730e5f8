"""ModelServices over more endpoints than one HTTPRoute rule holds (api.md "Large services").

Gateway API caps a rule at 16 backendRefs. On Traefik a larger service is split in shards
behind a second pass through the front door's own Service; these pin what is rendered, that
every endpoint keeps its share, that the shards are guarded, and what is refused and when
(validation before any `up`, and the component for what only the stacks know).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from modelplane.api.loader import load_fleet
from modelplane.api.model_service import ModelService
from modelplane.api.references import RULE_BACKENDS, SHARDED_BACKENDS
from modelplane.components.gateway import TRAEFIK
from modelplane.components.model_service import (
    LOOP_NAMESPACE,
    LOOP_SERVICE,
    EndpointInfo,
    FrontDoor,
    ModelServiceComponent,
    service_backends,
    service_route_manifests,
    shard_check_name,
)
from modelplane.components.workload import front_door
from modelplane.components.workload.routes import (
    MAX_BACKENDS,
    SHARD_PATH,
    SplitError,
    shard_prefix,
)
from modelplane.observe import usage
from tests.components.workload_helpers import ROUTE, load
from tests.pulumi_mocks import MockRun, contains_secret
from tests.spec_docs import base_fleet, write_fleet

KEY = "front-door-key-for-tests"
GATEWAY = ("modelplane", "modelplane-system")
DOOR = FrontDoor(
    listener="web",
    authz_address="http://authz/",
    shard_users="modelplane:{SHA}x\n",
    shard_listener="web",
)

SERVICE = load(
    ModelService,
    """
metadata: {name: big, namespace: team}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: big}}
    weight: 90
  - selector: {matchLabels: {provider: outside}}
    weight: 10
""",
)


def endpoints(replicas: int, outside: int = 1) -> list[EndpointInfo]:
    out = [
        EndpointInfo(
            f"big-{i}",
            "team",
            f"http://10.0.{i // 200}.{i % 200 + 1}/",
            f"/team/big-{i}/",
            {"modelplane.ai/deployment": "big"},
            replica=True,
        )
        for i in range(replicas)
    ]
    out += [
        EndpointInfo(
            f"outside-{i}", "team", f"http://10.9.0.{i + 1}/", "/v1/", {"provider": "outside"}
        )
        for i in range(outside)
    ]
    return out


def routes_of(manifests: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the service's own route, its shard routes) -- the own route comes last."""
    routes = [m for m in manifests if m["kind"] == "HTTPRoute"]
    assert routes[-1]["metadata"]["name"] == "big"
    return routes[-1], routes[:-1]


def shares(manifests: list[dict[str, Any]]) -> dict[str, Fraction]:
    """The share of requests each endpoint gets through both passes (exact)."""
    first, shards = routes_of(manifests)
    [rule] = first["spec"]["rules"]
    total = sum(ref["weight"] for ref in rule["backendRefs"])
    by_prefix = {s["spec"]["rules"][0]["matches"][0]["path"]["value"]: s for s in shards}
    out: dict[str, Fraction] = {}
    for ref in rule["backendRefs"]:
        prefix = ref["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"]
        [inner] = by_prefix[prefix]["spec"]["rules"]
        inner_total = sum(r["weight"] for r in inner["backendRefs"])
        for r in inner["backendRefs"]:
            out[r["name"]] = Fraction(ref["weight"], total) * Fraction(r["weight"], inner_total)
    return out


@pytest.mark.parametrize(
    ("replicas", "outside", "shards"),
    [(15, 1, 0), (16, 1, 2), (29, 1, 2), (30, 3, 3), (100, 0, 7), (255, 1, 16)],
)
def test_shards_only_past_one_rule_each_holding_at_most_16(
    replicas: int, outside: int, shards: int
) -> None:
    manifests = service_route_manifests(
        SERVICE, endpoints(replicas, outside), "Traefik", GATEWAY, DOOR
    )
    first, inner = routes_of(manifests)
    assert len(inner) == shards
    if not shards:
        assert len(manifests) == 1
        assert len(first["spec"]["rules"][0]["backendRefs"]) == replicas + outside
        return
    names = Counter(r["name"] for s in inner for r in s["spec"]["rules"][0]["backendRefs"])
    assert len(names) == replicas + outside and set(names.values()) == {1}
    assert all(len(s["spec"]["rules"][0]["backendRefs"]) <= MAX_BACKENDS for s in inner)
    # Each endpoint's share through both passes is exactly its weight over the total, as in
    # one rule (a shard weighs what its endpoints weigh).
    weights = {
        b.backend["name"]: b.weight
        for b in service_backends(SERVICE, endpoints(replicas, outside), "Traefik")
    }
    total = sum(weights.values())
    assert shares(manifests) == {k: Fraction(w, total) for k, w in weights.items()}


def test_the_first_pass_runs_the_key_check_and_goes_to_the_front_doors_own_service() -> None:
    manifests = service_route_manifests(SERVICE, endpoints(20), "Traefik", GATEWAY, DOOR)
    first, inner = routes_of(manifests)
    assert first["spec"]["parentRefs"][0]["sectionName"] == "web"
    [rule] = first["spec"]["rules"]
    assert [f["extensionRef"]["name"] for f in rule["filters"]] == [
        "big-client-headers",
        "big-auth",
        "big-strip-key",
        "big-retry",
    ]
    assert {(r["name"], r["namespace"], r["port"]) for r in rule["backendRefs"]} == {
        (TRAEFIK["release"], TRAEFIK["namespace"], 80)
    }
    prefixes = [
        r["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] for r in rule["backendRefs"]
    ]
    assert prefixes == [shard_prefix("team", "big", k) for k in range(2)]
    assert all(p.startswith(SHARD_PATH + "/") for p in prefixes)
    # The shards: on the plain-HTTP listener the loop reaches, guarded by the front-door
    # credentials (kept: the workload gateways check them again), then the retries.
    for shard in inner:
        assert shard["spec"]["parentRefs"][0]["sectionName"] == "web"
        [srule] = shard["spec"]["rules"]
        assert [f["extensionRef"]["name"] for f in srule["filters"]] == [
            shard_check_name("big"),
            "big-retry",
        ]
        # Per endpoint: the rewrite to its own path, and an outside provider never gets the
        # front door's credentials.
        for ref in srule["backendRefs"]:
            kinds = [f["type"] for f in ref["filters"]]
            assert kinds == (
                ["URLRewrite"]
                if ref["name"].startswith("ep-big")
                else ["URLRewrite", "RequestHeaderModifier"]
            )
    check = next(m for m in manifests if m["kind"] == "Middleware")
    assert check["spec"]["basicAuth"] == {
        "secret": shard_check_name("big"),
        "removeHeader": False,
        "realm": "modelplane",
    }
    [grant] = [m for m in manifests if m["kind"] == "ReferenceGrant"]
    assert grant["metadata"]["namespace"] == LOOP_NAMESPACE
    assert grant["spec"] == {
        "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "team"}],
        "to": [{"group": "", "kind": "Service", "name": LOOP_SERVICE}],
    }


@pytest.mark.parametrize(
    ("backend", "door", "expected"),
    [
        ("EnvoyGateway", DOOR, "EnvoyGateway backend routes a service as one rule"),
        ("Traefik", FrontDoor(listener="websecure", shard_users="u"), "no plain-HTTP listener"),
        ("Traefik", FrontDoor(listener="web", shard_listener="web"), "no front-door key"),
    ],
)
def test_a_service_that_cannot_be_sharded_is_an_error(
    backend: str, door: FrontDoor, expected: str
) -> None:
    with pytest.raises(SplitError, match=expected):
        service_route_manifests(SERVICE, endpoints(17), backend, GATEWAY, door)  # type: ignore[arg-type]


def test_more_than_256_endpoints_is_an_error() -> None:
    with pytest.raises(SplitError, match="at most 256"):
        service_route_manifests(SERVICE, endpoints(256, 1), "Traefik", GATEWAY, DOOR)


def test_component_registers_shards_before_the_route_and_keeps_the_credentials_secret() -> None:
    run = MockRun()
    eps = endpoints(20)

    def program() -> ModelServiceComponent:
        provider = k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        door = FrontDoor(
            listener="web",
            authz_address="http://authz/",
            shard_users=pulumi.Output.secret(front_door.htpasswd(KEY)),
            shard_listener="web",
        )
        return ModelServiceComponent(
            SERVICE.key,
            SERVICE,
            eps,
            backend="Traefik",
            gateway_address="front.example.com",
            gateway=GATEWAY,
            front_door=door,
            opts=pulumi.ResourceOptions(providers=[provider]),
        )

    run.run(program)
    routes = run.of_type(ROUTE)
    own = next(r for r in routes if r.get("metadata.name") == "big")
    shard_routes = [r for r in routes if r is not own]
    assert len(shard_routes) == 2
    assert all(own.depends_on(r) for r in shard_routes)
    [secret] = run.of_type("kubernetes:core/v1:Secret")
    assert contains_secret(secret.inputs["stringData"])
    assert secret.get("stringData") == {"users": front_door.htpasswd(KEY)}
    assert all(r.parent_type == "modelplane:gateway:ModelService" for r in routes)


# --- validation: before any `up` -----------------------------------------------------------


def _fleet(replicas: int, **gateway_spec: Any) -> list[dict[str, Any]]:
    docs = base_fleet()
    docs[1]["spec"]["nodePools"][0]["nodeCount"] = 400
    docs[2]["spec"]["replicas"] = replicas
    docs[3]["spec"].update(gateway_spec)
    docs.append(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": "svc", "namespace": "team"},
            "spec": {
                "endpoints": [{"selector": {"matchLabels": {"modelplane.ai/deployment": "m"}}}]
            },
        }
    )
    return docs


@pytest.mark.parametrize(
    ("replicas", "rollout", "gateway_spec", "message"),
    [
        (16, None, {"backend": "EnvoyGateway"}, None),
        (17, None, {"backend": "EnvoyGateway"}, "EnvoyGateway backend routes at most 16"),
        # A surge replica counts: 16 + 1 during a rollout.
        (16, {"maxSurge": 1}, {"backend": "EnvoyGateway"}, "16 + 1 surge"),
        (30, None, {"backend": "Traefik"}, None),
        (256, None, {"backend": "Traefik"}, None),
        (257, None, {"backend": "Traefik"}, "at most 256"),
    ],
)
def test_validation_counts_what_a_service_can_route(
    tmp_path: Path,
    replicas: int,
    rollout: dict[str, Any] | None,
    gateway_spec: dict[str, Any],
    message: str | None,
) -> None:
    docs = _fleet(replicas, **gateway_spec)
    if rollout:
        docs[2]["spec"]["rollout"] = rollout
    errors = [
        e
        for e in load_fleet(write_fleet(tmp_path, docs)).errors
        if e.object == "ModelService team/svc"
    ]
    if message is None:
        assert errors == []
    else:
        [error] = errors
        assert error.path == "spec.endpoints" and message in error.message
        assert error.file.endswith("fleet.yaml")


def test_validation_counts_autoscaling_max_and_shards_with_refuse_stay_valid(
    tmp_path: Path,
) -> None:
    """Up to 20 endpoints (autoscaling's max) shard; with `tls.http: Refuse` too: the second
    pass goes through the `web` entrypoint on the front door's internal Service (security
    review M5; tests/components/test_security_transport.py renders it)."""
    docs = _fleet(4, backend="Traefik")
    docs[2]["spec"]["autoscaling"] = {
        "minReplicas": 1,
        "maxReplicas": 20,
        "metrics": [{"type": "queueDepth", "target": 4}],
    }
    assert load_fleet(write_fleet(tmp_path / "a", docs)).errors == []
    docs[3]["spec"]["tls"] = {
        "certificate": {"name": "front-door-tls", "key": "tls.crt"},
        "privateKey": {"name": "front-door-tls", "key": "tls.key"},
        "http": "Refuse",
    }
    assert load_fleet(write_fleet(tmp_path / "b", docs)).errors == []


def test_limits_agree_between_validation_and_rendering() -> None:
    assert RULE_BACKENDS == MAX_BACKENDS
    assert SHARDED_BACKENDS == MAX_BACKENDS * 16
    assert SHARD_PATH == "/" + usage.SHARD_PATH


def test_usage_counts_a_sharded_request_once() -> None:
    first = '{"RequestPath": "/team/big/v1/chat/completions", "DownstreamStatus": 200, "RouterName": "big", "request_X-Modelplane-Caller": "alice"}'
    second = '{"RequestPath": "/_shards/team/big/1/v1/chat/completions", "DownstreamStatus": 200, "RouterName": "big-shard-1", "request_X-Modelplane-Caller": "alice"}'
    counts = usage.count_usage([first, second])
    assert {k: v.as_dict() for k, v in counts.items()} == {
        ("alice", "team/big"): {"requests": 1, "errors": 0, "refused": 0}
    }
