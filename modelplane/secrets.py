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
    where: str = ""  # for people: the config key, variable or file (never the value)


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
        return ResolvedSecret(value, "config", f"config secret {full_key}")
    var = env_var(name, key)
    tried.append(f"environment variable {var}")
    value = env.get(var)
    if value:
        return ResolvedSecret(value, "env", f"environment variable {var}")
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
            return ResolvedSecret(value, "file", f"file {path}")
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
    inside the directory ``inside`` and that does not exist yet: the keys `dev-fleet up`
    makes for the dev fleet's state, never the specs. Returns the files written (never
    their content). (`up` makes none: `modelplane keys create`, api.md "Keys".)"""
    gateway = getattr(fleet_spec, "gateway", None)
    auth = gateway.spec.auth if gateway is not None else None
    written: list[Path] = []
    for caller in auth.callers if auth is not None else []:
        name = caller.secret_ref.name
        path = place(name[len(FILE_PREFIX) :]) if name.startswith(FILE_PREFIX) else None
        if path is None or path.exists() or not path.resolve().is_relative_to(inside.resolve()):
            continue
        write_new_key_file(path, inside)
        written.append(path)
    return written


# --- callers' key files (api.md "Keys") ---------------------------------------------------


@dataclass(frozen=True)
class CallerKeyFile:
    """Where one caller's key lives, as `keys create|rotate|list` and `up` see it."""

    caller: str
    ref: str  # the secretRef's name
    ref_key: str  # the secretRef's key
    path: Path | None  # the file, when the key is a file modelplane keeps
    home: Path | None  # the private directory holding it (fleet `.modelplane/`, dev state)
    why: str  # why modelplane keeps no file for it (path None)

    @property
    def env_var(self) -> str:
        return env_var(self.ref, self.ref_key)

    @property
    def source(self) -> str:
        """Where the key is, for people (never the key)."""
        if self.path is not None:
            return str(self.path)
        return self.why


def caller_key_files(
    fleet_spec: object, fleet_dir: Path, env: Mapping[str, str]
) -> list[CallerKeyFile]:
    """Every InferenceGateway caller and where its key is: a ``file:`` in the fleet's own
    `.modelplane/` or in the dev fleet's state (``${MODELPLANE_DEV_FLEET_STATE}/...``) is a
    file modelplane keeps (`keys create` makes it, `keys rotate` rewrites it); anything else
    (stack config, environment, a file elsewhere in the fleet folder) is the user's."""
    gateway = getattr(fleet_spec, "gateway", None)
    auth = gateway.spec.auth if gateway is not None else None
    found: list[CallerKeyFile] = []
    for caller in auth.callers if auth is not None else []:
        name, key = caller.secret_ref.name, caller.secret_ref.key
        path: Path | None = None
        home: Path | None = None
        why = f"secret {name!r} key {key!r} (stack config or {env_var(name, key)})"
        if name.startswith(FILE_PREFIX):
            raw = name[len(FILE_PREFIX) :]
            dev = raw.startswith(secret_refs.DEV_FLEET_STATE)
            state = dev_fleet_state(env)
            root = Path(os.path.realpath(state if dev else fleet_dir / ".modelplane"))
            try:
                target = secret_refs.confined_file(raw, fleet_dir, state)
            except ValueError as exc:
                why = f"file {raw!r}, refused: {exc}"
            else:
                if target.is_relative_to(root) and target != root:
                    path, home = target, root
                else:
                    why = f"file {target} (outside .modelplane/: yours to make and keep)"
        found.append(CallerKeyFile(caller.name, name, key, path, home, why))
    return found


