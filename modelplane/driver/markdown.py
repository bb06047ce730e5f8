"""``modelplane preview --markdown``: a pull-request comment (pure).

First the placement diff between the committed lock and the new plan (replicas added,
removed, moved, with the reasons for shortfalls), then per stack the resource changes from
the preview's engine events: counts and the changed resources with the properties that
changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from modelplane.api.placement_lock import LockedReplica
from modelplane.driver.placement_diff import DeploymentDiff, placement_diff, pools_text
from modelplane.driver.plan import Plan
from modelplane.driver.results import Outcome, ResourceChange, RunResult, StackResult

if TYPE_CHECKING:
    from modelplane.scheduler.survive import SurviveReport

MARKER = "<!-- modelplane-preview -->"
GITHUB_LIMIT = 65_000  # a comment holds 65,536 characters
MAX_RESOURCES = 60
MAX_PROPERTIES = 8
OP_SYMBOL = {
    "create": "+ create",
    "update": "~ update",
    "replace": "+- replace",
    "delete": "- delete",
    "read": "> read",
    "import": "= import",
    "discard": "- discard",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _replica(r: LockedReplica) -> str:
    return f"`{r.name}`"


def _where(r: LockedReplica) -> str:
    return f"{r.cluster} ({pools_text(r)})"


def placement_section(plan: Plan) -> list[str]:
    diffs = placement_diff(plan.previous, plan.lock, plan.report)
    changed = [d for d in diffs if d.changed]
    short = [d for d in diffs if d.unplaced > 0]
    lines = ["### Placement", ""]
    if not changed:
        lines.append("No placement changes: every replica stays where the lock has it.")
    else:
        added = sum(len(d.added) for d in changed)
        removed = sum(len(d.removed) for d in changed)
        moved = sum(len(d.moved) for d in changed)
        lines.append(
            f"**{added} added, {removed} removed, {moved} moved** (`modelplane.lock.yaml`)"
        )
        lines += [
            "",
            "| deployment | change | replica | from | to |",
            "| --- | --- | --- | --- | --- |",
        ]
        for d in changed:
            lines += _placement_rows(d)
    autoscaled = [(k, r) for k, r in plan.report.items() if r.autoscaling is not None]
    if autoscaled:
        lines += ["", "**Autoscaled deployments**", ""]
        for key, r in autoscaled:
            before = plan.previous.autoscaled(key)
            count = f"{r.desired}" if before in (None, r.desired) else f"{before} → {r.desired}"
            text = f"- `{key}`: {count} replica(s) (min {r.autoscaling[0]}, max {r.autoscaling[1]})"
            if r.draining:
                text += "; draining " + ", ".join(f"`{n}`" for n in r.draining)
            lines.append(text)
    if short:
        lines += ["", "**Short of replicas**", ""]
        for d in short:
            lines.append(f"- `{d.key}`: {d.unplaced} of {d.desired} replica(s) not placed")
            lines += [f"  - {_cell(reason)}" for reason in d.reasons]
    return lines


def _placement_rows(d: DeploymentDiff) -> list[str]:
    rows = []
    for r in d.added:
        rows.append(f"| `{d.key}` | added | {_replica(r)} | | {_where(r)} |")
    for r in d.removed:
        rows.append(f"| `{d.key}` | removed | {_replica(r)} | {_where(r)} | |")
    for src, dst in d.moved:
        names = f"{_replica(src)} → {_replica(dst)}"
        rows.append(f"| `{d.key}` | moved | {names} | {_where(src)} | {_where(dst)} |")
    for old, new in d.repooled:
        rows.append(f"| `{d.key}` | new pools | {_replica(new)} | {_where(old)} | {_where(new)} |")
    return rows


MAX_VALUE = 60


def _short_value(value: Any) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = text.replace("|", "\\|").replace("`", "'").replace("\n", " ")
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _old_new(old: Any, new: Any) -> str:
    """`` `a` → `b` `` for a changed value (secrets arrive masked)."""
    if old is None and new is None:
        return ""
    before = f"`{_short_value(old)}`" if old is not None else "(none)"
    after = f"`{_short_value(new)}`" if new is not None else "(none)"
    return f": {before} → {after}"


def _props(change: ResourceChange) -> str:
    if change.op in ("create", "delete") or not change.properties:
        return ""
    shown = [
        f"`{p.path}`"
        + _old_new(p.old, p.new)
        + (" (forces replace)" if p.kind.endswith("-replace") else "")
        for p in change.properties[:MAX_PROPERTIES]
    ]
    more = len(change.properties) - MAX_PROPERTIES
    return ", ".join(shown) + (f", and {more} more" if more > 0 else "")


OFFLINE = (Outcome.NEW, Outcome.RENDERED)
"""Outcomes whose resources come from the offline render (the program under Pulumi's mocks)."""
COUNTED = (Outcome.SUCCEEDED, *OFFLINE)
OFFLINE_SUFFIX = ": resources from the offline render"


def _stack_summary(r: StackResult) -> str:
    if r.outcome not in COUNTED:
        return r.outcome.value
    parts = [
        f"{r.count(k)} to {k}" for k in ("create", "update", "replace", "delete") if r.count(k)
    ]
    summary = ", ".join(parts) or "no changes"
    return f"{r.outcome.value} (offline render): {summary}" if r.outcome in OFFLINE else summary


def offline_line(r: StackResult) -> str:
    """The line that says a stack is shown from the offline render, not by the engine, and why."""
    if r.outcome is Outcome.NEW:
        why = "no stack in the backend yet"
    else:
        why = (r.note or "the engine cannot preview it yet").removesuffix(OFFLINE_SUFFIX)
    return f"- `{r.stack}`: shown from the offline render ({_cell(why)})"


def offline_section(run: RunResult) -> list[str]:
    """Every stack the engine did not preview, one line each (empty when there is none)."""
    offline = [r for r in run.results if r.outcome in OFFLINE]
    if not offline:
        return []
    return [
        "",
        f"**{len(offline)} stack(s) shown from the offline render**, not previewed by the engine: "
        "their resources come from the stack's program run under Pulumi's mocks (as "
        "`modelplane render` runs it), with no deployed state or live cluster to compare with.",
        "",
        *[offline_line(r) for r in offline],
    ]


def stacks_section(run: RunResult) -> list[str]:
    lines = ["### Stacks", ""]
    lines += [
        "| stack | result | create | update | replace | delete |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in run.results:
        ok = r.outcome in COUNTED
        counts = [str(r.count(k)) if ok else "" for k in ("create", "update", "replace", "delete")]
        lines.append(f"| `{r.stack}` | {_stack_summary(r)} | " + " | ".join(counts) + " |")
    lines += offline_section(run)
    for r in run.results:
        if r.error or (r.outcome not in COUNTED and r.note):
            lines += [
                "",
                f"**`{r.stack}` {r.outcome.value}**",
                "",
                "```",
                r.error or r.note or "",
                "```",
            ]
        changes = [c for c in r.resources if c.op != "same"] if r.ok else []
        if not changes:
            continue
        lines += [
            "",
            f"<details><summary><code>{r.stack}</code>: {_stack_summary(r)}</summary>",
            "",
        ]
        lines += ["| change | resource | type | changed properties |", "| --- | --- | --- | --- |"]
        for c in changes[:MAX_RESOURCES]:
            op = OP_SYMBOL.get(c.op, c.op)
            lines.append(f"| {op} | `{_cell(c.name)}` | `{_cell(c.type)}` | {_props(c)} |")
        if len(changes) > MAX_RESOURCES:
            lines.append(f"| | … and {len(changes) - MAX_RESOURCES} more | | |")
        lines += ["", "</details>"]
    return lines


def survive_line(report: SurviveReport) -> str:
    """`plan --survive 1` in one markdown line (scheduling.md, "Surviving a loss")."""
    if report.worst is None:
        return f"**Survives the loss of {report.what}: yes** ({report.scenarios} scenarios)."
    worst = report.worst
    shorts = ", ".join(
        f"`{k}` {s.replicas} replica(s) short"
        + (" (" + ", ".join(f"{n} {c}" for c, n in s.devices.items()) + " devices)")
        for k, s in worst.short.items()
    )
    return (
        f"**Survives the loss of {report.what}: no**: {len(report.failing)} of "
        f"{report.scenarios} scenarios leave a deployment short; the worst, losing "
        f"`{worst.name}`: {shorts}."
    )


def preview_markdown(
    plan: Plan,
    run: RunResult,
    *,
    title: str = "modelplane preview",
    survive: SurviveReport | None = None,
    rollouts: Mapping[str, str] | None = None,
) -> str:
    """The whole comment, with a marker so a bot can update it in place. ``rollouts``:
    deployment -> its rollout line (`rollout: 1/3 replicas at revision ...; next: ...`)."""
    total = {
        k: sum(r.count(k) for r in run.results if r.ok)
        for k in ("create", "update", "replace", "delete")
    }
    failed = [r.stack for r in run.results if not r.ok]
    offline = [r.stack for r in run.results if r.outcome in OFFLINE]
    head = [
        MARKER,
        f"## {title}",
        "",
        f"{total['create']} to create, {total['update']} to update, "
        f"{total['replace']} to replace, {total['delete']} to delete"
        + (f"; **{len(failed)} stack(s) did not preview**: {', '.join(failed)}" if failed else "")
        + (f"; {len(offline)} stack(s) shown from the offline render" if offline else ""),
        "",
    ]
    note = [
        "",
        "<sub>Each stack previews against the current outputs of the stacks it reads, so "
        "changes that reach it through them (new endpoints in the gateway's routes, a new "
        "cluster's kubeconfig) appear once `up` has run those stacks first.</sub>",
    ]
    survives = ["", survive_line(survive)] if survive is not None else []
    rolling = [""] + [f"- `{k}` {_cell(line)}" for k, line in sorted((rollouts or {}).items())]
    rolling = rolling if rollouts else []
    body = head + placement_section(plan) + rolling + survives + [""] + stacks_section(run) + note
    text = "\n".join(body).rstrip() + "\n"
    if len(text) > GITHUB_LIMIT:
        cut = text[: GITHUB_LIMIT - 200]
        text = cut[: cut.rfind("\n")] + "\n\n_(truncated: the full preview is in the job log)_\n"
    return text
