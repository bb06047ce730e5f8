"""Per-caller counts from the front door's access log (api.md "Usage per caller").

The InferenceGateway's Traefik writes one JSON line per request (`--accesslog.format=json`)
and keeps one request header, `X-Modelplane-Caller`. This module counts, per caller and
ModelService, the requests, the errors (5xx, or no answer) and the refused (401/403: no key,
a wrong key, a caller the service does not list). The header is the key check's only on a
request a route took (`RouterName`) that was not refused: forwardAuth
replaces it only on its yes, so elsewhere it is whatever the client sent: a refused request
counts for no caller (`-`); a request no route took (no service: its path is the client's
too) and a redirect to https (the client asks again) are not counted. Lines that are not
access-log lines (Traefik's own log), and lines whose fields have the wrong types, are
skipped. Pure: lines in, counts out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

CALLER_FIELD = "request_X-Modelplane-Caller"
ROUTER_FIELD = "RouterName"
# A request the key check did not let in: Traefik copies the caller header only from its yes.
NO_CALLER = "-"
MAX_CALLER = 256  # a longer value is no caller name (names are DNS labels)


def trusted_caller(entry: dict[str, object], status: int) -> str:
    """The caller the key check set on this routed line's request, else ``-``: on a refused
    request (401/403) forwardAuth keeps whatever header the client sent."""
    caller = entry.get(CALLER_FIELD)
    if not isinstance(caller, str) or not caller or len(caller) > MAX_CALLER:
        return NO_CALLER
    return NO_CALLER if status in (401, 403) else caller


@dataclass
class Counts:
    requests: int = 0
    errors: int = 0
    refused: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "errors": self.errors, "refused": self.refused}


# The route sending the base URL's /v1/ to the OpenAI router (components/model_router.py):
# its line carries no checked caller; the request is counted on its service's route, and by
# model in the router's own metrics.
OPENAI_ROUTE = "modelplane-openai"

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
        except (ValueError, RecursionError):  # RecursionError: a line nested thousands deep
            continue
        if not isinstance(entry, dict) or "RequestPath" not in entry:
            continue
        path, status = entry.get("RequestPath"), entry.get("DownstreamStatus") or 0
        if not isinstance(path, str) or not isinstance(status, int) or isinstance(status, bool):
            continue  # not Traefik's fields: a crafted or broken line
        router = entry.get(ROUTER_FIELD)
        if not router or 300 <= status < 400:
            # No route took it (the path, and any caller header, are the client's), or the
            # http->https redirect (the client asks again; that request is counted).
            continue
        if isinstance(router, str) and OPENAI_ROUTE in router:
            continue  # the OpenAI router's pass: it counts those itself (model_counts)
        service = service_of(path)
        if service is None:
            continue
        caller = trusted_caller(entry, status)
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


@dataclass
class ModelCounts:
    requests: int = 0
    errors: int = 0
    refused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "refused": self.refused,
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
        }


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split('",'):
        key, _, value = part.partition('="')
        out[key.strip()] = value.rstrip('"').replace('\\"', '"').replace("\\\\", "\\")
    return out


def model_counts(texts: Iterable[str]) -> dict[tuple[str, str], ModelCounts]:
    """(caller, model) -> counts, summed over the OpenAI router replicas' `/metrics`
    (modelplane/router.py): requests by status, tokens by kind. Other lines are skipped."""
    out: dict[tuple[str, str], ModelCounts] = {}
    for text in texts:
        for line in text.splitlines():
            if not line.startswith("modelplane_router_") or "{" not in line:
                continue
            name, _, rest = line.partition("{")
            inner, _, value = rest.rpartition("}")
            try:
                number = int(float(value.strip()))
            except ValueError:
                continue
            labels = _labels(inner)
            key = (labels.get("caller", ""), labels.get("model", ""))
            if not all(key) or number < 0:
                continue
            counts = out.setdefault(key, ModelCounts())
            if name == "modelplane_router_requests_total":
                code = labels.get("code", "")
                counts.requests += number
                if code in ("401", "403", "404", "429"):
                    counts.refused += number
                elif code.startswith("5"):
                    counts.errors += number
            elif name == "modelplane_router_tokens_total":
                if labels.get("kind") == "prompt":
                    counts.prompt_tokens += number
                elif labels.get("kind") == "completion":
                    counts.completion_tokens += number
    return out
