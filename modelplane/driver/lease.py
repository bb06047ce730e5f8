"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does
it (docs/architecture.md, "Reconcile as a service").

Every candidate tries, every ``retry_period``, to acquire or renew the Lease: it creates it
when it is missing, renews it when it holds it, and takes it over when its holder has not
renewed it for ``lease_duration`` -- measured on this process's own monotonic clock from the
moment it last saw the Lease change (never by comparing another host's timestamps, so
clock skew does not matter). Every write carries the Lease's ``resourceVersion``: of two
candidates writing at once, the API server accepts one and answers the other 409.

Fencing: :meth:`LeaderElector.fence` is None only while this process holds the Lease and
its last successful renewal is younger than ``renew_deadline`` (< ``lease_duration``):
a leader cut off from the API server stops acting before a standby may take over.
Releasing (SIGTERM) empties ``holderIdentity`` so a standby takes over at its next try.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from modelplane.observe.kube import KubeError, KubeReader, http_error_text, parse_kubeconfig

LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
DEFAULT_NAMESPACE = "modelplane-system"
DEFAULT_NAME = "modelplane-reconcile"


def default_identity() -> str:
    """``<hostname>_<pid>`` (a pod's hostname is its name)."""
    return f"{socket.gethostname()}_{os.getpid()}"


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str = DEFAULT_NAMESPACE
    name: str = DEFAULT_NAME
    identity: str = ""
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD

    def problems(self) -> list[str]:
        out = []
        if not self.lease_duration > self.renew_deadline:
            out.append("the lease duration must be longer than the renew deadline")
        if not self.renew_deadline > self.retry_period:
            out.append("the renew deadline must be longer than the retry period")
        if self.retry_period <= 0:
            out.append("the retry period must be positive")
        return out


