"""`modelplane call DIR <namespace>/<service>`: one chat completion through the front door.

The service's URL is the gateway stack's ``services`` output (the InferenceGateway's address
plus ``/<namespace>/<service>/``). Prints who answered (the replica, role and cluster a model
server reports in ``x-modelplane-*`` headers, as the dev fleet's stand-in does) and the reply.
Exit 0 on HTTP 200; otherwise the status and body, and exit 1 (3 when the service has no URL).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from modelplane.api.inference_gateway import InferenceGateway
from modelplane.cli.engine_verbs import (
    BackendOpt,
    FleetDir,
    LockOpt,
    SecretsOpt,
    _expected_failures,
    _load,
)
from modelplane.observe.kube import no_redirect_opener
from modelplane.secrets import SecretNotFound, resolve_secret

EXIT_NO_URL = 3
IDENTITY_HEADERS = ("x-modelplane-replica", "x-modelplane-role", "x-modelplane-cluster")

out = Console(highlight=False, soft_wrap=True)


@dataclass
class CallResult:
    url: str
    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == 200

    def answered_by(self) -> dict[str, str]:
        who = {
            h.removeprefix("x-modelplane-"): self.headers[h]
            for h in IDENTITY_HEADERS
            if h in self.headers
        }
        if not who:
            try:
                who = {
                    k: str(v) for k, v in (json.loads(self.body).get("modelplane") or {}).items()
                }
            except (ValueError, AttributeError):
                who = {}
        return who

    def reply(self) -> str:
        try:
            data = json.loads(self.body)
            return str(data["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError):
            return self.body


def chat_completion(
    base_url: str,
    prompt: str,
    *,
    model: str | None = None,
    timeout: float = 30.0,
    key: str | None = None,
) -> CallResult:
    """POST ``<base_url>v1/chat/completions`` (``model`` from ``v1/models`` when not given);
    ``key``: sent as `Authorization: Bearer <key>`."""
    base = base_url if base_url.endswith("/") else base_url + "/"
    if model is None:
        models = _request("GET", base + "v1/models", None, timeout, key)
        try:
            model = str(json.loads(models.body)["data"][0]["id"]) if models.ok else "default"
        except (ValueError, KeyError, IndexError, TypeError):
            model = "default"
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    return _request("POST", base + "v1/chat/completions", payload, timeout, key)


def caller_key(
    gateway: InferenceGateway | None,
    caller: str | None,
    *,
    env: Mapping[str, str],
    base_dir: Path,
) -> tuple[str | None, str | None, str]:
    """(caller, key, why not): the named caller's key, else the first one readable here
    (environment or file; a key kept only in stack config is not read by `call`); of a
    caller's several keys the newest unexpired one (api.md "Keys")."""
    from datetime import UTC, datetime

    from modelplane.caller_keys import KeyFormatError, newest_live_key, parse_keys

    now = datetime.now(UTC)
    auth = gateway.spec.auth if gateway is not None else None
    if auth is None:
        if caller:
            return None, None, "the InferenceGateway has no spec.auth: no caller to send"
        return None, None, ""
    names = [c.name for c in auth.callers]
    if caller and caller not in names:
        return None, None, f"no caller {caller!r} in spec.auth (callers: {', '.join(names)})"
    tried = []
    for c in auth.callers:
        if caller and c.name != caller:
            continue
        try:
            found = resolve_secret(
                c.secret_ref.name,
                c.secret_ref.key,
                config=lambda _k: None,
                env=env,
                base_dir=base_dir,
            )
        except SecretNotFound as exc:
            tried.append(f"{c.name}: {exc}")
            continue
        try:
            newest = newest_live_key(parse_keys(found.value, where=f"{c.name}'s keys"), now)
        except KeyFormatError as exc:
            tried.append(f"{c.name}: {exc}")
            continue
        if newest is None:
            tried.append(f"{c.name}: every key has expired")
            continue
        return c.name, newest.key, ""
    return None, None, "no caller's key is readable here: " + "; ".join(tried)


