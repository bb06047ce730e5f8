"""The dev fleet's `modelplane-authz`: the front door's key check, as a fleet service.

On a real gateway cluster the InferenceGateway's `spec.auth` runs `modelplane/authz.py` as the
Deployment `modelplane-system/modelplane-authz` with the Secret `modelplane-callers` mounted
(components/gateway.py). kwok's pods run nothing, so the dev fleet runs the same service
itself, inside the fleet's network namespace, at ``authz_ip(slot)``: its Service's DNS name
resolves there through the namespace's hosts file. Its keys file is the Secret's
`callers.json` (hashes only), read from every cluster's API server every half second and kept
mode 0600 in ``<state>/authz/callers.json`` -- as kubelet refreshes a mounted Secret.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
from pathlib import Path

from modelplane import authz
from modelplane.devcluster.rest import KubeRestError
from modelplane.devfleet import netns
from modelplane.devfleet.cluster import FleetCluster

HOST = "modelplane-authz.modelplane-system.svc.cluster.local"  # components.gateway
PORT = 8080
SECRET_PATH = "/api/v1/namespaces/modelplane-system/secrets/modelplane-callers"
POLL = 0.5


def authz_ip(slot: int) -> str:
    return f"10.255.{slot}.250"


def keys_path(state: Path) -> Path:
    return state / "authz" / "callers.json"


def merged_table(
    clusters: list[FleetCluster], seen: dict[int, dict[str, str]] | None = None
) -> dict[str, str] | None:
    """Every cluster's `callers.json` merged (only the gateway cluster has one); None unless
    every API server answered, with the Secret or a 404 (the last table is kept then, as
    kubelet keeps a mounted Secret it cannot refresh): a busy gateway cluster that times out
    while the others say "no such Secret" must not read as "no callers" and refuse them all.

    ``seen``: each cluster's last table, kept across calls. A Secret that was there and is
    gone (404) keeps its last table, as kubelet keeps a deleted Secret's files in a running
    pod: the Kubernetes provider replaces a Secret whose data changed (delete, then create
    under the same name), and that moment must not refuse every caller."""
    table: dict[str, str] = {}
    for i, cluster in enumerate(clusters):
        try:
            secret = cluster.rest().get(SECRET_PATH, timeout=2)
        except KubeRestError as exc:
            if exc.status == 404:
                table.update((seen or {}).get(i, {}))
                continue
            return None
        except OSError:
            return None
        raw = (secret.get("data") or {}).get("callers.json")
        if raw:
            try:
                found = json.loads(base64.b64decode(raw))
            except ValueError:
                return None
            table.update(found)
            if seen is not None and isinstance(found, dict):
                seen[i] = found
    return table


def write_table(path: Path, table: dict[str, str]) -> bool:
    """Write atomically (0600); False when unchanged."""
    return write_private(path, json.dumps(table, sort_keys=True))


def write_private(path: Path, text: str) -> bool:
    """What a mounted Secret or ConfigMap holds, as kubelet writes it: atomically, mode 0600
    in a 0700 folder; False when unchanged."""
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modelplane.devfleet.authz")
    parser.add_argument("--state", required=True, type=Path)
    args = parser.parse_args(argv)
    data = json.loads((args.state / "fleet.json").read_text())
    netns.enter(str(data["netns"]))
    clusters = [FleetCluster.from_state(c) for c in data["clusters"]]
    path = keys_path(args.state)
    seen: dict[int, dict[str, str]] = {}
    write_table(path, merged_table(clusters, seen) or {})
    server = authz.serve(path, authz_ip(int(data["slot"])), PORT)
    stop = threading.Event()

    def sync() -> None:
        while not stop.wait(POLL):
            table = merged_table(clusters, seen)
            if table is not None:
                write_table(path, table)

    threading.Thread(target=sync, daemon=True).start()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"authz ready on {authz_ip(int(data['slot']))}:{PORT}", flush=True)
    while not stop.wait(1.0):
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