class LeaseClient(KubeReader):
    """GET/POST/PUT of one Lease (the API server's JSON, with its resourceVersion)."""

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(self.server + path, data=data, headers=headers, method=method)
        try:
            with self._open(req) as resp:  # never follows a redirect (KubeReader)
                return dict(json.loads(resp.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            raise KubeError(exc.code, f"{method} {path}: {http_error_text(exc)}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise KubeError(0, f"cannot reach {self.server}: {reason}") from None


class LeaderElector:
    """One candidate. :meth:`try_once` is one acquire-or-renew step; :meth:`start` runs it
    every retry period in a daemon thread."""

    def __init__(
        self,
        client: LeaseClient,
        config: LeaseConfig,
        *,
        on_change: Callable[[bool, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.config = config
        self.identity = config.identity or default_identity()
        self.on_change = on_change or (lambda _leader, _why: None)
        self.clock = clock
        self.holder = ""  # the holder last seen
        self.reached = False  # the API server answered about the Lease at least once
        self.transitions = 0
        self._leader = False
        self._renewed_at: float | None = None  # when this process last renewed (monotonic)
        self._seen: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._seen_at = 0.0  # when that record was first seen (monotonic)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_kubeconfig(
        cls, text: str, base_dir: str | None, config: LeaseConfig, **kwargs: Any
    ) -> LeaderElector:
        timeout = max(1.0, min(5.0, config.retry_period * 2))
        return cls(LeaseClient(parse_kubeconfig(text, base_dir), timeout), config, **kwargs)

    @property
    def path(self) -> str:
        c = self.config
        return f"/apis/coordination.k8s.io/v1/namespaces/{c.namespace}/leases/{c.name}"

    # -- fencing ---------------------------------------------------------------------------

    @property
    def leader(self) -> bool:
        return self.fence() is None

    def fence(self) -> str | None:
        """None while this process may act; else why not."""
        with self._lock:
            if not self._leader or self._renewed_at is None:
                held = f" (held by {self.holder})" if self.holder else ""
                return f"{self.identity} does not hold lease {self.config.name}{held}"
            age = self.clock() - self._renewed_at
            if age >= self.config.renew_deadline:
                return (
                    f"lease {self.config.name} not renewed for {age:.1f}s "
                    f"(renew deadline {self.config.renew_deadline:.0f}s)"
                )
            return None

    # -- one step --------------------------------------------------------------------------

    def _spec(self, acquire: bool, transitions: int) -> dict[str, Any]:
        now = _now_micro()
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if acquire:
            spec["acquireTime"] = now
        return spec

    def try_once(self) -> bool:
        """Acquire or renew once; whether this process is the leader now."""
        try:
            return self._step()
        except KubeError as exc:
            self._set(False, f"lease {self.config.name}: {exc}", keep_renewal=True)
            return self.leader

    def _step(self) -> bool:
        c = self.config
        now = self.clock()
        try:
            lease = self.client.get(self.path)
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": c.name, "namespace": c.namespace},
                "spec": self._spec(True, 0),
            }
            try:
                self.client.request(
                    "POST", f"/apis/coordination.k8s.io/v1/namespaces/{c.namespace}/leases", body
                )
            except KubeError as exc2:
                if exc2.status == 409:  # another candidate created it first
                    return False
                raise
            self._renewed(now, "created the lease")
            return True
        self.reached = True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._seen:
            self._seen, self._seen_at = record, now
        self.holder = holder
        transitions = int(spec.get("leaseTransitions") or 0)
        self.transitions = transitions
        duration = float(spec.get("leaseDurationSeconds") or c.lease_duration)
        if holder and holder != self.identity and now - self._seen_at < duration:
            self._set(False, f"standby: {holder} holds lease {c.name}")
            return False
        acquire = holder != self.identity
        lease["spec"] = {**spec, **self._spec(acquire, transitions + (1 if acquire else 0))}
        if not acquire:
            lease["spec"]["acquireTime"] = spec.get("acquireTime") or _now_micro()
        try:  # the resourceVersion in metadata makes this a compare-and-swap
            self.client.request("PUT", self.path, lease)
        except KubeError as exc:
            if exc.status == 409:
                self._set(False, f"lease {c.name} changed under us (another candidate won)")
                return False
            raise
        self._renewed(now, "took over the lease" if acquire else "renewed")
        return True

    def _renewed(self, at: float, why: str) -> None:
        with self._lock:
            self._renewed_at = at
            self.holder = self.identity
            was, self._leader = self._leader, True
        if not was:
            self.on_change(True, f"{self.identity} leads ({why})")

    def _set(self, leader: bool, why: str, keep_renewal: bool = False) -> None:
        with self._lock:
            was = self._leader
            if not keep_renewal:
                self._leader = leader
            elif was and self._renewed_at is not None:
                # an API error: still the leader until the renew deadline passes
                if self.clock() - self._renewed_at >= self.config.renew_deadline:
                    self._leader = False
            else:
                self._leader = False
            now = self._leader
        if was != now:
            self.on_change(now, why)

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="lease", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.try_once()
            self._stop.wait(self.config.retry_period)

    def stop(self, release: bool = True) -> None:
        """Stop trying; with ``release``, give the lease up if held (a standby takes over
        at its next try instead of after the lease duration)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.retry_period + 5)
        held = self._leader
        with self._lock:
            self._leader = False
        if release and held:
            try:
                lease = self.client.get(self.path)
                spec = lease.get("spec") or {}
                if spec.get("holderIdentity") == self.identity:
                    lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}
                    self.client.request("PUT", self.path, lease)
            except KubeError:
                pass  # it expires on its own
            self.on_change(False, f"{self.identity} released lease {self.config.name}")

    def wait_for_leadership(self, stop: threading.Event) -> bool:
        """Block until leader (True) or ``stop`` (False)."""
        while not stop.is_set():
            if self.leader:
                return True
            stop.wait(min(0.5, self.config.retry_period))
        return False
