"""Per-caller counts from the front door's access log (api.md "Usage per caller").

The InferenceGateway's Traefik writes one JSON line per request (`--accesslog.format=json`)
and keeps one request header, `X-Modelplane-Caller`, as the key check set it (a forged one is
already replaced when the line is written). This module counts, per caller and ModelService,
the requests, the errors (5xx, or no answer) and the refused (401/403: no key, a wrong key, a
caller the service does not list). Lines that are not access-log lines (Traefik's own log)
are skipped. Pure: lines in, counts out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

CALLER_FIELD = "request_X-Modelplane-Caller"
# A request the key check did not let in: Traefik copies the caller header only from its yes.
NO_CALLER = "-"


@dataclass
class Counts:
    requests: int = 0
    errors: int = 0
    refused: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "errors": self.errors, "refused": self.refused}


# The second pass of a sharded service (api.md "Large services"): the first pass's line is
# the one with the caller and the status the client saw; this one is not counted again.
SHARD_PATH = "_shards"


def service_of(path: str) -> str | None:
    """`/<namespace>/<service>/...` -> `<namespace>/<service>` (None: not a service path)."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == SHARD_PATH:
        return None
    return f"{parts[0]}/{parts[1]}" if len(parts) >= 2 and parts[0] and parts[1] else None


def count_usage(lines: Iterable[str]) -> dict[tuple[str, str], Counts]:
    """(caller, service) -> counts, from access-log lines."""
    out: dict[tuple[str, str], Counts] = {}
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or "RequestPath" not in entry:
            continue
        service = service_of(str(entry.get("RequestPath") or ""))
        if service is None:
            continue
        caller = str(entry.get(CALLER_FIELD) or NO_CALLER)
        status = int(entry.get("DownstreamStatus") or 0)
        counts = out.setdefault((caller, service), Counts())
        counts.requests += 1
        if status in (401, 403):
            counts.refused += 1
        elif status >= 500 or status == 0:
            counts.errors += 1
    return out


def access_log_arguments(path: str | None = None) -> list[str]:
    """Traefik's flags for that log: JSON, every header dropped but the caller's."""
    flags = [
        "--accesslog=true",
        "--accesslog.format=json",
        "--accesslog.fields.headers.defaultmode=drop",
        "--accesslog.fields.headers.names.X-Modelplane-Caller=keep",
    ]
    if path:
        flags.append(f"--accesslog.filepath={path}")
    return flags
