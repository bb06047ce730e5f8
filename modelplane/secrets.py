"""Resolve a `secretRef {name, key}` to its value (architecture.md, "Secrets").

Order: the stack config secret `modelplane:secrets.<name>.<key>`, then the
environment variable `MODELPLANE_SECRET_<NAME>_<KEY>` (upper-cased, `-` and `.`
as `_`), then, for a name written `file:<path>`, the file's content: a path relative
to the fleet directory that stays inside it, or one below a leading
`${MODELPLANE_DEV_FLEET_STATE}/` (the dev fleet's state, default
`.modelplane/dev-fleet` of the current directory); anything else is refused
(modelplane/api/secret_refs.py, docs/architecture.md "Secrets").

Pure: no Pulumi import. The caller passes a config lookup (the stack program
hands in Pulumi's raw config getter) and wraps the value as a secret output.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from modelplane.api import secret_refs
from modelplane.errors import UserError

if TYPE_CHECKING:
    from modelplane.api.errors import SpecError
    from modelplane.api.fleet import FleetSpec

CONFIG_NAMESPACE = "modelplane"
FILE_PREFIX = "file:"
DEV_FLEET_STATE_ENV = "MODELPLANE_DEV_FLEET_STATE"
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")

MAX_SECRET_FILE_BYTES = 1024 * 1024  # a Kubernetes Secret holds at most 1 MiB

ConfigLookup = Callable[[str], str | None]


def _read_secret_file(path: Path) -> str | None:
    """The file's text, or None unless it is a regular UTF-8 file within the size limit.

    Opened with O_NONBLOCK and checked with fstat before reading, so a FIFO, a
    device (/dev/zero) or a socket is refused rather than hanging or filling memory.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SECRET_FILE_BYTES:
            return None
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
        if len(data) > MAX_SECRET_FILE_BYTES:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


class SecretNotFound(UserError, LookupError):
    """No source had the secret; the message names every place that was tried."""

    def __init__(self, name: str, key: str, tried: list[str]) -> None:
        self.name = name
        self.key = key
        self.tried = tried
        super().__init__(f"secret {name!r} key {key!r} not found; set one of: " + "; ".join(tried))


class PlaintextSecret(UserError, ValueError):
    """A secret found in stack config that is not a Pulumi secret (it would sit in plaintext in
    the stack's config file and be recorded as such)."""

    def __init__(self, full_key: str) -> None:
        self.full_key = full_key
        super().__init__(
            f"config value {full_key} is plaintext; store it as a secret: "
            f"pulumi config set --secret {full_key} ..."
        )


@dataclass(frozen=True)
class ResolvedSecret:
    value: str
    source: str  # "config", "env" or "file" -- never the value itself


def config_key(name: str, key: str) -> str:
    """The stack config key (without the namespace): `secrets.<name>.<key>`."""
    return f"secrets.{name}.{key}"


def env_var(name: str, key: str) -> str:
    """`MODELPLANE_SECRET_<NAME>_<KEY>`: upper-cased, `-` and `.` (and `/`, `:`) as `_`."""
    return secret_refs.env_var(name, key)


def dev_fleet_state(env: Mapping[str, str]) -> Path:
    """The dev fleet's state directory: `MODELPLANE_DEV_FLEET_STATE`, else its default."""
    found = env.get(DEV_FLEET_STATE_ENV)
    return Path(found) if found else Path.cwd() / ".modelplane" / "dev-fleet"


def resolve_secret(
    name: str,
    key: str,
    *,
    config: ConfigLookup,
    env: Mapping[str, str] | None = None,
    base_dir: str | Path | None = None,
    is_secret: Callable[[str], bool] | None = None,
) -> ResolvedSecret:
    """The secret's value, or SecretNotFound naming the config key, env var and file tried.

    `config` receives the fully qualified key (`modelplane:secrets.<name>.<key>`)
    and returns the value or None. With `is_secret` (the stack program passes Pulumi's
    `is_config_secret`), a config value that is not a Pulumi secret raises PlaintextSecret.
    """
    env = os.environ if env is None else env
    full_key = f"{CONFIG_NAMESPACE}:{config_key(name, key)}"
    tried = [f"config secret {full_key} (pulumi config set --secret)"]
    value = config(full_key)
    if value:
        if is_secret is not None and not is_secret(full_key):
            raise PlaintextSecret(full_key)
        return ResolvedSecret(value, "config")
    var = env_var(name, key)
    tried.append(f"environment variable {var}")
    value = env.get(var)
    if value:
        return ResolvedSecret(value, "env")
    if name.startswith(FILE_PREFIX):
        raw = name[len(FILE_PREFIX) :]
        try:
            path = secret_refs.confined_file(raw, base_dir or Path.cwd(), dev_fleet_state(env))
        except ValueError as exc:  # validation says so first; refused here all the same
            tried.append(f"no file: {raw!r} {exc}")
            raise SecretNotFound(name, key, tried) from None
        tried.append(f"file {path} (a regular file of at most {MAX_SECRET_FILE_BYTES} bytes)")
        value = _read_secret_file(path)
        if value is not None:
            return ResolvedSecret(value, "file")
    else:
        tried.append(f"a file, by naming the secret 'file:<path>' instead of {name!r}")
    raise SecretNotFound(name, key, tried)


