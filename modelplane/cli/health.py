"""What the CLI shows of the fleet's health: the readiness tables, `reconcile`, waiting.

`status` prints `readiness_tables` above the stack tables; `plan --observe` and `reconcile`
schedule on the observation (scheduling.md, "Health-aware scheduling").
"""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from modelplane.cli.output import log_console
from modelplane.health.readiness import READY, FleetReadiness, readiness
from modelplane.health.rules import DEFAULT_GRACE

if TYPE_CHECKING:
    from modelplane.observe.front_doors import FrontDoor

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """`30s`, `5m`, `1h`, `1m30s`, `250ms` or plain seconds (`45`, `0.5`)."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise typer.BadParameter(
                f"{text!r} is not a duration (e.g. 30s, 5m, 1h, 1m30s)"
            ) from None
        value = sum(float(n) * _UNITS[u] for n, u in parts)
    if value < 0:
        raise typer.BadParameter(f"{text!r} is negative")
    return value


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def startup(phases: dict[str, float]) -> str:
    """`created +2s, scheduled +2s, started +4s, ready +25s, routed +38s` (from `placed`,
    else from `created`)."""
    from modelplane.health.phases import durations

    after = durations(phases)
    first = "placed" if "placed" in after else "created"
    return ", ".join(f"{p} +{s:g}s" for p, s in after.items() if p != first) or "-"


def readiness_tables(view: FleetReadiness, *, wide: bool = False) -> list[Table]:
    """Deployments (READY n/m ...), then per replica (wide), services and clusters."""
    deployments = Table(title="deployments", title_justify="left")
    autoscaled = any(d.autoscaling for d in view.deployments)
    columns = ["NAME", "READY", "PLACED", "CLUSTERS", "AGE", "CONDITIONS"]
    if autoscaled:
        columns.insert(3, "AUTOSCALE")
    for col in columns:
        deployments.add_column(col, overflow="fold")
    for d in view.deployments:
        conditions = Text()
        for c in d.conditions:
            style = "green" if c.status == "True" else "yellow"
            if conditions:
                conditions.append("\n")
            conditions.append(f"{c.type}={c.status}", style=style)
            if c.status != "True":
                conditions.append(f" {c.reason}: {c.message}")
        ready = Text(f"{d.ready}/{d.desired}", style="green" if d.ready >= d.desired else "yellow")
        cells: list[Any] = [d.key, ready, f"{d.placed}/{d.desired}"]
        if autoscaled:
            auto = "-"
            if d.autoscaling:
                auto = f"{d.desired} ({d.autoscaling[0]}..{d.autoscaling[1]})"
                if d.desired == 0:
                    auto += "; scaled to zero"
                if d.draining:
                    auto += f"; draining {', '.join(d.draining)}"
            cells.append(auto)
        cells += [",".join(d.clusters) or "-", _age(d.age), conditions]
        deployments.add_row(*cells)
    tables = [deployments]
    if wide:
        replicas = Table(title="replicas", title_justify="left")
        for col in (
            "DEPLOYMENT",
            "REPLICA",
            "CLUSTER",
            "POOL",
            "PHASE",
            "PODS",
            "AGE",
            "STARTED (s after placed)",
            "REASON",
        ):
            replicas.add_column(col, overflow="fold")
        for d in view.deployments:
            for r in d.replicas:
                phase = Text(r.phase, style="green" if r.phase == READY else "yellow")
                replicas.add_row(
                    d.key,
                    r.name,
                    r.cluster,
                    ",".join(f"{k}={v}" for k, v in r.pools.items()),
                    phase,
                    f"{r.ready_pods}/{r.expected_pods}",
                    _age(r.age),
                    startup(r.phases),
                    r.reason,
                )
        tables.append(replicas)
    if view.services:
        services = Table(title="services", title_justify="left")
        for col in ("NAME", "URL", "ROUTABLE", "NOT ROUTABLE"):
            services.add_column(col, overflow="fold")
        for s in view.services:
            services.add_row(
                s.key,
                s.url or "(no address yet)",
                f"{s.routable}/{s.endpoints}",
                "\n".join([*s.unroutable, *([s.routes_error] if s.routes_error else [])]),
            )
        tables.append(services)
    if view.caches:
        caches = Table(title="model caches", title_justify="left")
        for col in ("NAME", "HYDRATED", "NOT HYDRATED"):
            caches.add_column(col, overflow="fold")
        for c in view.caches:
            caches.add_row(
                c.key,
                f"{c.hydrated}/{len(c.clusters)}",
                "\n".join(
                    f"{name}: {state}" + (f" ({why})" if why else "")
                    for name, (state, why) in c.clusters.items()
                    if state != "Hydrated"
                ),
            )
        tables.append(caches)
    if view.front_doors:
        doors = Table(title="front doors", title_justify="left")
        for col in ("CLUSTER", "STACK", "ADDRESS", "HEALTH", "MESSAGE"):
            doors.add_column(col, overflow="fold")
        for d in view.front_doors:
            doors.add_row(
                d.cluster,
                d.stack,
                d.address or "-",
                Text(d.health, style="green" if d.health == "Serving" else "red"),
                d.message,
            )
        tables.append(doors)
    clusters = Table(title="clusters", title_justify="left")
    for col in ("NAME", "HEALTH", "NODES READY", "DEVICES", "GATEWAY", "MESSAGE"):
        clusters.add_column(col, overflow="fold")
    for c in view.clusters:
        health = Text(c.health, style="green" if c.health == "Healthy" else "yellow")
        clusters.add_row(
            c.name,
            health,
            c.nodes or "-",
            "-" if c.devices is None else str(c.devices),
            c.gateway_address or "-",
            c.message,
        )
    tables.append(clusters)
    return tables


def cloud_kubeconfigs(fleet: Any) -> dict[str, str]:
    """GKE/EKS kubeconfigs from their cluster stacks' outputs (none when the backend cannot
    be read: those clusters are then not observed)."""
    from modelplane.driver.errors import DriverError

    try:
        return dict(fleet.cluster_kubeconfigs())
    except DriverError:
        return {}


def fleet_readiness(
    fleet: Any,
    service_urls: dict[str, Any] | None = None,
    *,
    grace: float = DEFAULT_GRACE,
    timeout: float = 5.0,
    kubeconfigs: dict[str, str] | None = None,
    front_doors: Sequence[FrontDoor] = (),
) -> FleetReadiness:
    """Observe the clusters of a loaded `modelplane.Fleet` and build its readiness view
    (`kubeconfigs`: the cloud clusters' ones, read from their stacks when not given;
    `front_doors`: each is asked its health path, all at once)."""
    from modelplane.health.readiness import FrontDoorProbe
    from modelplane.health.rules import observed_schedule
    from modelplane.observe import observe_fleet
    from modelplane.observe.front_doors import probe_all

    observation = observe_fleet(
        fleet.spec,
        fleet.path,
        lock=fleet.previous,
        env=fleet.env,
        timeout=timeout,
        kubeconfigs=cloud_kubeconfigs(fleet) if kubeconfigs is None else kubeconfigs,
    )
    since = fleet.runtime.unhealthy_since()
    result, _ = observed_schedule(
        fleet.spec,
        fleet.previous,
        observation,
        since,
        observation.at,
        grace,
        fleet.runtime.capacity(),
    )
    shortfall = {k: r.reasons for k, r in result.report.items() if r.unplaced}
    urls = {k: v if isinstance(v, str) else None for k, v in (service_urls or {}).items()}
    https = fleet.spec.gateway is not None and fleet.spec.gateway.spec.tls is not None
    answers = probe_all(front_doors, https, timeout=min(timeout, 3.0))
    probes = {
        d.cluster: FrontDoorProbe(d.stack, d.address, answers[d.cluster]) for d in front_doors
    }
    return readiness(
        fleet.spec,
        fleet.previous,
        observation,
        shortfall=shortfall,
        service_urls=urls,
        since=since,
        phases=fleet.runtime.replica_phases(),
        front_doors=probes,
    )


# --------------------------------------------------------------------------- reconcile

GraceOpt = Annotated[
    str,
    typer.Option(
        "--grace",
        help="How long replicas stay on an unhealthy cluster before they are re-placed "
        "(e.g. 5m, 90s).",
    ),
]


def reconcile(
    fleet: Annotated[Path, typer.Argument(help="The fleet directory.", show_default=False)],
    interval: Annotated[
        str, typer.Option("--interval", help="Time between rounds (e.g. 30s, 2m).")
    ] = "30s",
    once: Annotated[bool, typer.Option("--once", help="One round, then exit.")] = False,
    probe: Annotated[
        str,
        typer.Option(
            "--probe",
            help="Between rounds, check this often whether each cluster's API server still "
            "answers (or answers again), and whether the OpenAI router holds requests for a "
            "model at zero; either starts the next round at once. off: never.",
        ),
    ] = "2s",
    grace: GraceOpt = "5m",
    spill_after: Annotated[
        str,
        typer.Option(
            "--spill-after",
            help="A replica whose pods stay Unschedulable this long (no node fits, a cloud "
            "scale-up failed) is placed again elsewhere (e.g. 10m).",
        ),
    ] = "10m",
    capacity_cooldown: Annotated[
        str,
        typer.Option(
            "--capacity-cooldown",
            help="How long the pool it could not get onto takes no new replica, unless a "
            "node more becomes Ready (e.g. 30m).",
        ),
    ] = "30m",
    timeout: Annotated[
        str, typer.Option("--timeout", help="Per-request timeout when observing a cluster.")
    ] = "5s",
    lock: Annotated[Path | None, typer.Option(help="Placement lock.", show_default=False)] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Pulumi backend URL.", show_default=False)
    ] = None,
    secrets_provider: Annotated[
        str | None, typer.Option("--secrets-provider", show_default=False)
    ] = None,
    parallel: Annotated[int, typer.Option("--parallel", "-p", min=1)] = 4,
    output: Annotated[
        str, typer.Option("--output", "-o", help="table (one line per event) or json (lines).")
    ] = "table",
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect",
            help="Run as one of several replicas: only the holder of a coordination.k8s.io "
            "Lease on the management cluster acts; the others stand by.",
        ),
    ] = False,
    lease_kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--lease-kubeconfig",
            help="The management cluster holding the Lease (default: --lease-cluster, "
            "$KUBECONFIG, or the pod's service account).",
            show_default=False,
        ),
    ] = None,
    lease_cluster: Annotated[
        str | None,
        typer.Option(
            "--lease-cluster", help="A fleet cluster to hold the Lease.", show_default=False
        ),
    ] = None,
    lease_namespace: Annotated[str, typer.Option("--lease-namespace")] = "modelplane-system",
    lease_name: Annotated[str, typer.Option("--lease-name")] = "modelplane-reconcile",
    lease_duration: Annotated[str, typer.Option("--lease-duration")] = "15s",
    renew_deadline: Annotated[str, typer.Option("--renew-deadline")] = "10s",
    retry_period: Annotated[str, typer.Option("--retry-period")] = "2s",
    identity: Annotated[
        str | None,
        typer.Option(
            "--identity", help="Lease holder name (default <hostname>_<pid>).", show_default=False
        ),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            help="Serve /healthz, /readyz and Prometheus /metrics on HOST:PORT "
            "(e.g. 127.0.0.1:9464).",
            show_default=False,
        ),
    ] = None,
    log_format: Annotated[
        str, typer.Option("--log-format", help="text, or json (one object per line on stderr).")
    ] = "text",
) -> None:
    """Keep the fleet converged: observe every cluster, plan, `up` what changed, repeat.

    Each round re-reads the specs and the lock, observes the clusters (API, Ready nodes per
    pool, gateway address, replicas), schedules with the health rules (no new replicas on
    an unhealthy cluster; replicas there are re-placed after --grace), writes the lock when
    it changes and runs only the stacks whose inputs changed. A stack locked by another
    update (e.g. CI running `up`) is retried next round. SIGTERM or Ctrl-C stops after the
    current round. With --once: exit 1 if the round failed.

    With --leader-elect, several replicas run and only the holder of the Lease acts: it
    checks it still holds the Lease before every stack's `up` and stops acting when it
    loses it; a standby takes over within the lease duration. SIGTERM finishes the
    current round (the stack in flight included) and releases the Lease.
    """
    from modelplane.driver.lease import LeaseConfig
    from modelplane.driver.reconcile import Reconciler
    from modelplane.driver.service import Metrics, log_json, serve

    if output not in ("table", "json"):
        raise typer.BadParameter("--output is table or json")
    if log_format not in ("text", "json"):
        raise typer.BadParameter("--log-format is text or json")
    if log_format == "json":
        output = "jsonl"  # the rounds as log lines too: one JSON object per line
    metrics = Metrics()

    def say(event: str, text: str, **fields: Any) -> None:
        if log_format == "json":
            log_json(event, message=text, **fields)
        else:
            log_console(stderr=True).print(f"{time.strftime('%H:%M:%S')} {text}", highlight=False)

    elector = None
    if leader_elect:
        from modelplane.driver.leadership import elector as make_elector

        def changed(leader: bool, why: str) -> None:
            metrics.set_leader(leader)
            say("leader" if leader else "standby", why, leader=leader)

        elector = make_elector(
            fleet,
            LeaseConfig(
                lease_namespace,
                lease_name,
                identity or "",
                parse_duration(lease_duration),
                parse_duration(renew_deadline),
                parse_duration(retry_period),
            ),
            kubeconfig=lease_kubeconfig,
            cluster=lease_cluster,
            on_change=changed,
        )
    server = serve(listen, metrics) if listen else None
    every = parse_duration(interval)
    probe_every = 0.0 if probe == "off" else parse_duration(probe)
    reconciler = Reconciler(
        fleet,
        lock=lock,
        backend=backend,
        secrets_provider=secrets_provider,
        grace=parse_duration(grace),
        timeout=parse_duration(timeout),
        parallel=parallel,
        # a Prometheus sample older than two rounds is stale: missing, never a scale-in
        metrics_stale_after=2 * every,
        spill_after=parse_duration(spill_after),
        cooldown=parse_duration(capacity_cooldown),
        fence=elector.fence if elector is not None else None,
    )
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    if elector is None:
        metrics.set_leader(True)
    else:
        say("candidate", f"{elector.identity} wants lease {lease_namespace}/{lease_name}")
        elector.start()
    try:
        _reconcile_rounds(reconciler, stop, once, output, every, probe_every, elector, metrics)
    finally:
        # The replicas it kept out of the routes until Ready are its own view: a plain
        # `up` after it routes every placed replica (status.md, "Routes wait for Ready").
        # A standby never kept any: it leaves the leader's alone.
        if elector is None or elector.leader:
            reconciler.close()
        if elector is not None:
            elector.stop(release=True)
        if server is not None:
            server.shutdown()


def _reconcile_rounds(
    reconciler: Any,
    stop: threading.Event,
    once: bool,
    output: str,
    every: float,
    probe_every: float,
    elector: Any = None,
    metrics: Any = None,
) -> None:
    from modelplane.cli.output import log_console, print_json
    from modelplane.driver.reconcile import WAKE_PREFIX

    err, out = log_console(stderr=True), log_console(stderr=False)

    while True:
        if elector is not None:
            while not elector.leader and not stop.is_set():
                if metrics is not None:
                    metrics.tick()
                    if elector.reached:  # a standby that reaches the Lease is ready
                        metrics.mark_ready()
                stop.wait(min(0.5, elector.config.retry_period))
            if stop.is_set():
                _stopped(err, output)
                return
        current = reconciler.round()
        if metrics is not None:
            metrics.record_round(current)
        if output == "jsonl":
            from modelplane.driver.service import log_json

            log_json(
                "round", sys.stdout, level="info" if current.ok else "error", **current.as_json()
            )
        elif output == "json":
            print_json(current.as_json())
        else:
            _say_round(current, out, err)
        if once:
            if not current.ok:
                raise typer.Exit(1)
            return
        # A fixed cadence: a round that ran an `up` does not delay the next observation.
        # Meanwhile the cheap probe may start the next round early.
        changed = _wait_for_next_round(reconciler, stop, every - current.duration, probe_every)
        if changed:
            if output in ("json", "jsonl"):
                print_json({"probe": changed, "at": time.time()})
            else:
                said = ", ".join(
                    f"requests held for {name[len(WAKE_PREFIX) :]}"
                    if name.startswith(WAKE_PREFIX)
                    else f"{name} {'answers again' if up else 'stopped answering'}"
                    for name, up in sorted(changed.items())
                )
                out.print(f"{time.strftime('%H:%M:%S')} probe: {said}: round now", highlight=False)
        if stop.is_set():
            _stopped(err, output)
            return


def _stopped(err: Any, output: str) -> None:
    if output == "jsonl":
        from modelplane.driver.service import log_json

        log_json("stopped", message="reconcile: stopped")
    else:
        err.print("reconcile: stopped", highlight=False)


def _wait_for_next_round(
    reconciler: Any, stop: threading.Event, wait: float, probe_every: float
) -> dict[str, bool]:
    """Wait up to ``wait`` seconds (or until ``stop``), probing the clusters every
    ``probe_every`` seconds (0: never); return early with the clusters whose API server
    stopped (False) or started (True) answering since the last round."""
    deadline = time.monotonic() + max(0.0, wait)
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if stop.wait(min(left, probe_every) if probe_every > 0 else left):
            break
        if probe_every > 0 and time.monotonic() < deadline:
            changed: dict[str, bool] = reconciler.probe()
            if changed:
                return changed
    return {}


def _say_round(current: Any, out: Any, err: Any) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime(current.started))
    head = f"{stamp} round {current.number}"
    if current.error:
        err.print(f"{head}: [bold red]error[/] {current.error}", highlight=False)
        return
    view = current.view
    for name, h in view.health.items() if view else []:
        if h.problem:
            state = "evicting" if name in view.evicting else "keeping its replicas (grace)"
            out.print(f"{head}: cluster {name} {h.problem}; {state}", highlight=False)
    for key, d in current.autoscale.items():
        if d.changed:
            out.print(
                f"{head}: autoscale {key} {d.current} -> {d.desired} ({d.describe()})",
                highlight=False,
            )
        for note in d.notes:
            out.print(f"{head}: autoscale {key}: {note}", highlight=False)
        # why Prometheus was not used, with the rounds that say something about the count
        for replica, why in d.fallbacks if (d.changed or d.notes) else ():
            out.print(
                f"{head}: autoscale {key}: {replica} metrics through the pod proxy ({why})",
                highlight=False,
            )
    for name in current.draining:
        out.print(f"{head}: draining replica {name} (out of the routes)", highlight=False)
    for name, why in current.drained.items():
        out.print(f"{head}: drained replica {name} ({why})", highlight=False)
    for name in current.moved:
        out.print(f"{head}: removed replica {name}", highlight=False)
    for name in current.added:
        out.print(f"{head}: placed replica {name}", highlight=False)
    for name, why in current.unready.items():
        out.print(f"{head}: replica {name} out of the routes until Ready ({why})", highlight=False)
    if current.plan is not None:
        for key, rep in current.plan.report.items():
            if rep.unplaced:
                out.print(
                    f"{head}: short {key}: {rep.unplaced} of {rep.desired} not placed: "
                    + "; ".join(rep.reasons),
                    highlight=False,
                )
    for line in current.orphans_deleted:
        out.print(f"{head}: orphan deleted: {line}", highlight=False)
    for line in current.orphan_errors:
        err.print(f"{head}: orphan not deleted yet: {line}", highlight=False)
    first = current.routes_first
    if first is not None:
        out.print(
            f"{head}: routes first (unroutable: {', '.join(current.unroutable) or 'none'}): "
            f"gateway {'ok' if first.ok else 'FAILED'} in {first.duration:.1f}s",
            highlight=False,
        )
    run = current.run
    if current.skipped_up:
        out.print(f"{head}: nothing changed ({current.duration:.1f}s)", highlight=False)
    elif run is not None:
        ran = [r.stack for r in run.results if r.outcome.value == "succeeded"]
        out.print(
            f"{head}: up {'ok' if run.ok else 'FAILED'} in {run.duration:.1f}s; ran "
            f"{', '.join(ran) or 'nothing'}" + ("; lock written" if run.lock_written else ""),
            highlight=False,
        )
        for name in current.locked:
            err.print(
                f"{head}: stack {name} is locked by another update; retrying next round",
                highlight=False,
            )
        for r in run.results:
            if r.error and r.outcome.value != "locked":
                err.print(f"{head}: {r.stack} {r.outcome.value}: {r.error}", highlight=False)


def wait_ready(
    fleet: Any, keys: list[str], timeout: float, *, interval: float = 2.0
) -> FleetReadiness:
    """Observe until every deployment in `keys` is READY or `timeout` passed; the last view."""
    deadline = time.monotonic() + timeout
    kubeconfigs = cloud_kubeconfigs(fleet)
    while True:
        view = fleet_readiness(fleet, kubeconfigs=kubeconfigs)
        pending = [d for d in view.deployments if d.key in keys and d.ready < d.desired]
        if not pending or time.monotonic() >= deadline:
            return view
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