def write_new_key_file(path: Path, home: Path) -> str:
    """A new random key in ``path`` (mode 0600, never an existing file: FileExistsError),
    its private directory ``home`` made first (0700, `.gitignore`). Returns the key."""
    from modelplane.caller_keys import new_key

    private_dir(home)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = new_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def replace_key_file(path: Path, text: str) -> None:
    """``path``'s content replaced by ``text`` at once (a 0600 file renamed over it): a
    reader sees the old keys or the new ones, never half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def missing_caller_keys(
    fleet_spec: object, fleet_dir: Path, env: Mapping[str, str]
) -> list[CallerKeyFile]:
    """The callers whose key is a file modelplane keeps that does not exist, and that no
    other source (stack config of the gateway stack, ``MODELPLANE_SECRET_*``) provides:
    the keys `keys create` would make (`up` never makes one silently, api.md "Keys")."""
    configured = configured_secret_keys(fleet_dir, "gateway")
    missing: list[CallerKeyFile] = []
    for entry in caller_key_files(fleet_spec, fleet_dir, env):
        if entry.path is None or entry.path.exists():
            continue
        try:
            resolve_secret(
                entry.ref,
                entry.ref_key,
                config=lambda full: "set" if full in configured else None,
                env=env,
                base_dir=fleet_dir,
            )
        except SecretNotFound:
            missing.append(entry)
    return missing


class CallerKeysMissing(UserError):
    """Callers' key files that do not exist, all of them, with the command that makes them
    (one line; never made silently: security review M3)."""

    def __init__(self, missing: list[CallerKeyFile], fleet_dir: str | Path) -> None:
        self.missing = missing
        names = [m.caller for m in missing]
        listed = ", ".join(f"caller {m.caller} (file {m.path})" for m in missing)
        create = f"modelplane keys create {fleet_dir} " + " ".join(f"--caller {n}" for n in names)
        given = ", ".join(m.env_var for m in missing)
        super().__init__(
            f"{len(missing)} caller key(s) missing: {listed}; `up` makes none outside a first "
            f"`up` in a terminal on a local backend. New keys: `{create}`; in CI or the "
            f"reconcile pod give the existing ones instead (the files, or {given})"
        )


@dataclass(frozen=True)
class ShortCallerKey:
    """A caller whose unexpired keys include one shorter than the rule (security review L8)."""

    caller: str
    source: str  # where its key text is, for people (never a key)
    lines: tuple[int, ...]
    kept: bool  # a file modelplane keeps: `keys rotate` replaces it


def short_caller_keys(
    fleet_spec: object,
    fleet_dir: Path,
    env: Mapping[str, str],
    *,
    skip_callers: frozenset[str] = frozenset(),
) -> list[ShortCallerKey]:
    """Every caller whose key text, read from a file or ``MODELPLANE_SECRET_*``, holds an
    unexpired key shorter than ``MIN_KEY_LENGTH``. Stack config is encrypted and not read
    here (the gateway stack's program refuses a short key there); a key no source has or a
    malformed text is :func:`gateway_secret_errors`' to report."""
    from datetime import UTC, datetime

    from modelplane.caller_keys import KeyFormatError, short_key_lines

    configured = configured_secret_keys(fleet_dir, "gateway")
    now = datetime.now(UTC)
    found: list[ShortCallerKey] = []
    for entry in caller_key_files(fleet_spec, fleet_dir, env):
        if entry.caller in skip_callers:
            continue
        try:
            text = resolve_secret(
                entry.ref,
                entry.ref_key,
                config=lambda full: "set" if full in configured else None,
                env=env,
                base_dir=fleet_dir,
            )
            lines = short_key_lines(text.value, now) if text.source != "config" else []
        except (SecretNotFound, KeyFormatError):
            continue
        if lines:
            kept = entry.path is not None
            found.append(ShortCallerKey(entry.caller, text.where, tuple(lines), kept))
    return found


class CallerKeysTooShort(UserError):
    """Callers with a key shorter than the rule, all of them, with where each key text is and
    its lines (one line, never a key: security review L8)."""

    def __init__(self, short: list[ShortCallerKey], fleet_dir: str | Path) -> None:
        from modelplane.caller_keys import MIN_KEY_LENGTH, SHORT_KEY_RULE
        from modelplane.caller_keys import short_keys as describe

        self.short = short
        listed = ", ".join(describe(s.caller, s.source, s.lines) for s in short)
        kept = [s.caller for s in short if s.kept]
        fixes: list[str] = []
        if kept:
            callers = " ".join(f"--caller {c}" for c in kept)
            fixes.append(
                f"`modelplane keys rotate {fleet_dir} {callers} --grace 0` appends a new key "
                "and ends the short ones"
            )
        others = [s.caller for s in short if not s.kept]
        if others:
            theirs = "its" if len(others) == 1 else "their"
            fixes.append(
                f"caller {', '.join(others)}: put a key of {MIN_KEY_LENGTH} characters or more "
                f"in {theirs} source"
            )
        super().__init__(
            f"{len(short)} caller(s) with a key shorter than {MIN_KEY_LENGTH} characters: "
            f"{listed}; {SHORT_KEY_RULE}: " + "; ".join(fixes)
        )


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
    fleet: FleetSpec,
    fleet_dir: Path,
    env: Mapping[str, str],
    *,
    skip_callers: frozenset[str] = frozenset(),
) -> list[SpecError]:
    """Every InferenceGateway secretRef (callers' keys, TLS certificate and key) no source has,
    as spec errors naming file, object and field (api.md "Callers"): `validate` and `up`
    report them before any stack runs, so nothing is half-applied. ``skip_callers``: callers
    whose keys are about to be made (not checked)."""
    from modelplane.api.errors import SpecError as Error

    gateway = fleet.gateway
    if gateway is None:
        return []
    refs: list[tuple[str, str, str]] = []
    if gateway.spec.auth is not None:
        refs += [
            (f"spec.auth.callers[{i}].secretRef", c.secret_ref.name, c.secret_ref.key)
            for i, c in enumerate(gateway.spec.auth.callers)
            if c.name not in skip_callers
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
            found = resolve_secret(
                name,
                key,
                config=lambda full: "set" if full in configured else None,
                env=env,
                base_dir=fleet_dir,
            )
        except SecretNotFound as exc:
            problem: str | None = str(exc)
        else:
            # A caller's keys read here (not the stack config's, encrypted): well formed and
            # one of them unexpired (api.md "Keys").
            caller = path.startswith("spec.auth.")
            problem = caller_keys_problem(found, name) if caller else None
        if problem:
            errors.append(
                Error(file, document, f"InferenceGateway {gateway.metadata.name}", path, problem)
            )
    return errors


def caller_keys_problem(found: ResolvedSecret, name: str) -> str | None:
    """Why a caller's key text read from a file or the environment is unusable: malformed,
    or every key expired (None: usable; a stack config value is not read here)."""
    from datetime import UTC, datetime

    from modelplane.caller_keys import KeyFormatError, live_keys, parse_keys

    if found.source == "config":
        return None
    try:
        keys = parse_keys(found.value, where=f"the keys of {name!r} ({found.source})")
    except KeyFormatError as exc:
        return str(exc)
    if not live_keys(keys, datetime.now(UTC)):
        return (
            f"every key of {name!r} has expired (notAfter): `modelplane keys rotate` adds a new one"
        )
    return None