def expand_path_variables(text: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """``$VAR``/``${VAR}`` replaced from ``env``; the names that are not set.

    ``MODELPLANE_DEV_FLEET_STATE`` falls back to ``.modelplane/dev-fleet`` of the current
    directory, as `modelplane dev-fleet` does.
    """
    missing: list[str] = []

    def value(match: re.Match[str]) -> str:
        var = match.group(1) or match.group(2)
        found = env.get(var)
        if not found and var == DEV_FLEET_STATE_ENV:
            found = str(Path.cwd() / ".modelplane" / "dev-fleet")
        if not found:
            missing.append(var)
            return match.group(0)
        return found

    return _VARIABLE.sub(value, text), missing


GITIGNORE = "# modelplane's own: state, keys, workspaces. Never committed.\n*\n"


def private_dir(path: Path) -> Path:
    """``path`` (a fleet's `.modelplane/`, holding keys and state) made when missing, mode
    0700 (narrowed to it when this user owns a wider one), with a `.gitignore` of `*` so that
    `git add .` in a fleet repository never commits it (docs/architecture.md)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        info = path.stat()
        if info.st_uid == os.getuid() and info.st_mode & 0o077:
            path.chmod(0o700)
        fd = os.open(path / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    except OSError:
        return path  # a directory of another user, a read-only checkout: left as it is
    with os.fdopen(fd, "w") as handle:
        handle.write(GITIGNORE)
    return path


def ensure_caller_key_files(
    fleet_spec: object, place: Callable[[str], Path | None], inside: Path
) -> list[Path]:
    """A random API key (``sk-mp-...``, mode 0600) for each InferenceGateway caller whose
    secretRef is a ``file:<path>`` that ``place`` turns into a file (None: not one to make)
    inside the directory ``inside`` and that does not exist yet: the keys `up` and `dev-fleet
    up` make for the fleet's own state, never the specs. Returns the files written (never
    their content)."""
    import secrets

    gateway = getattr(fleet_spec, "gateway", None)
    auth = gateway.spec.auth if gateway is not None else None
    written: list[Path] = []
    for caller in auth.callers if auth is not None else []:
        name = caller.secret_ref.name
        path = place(name[len(FILE_PREFIX) :]) if name.startswith(FILE_PREFIX) else None
        if path is None or path.exists() or not path.resolve().is_relative_to(inside.resolve()):
            continue
        private_dir(inside)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"sk-mp-{secrets.token_urlsafe(32)}\n")
        written.append(path)
    return written


def configured_secret_keys(fleet_dir: Path, stack: str) -> frozenset[str]:
    """The config keys `Pulumi.<stack>.yaml` in the fleet directory holds (never the values:
    a secret's presence is enough to know `up` can resolve it)."""
    import yaml

    path = fleet_dir / f"Pulumi.{stack}.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return frozenset()
    config = data.get("config") if isinstance(data, dict) else None
    return frozenset(str(k) for k in config) if isinstance(config, dict) else frozenset()


def gateway_secret_errors(
    fleet: FleetSpec, fleet_dir: Path, env: Mapping[str, str]
) -> list[SpecError]:
    """Every InferenceGateway secretRef (callers' keys, TLS certificate and key) no source has,
    as spec errors naming file, object and field (api.md "Callers"): `validate` and `up`
    report them before any stack runs, so nothing is half-applied."""
    from modelplane.api.errors import SpecError as Error

    gateway = fleet.gateway
    if gateway is None:
        return []
    refs: list[tuple[str, str, str]] = []
    if gateway.spec.auth is not None:
        refs += [
            (f"spec.auth.callers[{i}].secretRef", c.secret_ref.name, c.secret_ref.key)
            for i, c in enumerate(gateway.spec.auth.callers)
        ]
    if gateway.spec.tls is not None:
        tls = gateway.spec.tls
        refs += [
            ("spec.tls.certificate", tls.certificate.name, tls.certificate.key),
            ("spec.tls.privateKey", tls.private_key.name, tls.private_key.key),
        ]
    configured = configured_secret_keys(fleet_dir, "gateway")
    file, document = fleet.sources.get(("InferenceGateway", gateway.metadata.name), ("", 0))
    errors: list[SpecError] = []
    for path, name, key in refs:
        try:
            resolve_secret(
                name,
                key,
                config=lambda full: "set" if full in configured else None,
                env=env,
                base_dir=fleet_dir,
            )
        except SecretNotFound as exc:
            errors.append(
                Error(
                    file,
                    document,
                    f"InferenceGateway {gateway.metadata.name}",
                    path,
                    str(exc),
                )
            )
    return errors