def _request(
    method: str, url: str, payload: Any, timeout: float, key: str | None = None
) -> CallResult:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_unredirected_header("Authorization", f"Bearer {key}")
    started = time.monotonic()
    try:
        # The key goes to `url` only: a redirect is reported, never followed (NoRedirects).
        with no_redirect_opener().open(req, timeout=timeout) as resp:
            body = resp.read().decode(errors="replace")
            headers = {k.lower(): v for k, v in resp.headers.items()}
            return CallResult(url, resp.status, body, headers, time.monotonic() - started)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
        if 300 <= exc.code < 400:
            where = headers.get("location", "(no Location)")
            body = f"a redirect to {where}: not followed (the key is sent to {url} only)"
        return CallResult(url, exc.code, body, headers, time.monotonic() - started)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return CallResult(url, 0, f"no answer: {reason}", {}, time.monotonic() - started)


def call(
    fleet: FleetDir,
    service: Annotated[
        str | None,
        typer.Argument(
            help="<namespace>/<name> of a ModelService (omitted: the fleet's OpenAI base URL, "
            "routed by --model)."
        ),
    ] = None,
    prompt: Annotated[str, typer.Option("--prompt", help="The user message.")] = "Say hello.",
    model: Annotated[
        str | None, typer.Option("--model", help="The model name (default: from /v1/models).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds per request.")] = 30.0,
    caller: Annotated[
        str | None,
        typer.Option(
            "--caller",
            help="The InferenceGateway caller whose key to send (default: the first one whose "
            "key is readable from the environment or a file).",
        ),
    ] = None,
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
) -> None:
    """Send one chat completion to a ModelService through the fleet's front door (or, with
    only --model, to the fleet's OpenAI base URL, routed by the model name) and print who
    answered (exit 0 on HTTP 200)."""
    with _expected_failures():
        f = _load(fleet, lock, backend, secrets_provider)
        if service is None:
            if not model:
                out.print("error: name a service (<namespace>/<name>) or a --model")
                raise typer.Exit(2)
            base = f.status().gateway.get("openai")
            if not base:
                out.print(
                    "error: the fleet has no OpenAI base URL yet: no ModelService names "
                    "spec.models, the gateway stack has not run, or its Gateway has no address"
                )
                raise typer.Exit(EXIT_NO_URL)
            service = "--model " + model
            urls = {service: str(base).removesuffix("v1/")}
        elif service not in f.spec.services:
            known = ", ".join(sorted(f.spec.services)) or "none"
            out.print(
                f"error: no ModelService {escape(service)} in {escape(str(fleet))} "
                f"(the fleet has: {escape(known)})"
            )
            raise typer.Exit(2)
        else:
            urls = f.status().gateway.get("services") or {}
    name, key, why = caller_key(f.spec.gateway, caller, env=os.environ, base_dir=Path(fleet))
    if why:
        out.print(f"error: {escape(why)}")
        raise typer.Exit(2)
    url = urls.get(service)
    if not url:
        out.print(
            f"error: {escape(service)} has no URL yet: the gateway stack has not run, or its "
            "Gateway has no address (`modelplane up` then `modelplane status`)"
        )
        raise typer.Exit(EXIT_NO_URL)
    result = chat_completion(url, prompt, model=model, timeout=timeout, key=key)
    who = result.answered_by()
    answered = ", ".join(f"{k}={v}" for k, v in who.items()) or "unknown"
    if result.ok:
        as_caller = f" as caller {escape(name)}" if name else ""
        out.print(f"HTTP 200 from {escape(url)}{as_caller} in {result.seconds * 1000:.0f} ms")
        out.print(f"answered by: {escape(answered)}")
        out.print(escape(result.reply()))
        return
    status = result.status or "no answer"
    out.print(f"HTTP {status} from {escape(url)}: {escape(result.body[:2000])}")
    raise typer.Exit(1)
