"""Readiness probes of dev-fleet serving pods, run by the pod agent against its stand-ins.

A kubelet runs a container's readiness probe and reports the pod ``Ready`` once every
container is ready. On the dev fleet kwok starts serving pods unready (``stages.py``) and the
pod agent plays the kubelet's part with these helpers: which probes a pod has
(``pod_probes``), running one (``run_probe``), and the status patch that records the outcome
(``readiness_patch``). ``initialDelaySeconds`` is ignored: the stand-in's load time plays it.

Pure except ``run_probe`` (one HTTP request or TCP connect, to a pod IP).
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MAX_TIMEOUT = 1.0


@dataclass(frozen=True)
class Probe:
    """One container's readiness probe, its port resolved to a number."""

    container: str
    kind: str  # "http" or "tcp"; anything else is not simulated
    port: int
    path: str = "/"
    period: float = 10.0
    timeout: float = MAX_TIMEOUT
    failure_threshold: int = 3


def _port(value: Any, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports (0: unknown)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        for port in container.get("ports", []) or []:
            if port.get("name") == value:
                return int(port.get("containerPort", 0))
    return 0


def pod_probes(pod: Mapping[str, Any]) -> dict[str, Probe | None]:
    """Each container's readiness probe (None: the container has none, so it is ready)."""
    out: dict[str, Probe | None] = {}
    for container in (pod.get("spec", {}) or {}).get("containers", []) or []:
        name = str(container.get("name", ""))
        spec = container.get("readinessProbe")
        if not isinstance(spec, Mapping):
            out[name] = None
            continue
        kind, port, path = "other", 0, "/"  # grpc, exec: nothing on the dev fleet answers
        if isinstance(spec.get("httpGet"), Mapping):
            get = spec["httpGet"]
            kind, port = "http", _port(get.get("port"), container)
            path = str(get.get("path") or "/")
        elif isinstance(spec.get("tcpSocket"), Mapping):
            kind, port = "tcp", _port(spec["tcpSocket"].get("port"), container)
        out[name] = Probe(
            name,
            kind,
            port,
            path,
            period=float(spec.get("periodSeconds", 10) or 10),
            timeout=min(MAX_TIMEOUT, float(spec.get("timeoutSeconds", 1) or 1)),
            failure_threshold=max(1, int(spec.get("failureThreshold", 3) or 3)),
        )
    return out


def run_probe(ip: str, probe: Probe) -> bool:
    """One probe against ``ip``: HTTP 200-399, or a TCP connection accepted."""
    try:
        if probe.kind == "tcp":
            with socket.create_connection((ip, probe.port), timeout=probe.timeout):
                return True
        conn = http.client.HTTPConnection(ip, probe.port, timeout=probe.timeout)
        try:
            conn.request("GET", probe.path, headers={"User-Agent": "kube-probe/dev-fleet"})
            status = conn.getresponse().status
        finally:
            conn.close()
        return 200 <= status < 400
    except OSError:
        return False


def is_ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status", {}) or {}).get("conditions", []) or []
    )


NOT_READY_REASON = "ContainersNotReady"


def held_unready(pod: Mapping[str, Any]) -> bool:
    """Someone else made the pod unready (a Ready condition False with a reason other than the
    kubelet's, e.g. a test forcing it): the prober leaves such a pod alone."""
    for c in (pod.get("status", {}) or {}).get("conditions", []) or []:
        if c.get("type") == "Ready" and c.get("status") == "False":
            return c.get("reason", NOT_READY_REASON) != NOT_READY_REASON
    return False


def readiness_patch(
    pod: Mapping[str, Any], ready: Mapping[str, bool], now: datetime | None = None
) -> dict[str, Any] | None:
    """The JSON merge patch that makes the pod's status say which containers are ready
    (``ready``: container -> ready; containers not named keep theirs) and whether the pod is
    (all of them); None when the status already says so. It carries the pod's
    ``resourceVersion``, so a concurrent change makes it fail (409) rather than be lost."""
    status = pod.get("status", {}) or {}
    containers = [dict(c) for c in status.get("containerStatuses", []) or []]
    for c in containers:
        if c.get("name") in ready:
            c["ready"] = bool(ready[c["name"]])
    pod_ready = all(c.get("ready") for c in containers) if containers else all(ready.values())
    unready = sorted(str(c.get("name")) for c in containers if not c.get("ready"))
    wanted = "True" if pod_ready else "False"
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions, changed = [], containers != list(status.get("containerStatuses", []) or [])
    for cond in status.get("conditions", []) or []:
        cond = dict(cond)
        if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") != wanted:
            changed = True
            cond.update(status=wanted, lastTransitionTime=stamp)
            if pod_ready:
                cond.pop("reason", None)
                cond.pop("message", None)
            else:
                cond["reason"] = NOT_READY_REASON
                cond["message"] = f"containers with unready status: [{' '.join(unready)}]"
        conditions.append(cond)
    if not changed:
        return None
    meta = pod.get("metadata", {}) or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"conditions": conditions, "containerStatuses": containers},
    }
