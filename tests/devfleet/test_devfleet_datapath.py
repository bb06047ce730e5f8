"""Requests through the fleet's front door on the dev fleet (issue 16).

client (host) -> bridge -> front-door Traefik (InferenceGateway, cluster dev-1) -> the
ModelService's HTTPRoute (weights, rewrite) -> the replica's cluster gateway (Traefik, class
modelplane-dev) or the replica's Service on dev-1 -> pod IP, where the pod agent's stand-in
model server answers. External ModelEndpoints (an IP and a name) are stand-ins too.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.cli.call import chat_completion
from modelplane.devfleet import fleet as devfleet
from modelplane.devfleet.agent import EXTERNALS_FILE
from modelplane.driver.fleet import Fleet
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

EXTERNAL_IP = "10.254.0.10"
EXTERNAL_NAME = "external.modelplane.test"
EXTERNAL_NAME_IP = "10.254.0.11"
# A service wider than one route rule (api.md "Large services"): 18 outside endpoints plus
# the split replicas, sharded by the front door.
MANY = [(f"many-{i}", f"10.254.1.{i + 1}") for i in range(18)]


def partner(name: str, host: str) -> dict[str, Any]:
    """An external ModelEndpoint at http://HOST:9000/, labelled provider=NAME."""
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelEndpoint",
        "metadata": {"name": name, "namespace": "web", "labels": {"provider": name}},
        "spec": {"url": f"http://{host}:9000/"},
    }


# after the deployment split (write_split): the services over it and the partners
SERVICES = """---
apiVersion: modelplane.ai/v1alpha1
kind: ModelService
metadata: {name: split, namespace: web}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: split}}
    weight: 80
  - selector: {matchLabels: {provider: partner-ip}}
    weight: 20
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelService
metadata: {name: partner, namespace: web}
spec:
  endpoints:
  - selector: {matchLabels: {provider: partner-name}}
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelService
metadata: {name: wide, namespace: web}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: split}}
    weight: 50
  - selector: {matchLabels: {group: many}}
    weight: 50
"""


@pytest.fixture(scope="module")
def served(deployer: fx.Deployer, dev_fleet: devfleet.DevFleet) -> Iterator[dict[str, Any]]:
    """specs/dev plus the split services, deployed, with external stand-ins running (until
    the module ends: the dev fleet is shared)."""
    externals = dev_fleet.root / EXTERNALS_FILE
    externals.write_text(
        json.dumps(
            [
                {"ip": EXTERNAL_IP, "port": 9000, "replica": "partner-ip", "cluster": "outside"},
                {
                    "ip": EXTERNAL_NAME_IP,
                    "port": 9000,
                    "replica": "partner-name",
                    "cluster": "outside",
                    "hostname": EXTERNAL_NAME,
                },
                *(
                    {"ip": ip, "port": 9000, "replica": name, "cluster": "outside"}
                    for name, ip in MANY
                ),
            ]
        )
    )
    fleet_dir = deployer.dev_specs("datapath")
    write_split(fleet_dir, replicas=3)
    fleet = deployer.fleet(fleet_dir)
    fx.check(fleet.up())
    services = fx.wait_for(
        "service URLs", lambda: fleet.status().gateway.get("services") or {}, timeout=60
    )
    try:
        yield {"dir": fleet_dir, "services": services, "env": deployer.env()}
    finally:
        externals.unlink(missing_ok=True)


def write_split(fleet_dir: Path, replicas: int) -> None:
    split = fx.model_deployment(
        "split",
        namespace="web",
        replicas=replicas,
        gpu=fx.GPU_16GI,
        model="split-model",
        cpu="2",
        memory="8Gi",
    )
    partners = (partner("partner-ip", EXTERNAL_IP), partner("partner-name", EXTERNAL_NAME))
    many = []
    for name, ip in MANY:
        endpoint = partner(name, ip)
        endpoint["metadata"]["labels"]["group"] = "many"
        many.append(endpoint)
    text = fx.specs_yaml(split, *partners, *many) + SERVICES
    (fleet_dir / "split.yaml").write_text(text)


