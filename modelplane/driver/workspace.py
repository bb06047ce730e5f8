"""One Automation API workspace per stack, all sharing one engine (the only engine I/O).

Every stack gets its own work directory, ``<fleet>/.modelplane/workspaces/<stack>/``
(Automation API workspaces are not safe to share between threads, pulumi/pulumi#8186). It
holds a generated ``Pulumi.yaml`` for the fleet's project (``modelplane-<fleet>``, or the
``name`` of ``<fleet>/Pulumi.yaml``: modelplane.driver.project) whose ``main`` is ``program``, a
symlink to the repository's ``stacks/`` package (the engine runs the very program that
``pulumi up -s <stack>`` runs), with the Python interpreter that runs the driver, and whose
``stackConfigDir`` is the fleet directory: each stack's config, ``<fleet>/Pulumi.<stack>.yaml``
(the passphrase salt and anything set with ``pulumi config set``), is the fleet's own,
committed with its specs, and the same file the plain CLI reads and writes::

    cd specs/local && pulumi config set -s gateway --secret modelplane:secrets.hf.token ...

The driver writes nothing into those files but the salt a new stack gets: it tells the program
which fleet and lock to use through the environment (``MODELPLANE_FLEET_DIR``,
``MODELPLANE_LOCK``), so no absolute path lands in a committed file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from modelplane import front_door_keys
from modelplane.driver.engine_calls import Call, CallLog, engine_command, short_call_env
from modelplane.driver.errors import DriverError, EngineUnavailable
from modelplane.driver.project import LEGACY_PROJECT
from modelplane.driver.settings import SecretsSettings, engine_environment, local_state_dir
from modelplane.driver.stack_cache import Marker, StackCache

if TYPE_CHECKING:
    from pulumi.automation import LocalWorkspace, PulumiCommand, Stack

DRIVER_CONFIG = ("modelplane:specs", "modelplane:lock")
# What `reconcile` and rollouts decide, set by the driver as stack config before an `up`
# (modelplane/program.py): inputs of the fingerprint through the routing state and the lock.
UNROUTABLE_CONFIG = "modelplane:unroutable"
TEMPLATES_CONFIG = "modelplane:revisionTemplates"
# The driver's front-door hold (modelplane/front_door_keys.py): an input of the fingerprint
# only through what it changes (modelplane/driver/fingerprint.py, ``front_door_phase``).
HOLD_CONFIG = (front_door_keys.KEEP_CONFIG, front_door_keys.ACCEPTED_CONFIG)
PROGRAM_CONFIG = (UNROUTABLE_CONFIG, TEMPLATES_CONFIG, *HOLD_CONFIG)
FLEET_ENV = "MODELPLANE_FLEET_DIR"
LOCK_ENV = "MODELPLANE_LOCK"
# The clusters and `replica:<name>` entries the gateway leaves out of routes
# (`modelplane.driver.state.Routing.exclusions`).
UNROUTABLE_ENV = "MODELPLANE_UNROUTABLE"
# The pod templates of older revisions replicas still run during a rollout (JSON
# {deployment: {revision: template}}; modelplane/program.py renders those replicas from them).
TEMPLATES_ENV = "MODELPLANE_REVISION_TEMPLATES"


def program_dir() -> Path:
    """The folder of the Pulumi program, the ``modelplane.program`` package (its
    ``__main__.py``), in a checkout or an installed modelplane."""
    spec = importlib.util.find_spec("modelplane.program")
    if spec is None or not spec.submodule_search_locations:
        raise EngineUnavailable("the Pulumi program (`modelplane.program`) is not importable")
    path = Path(next(iter(spec.submodule_search_locations))).resolve()
    if not (path / "__main__.py").is_file():
        raise EngineUnavailable(f"the Pulumi program {path}/__main__.py does not exist")
    return path


#: The entry point the driver writes when modelplane is installed (no checkout's ``stacks/``).
ENTRY_POINT = (
    '"""modelplane\'s Pulumi program (written by the modelplane driver; do not edit)."""\n'
    "import runpy\n\n"
    'runpy.run_module("modelplane.program", run_name="__main__", alter_sys=True)\n'
)


