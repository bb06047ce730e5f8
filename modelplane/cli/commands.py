"""The pure verbs: validate, plan, schema. Engine verbs and sub-apps are mounted here too."""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelplane import cli
from modelplane.api.loader import load_fleet
from modelplane.cli import app
from modelplane.cli.output import (
    EXIT_INVALID,
    error_table,
    fail,
    get_console,
    github_annotations,
    print_json,
    warning_table,
)
from modelplane.lock import write_lock
from modelplane.planning import PlanOutcome, plan_fleet
from modelplane.scheduler import DEFAULT_TIME_LIMIT, OptimizeReport
from modelplane.secrets import gateway_secret_errors

if TYPE_CHECKING:
    from rich.table import Table

    from modelplane.scheduler.survive import SurviveReport


def escape(text: str) -> str:
    """rich's markup escape, imported when first needed (`--output json` needs no rich)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class Output(StrEnum):
    table = "table"
    json = "json"
    github = "github"


FleetDir = Annotated[Path, typer.Argument(help="The fleet directory (or a single spec file).")]
OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        help="table for people, json for machines, github for workflow annotations.",
    ),
]


StrictOpt = Annotated[
    bool,
    typer.Option("--strict", help="Warnings are errors (exit 2)."),
]


@app.command()
def validate(fleet: FleetDir, output: OutputOpt = Output.table, strict: StrictOpt = False) -> None:
    """Check every spec of a fleet: schema, references, CEL. Exit 2 listing every error;
    warnings (valid, but almost surely unintended) are listed too, errors with --strict."""
    result = load_fleet(fleet)
    errors, warnings = result.errors, result.warnings
    if not errors:
        # The gateway's secrets (callers' keys, TLS) that `up` could not read here: the specs
        # are valid, the environment lacks a secret (a warning; `up` refuses it, api.md).
        root = Path(fleet) if Path(fleet).is_dir() else Path(fleet).parent
        warnings = sorted(warnings + gateway_secret_errors(result.fleet, root, os.environ))
    if strict:
        errors, warnings = sorted(errors + warnings), []
    if output is Output.json:
        print_json(
            {"errors": [e.as_dict() for e in errors], "warnings": [w.as_dict() for w in warnings]}
        )
    elif output is Output.github:
        sys.stdout.write(github_annotations(errors))
        sys.stdout.write(github_annotations(warnings, "warning"))
    else:
        if errors:
            get_console().print(error_table(errors))
        if warnings:
            get_console().print(warning_table(warnings))
        if not errors:
            f = result.fleet
            get_console().print(
                f"[green]valid[/]: {len(f.classes)} classes, {len(f.clusters)} clusters, "
                f"{len(f.deployments)} deployments, {len(f.services)} services, "
                f"{len(f.endpoints)} endpoints, {len(f.caches)} caches"
                + (", 1 gateway" if f.gateway else "")
                + (f", {len(warnings)} warning(s)" if warnings else "")
            )
    if errors:
        raise typer.Exit(EXIT_INVALID)


@app.command()
def plan(
    fleet: FleetDir,
    lock: Annotated[
        Path | None, typer.Option(help="Placement lock (default: <fleet>/modelplane.lock.yaml).")
    ] = None,
    output: OutputOpt = Output.table,
    write: Annotated[bool, typer.Option("--write", help="Update the lock file.")] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Warnings are errors (exit 2); exit 1 when a deployment is short."
        ),
    ] = False,
    observe: Annotated[
        bool,
        typer.Option(
            "--observe",
            help="Observe the clusters and apply the health rules (docs/scheduling.md).",
        ),
    ] = False,
    grace: Annotated[
        str, typer.Option("--grace", help="With --observe: the grace period (e.g. 5m).")
    ] = "5m",
    optimize: Annotated[
        bool,
        typer.Option("--optimize", help="Place new replicas with a MILP solver (HiGHS)."),
    ] = False,
    time_limit: Annotated[
        float,
        typer.Option("--time-limit", min=0.1, help="Seconds the solver may take (--optimize)."),
    ] = DEFAULT_TIME_LIMIT,
    survive: Annotated[
        int | None,
        typer.Option(
            "--survive",
            min=1,
            help="What if any N clusters were lost: re-plan each case by failover's rules; "
            "exit 1 when one leaves a deployment short (docs/scheduling.md).",
        ),
    ] = None,
    survive_label: Annotated[
        str | None,
        typer.Option(
            "--survive-label",
            help="What if all clusters with one value of this label were lost (e.g. a "
            "region), for each value; exit 1 when one leaves a deployment short.",
        ),
    ] = None,
    explain: Annotated[
        list[str] | None,
        typer.Option(
            "--explain",
            help="ns/name (repeatable, or `short`): per cluster, the first rule that "
            "rejects another replica, with numbers; per replica, why it is where it is.",
        ),
    ] = None,
) -> None:
    """Schedule every replica onto a cluster and pool (a dry run unless --write).

    Kept replicas stay where the lock has them; shortfalls are reported with the
    reason per cluster. Exit 0 when valid, 2 on validation errors.
    """
    if observe and optimize:
        get_console().print(
            "[red]error[/]: --optimize and --observe cannot be combined", highlight=False
        )
        raise typer.Exit(EXIT_INVALID)
    if survive is not None and survive_label is not None:
        get_console().print(
            "[red]error[/]: --survive and --survive-label cannot be combined", highlight=False
        )
        raise typer.Exit(EXIT_INVALID)
    if observe and (survive is not None or survive_label is not None or explain):
        get_console().print(
            "[red]error[/]: --survive, --survive-label and --explain work on the specs' plan, "
            "not with --observe",
            highlight=False,
        )
        raise typer.Exit(EXIT_INVALID)
    cordons = _cordons(fleet)
    outcome = plan_fleet(
        fleet,
        lock,
        optimize=optimize,
        time_limit=time_limit,
        strict=strict,
        require_specs=write,
        cordons=cordons,
    )
    if not outcome.errors:
        if explain is not None and output is Output.json:
            explain = [*explain, "short"]  # JSON: every short deployment's evidence too
        problems = outcome.what_if(losses=survive, label=survive_label, explain=explain)
        for problem in problems:
            get_console(stderr=True).print(f"[red]error[/]: {escape(problem)}", highlight=False)
        if problems:
            raise typer.Exit(EXIT_INVALID)
    health: dict[str, str] = {}
    if observe and not outcome.errors:
        health = _observe(fleet, outcome, grace)
    if output is Output.json:
        print_json(
            {
                **outcome.as_json(),
                "cordoned": cordons,
                **({"unhealthy": health} if observe else {}),
            }
        )
    elif output is Output.github:
        sys.stdout.write(github_annotations(outcome.errors))
        sys.stdout.write(github_annotations(outcome.warnings, "warning"))
    elif outcome.errors:
        get_console().print(error_table(outcome.errors))
        if outcome.warnings:
            get_console().print(warning_table(outcome.warnings))
    else:
        get_console().print(_plan_table(outcome.as_json()["deployments"]))
        for key, progress in outcome.rollouts().items():
            get_console().print(f"[cyan]{escape(key)}[/] {escape(progress.line)}", highlight=False)
        for key, removed in outcome.removed.items():
            get_console().print(
                f"[yellow]removed[/] {escape(key)}: {escape(removed.note)}",
                highlight=False,
            )
        for name, ranges in outcome.addresses().items():
            get_console().print(
                f"[cyan]addresses[/] {escape(name)}: {escape(_ranges_line(ranges))}",
                highlight=False,
            )
        for path in outcome.paths():
            stack = f" (stack {path['stack']})" if path["stack"] else ""
            get_console().print(
                f"[cyan]path[/] {escape(path['from'])} -> {escape(path['to'])}: "
                f"{escape(path['how'])}{escape(stack)}",
                highlight=False,
            )
        for key, volumes in outcome.caches().items():
            size = outcome.fleet.caches[key].spec.size_gib
            for cluster, volume in volumes.items():
                get_console().print(
                    f"[cyan]cache[/] {escape(key)} on {escape(cluster)}: "
                    f"{escape(volume.describe(size))}",
                    highlight=False,
                )
        for name, problem in health.items():
            get_console().print(
                f"[yellow]unhealthy[/] {escape(name)}: {escape(problem)}", highlight=False
            )
        for name in cordons:
            get_console().print(
                f"[yellow]cordoned[/] {escape(name)}: no new replicas; its replicas move "
                "elsewhere (`modelplane drain`), until `modelplane uncordon`",
                highlight=False,
            )
        if outcome.result is not None and outcome.result.optimize is not None:
            get_console().print(_optimize_line(outcome.result.optimize), highlight=False)
        for key, evidence in outcome.explain.items():
            get_console().print(_explain_table(key, evidence))
        if outcome.survive is not None:
            _print_survive(outcome.survive)
        if outcome.warnings:
            get_console().print(warning_table(outcome.warnings))
    if outcome.errors:
        raise typer.Exit(EXIT_INVALID)
    assert outcome.result is not None
    if write:
        try:
            changed = write_lock(outcome.lock_path, outcome.result.lock)
        except OSError as exc:
            fail(f"cannot write the lock {outcome.lock_path}: {exc.strerror or exc}", EXIT_INVALID)
        if output is Output.table:
            get_console().print(
                f"{'wrote' if changed else 'unchanged'}: {escape(str(outcome.lock_path))}",
                highlight=False,
            )
    if strict and outcome.shortfall:
        raise typer.Exit(1)
    if outcome.survive is not None and not outcome.survive.survives:
        raise typer.Exit(1)


def _ranges_line(ranges: dict[str, Any]) -> str:
    """`block 10.0.0.0/16 (fleet address plan): nodes 10.0.128.0/20, ...`."""
    origin = {
        "plan": f"block {ranges.get('block')} of the fleet address plan",
        "kept": "kept from before the fleet address plan",
        "declared": "declared",
    }[ranges["from"]]
    fields = []
    for key, value in ranges.items():
        if key in ("from", "block"):
            continue
        fields.append(f"{key} {', '.join(value) if isinstance(value, list) else value}")
    return f"{origin}: {'; '.join(fields)}"


def _print_survive(report: SurviveReport) -> None:
    from rich.table import Table

    console = get_console()
    colour = "green" if report.survives else "red"
    console.print(f"[{colour}]{escape(report.line())}[/]", highlight=False)
    if report.failing:
        table = Table(title="scenarios that leave a deployment short", title_justify="left")
        for col in ("lost", "deployment", "replicas short", "devices missing"):
            table.add_column(col, overflow="fold")
        for scenario in report.failing[:SURVIVE_ROWS]:
            first = True
            for key, short in scenario.short.items():
                devices = ", ".join(f"{n} {cls}" for cls, n in short.devices.items())
                cells = (scenario.name if first else "", key, str(short.replicas), devices)
                table.add_row(*map(escape, cells))
                first = False
        console.print(table)
        if len(report.failing) > SURVIVE_ROWS:
            console.print(f"... and {len(report.failing) - SURVIVE_ROWS} more (--output json)")
    free = ", ".join(
        f"{cls} {n} -> {report.free_after.get(cls, 0)}" for cls, n in report.free.items()
    )
    console.print(f"free devices per class, now -> after the worst loss: {escape(free)}")
    if len(report.headroom) <= HEADROOM_ROWS:
        room = ", ".join(
            f"{k} +{n} -> +{report.headroom_after[k]}" for k, n in report.headroom.items()
        )
        console.print(f"headroom (more replicas), now -> after the worst loss: {escape(room)}")


SURVIVE_ROWS = 20
HEADROOM_ROWS = 30


def _explain_table(key: str, evidence: dict) -> Table:
    from rich.table import Table

    table = Table(
        title=f"explain {key}: {evidence['placed']} of {evidence['desired']} placed",
        title_justify="left",
    )
    for col in ("cluster", "first failing rule", "evidence"):
        table.add_column(col, overflow="fold")
    for c in evidence["clusters"]:
        numbers = "; ".join(
            f"{p['role']} on {p['pool']}: {p['freeNodes']} free nodes of {p['neededNodes']} "
            f"needed, {p['freeDevices']} free devices of {p['neededDevices']} needed"
            for p in c.get("pools", [])
        )
        extra = c["message"] + (f" ({numbers})" if numbers else "")
        if c.get("selectors"):
            extra += f" (selectors: {'; '.join(c['selectors'])})"
        table.add_row(*map(escape, (c["cluster"], c["rule"] or "-", extra)))
    for r in evidence["replicas"]:
        cost = f" ({r['costPerHour']:.2f} per hour)" if r.get("costPerHour") is not None else ""
        table.add_row(escape(r["cluster"]), "placed", escape(f"{r['name']}: {r['why']}{cost}"))
    return table


def _cordons(fleet: Path) -> list[str]:
    """The clusters `modelplane drain` cordoned (`.modelplane/cordons.json`)."""
    from modelplane.driver.settings import state_root
    from modelplane.driver.state import RuntimeState

    return sorted(RuntimeState.at(state_root(fleet)).cordons())


def _observe(fleet: Path, outcome: PlanOutcome, grace: str) -> dict[str, str]:
    """Re-plan `outcome` on the observed clusters; the unhealthy ones and why."""
    from modelplane.cli.health import cloud_kubeconfigs, parse_duration
    from modelplane.driver.fleet import Fleet
    from modelplane.health.rules import observed_schedule
    from modelplane.observe import observe_fleet

    driver = Fleet(fleet, outcome.fleet, outcome.previous, outcome.lock_path)
    observation = observe_fleet(
        outcome.fleet, fleet, lock=outcome.previous, kubeconfigs=cloud_kubeconfigs(driver)
    )
    since = driver.runtime.unhealthy_since()
    outcome.result, view = observed_schedule(
        outcome.fleet,
        outcome.previous,
        observation,
        since,
        observation.at,
        parse_duration(grace),
        driver.runtime.capacity(),
    )
    return {
        name: h.problem + (" (past the grace period: re-placing)" if name in view.evicting else "")
        for name, h in view.health.items()
        if h.problem
    }


def _optimize_line(report: OptimizeReport) -> str:
    if report.optimal:
        head = f"optimal ({report.status}, {report.seconds:.2f} s)"
    else:
        head = (
            f"not proven optimal: the solver stopped ({report.status}) after "
            f"{report.seconds:.2f} s; its best solution was used"
        )
    return f"optimize: {head}; {report.placed_gpus} GPUs placed"


def _plan_table(deployments: dict) -> Table:
    from rich.table import Table

    table = Table(title="placement", title_justify="left")
    for col in ("deployment", "replica", "cluster", "index", "pools", "short by / why"):
        table.add_column(col, overflow="fold")
    for key, d in deployments.items():
        first = True
        auto = d.get("autoscaling")
        label = key
        if auto:
            bounds = f"{auto['minReplicas']}..{auto['maxReplicas']}"
            label += f"\nautoscaled {auto['replicas']} ({bounds})"
        if d.get("placementPolicy") == "Cheapest":
            label += "\ncheapest first"
        if "costPerHour" in d:
            label += f"\n{d['costPerHour']:.2f} per hour"
        for r in d["replicas"]:
            pools = ", ".join(f"{k}={v}" for k, v in r["pools"].items())
            note = "draining (scale-in)" if r.get("draining") else ""
            cells = (label if first else "", r["name"], r["cluster"], str(r["index"]), pools, note)
            table.add_row(*map(escape, cells))
            first = False
        if d["unplaced"] or not d["replicas"]:
            why = "\n".join(d["reasons"]) or ("replicas: 0" if not d["desired"] else "")
            short = f"{d['unplaced']} of {d['desired']}: " if d["unplaced"] else ""
            table.add_row(escape(label) if first else "", "", "", "", "", escape(f"{short}{why}"))
    return table


@app.command()
def schema(
    out: Annotated[Path, typer.Option(help="Directory for the JSON Schema files.")] = Path(
        "schemas"
    ),
) -> None:
    """Write JSON Schemas for editors (`# yaml-language-server: $schema=...`): one per kind,
    and modelplane.schema.json, which dispatches on `kind` (for multi-kind files)."""
    from modelplane.api.kinds import KINDS
    from modelplane.api.placement_lock import PlacementLock
    from modelplane.cli.schema import COMBINED, combined_schema, kind_schema

    out.mkdir(parents=True, exist_ok=True)
    docs = {
        f"{kind}.schema.json": kind_schema(kind, model)
        for kind, model in {**KINDS, "PlacementLock": PlacementLock}.items()
    }
    docs[COMBINED] = combined_schema(KINDS)
    for name, doc in docs.items():
        path = out / name
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        get_console().print(f"wrote {escape(str(path))}", highlight=False)


def _mount() -> None:
    """Attach the engine verbs and the sub-apps (their modules import Pulumi lazily)."""
    from modelplane.cli import (
        call,
        dev_cluster,
        dev_fleet,
        engine_verbs,
        keys,
        maintenance,
        project,
        render,
        usage,
    )

    engine_verbs.register(app)
    maintenance.register(app)
    from modelplane.cli import health

    app.command("reconcile", help=engine_verbs._help(health.reconcile.__doc__))(health.reconcile)
    app.registered_commands.extend(render.app.registered_commands)
    app.add_typer(dev_cluster.app, name="dev-cluster")
    app.add_typer(dev_fleet.app, name="dev-fleet")
    app.add_typer(keys.app, name="keys")
    from modelplane.cli import rollout_verbs

    app.add_typer(rollout_verbs.app, name="rollout")
    app.command("call")(call.call)
    app.command("usage")(usage.usage)
    app.command("project")(project.project)


if not cli.pure_only:  # `modelplane validate|plan|schema ...` skip the rest (cli.main)
    _mount()