def post(
    url: str, path: str, payload: dict[str, Any], timeout: float = 10.0
) -> tuple[int, Any, dict[str, str]]:
    req = urllib.request.Request(
        url + path,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **fx.caller_headers()},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read().decode()
            return resp.status, body, {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace"), {}


def answered(url: str, path: str = "v1/chat/completions") -> int:
    status, _, _ = post(
        url,
        path,
        {"model": "any", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    return status


@pytest.mark.parametrize("service", ["demo/chat", "web/split", "web/partner"])
def test_chat_and_messages_through_the_front_door(served: dict[str, Any], service: str) -> None:
    url = served["services"][service]
    assert url.startswith("http://127.77.") and url.endswith(f"/{service}/")
    fx.wait_for(f"{service} answering", lambda: answered(url) == 200, timeout=60)
    status, body, headers = post(
        url, "v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert status == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"]
    assert headers.get("x-modelplane-replica")
    status, body, _ = post(
        url,
        "v1/messages",
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert status == 200, body
    assert json.loads(body)["type"] == "message"


def test_streamed_chat_completion(served: dict[str, Any]) -> None:
    url = served["services"]["demo/chat"]
    req = urllib.request.Request(
        url + "v1/chat/completions",
        data=json.dumps(
            {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ).encode(),
        headers={"Content-Type": "application/json", **fx.caller_headers()},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers.get("Content-Type", "").startswith("text/event-stream")
        events = [line for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) >= 3
    chunk = json.loads(events[0].removeprefix("data: "))
    assert chunk["object"] == "chat.completion.chunk"


def test_call_command_reports_who_answered(served: dict[str, Any]) -> None:
    result = chat_completion(served["services"]["demo/chat"], "hello", key=fx.caller_key())
    assert result.ok, result.body
    who = result.answered_by()
    assert who["replica"].startswith(("qwen-", "mistral-pd-")) and who["cluster"].startswith("dev-")


def _shares(url: str, n: int) -> Counter[str]:
    seen: Counter[str] = Counter()
    for _ in range(n):
        status, _, headers = post(
            url,
            "v1/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        assert status == 200
        seen[headers["x-modelplane-replica"]] += 1
    return seen


def test_weights_hold_over_2000_requests(served: dict[str, Any]) -> None:
    url = served["services"]["web/split"]
    fx.wait_for("web/split answering", lambda: answered(url) == 200, timeout=60)
    seen = _shares(url, 2000)
    assert len(seen) == 4, seen
    shares = {k: 100 * v / 2000 for k, v in seen.items()}
    assert abs(shares.pop("partner-ip") - 20) <= 3, seen
    for share in shares.values():  # 80 split evenly over 3 replicas
        assert abs(share - 80 / 3) <= 3, seen


def test_a_service_wider_than_one_route_rule_reaches_every_endpoint_by_weight(
    served: dict[str, Any],
) -> None:
    """21 endpoints (3 replicas through their cluster gateways, 18 outside): more than the 16
    one HTTPRoute rule holds, so the front door shards them; every endpoint answers, with its
    share, and no caller reaches a shard past the key check."""
    url = served["services"]["web/wide"]
    fx.wait_for("web/wide answering", lambda: answered(url) == 200, timeout=60)
    n = 1800
    seen = _shares(url, n)
    many = {name for name, _ in MANY}
    assert many <= set(seen), sorted(many - set(seen))
    replicas = {k: v for k, v in seen.items() if k not in many}
    assert len(replicas) == 3, seen
    # 50 % over the replicas, 50 % over the 18 others (Traefik's weighted round robin at
    # both passes: close to exact).
    assert abs(100 * sum(replicas.values()) / n - 50) <= 3, seen
    for name in many:
        assert abs(100 * seen[name] / n - 50 / 18) <= 1.5, seen
    # A shard's own path: refused without the front door's credentials, a caller key or not.
    shard = url.split("/web/wide/")[0] + "/_shards/web/wide/0/"
    for headers in ({}, fx.caller_headers()):
        req = urllib.request.Request(
            shard + "v1/chat/completions",
            data=b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
            method="POST",
            headers={"Content-Type": "application/json", **headers},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 401


def test_adding_a_replica_shifts_the_split_without_failed_requests(
    served: dict[str, Any],
) -> None:
    url = served["services"]["web/split"]
    failures: list[str] = []
    sent = Counter[str]()
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:
                status, body, headers = post(
                    url,
                    "v1/chat/completions",
                    {"model": "m", "messages": [{"role": "user", "content": "x"}]},
                )
            except OSError as exc:
                failures.append(str(exc))
                continue
            if status != 200:
                failures.append(f"{status}: {body[:200]}")
            else:
                sent[headers["x-modelplane-replica"]] += 1

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        write_split(served["dir"], replicas=4)
        fx.check(Fleet.load(served["dir"], env=served["env"]).up())
        fx.wait_for("4 replicas answering", lambda: len(_shares(url, 200)) == 5, timeout=120)
        time.sleep(2)
    finally:
        stop.set()
        thread.join(15)
    assert not failures, failures[:5]
    assert sum(sent.values()) > 100


def test_prefill_decode_requests_reach_decode_pods(served: dict[str, Any]) -> None:
    """The dev fleet's Traefik cannot route to an InferencePool (no llm-d endpoint picker
    here), so the replica route targets the decode Service (docs/architecture.md)."""
    lock = (served["dir"] / "modelplane.lock.yaml").read_text()
    assert "mistral-pd" in lock
    url = served["services"]["demo/chat"]
    roles = Counter[str]()
    for _ in range(200):
        status, _, headers = post(
            url,
            "v1/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        assert status == 200
        if headers["x-modelplane-replica"].startswith("mistral-pd"):
            roles[headers["x-modelplane-role"]] += 1
    assert roles and set(roles) == {"decode"}, roles


def _route_backends(custom: Any) -> set[str]:
    """The replicas `demo/chat` names: through the front door's second pass to their workload
    gateway (mutual TLS: the rewrite to `/_gateways/<cluster>/<ns>/<replica>/`), or an
    `ep-<replica>` Service."""
    from modelplane.network.hop import replica_of_ref

    route = custom.get_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", "demo", "httproutes", "chat"
    )
    return {
        replica_of_ref(ref) or str(ref["name"]).removeprefix("ep-")
        for rule in route["spec"]["rules"]
        for ref in rule["backendRefs"]
    }


def _role_images(core: Any) -> tuple[dict[str, set[str]], bool]:
    """mistral-pd's serving pods: their engine's image per role, and whether all are Ready."""
    images: dict[str, set[str]] = {}
    ready = True
    for pod in core.list_namespaced_pod(
        "demo", label_selector="modelplane.ai/deployment=mistral-pd"
    ).items:
        role = pod.metadata.labels.get("modelplane.ai/role", "")
        if role not in ("prefill", "decode"):
            continue  # not a serving pod of a role (the replica's routing pieces)
        images.setdefault(role, set()).update(
            c.image for c in pod.spec.containers if c.name == "engine"
        )
        ready = (
            ready
            and pod.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        )
    return images, ready


def test_prefill_decode_rollout_never_routes_a_replica_with_mixed_revisions(
    served: dict[str, Any], dev_fleet: devfleet.DevFleet
) -> None:
    """A new image on both roles of mistral-pd (1P1D): the rollout takes the replica out of
    `demo/chat`, updates both roles, and routes it again only once both are Ready on the new
    image. Sampled all along from the API servers: whenever the route names the replica, its
    prefill and decode pods are all Ready on one image. `demo/chat` (qwen too) fails nothing."""
    from kubernetes.client import CoreV1Api, CustomObjectsApi

    from modelplane.lock import read_lock

    fleet_dir = Path(served["dir"])
    [replica] = read_lock(fleet_dir / "modelplane.lock.yaml").replicas_of("demo/mistral-pd")
    endpoint = replica.name
    custom = CustomObjectsApi(fx.api_client(dev_fleet.cluster("dev-1")))
    core = CoreV1Api(fx.api_client(dev_fleet.cluster(replica.cluster)))
    old, new = "vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.11.1"
    assert endpoint in _route_backends(custom)
    assert _role_images(core)[0] == {"prefill": {old}, "decode": {old}}
    models = fleet_dir / "models.yaml"
    docs = list(yaml.safe_load_all(models.read_text()))
    for doc in docs:
        if doc["metadata"]["name"] == "mistral-pd":
            for role in ("prefill", "decode"):
                doc["spec"][role]["workers"]["template"]["spec"]["containers"][0]["image"] = new
    models.write_text(yaml.safe_dump_all(docs, sort_keys=False))

    url = served["services"]["demo/chat"]
    samples: list[tuple[bool, dict[str, set[str]], bool]] = []
    failures: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            before = endpoint in _route_backends(custom)
            images, ready = _role_images(core)
            # routed for the whole sample: the route named it before and after the pods read
            samples.append((before and endpoint in _route_backends(custom), images, ready))
            time.sleep(0.2)

    def load() -> None:
        while not stop.is_set():
            status = answered(url)
            if status != 200:
                failures.append(status)

    threads = [
        threading.Thread(target=watch, daemon=True),
        threading.Thread(target=load, daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        run = fx.check(Fleet.load(fleet_dir, env=served["env"]).up())
        fx.wait_for(
            "mistral-pd routed again", lambda: endpoint in _route_backends(custom), timeout=60
        )
        time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    [outcome] = [r for r in run.rollouts if r["deployment"] == "demo/mistral-pd"]
    assert outcome["phase"] == "Complete", outcome
    assert _role_images(core) == ({"prefill": {new}, "decode": {new}}, True)
    assert any(not routed for routed, _, _ in samples), "the replica never left the routes"
    mixed = [
        (images, ready)
        for routed, images, ready in samples
        if routed
        and not (
            ready
            and images.get("prefill") == images.get("decode")
            and len(images.get("decode", ())) == 1
        )
    ]
    assert not mixed, mixed[:3]
    assert {frozenset(images.get("decode", ())) for routed, images, _ in samples if routed} == {
        frozenset({old}),
        frozenset({new}),
    }
    assert not failures, Counter(failures)