def entry_dir(work_root: Path) -> Path:
    """The folder the engine runs as the program: its working directory, and so the
    Kubernetes provider's, against which a renderTo path is recorded (relative, so a moved
    checkout changes nothing). In a checkout it is the repository's ``stacks/``, the folder
    the root and fleet ``Pulumi.yaml`` files name: ``modelplane up`` and a hand-run ``pulumi
    up -s`` record the same path. An installed modelplane has none: a real folder (not a
    link, whose ``..`` the kernel would resolve elsewhere) in the fleet's workspaces."""
    package = program_dir()
    checkout = package.parents[1]
    if (checkout / "stacks" / "__main__.py").is_file() and (checkout / "Pulumi.yaml").is_file():
        return checkout / "stacks"
    entry = work_root / "program"
    entry.mkdir(parents=True, exist_ok=True)
    main = entry / "__main__.py"
    if not main.is_file() or main.read_text(encoding="utf-8") != ENTRY_POINT:
        main.write_text(ENTRY_POINT, encoding="utf-8")
    return entry


def project_settings(
    project: str, stack_config_dir: str | None = None, main: str = "program"
) -> dict[str, Any]:
    """The per-stack ``Pulumi.yaml``: the fleet's project, run by this interpreter; ``main``:
    the program's folder relative to the work directory."""
    options: dict[str, Any] = {"toolchain": "pip"}
    if sys.prefix != sys.base_prefix:  # running inside a virtualenv: the program uses it too
        options["virtualenv"] = sys.prefix
    settings: dict[str, Any] = {
        "name": project,
        "description": "modelplane stacks (generated by the modelplane driver; do not edit)",
        "runtime": {"name": "python", "options": options},
        "main": main,
    }
    if stack_config_dir is not None:
        settings["stackConfigDir"] = stack_config_dir
    return settings


