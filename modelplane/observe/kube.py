"""A read-only Kubernetes client from a kubeconfig (standard library only).

The kubeconfig is a secret: it is never logged, and errors never quote it. An exec
credential plugin (GKE, EKS) is run as kubectl runs it. Client certificate and key data
are written to files (mode 0600) in a private temporary directory only for as long as
``ssl`` needs to load them, then deleted.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

import yaml

from modelplane.errors import EnvironmentProblem

RETRIES = 2
RETRY_PAUSE = 0.25
EXEC_TIMEOUT = 10.0


class KubeError(EnvironmentProblem):
    """The cluster could not be asked (``status`` 0) or answered an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class KubeTarget:
    """What a request needs from a kubeconfig's current context (secrets inside)."""

    server: str
    ca_data: bytes | None = None
    insecure: bool = False
    cert_data: bytes | None = None
    key_data: bytes | None = None
    token: str | None = None

    def __repr__(self) -> str:  # never show credentials
        return f"KubeTarget(server={self.server!r})"


def _named(items: Any, name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return dict(item.get(what) or {})
    raise KubeError(0, f"the kubeconfig has no {what} named {name!r}")


def _data(block: dict[str, Any], key: str, base_dir: str | None) -> bytes | None:
    if block.get(f"{key}-data"):
        return base64.b64decode(block[f"{key}-data"])
    path = block.get(key)
    if path:
        if base_dir and not os.path.isabs(path):
            path = os.path.join(base_dir, path)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise KubeError(0, f"the kubeconfig names {key} {path}: {exc.strerror}") from None
    return None


def parse_kubeconfig(
    text: str, base_dir: str | None = None, exec_timeout: float = 10.0
) -> KubeTarget:
    """The current context's server and credentials (an exec plugin is run for them;
    auth-provider plugins are not supported)."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        raise KubeError(0, "the kubeconfig is not valid YAML") from None
    if not isinstance(config, dict):
        raise KubeError(0, "the kubeconfig is not a YAML mapping")
    current = config.get("current-context")
    contexts = config.get("contexts") or []
    if not current and contexts:
        current = contexts[0].get("name")
    context = _named(contexts, str(current), "context")
    cluster = _named(config.get("clusters"), str(context.get("cluster")), "cluster")
    user = (
        _named(config.get("users"), str(context.get("user")), "user") if context.get("user") else {}
    )
    server = str(cluster.get("server") or "")
    if not server:
        raise KubeError(0, "the kubeconfig's cluster has no server")
    if user.get("auth-provider"):
        raise KubeError(0, "the kubeconfig uses an auth-provider plugin (not supported)")
    cert_data = _data(user, "client-certificate", base_dir)
    key_data = _data(user, "client-key", base_dir)
    token = user.get("token")
    if user.get("exec"):
        token, cert_data, key_data = exec_credential(user["exec"], base_dir, exec_timeout)
    if not token and user.get("tokenFile"):
        try:
            with open(user["tokenFile"], encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise KubeError(0, f"the kubeconfig's tokenFile: {exc.strerror}") from None
    return KubeTarget(
        server=server.rstrip("/"),
        ca_data=_data(cluster, "certificate-authority", base_dir),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        cert_data=cert_data,
        key_data=key_data,
        token=token or None,
    )


def exec_credential(
    spec: Any, base_dir: str | None, timeout: float = EXEC_TIMEOUT
) -> tuple[str | None, bytes | None, bytes | None]:
    """Run a kubeconfig's exec credential plugin (`client.authentication.k8s.io`, as
    kubectl does: GKE's `gke-gcloud-auth-plugin`, EKS's `aws eks get-token`); its token or
    client certificate and key. Nothing it prints is ever quoted in an error."""
    if not isinstance(spec, dict) or not spec.get("command"):
        raise KubeError(0, "the kubeconfig's exec plugin has no command")
    command = str(spec["command"])
    if os.sep in command and not os.path.isabs(command) and base_dir:
        command = os.path.join(base_dir, command)
    name = os.path.basename(command)
    env = dict(os.environ)
    for item in spec.get("env") or []:
        if isinstance(item, dict) and item.get("name"):
            env[str(item["name"])] = str(item.get("value") or "")
    api_version = str(spec.get("apiVersion") or "client.authentication.k8s.io/v1beta1")
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    try:
        done = subprocess.run(
            [command, *(str(a) for a in spec.get("args") or [])],
            env=env,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise KubeError(0, f"the kubeconfig's exec plugin {name} is not installed") from None
    except subprocess.TimeoutExpired:
        raise KubeError(0, f"the kubeconfig's exec plugin {name} timed out") from None
    except OSError as exc:
        raise KubeError(0, f"the kubeconfig's exec plugin {name}: {exc.strerror}") from None
    if done.returncode != 0:
        raise KubeError(0, f"the kubeconfig's exec plugin {name} failed (exit {done.returncode})")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except (ValueError, AttributeError):
        raise KubeError(
            0, f"the kubeconfig's exec plugin {name} printed no ExecCredential"
        ) from None
    token = status.get("token") or None
    cert = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    if not token and not (cert and key):
        raise KubeError(0, f"the kubeconfig's exec plugin {name} returned no credential")
    return (
        str(token) if token else None,
        str(cert).encode() if cert else None,
        str(key).encode() if key else None,
    )


def ssl_context(target: KubeTarget) -> ssl.SSLContext:
    if target.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif target.ca_data:
        context = ssl.create_default_context(cadata=target.ca_data.decode("ascii", "replace"))
    else:
        context = ssl.create_default_context()
    if target.cert_data and target.key_data:
        with tempfile.TemporaryDirectory(prefix="modelplane-observe-") as private:
            os.chmod(private, 0o700)
            cert, key = os.path.join(private, "cert.pem"), os.path.join(private, "key.pem")
            for path, data in ((cert, target.cert_data), (key, target.key_data)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            try:
                context.load_cert_chain(cert, key)
            except (ssl.SSLError, OSError):
                raise KubeError(0, "the kubeconfig's client certificate/key is invalid") from None
    return context


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would send the request's headers -- the bearer token,
    a caller's key -- to whatever ``Location`` names, any host, plain ``http://`` included.
    The 3xx answer is an ``HTTPError`` like any other error status."""

    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


