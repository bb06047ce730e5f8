"""Where state lives and how secrets are encrypted: backend URL and passphrase (pure).

- Backend: an explicit URL (``--backend``), else ``PULUMI_BACKEND_URL``, else the embedded
  default ``file://<fleet>/.modelplane/state``.
- Secrets provider: self-managed ("DIY") backends (``file://``, ``s3://``, ``gs://``,
  ``azblob://``, ``postgres://``) default to Pulumi's passphrase provider, which needs
  ``PULUMI_CONFIG_PASSPHRASE`` or ``PULUMI_CONFIG_PASSPHRASE_FILE``. Without either, the
  driver stops before any stack runs. Pulumi Cloud (``https://``) uses its own provider; an
  explicit provider URL (``awskms://...``, ``gcpkms://...``) needs no passphrase either.
- Shown to people: :func:`redact_url` (``postgres://user:****@host/db``) wherever a backend URL
  is printed, logged or quoted in an error; :func:`scrub` removes the URL's secrets from text
  that did not come from modelplane (the engine's errors).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from modelplane.driver.errors import BackendError, PassphraseMissing

STATE_DIR = ".modelplane"
DIY_SCHEMES = ("file", "s3", "gs", "azblob", "postgres")

PASSPHRASE = "PULUMI_CONFIG_PASSPHRASE"
PASSPHRASE_FILE = "PULUMI_CONFIG_PASSPHRASE_FILE"
ACQUISITION = "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"
DIY_PARALLEL = "PULUMI_DIY_BACKEND_PARALLEL"

PASSPHRASE_HELP = (
    "Stack secrets (kubeconfigs, tokens) are encrypted with a passphrase on this backend.\n"
    f"Set {PASSPHRASE} (or {PASSPHRASE_FILE} to a file holding it) and run again, e.g.\n"
    f"  export {PASSPHRASE}='<a passphrase you keep>'\n"
    "For the local example fleet, the documented throw-away passphrase is fine:\n"
    f"  export {PASSPHRASE}=modelplane-local\n"
    "Use the same passphrase for every later command on this fleet's state."
)


MASK = "****"
#: Query parameters whose value is a credential (libpq's ``password``/``sslpassword``, an
#: Azure SAS ``sig``, tokens and keys): masked like the password.
SECRET_QUERY_KEYS = frozenset(
    {
        "password",
        "sslpassword",
        "passwd",
        "pwd",
        "secret",
        "token",
        "access_token",
        "sig",
        "secret_key",
        "secretkey",
        "aws_secret_access_key",
        "credentials",
    }
)
#: Shorter secrets are not scrubbed from free text (they would mask ordinary words); a
#: URL's password is masked whatever its length.
MIN_SCRUB = 4


def _split_url(url: str) -> tuple[str, str | None, str, str, str]:
    """(``scheme://``, userinfo or None, host and path, ``?`` or "", query) by plain string
    rules that never raise: the userinfo ends at the last ``@`` before the first ``/`` that
    follows an ``@``, so a password holding ``/``, ``@`` or ``?`` unencoded stays in it (a
    URL that is not one is masked on the safe side)."""
    scheme, sep, rest = url.partition("://")
    head = scheme + sep if sep else ""
    if not sep:
        rest = url
    userinfo: str | None = None
    first = rest.find("@")
    if first >= 0:
        slash = rest.find("/", first)
        at = rest.rfind("@", 0, len(rest) if slash < 0 else slash)
        userinfo, rest = rest[:at], rest[at + 1 :]
    hostpath, qmark, query = rest.partition("?")
    return head, userinfo, hostpath, qmark, query


def redact_url(url: str) -> str:
    """``url`` as shown to people: the password (``user:****@host``) and the credential query
    parameters (:data:`SECRET_QUERY_KEYS`) masked; everything else as written. Never raises."""
    head, userinfo, hostpath, qmark, query = _split_url(str(url))
    shown = head
    if userinfo is not None:
        user, colon, _password = userinfo.partition(":")
        shown += f"{user}{':' + MASK if colon else ''}@"
    shown += hostpath
    if qmark:
        pairs = []
        for pair in query.split("&"):
            key, eq, _value = pair.partition("=")
            secret = eq and unquote(key).lower() in SECRET_QUERY_KEYS
            pairs.append(f"{key}={MASK}" if secret else pair)
        shown += "?" + "&".join(pairs)
    return shown


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The credentials in ``url`` (its password, credential query values), as written and
    percent-decoded, longest first: what :func:`scrub` removes."""
    if not url:
        return ()
    _head, userinfo, _hostpath, _qmark, query = _split_url(str(url))
    found: list[str] = []
    _user, colon, password = (userinfo or "").partition(":")
    if colon and password:
        found.append(password)
    for pair in query.split("&") if query else []:
        key, eq, value = pair.partition("=")
        if eq and value and unquote(key).lower() in SECRET_QUERY_KEYS:
            found.append(value)
    both = {v for s in found for v in (s, unquote(s))}
    return tuple(sorted(both, key=lambda v: (-len(v), v)))


def scrub(text: str, secrets: tuple[str, ...] | list[str]) -> str:
    """``text`` with every secret of :func:`url_secrets` (of at least :data:`MIN_SCRUB`
    characters) replaced by ``****``: for messages modelplane did not write itself (the
    engine's errors quote the backend URL)."""
    for secret in secrets:
        if len(secret) >= MIN_SCRUB:
            text = text.replace(secret, MASK)
    return text


def state_root(fleet_dir: str | Path) -> Path:
    """The fleet's private directory: state (default backend), workspaces, plans."""
    return Path(fleet_dir).resolve() / STATE_DIR


def default_backend(fleet_dir: str | Path) -> str:
    return (state_root(fleet_dir) / "state").as_uri()


def resolve_backend(
    fleet_dir: str | Path, explicit: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    environ = os.environ if environ is None else environ
    url = explicit or environ.get("PULUMI_BACKEND_URL") or default_backend(fleet_dir)
    scheme = urlparse(url).scheme
    if not scheme:
        raise BackendError(
            f"backend {redact_url(url)!r} is not a URL; use e.g. file:///abs/dir, s3://bucket, "
            "gs://bucket or https://api.pulumi.com"
        )
    return url


def is_diy(url: str) -> bool:
    return urlparse(url).scheme in DIY_SCHEMES


def local_state_dir(url: str) -> Path | None:
    """The directory of a ``file://`` backend (created by the driver), else None."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    path = parsed.netloc + parsed.path if parsed.netloc not in ("", "localhost") else parsed.path
    return Path(path).expanduser()


@dataclass(frozen=True)
class SecretsSettings:
    """The secrets provider for new stacks (None: the backend's default)."""

    provider: str | None
    uses_passphrase: bool


def resolve_secrets(
    backend_url: str,
    secrets_provider: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> SecretsSettings:
    """Check, before any stack runs, that secrets can be encrypted and decrypted."""
    environ = os.environ if environ is None else environ
    if secrets_provider and secrets_provider != "passphrase":
        return SecretsSettings(secrets_provider, uses_passphrase=False)
    if secrets_provider is None and not is_diy(backend_url):
        return SecretsSettings(None, uses_passphrase=False)
    if PASSPHRASE in environ:
        return SecretsSettings("passphrase", uses_passphrase=True)
    file = environ.get(PASSPHRASE_FILE)
    if file:
        path = Path(file).expanduser()
        if not path.is_file():
            raise PassphraseMissing(f"{PASSPHRASE_FILE} is {file!r}, which is not a readable file.")
        try:
            path.read_bytes()
        except OSError as exc:
            raise PassphraseMissing(f"{PASSPHRASE_FILE} {file!r} cannot be read: {exc}") from None
        return SecretsSettings("passphrase", uses_passphrase=True)
    raise PassphraseMissing(
        f"no passphrase for the secrets of backend {redact_url(backend_url)}.\n{PASSPHRASE_HELP}"
    )


def engine_environment(
    base: Mapping[str, str], backend_url: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Variables for every engine command: ``base`` (the engine's own) plus backend and secrets."""
    environ = os.environ if environ is None else environ
    env = dict(base)
    env["PULUMI_BACKEND_URL"] = backend_url
    env.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    env.setdefault(ACQUISITION, "true")
    # Plugin downloads stay off unless the user turns them back on
    # (`export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=false`).
    for key in (PASSPHRASE, PASSPHRASE_FILE, ACQUISITION):
        if key in environ:
            env[key] = environ[key]
    if urlparse(backend_url).scheme in ("postgres", "postgresql"):
        # Pulumi's postgres backend (v3.274) lists stacks with DIY_BACKEND_PARALLEL workers
        # (default 10), each holding a pooled connection while it asks for a second one,
        # from a pool of 2 x GOMAXPROCS: with more stacks than connections (5 stacks on 2
        # cores) every worker waits on another and `stack ls` hangs. One worker cannot.
        env[DIY_PARALLEL] = environ.get(DIY_PARALLEL, "1")
    return env
