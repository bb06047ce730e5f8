"""A minimal HTTPS client for the local API server (standard library only).

The ``kubernetes`` Python package is a dev-only dependency, and ``modelplane dev-cluster up``
must work without it, so health checks and CRD installation use this instead.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from modelplane.errors import EnvironmentProblem


class KubeRestError(EnvironmentProblem):
    """An HTTP error from the API server (``status`` 0: no answer at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class KubeRest:
    """Talks to ``server`` (``https://127.0.0.1:<port>``) with a client certificate."""

    def __init__(self, server: str, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        self.server = server.rstrip("/")
        context = ssl.create_default_context(cafile=str(ca_file))
        context.load_cert_chain(str(cert_file), str(key_file))
        self._context = context
        self._discovery: dict[str, list[dict[str, Any]]] = {}

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Sequence[tuple[str, str]] = (),
        timeout: float = 30.0,
    ) -> Any:
        """Send a request; return the decoded JSON body (or text for non-JSON answers)."""
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self._context, timeout=timeout) as resp:
                raw = resp.read()
                if "json" in (resp.headers.get("Content-Type") or ""):
                    return json.loads(raw)
                return raw.decode(errors="replace")
        except urllib.error.HTTPError as exc:
            raise KubeRestError(exc.code, _message(exc.read())) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise KubeRestError(0, f"cannot reach {self.server}: {reason}") from None

    def get(self, path: str, *, timeout: float = 30.0) -> Any:
        return self.request("GET", path, timeout=timeout)

    # -- objects

    def resource_path(self, obj: dict[str, Any]) -> str:
        """The REST path of ``obj`` (found through API discovery)."""
        api_version: str = obj["apiVersion"]
        kind: str = obj["kind"]
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        if api_version not in self._discovery:
            try:
                self._discovery[api_version] = self.get(base).get("resources", [])
            except KubeRestError as exc:
                if exc.status == 404:
                    raise KubeRestError(404, f"the server does not serve {api_version}") from None
                raise
        name = obj["metadata"]["name"]
        for resource in self._discovery[api_version]:
            plural = str(resource.get("name", ""))
            if resource.get("kind") == kind and "/" not in plural:
                if resource.get("namespaced"):
                    namespace = obj["metadata"].get("namespace", "default")
                    return f"{base}/namespaces/{namespace}/{plural}/{name}"
                return f"{base}/{plural}/{name}"
        raise KubeRestError(404, f"the server does not serve {kind} in {api_version}")

    def apply(self, obj: dict[str, Any], *, field_manager: str, force: bool = True) -> Any:
        """Server-side apply ``obj``."""
        return self.request(
            "PATCH",
            self.resource_path(obj),
            body=obj,
            content_type="application/apply-patch+yaml",  # JSON is YAML
            query=[("fieldManager", field_manager), ("force", "true" if force else "false")],
        )


def _message(raw: bytes) -> str:
    text = raw.decode(errors="replace")
    try:
        decoded = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(decoded, dict) and decoded.get("message"):
        return str(decoded["message"])
    return text.strip()[:500]
