"""`modelplane usage DIR`: requests, errors and refused requests per caller and ModelService,
counted from the front door's access log (api.md "Usage per caller").

Where the log is read: the files given with `--access-log` (`-` is standard input, e.g.
`kubectl logs -n traefik-system deploy/mp-traefik | modelplane usage DIR --access-log -`);
else, on the dev fleet, the gateway cluster's front-door log in the dev fleet's state (the
directory of the kubeconfig file its secretRef names).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from modelplane.api.loader import load_fleet
from modelplane.errors import UserError
from modelplane.observe.usage import ModelCounts, count_usage, model_counts
from modelplane.secrets import FILE_PREFIX, expand_path_variables

out = Console(highlight=False, soft_wrap=True)
DEV_FLEET_LOG = Path("logs") / "front-door-access.log"  # modelplane.devfleet.cluster


class NoAccessLog(UserError, FileNotFoundError):
    """No access log to count from."""


def dev_fleet_logs(fleet_dir: Path) -> list[Path]:
    """The dev fleet's front-door access logs of the InferenceGateway's clusters (every
    front door's: a caller's requests are counted wherever they entered)."""
    result = load_fleet(fleet_dir)
    gateway = result.fleet.gateway
    found = []
    for ref in gateway.spec.front_door_clusters if gateway is not None else []:
        cluster = result.fleet.clusters.get(ref)
        existing = cluster.spec.cluster.existing if cluster is not None else None
        secret = existing.secret_ref if existing is not None else None
        if secret is None or not secret.name.startswith(FILE_PREFIX):
            continue
        expanded, missing = expand_path_variables(secret.name[len(FILE_PREFIX) :], os.environ)
        if missing:
            continue
        path = Path(expanded)
        if not path.is_absolute():
            path = fleet_dir / path
        log = path.parent / DEV_FLEET_LOG
        if log.is_file():
            found.append(log)
    return found


def router_metrics(fleet_dir: Path) -> tuple[list[str], str | None]:
    """Each OpenAI router pod's `/metrics` on the front doors' clusters (through their API
    servers' pod proxy), and why none could be read (None: read, or no router)."""
    from modelplane.observe.router import router_metrics as read

    return read(load_fleet(fleet_dir).fleet, fleet_dir, os.environ)


def _lines(paths: list[str]) -> Iterator[str]:
    for name in paths:
        if name == "-":
            yield from sys.stdin
            continue
        try:
            with open(name, encoding="utf-8", errors="replace") as handle:
                yield from handle
        except OSError as exc:
            raise NoAccessLog(f"cannot read access log {name}: {exc.strerror}") from None


def usage(
    fleet: Annotated[Path, typer.Argument(help="The fleet directory.")],
    access_log: Annotated[
        list[str] | None,
        typer.Option(
            "--access-log",
            help="An access log of the front door (JSON lines; `-`: standard input). "
            "Default: the dev fleet's, for a dev-fleet gateway.",
        ),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table | json")] = "table",
) -> None:
    """Requests, errors (5xx, no answer) and refused (401/403) per caller and service; per
    caller and model name, also the prompt and completion tokens (the OpenAI router's)."""
    paths = list(access_log or [])
    if not paths:
        found = dev_fleet_logs(fleet)
        if not found:
            raise NoAccessLog(
                "no access log found: pass --access-log FILE (e.g. `kubectl logs -n "
                "traefik-system deploy/mp-traefik | modelplane usage DIR --access-log -`)"
            )
        paths = [str(p) for p in found]
    counts = count_usage(_lines(paths))
    rows = sorted(counts.items(), key=lambda item: (item[0][1], item[0][0]))
    texts, why = router_metrics(fleet)
    by_model: list[tuple[tuple[str, str], ModelCounts]] = sorted(
        model_counts(texts).items(), key=lambda item: (item[0][1], item[0][0])
    )
    if output == "json":
        data = [{"caller": c, "service": s, **n.as_dict()} for (c, s), n in rows]
        models = [{"caller": c, "model": m, **n.as_dict()} for (c, m), n in by_model]
        answer: dict[str, object] = {"usage": data, "models": models}
        if why:
            answer["modelsError"] = why
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
        return
    table = Table("service", "caller", "requests", "errors", "refused")
    for (caller, service), n in rows:
        # The path and a caller name came from the network: text, never markup or a
        # terminal control sequence.
        table.add_row(Text(shown(service)), Text(shown(caller)), *map(str, n.as_dict().values()))
    out.print(table)
    if by_model:
        tokens = Table(
            "model",
            "caller",
            "requests",
            "errors",
            "refused",
            "prompt tokens",
            "completion tokens",
            title="by model name (the OpenAI base URL)",
        )
        for (caller, model), m in by_model:
            tokens.add_row(Text(shown(model)), Text(shown(caller)), *map(str, m.as_dict().values()))
        out.print(tokens)
    if why:
        out.print(Text(f"by model name: not read ({shown(why)})"))


def shown(value: str) -> str:
    """``value`` with every non-printable character escaped (``\\x1b``), for a terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in value)
