"""One OpenAI base URL for the fleet (issue 37), on the dev fleet: the real Traefik front door
sends `/v1/` to the OpenAI router (modelplane/router.py, run for the router's pods by the pod
agent), which routes by `model` through the services' own routes (key check, caller list,
weights). A copy of specs/dev (callers `dev` and `batch`) with TLS on the front door (so the
router's hop back to it is https, pinned to the front door's certificate): `demo/chat`
(qwen x3) answers to
`qwen` and `Qwen/Qwen2.5-0.5B-Instruct`; `demo/batch` (the same replicas) to `batch-qwen`,
for caller `batch` only; `demo/sleepy` (a stand-in that waits 60 s before its first token)
to `sleepy`, with a 2 s first-byte timeout; `demo/napper` (a stand-in that takes 20 s to
load, `autoscaling.minReplicas: 0`, starting at 0 replicas) to `napper`: the wake drill.
Select with `pytest -k openai` (the drill also with `-k "wake or zero"`).
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelplane.devfleet import fleet as devfleet
from modelplane.devfleet.agent import EXTERNALS_FILE
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"
SAAS_IP = "10.254.0.40"
STATE = "${MODELPLANE_DEV_FLEET_STATE}"
GATEWAY_TLS = (
    "  tls:\n"
    f"    certificate: {{name: 'file:{STATE}/openai-tls/tls.crt', key: crt}}\n"
    f"    privateKey: {{name: 'file:{STATE}/openai-tls/tls.key', key: key}}\n"
)
TRUST: list[ssl.SSLContext] = []  # the test CA, once the module's fleet is up
NAP_LOAD = 20.0  # the napper stand-in's load time (s)
NAP_IDLE = 10.0  # its idle window (s): the shortest there is
WAKE_RESULTS = Path(os.environ.get("MODELPLANE_WAKE_RESULTS", "/tmp/modelplane-wake.json"))


def _service(name: str, deployment: str, **spec: Any) -> dict[str, Any]:
    doc = fx.model_service(name, deployment)
    doc["spec"].update(spec)
    return doc


@pytest.fixture(scope="module")
def deployed(
    deployer: fx.Deployer, dev_fleet: devfleet.DevFleet
) -> Iterator[tuple[Path, str, dict]]:
    """(fleet dir, the OpenAI base URL, caller -> key)."""
    sleepy = fx.model_deployment("sleepy", gpu=fx.GPU_16GI)
    engine = sleepy["spec"]["workers"]["template"]["spec"]["containers"][0]
    engine["env"] = [{"name": "MODELPLANE_STANDIN_FIRST_TOKEN_DELAY", "value": "60"}]
    saas = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelEndpoint",
        "metadata": {"name": "saas", "namespace": "demo", "labels": {"provider": "saas"}},
        "spec": {"url": f"http://{SAAS_IP}:9000/"},
    }
    napper = fx.model_deployment(
        "napper",
        replicas=0,
        gpu=fx.GPU_16GI,
        autoscaling=fx.autoscaling(
            0,
            1,
            4,
            idleWindow=f"{NAP_IDLE:.0f}s",
            scaleDown={"stabilizationWindow": "0s"},
            drainTimeout="5s",
        ),
    )
    napper["spec"]["workers"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MODELPLANE_STANDIN_LOAD_TIME", "value": f"{NAP_LOAD:.0f}"}
    ]
    overflow = _service("overflow", "solo", models=["overflow"])
    overflow["spec"]["endpoints"].append(
        {"selector": {"matchLabels": {"provider": "saas"}}, "tier": 2}
    )
    target = deployer.dev_specs(
        "openai",
        models=fx.specs_yaml(
            fx.model_deployment("qwen", replicas=3, gpu=fx.GPU_16GI, model=QWEN),
            sleepy,
            napper,
            fx.model_deployment("solo", gpu=fx.GPU_16GI, model=QWEN),
            saas,
            _service("chat", "qwen", models=["qwen", QWEN]),
            _service("batch", "qwen", models=["batch-qwen"], callers=["batch"]),
            _service("sleepy", "sleepy", models=["sleepy"], timeouts={"firstByte": "2s"}),
            _service("napper", "napper", models=["napper"], wake={"deadline": "10m"}),
            overflow,
        ),
    )
    # The SaaS provider outside the fleet: a stand-in the pod agent runs at SAAS_IP.
    externals = dev_fleet.root / EXTERNALS_FILE
    entries = json.loads(externals.read_text()) if externals.is_file() else []
    entries.append({"ip": SAAS_IP, "port": 9000, "replica": "saas", "cluster": "outside"})
    externals.write_text(json.dumps(entries))
    from modelplane.api.loader import load_fleet
    from modelplane.caller_keys import parse_keys
    from modelplane.devcluster.certs import generate_ca, generate_serving_cert
    from modelplane.devfleet.fleet import ensure_caller_keys

    fleet = target / "fleet.yaml"
    anchor = "  cluster: {inferenceClusterRef: dev-1}\n"
    fleet.write_text(fleet.read_text().replace(anchor, anchor + GATEWAY_TLS))
    front = dev_fleet.cluster("dev-1").addresses.front_door
    ca = generate_ca("openai-test-ca")
    cert = generate_serving_cert(ca, hosts=(front,), common_name=front)
    tls_dir = dev_fleet.root / "openai-tls"
    tls_dir.mkdir(exist_ok=True)
    (tls_dir / "tls.crt").write_bytes(cert.cert_pem)
    (tls_dir / "tls.key").write_bytes(cert.key_pem)
    (tls_dir / "ca.crt").write_bytes(ca.cert_pem)
    ensure_caller_keys(load_fleet(target).fleet, dev_fleet.root)
    keys = {
        n: parse_keys((dev_fleet.root / "callers" / n).read_text())[-1].key
        for n in ("dev", "batch")
    }
    up = deployer.run("up", str(target), "--yes", "--wait", "--timeout", "5m", timeout=900)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    base = deployer.fleet(target).status().gateway["openai"]
    assert base == f"https://{front}/v1/", base
    TRUST.append(ssl.create_default_context(cafile=str(tls_dir / "ca.crt")))
    # The router's pods run once the agent sees them Running: wait for it to answer.
    fx.wait_for("the OpenAI router", lambda: ask(base + "models", keys["dev"])[0] == 200, 120)
    try:
        yield target, base, keys
    finally:  # the dev fleet is shared: the SaaS stand-in goes with this module
        externals = dev_fleet.root / EXTERNALS_FILE
        if externals.is_file():
            left = [e for e in json.loads(externals.read_text()) if e.get("ip") != SAAS_IP]
            if left:
                externals.write_text(json.dumps(left))
            else:
                externals.unlink()


def ask(url: str, key: str | None, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=TRUST[-1]) as resp:
            raw = resp.read()
            kind = resp.headers.get("Content-Type", "")
            if "json" in kind:
                return resp.status, json.loads(raw)
            return resp.status, f"{kind}: {raw.decode(errors='replace')}"
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, raw.decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], **extra}


def test_openai_routes_by_model_name_and_lists_each_callers_models(deployed: Any) -> None:
    _, base, keys = deployed
    for name in ("qwen", QWEN):
        status, answer = ask(base + "chat/completions", keys["dev"], chat(name))
        assert status == 200, answer
        # The stand-in says which model and replica answered.
        assert answer["model"] == QWEN and answer["id"].startswith("chatcmpl-qwen-"), answer
    # batch-qwen is for caller batch: to dev it does not exist.
    refused = ask(base + "chat/completions", keys["dev"], chat("batch-qwen"))
    unknown = ask(base + "chat/completions", keys["dev"], chat("no-such-model"))
    assert refused[0] == unknown[0] == 404
    assert refused[1]["error"]["code"] == unknown[1]["error"]["code"] == "model_not_found"
    assert ask(base + "chat/completions", keys["batch"], chat("batch-qwen"))[0] == 200
    assert ask(base + "chat/completions", "sk-wrong", chat("qwen"))[0] == 401
    lists = {caller: ask(base + "models", key) for caller, key in keys.items()}
    assert all(status == 200 for status, _ in lists.values()), lists
    listed = {caller: [m["id"] for m in answer["data"]] for caller, (_, answer) in lists.items()}
    assert listed == {
        "dev": [QWEN, "napper", "overflow", "qwen", "sleepy"],
        "batch": [QWEN, "batch-qwen", "napper", "overflow", "qwen", "sleepy"],
    }
    models = {m["id"]: m for m in ask(base + "models", keys["dev"])[1]["data"]}
    assert models["qwen"]["owned_by"] == "demo" and models["qwen"]["modelplane"]["ready"]


def test_openai_hung_backend_answers_504_within_the_timeout(deployed: Any) -> None:
    _, base, keys = deployed
    # The stand-in answers 200 after 60 s (past the client's 30 s): a 504 is the timeout's.
    status, answer = ask(base + "chat/completions", keys["dev"], chat("sleepy"), timeout=30)
    assert status == 504, answer
    assert answer["error"]["code"] == "timeout"


def dev_fleet_root(deployer: fx.Deployer) -> Path:
    return Path(deployer.env()[devfleet.STATE_ENV])


def test_openai_tokens_per_caller_in_usage_and_call_by_model(
    deployed: Any, deployer: fx.Deployer
) -> None:
    target, base, keys = deployed

    def tokens() -> dict[tuple[str, str], dict[str, int]]:
        done = fx.modelplane("usage", str(target), "-o", "json", env=deployer.env(), timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return {(r["caller"], r["model"]): r for r in json.loads(done.stdout)["models"]}

    before = tokens().get(("batch", "qwen"), {"promptTokens": 0, "completionTokens": 0})
    status, answer = ask(base + "chat/completions", keys["batch"], chat("qwen"))
    assert status == 200, answer
    whole = answer["usage"]
    # A stream that did not ask for usage gets none, and still counts.
    status, stream = ask(base + "chat/completions", keys["batch"], chat("qwen", stream=True))
    assert status == 200 and "data: [DONE]" in stream and '"usage"' not in stream, stream

    def grown() -> dict[str, int] | None:
        now = tokens().get(("batch", "qwen"))
        if now and now["promptTokens"] >= before["promptTokens"] + 2 * whole["prompt_tokens"]:
            return now
        return None

    after = fx.wait_for("usage counting the tokens", grown, timeout=30)
    assert after["completionTokens"] > before["completionTokens"] + whole["completion_tokens"]
    ca = str(dev_fleet_root(deployer) / "openai-tls" / "ca.crt")
    done = fx.modelplane(
        "call",
        str(target),
        "--model",
        "qwen",
        "--caller",
        "dev",
        env={**deployer.env(), "SSL_CERT_FILE": ca},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "HTTP 200" in done.stdout and "replica=qwen-" in done.stdout, done.stdout


def test_openai_session_turns_stay_on_one_replica_and_hit_its_prefix_cache(
    deployed: Any,
) -> None:
    """Conversations (OpenAI's `user` field as the session key) across 3 replicas: each later
    turn lands on its first turn's replica, whose stand-in reports the earlier turns as
    cached prompt tokens (`usage.prompt_tokens_details.cached_tokens`)."""
    _, base, keys = deployed
    sessions, turns = 12, 4
    later = same = hits = 0
    first_replicas = set()
    for n in range(sessions):
        messages: list[dict[str, str]] = [{"role": "user", "content": f"session {n} turn 0"}]
        first = None
        for turn in range(turns):
            body = {"model": "qwen", "messages": messages, "user": f"conversation-{n}"}
            status, answer = ask(base + "chat/completions", keys["dev"], body)
            assert status == 200, answer
            replica = answer["id"].rsplit("-", 1)[0].removeprefix("chatcmpl-")
            cached = answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            if turn == 0:
                first = replica
                first_replicas.add(replica)
            else:
                later += 1
                same += replica == first
                hits += cached > 0
            messages = [
                *messages,
                answer["choices"][0]["message"],
                {"role": "user", "content": f"session {n} turn {turn + 1}"},
            ]
    print(f"sessions: {same}/{later} later turns on the first replica, {hits} cache hits")
    assert same / later >= 0.95, (same, later)
    assert hits / later >= 0.95, (hits, later)
    assert len(first_replicas) >= 2  # the sessions spread over the replicas


def _set_ready(dev_fleet: devfleet.DevFleet, deployment: str, ready: bool) -> int:
    """Mark every serving pod of ``deployment`` (Not)Ready with a reason of the test's own
    (the pod agent leaves such pods alone): the endpoints controller, the workload gateway
    and the front door then see the replica gone, or back. The number of pods marked."""
    marked = 0
    for cluster in dev_fleet.clusters:
        rest = cluster.rest()
        selector = f"modelplane.ai%2Fdeployment%3D{deployment}"
        pods = rest.get(f"/api/v1/namespaces/demo/pods?labelSelector={selector}").get("items", [])
        for pod in pods:
            status = "True" if ready else "False"
            conditions = [
                {"type": "Ready", "status": status, "reason": "TestKilled"},
                {"type": "ContainersReady", "status": status, "reason": "TestKilled"},
            ]
            rest.request(
                "PATCH",
                f"/api/v1/namespaces/demo/pods/{pod['metadata']['name']}/status",
                body={"status": {"conditions": conditions}},
                content_type="application/strategic-merge-patch+json",
            )
            marked += 1
    return marked


def test_openai_tiers_overflow_to_saas_only_while_every_replica_is_down(
    deployed: Any, dev_fleet: devfleet.DevFleet
) -> None:
    """`demo/overflow`: its one replica (tier 1), a SaaS endpoint outside the fleet (tier 2).
    Under load from 4 clients, the replica is killed and brought back: no request fails, the
    SaaS endpoint answers only while the replica is down."""
    _, base, keys = deployed
    results: list[tuple[str, int, str]] = []  # (phase, status, who answered)
    phase = ["up"]
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            status, answer = ask(base + "chat/completions", keys["dev"], chat("overflow"))
            who = answer["id"].split("-")[1] if status == 200 else str(answer)[:200]
            results.append((phase[0], status, who))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        phase[0] = "killing"
        assert _set_ready(dev_fleet, "solo", False) >= 1
        fx.wait_for(
            "the SaaS tier answering",
            lambda: any(p == "killing" and w == "saas" for p, _, w in results),
            timeout=60,
        )
        phase[0] = "down"
        time.sleep(3)
        phase[0] = "restoring"
        _set_ready(dev_fleet, "solo", True)
        fx.wait_for(
            "the replica answering again",
            lambda: any(p == "restoring" and w == "solo" for p, _, w in results),
            timeout=60,
        )
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        _set_ready(dev_fleet, "solo", True)
    failed = [r for r in results if r[1] != 200]
    by_phase = {p: {w for q, _, w in results if q == p} for p in ("up", "down")}
    print(f"tiers: {len(results)} requests, {len(failed)} failed, answered by {by_phase}")
    assert failed == []
    assert by_phase["up"] == {"solo"}  # no SaaS traffic while the replica is up
    assert "saas" in by_phase["down"]


NAPPER = "demo/napper"


def napper_lock(target: Path) -> dict[str, Any]:
    import yaml

    lock = yaml.safe_load((target / "modelplane.lock.yaml").read_text())
    return dict((lock.get("deployments") or {}).get(NAPPER) or {})


def test_wake_from_zero_answers_every_held_request_then_idle_scales_back_to_zero(
    deployed: Any, deployer: fx.Deployer, tmp_path: Path
) -> None:
    """The drill of api.md "Scale to zero": napper starts at 0 replicas; 4 clients ask for it
    by name at once. The router holds them, `reconcile`'s probe sees them held and the round
    it starts places a replica, which answers them all once loaded (20 s). Then, with no
    request for the idle window, it scales back to 0 through the drain. Last in the module:
    its reconcile loop changes the fleet."""
    target, base, keys = deployed
    assert napper_lock(target).get("replicas", []) == []  # at zero from the start
    loop = fx.start_reconcile(target, deployer.env(), tmp_path, interval=30.0, probe=1.0)
    try:
        fx.wait_for("a first round", lambda: len(fx.rounds(loop)) >= 1, timeout=600)
        assert fx.rounds(loop)[0]["ok"], fx.rounds(loop)[0]
        started = time.time()
        answers: list[tuple[int, Any, float]] = []

        def client(i: int) -> None:
            body = chat("napper", messages=[{"role": "user", "content": f"wake {i}"}])
            status, answer = ask(base + "chat/completions", keys["dev"], body, timeout=600)
            answers.append((status, answer, time.time()))

        clients = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(timeout=660)
        assert [a[0] for a in answers] == [200] * 4, answers  # 0 errors
        assert all(a[1]["id"].startswith("chatcmpl-napper-") for a in answers), answers
        first = min(a[2] for a in answers) - started
        woke = [r for r in fx.rounds(loop) if NAPPER in (r.get("woken") or {})]
        assert woke, fx.events(loop)
        assert woke[0]["woken"][NAPPER] == "napper"
        placed = woke[0]["started"] + woke[0]["duration"] - started
        probe = [e for e in fx.events(loop) if "model napper" in (e.get("probe") or {})]
        assert probe, "the probe started the round, not the interval"
        # Its start phases (status.md "Start phases"), from the pods and reconcile's record.
        status = fx.modelplane("status", str(target), "-o", "json", env=deployer.env(), timeout=180)
        assert status.returncode == 0, status.stderr[-2000:]
        (replica,) = json.loads(status.stdout)["readiness"]["deployments"][NAPPER]["replicas"]
        phases = replica["startSeconds"]
        assert set(phases) == {"placed", "created", "scheduled", "started", "ready", "routed"}, (
            replica
        )
        order = [phases[p] for p in ("placed", "created", "scheduled", "started", "ready")]
        assert order == sorted(order), phases
        assert phases["ready"] - phases["started"] >= NAP_LOAD - 1  # the load is in there
        # Idle: no request for the idle window -> 0, through the drain.
        quiet = time.time()
        fx.wait_for(
            "napper back at zero",
            lambda: (
                napper_lock(target).get("autoscaledReplicas") == 0
                and not napper_lock(target).get("replicas")
            ),
            timeout=NAP_IDLE + 600,
            interval=1.0,
        )
        asleep = time.time() - quiet
        notes = [
            n
            for r in fx.rounds(loop)
            for n in (r.get("autoscale", {}).get(NAPPER) or {}).get("notes", [])
        ]
        assert any("scaling to zero" in n for n in notes), notes
    finally:
        loop.stop()
    WAKE_RESULTS.write_text(
        json.dumps(
            {
                "clients": 4,
                "errors": 0,
                "loadSeconds": NAP_LOAD,
                "placedSeconds": round(placed, 1),
                "firstAnswerSeconds": round(first, 1),
                "lastAnswerSeconds": round(max(a[2] for a in answers) - started, 1),
                "budgetSeconds": round((placed + NAP_LOAD) * 1.1, 1),
                "backToZeroSeconds": round(asleep, 1),
                "idleWindowSeconds": NAP_IDLE,
                "startPhases": phases,
            },
            indent=1,
        )
    )