def prepare_work_dir(
    work_dir: Path, program: Path, config_dir: Path | None = None, project: str = LEGACY_PROJECT
) -> None:
    """Create or refresh a stack's work directory (idempotent).

    ``program``: the program's folder (:func:`entry_dir`), named by the generated
    ``Pulumi.yaml`` relative to the work directory, as is ``config_dir``, where the stacks'
    ``Pulumi.<stack>.yaml`` live (the fleet directory).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    relative = None
    if config_dir is not None:
        relative = os.path.relpath(config_dir.resolve(), work_dir.resolve())
        _migrate_stack_config(work_dir, config_dir)
    main = os.path.relpath(program.resolve(), work_dir.resolve())
    text = yaml.safe_dump(project_settings(project, relative, main), sort_keys=False)
    project_file = work_dir / "Pulumi.yaml"
    if not project_file.exists() or project_file.read_text(encoding="utf-8") != text:
        project_file.write_text(text, encoding="utf-8")
    link = work_dir / "program"  # an older driver's link to the package
    if link.is_symlink():
        link.unlink()


def _migrate_stack_config(work_dir: Path, config_dir: Path) -> None:
    """Move a stack config file an older driver kept in the work directory to the fleet."""
    for old in work_dir.glob("Pulumi.*.yaml"):
        new = config_dir / old.name
        if not new.exists():
            try:
                data = yaml.safe_load(old.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError):
                continue
            config = data.get("config")
            if isinstance(config, dict):
                for key in DRIVER_CONFIG:
                    config.pop(key, None)
                if not config:
                    data.pop("config")
            new.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        old.unlink()


class EngineSession:
    """The engine, backend and environment shared by every stack of one run."""

    def __init__(
        self,
        work_root: Path,
        backend: str,
        secrets: SecretsSettings,
        environ: Mapping[str, str] | None = None,
        progress: Callable[[str], None] | None = None,
        config_dir: Path | None = None,
        project: str = LEGACY_PROJECT,
        organization: str | None = None,
    ) -> None:
        self.work_root = work_root
        self.project = project  # the fleet's Pulumi project (modelplane.driver.project)
        # The fleet's organization (`modelplane.organization`): stacks are named
        # <organization>/<project>/<stack> to the engine; None: the backend's default.
        self.organization = organization
        # The stacks' config files: the fleet directory (work_root is <fleet>/.modelplane/...).
        self.config_dir = config_dir or work_root.parent.parent
        self.program_env: dict[str, str] = {}
        self.backend = backend
        self.secrets = secrets
        self._environ = dict(os.environ if environ is None else environ)
        self._progress = progress or (lambda _msg: None)
        self._command: PulumiCommand | None = None
        self._env: dict[str, str] | None = None
        self._program: Path | None = None
        self._tmp: Path | None = None
        self._lock = threading.Lock()
        # Every CLI process this session starts (modelplane.driver.engine_calls).
        self.calls = CallLog.from_env(self._environ)
        # What the driver remembers of each stack (set by the fleet), the stacks the last
        # `stack ls` listed, and the digests of stack outputs this session has seen.
        self.cache: StackCache | None = None
        self.existing: set[str] | None = None
        self._salt: str | None = None  # the passphrase salt new stacks take (fleet_salt)
        self._salt_lock = threading.Lock()
        # The stacks this session made or selected: later calls need no `stack select`.
        self.created: set[str] = set()
        self.digests: dict[str, str] = {}
        # The stacks the fleet derives: when the fleet's project has none in the backend
        # but the legacy project has some of these, the fleet predates project names.
        self.expected: set[str] = set()
        self.fleet_label = str(config_dir or "")
        self._legacy_checked = False
        # The backend is the fleet's own default state directory: legacy stacks in it are
        # this fleet's, and move to its project without asking.
        self.auto_migrate = False

    # -- engine ---------------------------------------------------------------------------

    def start(self) -> None:
        """Find (or build) the engine and check it starts; raises EngineUnavailable."""
        with self._lock:
            if self._command is not None:
                return
            try:
                from modelplane.engine import (
                    EngineBuildFailed,
                    EngineNotFound,
                    engine_env,
                    engine_root,
                    ensure_engine,
                )
            except ImportError as exc:  # pragma: no cover
                raise EngineUnavailable(f"the engine bootstrap is missing: {exc}") from None
            try:
                ensure_engine(progress=self._progress)
                root = engine_root()
                base_env = engine_env()
            except (EngineNotFound, EngineBuildFailed) as exc:
                raise EngineUnavailable(str(exc)) from None
            from pulumi.automation.errors import InvalidVersionError

            try:
                self._command = engine_command(root, engine_cli_version(root), self.calls)
            except (InvalidVersionError, OSError) as exc:
                raise EngineUnavailable(f"the Pulumi CLI in {root} does not start: {exc}") from None
            env = engine_environment(base_env, self.backend, self._environ)
            for key, value in self._environ.items():
                env.setdefault(key, value)
            if sys.prefix == sys.base_prefix:  # no virtualenv in the project settings
                env.setdefault("PULUMI_PYTHON_CMD", sys.executable)
            # The Kubernetes provider writes each kubeconfig it is given to a temporary file
            # (for Helm) and leaves it there: give the engine a private temporary directory
            # (mode 0700) that close() removes, so no plaintext kubeconfig outlives the run.
            self._tmp = Path(tempfile.mkdtemp(prefix="modelplane-engine-"))
            env["TMPDIR"] = str(self._tmp)
            self._env = env
            self._program = entry_dir(self.work_root)
            state_dir = local_state_dir(self.backend)
            if state_dir is not None:
                state_dir.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        """Remove the engine's temporary directory (idempotent)."""
        with self._lock:
            if self._tmp is not None:
                # A plugin that is still exiting may write one more file while the tree is
                # removed: try again briefly rather than leave a kubeconfig behind.
                for _ in range(5):
                    shutil.rmtree(self._tmp, ignore_errors=True)
                    if not self._tmp.exists():
                        break
                    time.sleep(0.2)
                self._tmp = None

    @property
    def env(self) -> dict[str, str]:
        self.start()
        assert self._env is not None
        return self._env

    # -- workspaces and stacks ------------------------------------------------------------

    def qualified(self, stack: str) -> str:
        """The name the engine is given for one of the fleet's stacks: org-qualified when the
        fleet names its organization (its stacks land there, not in the user's default)."""
        if self.organization is None:
            return stack
        return f"{self.organization}/{self.project}/{stack}"

    def ours(self, listed: str) -> bool:
        """Whether a name `pulumi stack ls` printed is in the fleet's organization (a name
        without one is the backend's current one)."""
        parts = listed.split("/")
        return self.organization is None or len(parts) < 3 or parts[0] == self.organization

    def work_dir(self, stack: str) -> Path:
        return self.work_root / stack

    def workspace(self, stack: str, extra_env: Mapping[str, str] | None = None) -> LocalWorkspace:
        from pulumi.automation import LocalWorkspace

        self.start()
        assert self._program is not None
        work_dir = self.work_dir(stack)
        prepare_work_dir(work_dir, self._program, self.config_dir, self.project)
        return LocalWorkspace(
            work_dir=str(work_dir),
            env_vars={**self.env, **self.program_env, **(extra_env or {})},
            pulumi_command=self._command,
            secrets_provider=self.secrets.provider,
        )

    def stack(
        self,
        name: str,
        *,
        create: bool = True,
        extra_env: Mapping[str, str] | None = None,
        exists: bool = False,
    ) -> Stack:
        """Select the stack (creating it when ``create``); raises StackNotFoundError.

        ``exists``: the caller knows the stack is in the backend (this run's ``stack ls``):
        no ``pulumi stack select`` process is started, since every command the driver runs
        names its stack (``--stack``) anyway.
        """
        from pulumi.automation import Stack

        ws = self.workspace(name, extra_env)
        engine_name = self.qualified(name)
        if exists:
            return existing_stack(engine_name, ws)
        if not create:
            return Stack.select(engine_name, ws)
        if name in self.created:
            return existing_stack(engine_name, ws)
        if not self._new_passphrase_stack(name):
            stack = self._create(engine_name, ws, new=self._new(name))
        else:
            with self._salt_lock:  # the fleet's first new stack mints the salt the others take
                salt = self.fleet_salt()
                if salt is None:
                    stack = self._create(engine_name, ws, new=True)
                    self._salt = stack_salt(self.config_file(name))
            if salt is not None:
                stack = self._create_with_salt(name, engine_name, ws, salt)
        self.created.add(name)
        return stack

    def _new(self, stack: str) -> bool:
        """Whether this run's `stack ls` showed the stack missing."""
        return self.existing is not None and stack not in self.existing

    def _create(self, engine_name: str, ws: LocalWorkspace, *, new: bool) -> Stack:
        """``pulumi stack init`` of a stack known to be missing (one process instead of a
        failing ``stack select`` first), else select-or-create."""
        from pulumi.automation import Stack, StackAlreadyExistsError

        if not new:
            return Stack.create_or_select(engine_name, ws)
        try:
            return Stack.create(engine_name, ws)
        except StackAlreadyExistsError:  # made since the listing (another process)
            return Stack.select(engine_name, ws)

    def forget(self, stack: str) -> None:
        """The stack was removed from the backend."""
        self.created.discard(stack)
        if self.existing is not None:
            self.existing.discard(stack)

    # -- one passphrase salt per fleet ----------------------------------------------------
    #
    # The CLI derives a passphrase stack's key (1,000,000 PBKDF2 rounds, about 0.2 s of CPU)
    # once per salt and process: a stack run that reads five upstream stacks with salts of
    # their own derives six keys, with one salt for the fleet one. New stacks take the salt
    # of the fleet's existing ones (`encryptionsalt` in their config files, which the CLI
    # reuses); stacks made before keep theirs.

    def _new_passphrase_stack(self, stack: str) -> bool:
        return (
            self.secrets.uses_passphrase
            and self._new(stack)
            and stack_salt(self.config_file(stack)) is None
        )

    def fleet_salt(self) -> str | None:
        """The salt most of the fleet's existing stacks' config files name (None: none)."""
        if self._salt is None and self.existing:
            salts = [stack_salt(self.config_file(s)) for s in sorted(self.existing)]
            counted = Counter(s for s in salts if s is not None)
            if counted:
                self._salt = max(sorted(counted), key=lambda s: counted[s])
        return self._salt

    def _create_with_salt(
        self, name: str, engine_name: str, ws: LocalWorkspace, salt: str
    ) -> Stack:
        from pulumi.automation.errors import CommandError

        path = self.config_file(name)
        before = path.read_text(encoding="utf-8") if path.is_file() else None
        try:
            data = yaml.safe_load(before) if before else None
        except yaml.YAMLError:
            data = None
        if before and not isinstance(data, dict):
            return self._create(engine_name, ws, new=True)  # the CLI's own salt
        # One line in front: a config file written beforehand keeps its comments and layout.
        kept = before if data else ""
        path.write_text(f"encryptionsalt: {salt}\n{kept}", encoding="utf-8")
        try:
            return self._create(engine_name, ws, new=True)
        except CommandError:
            # e.g. the fleet's stacks were made with another passphrase: a salt of its own
            if before is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(before, encoding="utf-8")
            return self._create(engine_name, ws, new=True)

    def set_secret_config(self, stack: str, key: str, value: str) -> None:
        """``pulumi config set --secret KEY`` with the value on standard input: never on a
        command line, where ``ps`` and /proc show it to every user of the machine (the
        Automation API's ``set_config`` passes it as an argument)."""
        import subprocess

        ws = self.workspace(stack)
        assert self._command is not None  # started by workspace()
        env = {**os.environ, **_cli_env(ws), "PULUMI_AUTOMATION_API": "true"}
        env.update(short_call_env(env))
        argv = [self._command.command, "--non-interactive", "config", "set", "--secret"]
        argv += ["--stack", self.qualified(stack), key]  # no value: the CLI reads standard input
        started = time.monotonic()
        done = subprocess.run(
            argv, input=value, text=True, capture_output=True, cwd=ws.work_dir, env=env
        )
        self.calls.add(Call("config set", stack, time.monotonic() - started, done.returncode == 0))
        if done.returncode != 0:
            raise DriverError(
                f"pulumi config set --secret {key} on stack {stack} failed: "
                f"{done.stderr.strip()[-1000:]}"
            )

    def stack_markers(self) -> dict[str, Marker]:
        """Every stack of the fleet's project in the backend, with the backend's record of
        its last update (one ``pulumi stack ls``)."""
        ws = self.workspace(".project")
        markers = {
            s.name.rsplit("/", 1)[-1]: Marker.of(s) for s in ws.list_stacks() if self.ours(s.name)
        }
        if not markers and self._check_legacy():
            markers = {
                s.name.rsplit("/", 1)[-1]: Marker.of(s)
                for s in ws.list_stacks()
                if self.ours(s.name)
            }
        self.existing = set(markers)
        if self.cache is not None:
            self.cache.markers = dict(markers)
        return markers

    def list_stacks(self) -> list[str]:
        """The names of the fleet project's stacks in the backend."""
        return sorted(self.stack_markers())

    def all_stacks(self) -> list[tuple[str, str, str]]:
        """Every stack in the backend, of every project: ``(organization, project, stack)``
        (one ``pulumi stack ls --all``)."""
        ws = self.workspace(".project")
        out = []
        for summary in ws.list_stacks(include_all=True):
            parts = summary.name.split("/")
            if len(parts) == 3:
                out.append((parts[0], parts[1], parts[2]))
            else:  # the current project's stacks are listed by their short name
                out.append(("", self.project, parts[-1]))
        return out

    def legacy_stacks(self) -> list[tuple[str, str, str]]:
        """This fleet's stacks (by name) in the project every fleet shared before."""
        return [
            s
            for s in self.all_stacks()
            if s[1] == LEGACY_PROJECT and s[2] in self.expected and s[0]
        ]

    def _check_legacy(self) -> bool:
        """When the fleet's stacks still sit in the legacy project: move them (the fleet's
        own ``file://`` state, which no other fleet uses: True) or refuse to run (a shared
        backend, where a new, empty stack would build every cloud resource a second time)."""
        if self._legacy_checked or self.project == LEGACY_PROJECT or not self.expected:
            return False
        self._legacy_checked = True
        found = sorted(s[2] for s in self.legacy_stacks())
        if found and self.auto_migrate:
            from modelplane.driver.migrate import migrate_stacks

            moved = migrate_stacks(self).moved
            self._progress(
                f"moved stack(s) {', '.join(moved)} of this fleet's own state from project "
                f"`{LEGACY_PROJECT}` to `{self.project}` (`pulumi stack rename`)"
            )
            return bool(moved)
        if found:
            raise LegacyStacks(
                f"the backend holds this fleet's stacks ({', '.join(found)}) in project "
                f"`{LEGACY_PROJECT}`, which every fleet shared before each had a project of its "
                f"own; this fleet's project is `{self.project}`. Move them there with "
                f"`modelplane migrate {self.fleet_label}` (or keep the old project: "
                f"`name: {LEGACY_PROJECT}` in {self.fleet_label}/Pulumi.yaml)"
            )

    def rename_stack(self, qualified: str, new_qualified: str) -> None:
        """``pulumi stack rename`` of ``org/project/stack`` to ``org/project/stack`` (another
        project's stack too: the backend rewrites its resources' URNs)."""
        ws = self.workspace(".project")
        started = time.monotonic()
        ok = False
        try:
            ws.pulumi_command.run(
                ["stack", "rename", new_qualified, "--stack", qualified], ws.work_dir, _cli_env(ws)
            )
            ok = True
        finally:
            self.calls.add(Call("stack rename", qualified, time.monotonic() - started, ok))

    def plain_outputs(self, name: str) -> dict[str, Any] | None:
        """A stack's outputs, secrets in plaintext (one CLI process; None: no such stack)."""
        from pulumi.automation.errors import StackNotFoundError

        ws = self.workspace(name)
        try:
            result = ws.pulumi_command.run(
                ["stack", "output", "--json", "--show-secrets", "--stack", self.qualified(name)],
                ws.work_dir,
                _cli_env(ws),
            )
        except StackNotFoundError:
            return None
        data = json.loads(result.stdout or "{}")
        return dict(data) if isinstance(data, dict) else {}

    def set_program_inputs(
        self, fleet_dir: Path, lock: Path, unroutable: Sequence[str] = (), templates: str = ""
    ) -> None:
        """The fleet and lock the program reads (and the clusters the gateway leaves out of
        routes, and the templates of older revisions), for every workspace made after this."""
        self.program_env = {
            FLEET_ENV: str(fleet_dir),
            LOCK_ENV: str(lock),
            UNROUTABLE_ENV: ",".join(sorted(unroutable)),
        }
        if templates:
            self.program_env[TEMPLATES_ENV] = templates

    def config_file(self, stack: str) -> Path:
        """The stack's config file (committed with the fleet)."""
        return self.config_dir / f"Pulumi.{stack}.yaml"

    def extra_config(self, stack: str) -> dict[str, Any]:
        """The stack's config beyond the driver's own keys (encrypted values as stored)."""
        config = read_stack_config(self.config_dir, stack)
        return {k: v for k, v in config.items() if k not in DRIVER_CONFIG + PROGRAM_CONFIG}

    def environments(self, stack: str) -> list[str]:
        """The ESC environments the stack's config imports (never skipped: fingerprint.py)."""
        return read_stack_environments(self.config_dir, stack)

    def hold_config(self, stack: str) -> dict[str, Any]:
        """The stack's front-door hold as its config holds it (what the last sync wrote)."""
        config = read_stack_config(self.config_dir, stack)
        return {k: v for k, v in config.items() if k in HOLD_CONFIG}

    def sync_config(self, stack: str, values: Mapping[str, str | None]) -> list[str]:
        """Set (or, for None, remove) plain config values of an existing stack where its
        config file differs: one ``pulumi config set``/``rm`` per changed key; the keys."""
        current = read_stack_config(self.config_dir, stack)
        changed = [k for k, v in values.items() if current.get(k) != v]
        if not changed:
            return []
        ws = self.workspace(stack)
        to_set = [f"{k}={values[k]}" for k in changed if values[k] is not None]
        to_remove = [k for k in changed if values[k] is None]
        # One process for every key set, one for every key removed.
        calls = [("set-all", [a for kv in to_set for a in ("--plaintext", kv)])] if to_set else []
        calls += [("rm-all", to_remove)] if to_remove else []
        for verb, args in calls:
            started = time.monotonic()
            ok = False
            try:
                ws.pulumi_command.run(
                    ["config", verb, "--stack", self.qualified(stack), *args],
                    ws.work_dir,
                    _cli_env(ws),
                )
                ok = True
            finally:
                self.calls.add(Call(f"config {verb}", stack, time.monotonic() - started, ok))
        return changed

    def remove_work_dir(self, stack: str) -> None:
        work_dir = self.work_dir(stack)
        if work_dir.is_dir() and work_dir.parent == self.work_root:
            shutil.rmtree(work_dir)


