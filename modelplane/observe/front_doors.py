"""Whether each front door answers its health path (`status`; api.md, "More than one front
door"): the same question the fleet address's health checks ask, from where `status` runs."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from modelplane.api.inference_gateway import HEALTH_PATH


@dataclass(frozen=True)
class FrontDoor:
    """A front door as its gateway stack left it."""

    stack: str
    cluster: str
    address: str | None


def health_url(address: str, https: bool) -> str:
    return f"{'https' if https else 'http'}://{address}{HEALTH_PATH}"


def probe(address: str | None, https: bool, timeout: float = 3.0) -> str | None:
    """None when the front door answers 200, else why not. The certificate is not verified:
    the probe asks for a liveness answer and sends nothing (the front doors' certificate names
    the fleet's hostname, not each address)."""
    if not address:
        return "no address yet"
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(health_url(address, https), method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
            return None if answer.status == 200 else f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"no answer: {reason}"


def probe_all(
    doors: Sequence[FrontDoor], https: bool, timeout: float = 3.0
) -> Mapping[str, str | None]:
    """Cluster -> None (answers) or why not, every front door at once."""
    if not doors:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(doors))) as pool:
        answers = list(pool.map(lambda d: probe(d.address, https, timeout), doors))
    return {d.cluster: a for d, a in zip(doors, answers, strict=True)}
