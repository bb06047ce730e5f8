"""The dev fleet's kubelet for the OpenAI router's pods (modelplane/components/model_router.py).

kwok runs no container, so the pod agent runs the router's real code (`modelplane/router.py`)
for each Running pod of the Deployment `modelplane-system/modelplane-router`, on the pod's IP
and port, as its container would: the routing table is the ConfigMap's `models.json` and the
keys the Secret's `callers.json` (when the command says `--keys`), read from the cluster's API
server on every poll and written under the state directory (0600), as kubelet refreshes a
mounted volume (with the front door's TLS, the certificate of its Secret too). One stand-in
part: the front door the router sends requests on to is the dev fleet's Traefik at its own
addresses (`web`: `10.253.<slot>.<10+i>:8000`; `websecure`: `127.77.<slot>.<10+i>:8443`),
because the namespace has no ClusterIP routing for `mp-traefik.traefik-system.svc` (the
command's `--front-door`).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelplane import router
from modelplane.devcluster.rest import KubeRest, KubeRestError
from modelplane.devfleet.authz import write_private

ROUTER_LABEL = ("modelplane.ai/router", "modelplane-router")
NAMESPACE = "modelplane-system"
CONFIG_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/modelplane-router"
KEYS_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets/modelplane-callers"
TLS_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets/modelplane-front-door-tls"


@dataclass(frozen=True)
class RouterPod:
    key: str  # <cluster>/<pod>
    ip: str
    port: int
    with_keys: bool
    tls: bool = False  # the front door has TLS: requests go on over https


def router_pods(cluster: str, pods: list[dict[str, Any]]) -> dict[str, RouterPod]:
    out: dict[str, RouterPod] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if (meta.get("labels") or {}).get(ROUTER_LABEL[0]) != ROUTER_LABEL[1]:
            continue
        if meta.get("deletionTimestamp") or status.get("phase") != "Running":
            continue
        if not status.get("podIP"):
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            command = [str(c) for c in container.get("command") or []]
            ports = [int(p["containerPort"]) for p in container.get("ports") or []]
            if "/app/router.py" in command and ports:
                key = f"{cluster}/{meta.get('name')}"
                out[key] = RouterPod(
                    key,
                    str(status["podIP"]),
                    ports[0],
                    "--keys" in command,
                    "--front-door-ca" in command,
                )
    return out


class RouterPods:
    def __init__(self, state: Path, front_doors: dict[str, tuple[str, str]]) -> None:
        self.state = state
        # cluster -> (http://<front door inside>:<web port>, https://...:<websecure port>)
        self.front_doors = front_doors
        self.running: dict[str, tuple[RouterPod, Any]] = {}
        self.lock = threading.Lock()

    def files(self, cluster: str) -> tuple[Path, Path, Path]:
        folder = self.state / "router" / cluster
        return folder / "models.json", folder / "callers.json", folder / "front-door.crt"

    def _refresh(self, cluster: str, rest: KubeRest, with_keys: bool, tls: bool) -> bool:
        """The mounted volumes' contents now; False when the ConfigMap cannot be read."""
        models, keys, certificate = self.files(cluster)
        try:
            config = rest.get(CONFIG_PATH, timeout=2)
            write_private(models, str((config.get("data") or {}).get("models.json") or ""))
            if with_keys:
                secret = rest.get(KEYS_PATH, timeout=2)
                raw = (secret.get("data") or {}).get("callers.json") or ""
                write_private(keys, base64.b64decode(raw).decode() if raw else json.dumps({}))
            if tls:  # the certificate only, as the pod's projected volume
                secret = rest.get(TLS_PATH, timeout=2)
                raw = (secret.get("data") or {}).get("tls.crt") or ""
                write_private(certificate, base64.b64decode(raw).decode())
        except (KubeRestError, OSError, ValueError):
            return models.is_file()
        return True

    def sync(self, cluster: str, rest: KubeRest, pods: list[dict[str, Any]]) -> None:
        wanted = router_pods(cluster, pods)
        with self.lock:
            for key in [k for k in self.running if k.startswith(f"{cluster}/")]:
                if wanted.get(key) != self.running[key][0]:
                    _, server = self.running.pop(key)
                    server.shutdown()
                    server.server_close()
            if not wanted or cluster not in self.front_doors:
                return
            with_keys = any(p.with_keys for p in wanted.values())
            if not self._refresh(cluster, rest, with_keys, any(p.tls for p in wanted.values())):
                return
            models, keys, certificate = self.files(cluster)
            plain, secure = self.front_doors[cluster]
            for key, pod in sorted(wanted.items()):
                if key in self.running:
                    continue
                try:
                    server, _ = router.serve(
                        models,
                        keys if pod.with_keys else None,
                        secure if pod.tls else plain,
                        pod.ip,
                        pod.port,
                        front_door_ca=certificate if pod.tls else None,
                    )
                except (OSError, ValueError, ssl.SSLError) as exc:
                    print(f"agent: cannot run router {key} on {pod.ip}:{pod.port}: {exc}")
                    continue
                threading.Thread(
                    target=server.serve_forever, args=(0.2,), daemon=True, name=f"router-{key}"
                ).start()
                self.running[key] = (pod, server)
                print(f"agent: router {key} on {pod.ip}:{pod.port}", flush=True)

    def stop(self) -> None:
        with self.lock:
            for _, server in self.running.values():
                server.shutdown()
                server.server_close()
            self.running.clear()