def no_redirect_opener(context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
    """An opener like ``urlopen``'s (proxies from the environment) that follows no redirect."""
    handlers: list[Any] = [NoRedirects()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def http_error_text(exc: urllib.error.HTTPError) -> str:
    """``HTTP 404 Not Found``; a redirect says it was not followed (never where to: the
    ``Location`` is the answering side's text)."""
    text = f"HTTP {exc.code} {exc.reason}"
    return f"{text} (a redirect: not followed)" if 300 <= exc.code < 400 else text


class KubeReader:
    """GETs JSON from one API server; every call bounded by ``timeout`` seconds. Its token
    goes to that server only: redirects are never followed (``NoRedirects``)."""

    def __init__(self, target: KubeTarget, timeout: float = 5.0) -> None:
        self.server = target.server
        self.timeout = timeout
        self._token = target.token
        self._context = ssl_context(target) if target.server.startswith("https") else None
        self._opener = no_redirect_opener(self._context)

    def _open(self, request: urllib.request.Request) -> Any:
        """The response to ``request`` (a 3xx raises ``HTTPError``: never followed)."""
        return self._opener.open(request, timeout=self.timeout)

    def get(self, path: str, **query: str) -> dict[str, Any]:
        body = self._fetch(path, "application/json", query)
        try:
            return dict(json.loads(body))
        except (ValueError, TypeError):
            raise KubeError(0, f"{path}: the answer is not a JSON object") from None

    def get_text(self, path: str, max_bytes: int = 4 * 2**20) -> str:
        """A text body (e.g. Prometheus metrics through the pod proxy), at most max_bytes."""
        body = self._fetch(path, "text/plain", {}, max_bytes)
        return body.decode("utf-8", "replace")

    def _fetch(
        self, path: str, accept: str, query: dict[str, str], max_bytes: int | None = None
    ) -> bytes:
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": accept}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(url, headers=headers)
        for attempt in range(RETRIES + 1):
            try:
                with self._open(request) as resp:
                    return bytes(resp.read() if max_bytes is None else resp.read(max_bytes))
            except urllib.error.HTTPError as exc:
                # Throttled or a version not yet established (a CRD just installed): retry.
                if exc.code in (429, 503) and attempt < RETRIES:
                    time.sleep(RETRY_PAUSE * (attempt + 1))
                    continue
                raise KubeError(exc.code, f"{path}: {http_error_text(exc)}") from None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", None) or exc
                raise KubeError(0, f"cannot reach {self.server}: {reason}") from None
        raise AssertionError("unreachable")

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        """A list's items; a resource the server does not serve (404) is an empty list."""
        try:
            return list(self.get(path, **query).get("items") or [])
        except KubeError as exc:
            if exc.status == 404:
                return []
            raise