class LegacyStacks(DriverError):
    """The fleet's stacks are still in the project every fleet shared before."""


def _cli_env(ws: LocalWorkspace) -> dict[str, str]:
    """The environment the Automation API gives a CLI call of this workspace."""
    home = {"PULUMI_HOME": ws.pulumi_home} if ws.pulumi_home else {}
    return {**home, **ws.env_vars}


def existing_stack(name: str, workspace: LocalWorkspace) -> Stack:
    """A ``Stack`` of a stack known to exist, made without ``pulumi stack select``."""
    from pulumi.automation import Stack
    from pulumi.automation._stack import StackInitMode

    stack = Stack.__new__(Stack)
    # What Stack.__init__ sets before it selects (pulumi/automation/_stack.py).
    stack.name, stack.workspace, stack._mode = name, workspace, StackInitMode.SELECT
    return stack


def engine_cli_version(root: Path) -> str | None:
    """The CLI version the engine cache recorded for ``root`` (None: ask the CLI)."""
    from modelplane.gobuild import cache

    try:
        return cache.read_manifest(root, "engine").versions.get("pulumi") or None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_stack_environments(work_dir: Path, stack: str) -> list[str]:
    """The Pulumi ESC environments the stack's config file imports (``environment:``, a list
    of names, or the older ``environment: {imports: [...]}``), in order."""
    path = work_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise DriverError(f"cannot read stack config {path}: {exc}") from None
    found = data.get("environment") if isinstance(data, dict) else None
    if isinstance(found, dict):
        found = found.get("imports")
    if not isinstance(found, list):
        return []
    # An import is a name, or a one-key mapping `{name: {merge: false}}`.
    names = [next(iter(i), None) if isinstance(i, dict) else i for i in found]
    return [str(n) for n in names if n]


def stack_salt(path: Path) -> str | None:
    """The passphrase salt (`encryptionsalt`) of a stack config file, if it has one."""
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    salt = data.get("encryptionsalt") if isinstance(data, dict) else None
    return salt if isinstance(salt, str) and salt else None


def read_stack_config(work_dir: Path, stack: str) -> dict[str, Any]:
    path = work_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise DriverError(f"cannot read stack config {path}: {exc}") from None
    config = data.get("config") or {}
    return dict(config) if isinstance(config, dict) else {}
