"""The dev fleet's `modelplane-authz`: the front door's key check, as a fleet service.

On a real gateway cluster the InferenceGateway's `spec.auth` runs `modelplane/authz.py` as the
Deployment `modelplane-system/modelplane-authz` with the Secret `modelplane-callers` mounted
(modelplane/components/gateway.py). kwok's pods run nothing, so the dev fleet runs the same service
itself, inside the fleet's network namespace, at ``authz_ip(slot)``: its Service's DNS name
resolves there through the namespace's hosts file. Its keys file is the Secret's
`callers.json` (hashes only), read every half second and kept mode 0600 in
``<state>/authz/callers.json`` -- as kubelet refreshes a mounted Secret.

It does not know the gateway's cluster, so it asks every cluster's API server and takes the
table of exactly one cluster, never a merge (security review L10: another dev cluster's
Secret must not add a caller or replace the front door's credentials): a Secret the gateway
stack made (its labels, ``GATEWAY_LABELS``; any other is ignored), the newest by
`metadata.creationTimestamp` where several clusters hold one (a gateway moved from one
cluster to another), the cluster listed first on a tie. Not done: someone who may create
Secrets in a dev cluster's `modelplane-system` can copy the labels onto a newer one (dev
only: the dev clusters are this machine's own).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from modelplane import authz
from modelplane.devcluster.rest import KubeRestError
from modelplane.devfleet import netns
from modelplane.devfleet.cluster import FleetCluster

HOST = "modelplane-authz.modelplane-system.svc.cluster.local"  # modelplane.components.gateway
PORT = 8080
SECRET_PATH = "/api/v1/namespaces/modelplane-system/secrets/modelplane-callers"
POLL = 0.5
# The labels components/gateway.py gives the Secret (AUTHZ_LABELS): the gateway stack made it.
GATEWAY_LABELS = {
    "app.kubernetes.io/managed-by": "modelplane",
    "app.kubernetes.io/part-of": "modelplane",
    "app.kubernetes.io/component": "authz",
    "app.kubernetes.io/instance": "modelplane-authz",
}
OLDEST = datetime.min.replace(tzinfo=UTC)


def authz_ip(slot: int) -> str:
    return f"10.255.{slot}.250"


def keys_path(state: Path) -> Path:
    return state / "authz" / "callers.json"


@dataclass(frozen=True)
class CallersSecret:
    """One cluster's `modelplane-callers` as the gateway stack made it: its table and when
    the Secret was created."""

    table: dict[str, Any]
    created: datetime


def gateway_table(
    clusters: list[FleetCluster], seen: dict[int, CallersSecret] | None = None
) -> dict[str, Any] | None:
    """The callers table of one cluster: of the clusters holding a `modelplane-callers` the
    gateway stack made, the newest Secret's (ties: the cluster listed first); {} when none
    does. None unless every API server answered, with the Secret or a 404 (the last table is
    kept then, as kubelet keeps a mounted Secret it cannot refresh): a busy gateway cluster
    that times out while the others say "no such Secret" must not read as "no callers" and
    refuse them all.

    ``seen``: each cluster's last Secret, kept across calls. A Secret that was there and is
    gone (404, or one the gateway stack did not make) keeps its last table and creation time,
    as kubelet keeps a deleted Secret's files in a running pod: a Secret replaced (delete,
    then create under the same name: a stack from before modelplane's providers updated
    Secrets in place, modelplane/components/providers.py) must not refuse every caller meanwhile. A
    gateway moved to another cluster is read from the new one at once (its Secret is newer
    than the kept one)."""
    seen = {} if seen is None else seen
    for i, cluster in enumerate(clusters):
        try:
            found = callers_secret(cluster.rest().get(SECRET_PATH, timeout=2))
        except KubeRestError as exc:
            if exc.status != 404:
                return None
            found = None
        except (OSError, ValueError):
            return None
        if found is not None:
            seen[i] = found
    held = [(i, seen[i]) for i in range(len(clusters)) if i in seen]
    if not held:
        return {}
    _, newest = max(held, key=lambda item: (item[1].created, -item[0]))
    return newest.table


def callers_secret(secret: dict[str, Any]) -> CallersSecret | None:
    """The Secret's table when the gateway stack made it (``GATEWAY_LABELS``, a
    `callers.json`), else None; ValueError when its `callers.json` is not a JSON object."""
    meta = secret.get("metadata") or {}
    labels = meta.get("labels") or {}
    raw = (secret.get("data") or {}).get("callers.json")
    if any(labels.get(k) != v for k, v in GATEWAY_LABELS.items()) or not raw:
        return None
    table = json.loads(base64.b64decode(raw))
    if not isinstance(table, dict):
        raise ValueError("callers.json is not a JSON object")
    return CallersSecret(table, created(meta.get("creationTimestamp")))


def created(stamp: object) -> datetime:
    """`metadata.creationTimestamp` (RFC 3339, UTC); the oldest time when absent or bad."""
    try:
        value = datetime.fromisoformat(str(stamp))
    except ValueError:
        return OLDEST
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def write_table(path: Path, table: dict[str, Any]) -> bool:
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
    seen: dict[int, CallersSecret] = {}
    write_table(path, gateway_table(clusters, seen) or {})
    server = authz.serve(path, authz_ip(int(data["slot"])), PORT)
    stop = threading.Event()

    def sync() -> None:
        while not stop.wait(POLL):
            table = gateway_table(clusters, seen)
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
