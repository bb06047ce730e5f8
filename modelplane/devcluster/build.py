"""Build the Kubernetes control plane (``kube-apiserver``, ``kube-scheduler``,
``kube-controller-manager``, ``kubectl``) and ``kine`` from Go modules, once, into the
modelplane cache.

``k8s.io/kubernetes`` cannot be ``go install``-ed: its go.mod maps every staging module
(``k8s.io/api``, ``k8s.io/client-go``, ...) to ``./staging/src/...`` at ``v0.0.0``, which is
ignored when it is a dependency. So we generate a wrapper module that requires it and replaces
each staging module with its published ``v0.<minor>.<patch>`` version, copying the ``go`` and
``godebug`` lines so the binary gets upstream's GODEBUG defaults. kine gets a wrapper too (no
replaces needed), so both are built the same way: ``go mod tidy`` then ``go build -trimpath``
with ``CGO_ENABLED=0`` and ``GOTOOLCHAIN=local``, versions stamped through ``-ldflags -X``.

Layout (``kube_cache_dir()``)::

    <cache>/kube/k8s-v1.35.8-kine-v0.16.4/
        bin/kube-apiserver, bin/kube-scheduler, bin/kube-controller-manager, bin/kubectl,
        bin/kine                          appears atomically (rename of a finished temp dir)
        src/kube-apiserver/go.mod, go.sum wrapper modules
        src/kine/go.mod, go.sum
        build.log, build-info.json
    <cache>/kube/k8s-v1.35.8-kine-v0.16.4.lock   flock held while building
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from modelplane.devcluster.versions import (
    KINE_MODULE,
    KINE_PACKAGE,
    KINE_VERSION,
    KUBE_COMMANDS,
    KUBE_PACKAGES,
    KUBERNETES_MODULE,
    KUBERNETES_VERSION,
    MINIMUM_GO,
    kube_cache_dir,
    staging_version,
)

Progress = Callable[[str], None]
T = TypeVar("T")

HEARTBEAT_SECONDS = 60.0
APISERVER_WRAPPER_MODULE = "modelplane.local/build/kube-apiserver"
KINE_WRAPPER_MODULE = "modelplane.local/build/kine"
BIN_DIR_ENV = "MODELPLANE_KUBE_BIN_DIR"
"""Use prebuilt ``kube-apiserver`` and ``kine`` from this directory instead of building."""


class KubeBuildError(RuntimeError):
    """Building the local control plane failed; the message says which step and why."""


@dataclass(frozen=True)
class KubeBinaries:
    """Paths of a complete set of control-plane binaries."""

    bin_dir: Path
    kubernetes_version: str = KUBERNETES_VERSION
    kine_version: str = KINE_VERSION

    @property
    def kube_apiserver(self) -> Path:
        return self.bin_dir / "kube-apiserver"

    @property
    def kube_scheduler(self) -> Path:
        return self.bin_dir / "kube-scheduler"

    @property
    def kube_controller_manager(self) -> Path:
        return self.bin_dir / "kube-controller-manager"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def kine(self) -> Path:
        return self.bin_dir / "kine"

    def all_paths(self) -> list[Path]:
        return [self.bin_dir / name for name in (*KUBE_COMMANDS, "kine")]

    def complete(self) -> bool:
        return all(_is_executable(p) for p in self.all_paths())


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def default_progress(message: str) -> None:
    print(f"modelplane: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- go.mod rendering


@dataclass(frozen=True)
class Replace:
    old: str
    old_version: str | None
    new: str
    new_version: str | None

    @property
    def is_local_path(self) -> bool:
        return self.new.startswith(("./", "../", "/")) or self.new in (".", "..")

    def render(self) -> str:
        left = self.old if self.old_version is None else f"{self.old} {self.old_version}"
        right = self.new if self.new_version is None else f"{self.new} {self.new_version}"
        return f"{left} => {right}"


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].strip()


def _directive_entries(gomod: str, verb: str) -> list[str]:
    """The entries of every ``verb x`` line and ``verb ( ... )`` block, comments stripped."""
    entries: list[str] = []
    in_block = False
    for raw in gomod.splitlines():
        line = _strip_comment(raw)
        if in_block:
            if line == ")":
                in_block = False
            elif line:
                entries.append(line)
            continue
        if line == f"{verb} (":
            in_block = True
        elif line.startswith(f"{verb} ") or line.startswith(f"{verb}\t"):
            entries.append(line[len(verb) :].strip())
    return entries


def parse_replaces(gomod: str) -> list[Replace]:
    replaces: list[Replace] = []
    for entry in _directive_entries(gomod, "replace"):
        left, sep, right = entry.partition("=>")
        if not sep:
            continue
        lparts, rparts = left.split(), right.split()
        if not lparts or not rparts:
            continue
        replaces.append(
            Replace(
                old=lparts[0],
                old_version=lparts[1] if len(lparts) > 1 else None,
                new=rparts[0],
                new_version=rparts[1] if len(rparts) > 1 else None,
            )
        )
    return replaces


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """Modules the Kubernetes go.mod maps into ``./staging/src/`` (31 for 1.34 and 1.35)."""
    return sorted(
        r.old
        for r in parse_replaces(kubernetes_gomod)
        if r.is_local_path and r.new.startswith("./staging/src/")
    )


def go_directive(gomod: str) -> str:
    match = re.search(r"^go\s+(\d+\.\d+(?:\.\d+)?)\s*$", gomod, re.MULTILINE)
    if not match:
        raise KubeBuildError("go.mod has no `go` directive")
    return match.group(1)


def godebug_entries(gomod: str) -> list[str]:
    """``godebug`` settings (e.g. ``default=go1.25``); a dependency's are ignored, so copy them."""
    return _directive_entries(gomod, "godebug")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.removeprefix("go").split("."))


def wrapper_gomod(
    *,
    module: str,
    go: str,
    godebug: Sequence[str],
    tools: Sequence[str],
    require: Sequence[tuple[str, str]],
    replaces: Sequence[str],
    comment: str,
    excludes: Sequence[str] = (),
) -> str:
    # The `tool` directive needs go >= 1.24 in the main module.
    if _version_tuple(go) < (1, 24):
        go = "1.24"
    lines = [f"// {line}" if line else "//" for line in comment.splitlines()]
    lines += [f"module {module}", "", f"go {go}", ""]
    if godebug:
        if len(godebug) == 1:
            lines += [f"godebug {godebug[0]}", ""]
        else:
            lines += ["godebug (", *(f"\t{g}" for g in godebug), ")", ""]
    if len(tools) == 1:
        lines += [f"tool {tools[0]}", ""]
    else:
        lines += ["tool (", *(f"\t{t}" for t in tools), ")", ""]
    lines += ["require (", *(f"\t{m} {v}" for m, v in require), ")", ""]
    if replaces:
        lines += ["replace (", *(f"\t{r}" for r in replaces), ")", ""]
    if excludes:
        lines += ["exclude (", *(f"\t{e}" for e in excludes), ")", ""]
    return "\n".join(lines)


def render_apiserver_gomod(kubernetes_version: str, kubernetes_gomod: str) -> str:
    """The wrapper go.mod for ``k8s.io/kubernetes/cmd/kube-apiserver``.

    ``kubernetes_gomod`` is the text of the ``k8s.io/kubernetes`` go.mod at that version.
    """
    staging = staging_modules(kubernetes_gomod)
    if not staging:
        raise KubeBuildError("the k8s.io/kubernetes go.mod lists no ./staging replace directives")
    sv = staging_version(kubernetes_version)
    replaces = [f"{m} => {m} {sv}" for m in staging]
    # Non-path replaces upstream relies on are ignored for dependencies: copy them.
    replaces += [
        r.render()
        for r in parse_replaces(kubernetes_gomod)
        if not r.is_local_path and r.old not in staging
    ]
    return wrapper_gomod(
        module=APISERVER_WRAPPER_MODULE,
        go=go_directive(kubernetes_gomod),
        godebug=godebug_entries(kubernetes_gomod),
        tools=KUBE_PACKAGES,
        require=[(KUBERNETES_MODULE, f"v{kubernetes_version}")],
        replaces=replaces,
        comment=(
            f"Generated by modelplane: builds {', '.join(KUBE_COMMANDS)} v{kubernetes_version}.\n"
            f"Every staging module is replaced by its published {sv} version."
        ),
    )


def render_kine_gomod(kine_version: str, kine_gomod: str) -> str:
    """The wrapper go.mod for kine (its go.mod has no replace directives; copy any non-path ones
    it might grow)."""
    return wrapper_gomod(
        module=KINE_WRAPPER_MODULE,
        go=go_directive(kine_gomod),
        godebug=godebug_entries(kine_gomod),
        tools=[KINE_PACKAGE],
        require=[(KINE_MODULE, f"v{kine_version}")],
        replaces=[r.render() for r in parse_replaces(kine_gomod) if not r.is_local_path],
        comment=f"Generated by modelplane: builds kine v{kine_version}.",
    )


def apiserver_ldflags(kubernetes_version: str, git_commit: str, build_date: str) -> list[str]:
    """``-X`` flags so ``/version`` and ``--version`` report the release (hack/lib/version.sh)."""
    major, minor, _ = kubernetes_version.split(".")
    values = {
        "gitVersion": f"v{kubernetes_version}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": git_commit,
        "gitTreeState": "clean",
        "buildDate": build_date,
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{name}={value}" for name, value in values.items()]
    return flags


def kine_ldflags(kine_version: str, git_commit: str) -> list[str]:
    return [
        "-s",
        "-w",
        f"-X github.com/k3s-io/kine/pkg/version.Version=v{kine_version}",
        f"-X github.com/k3s-io/kine/pkg/version.GitCommit={git_commit}",
    ]


# --------------------------------------------------------------------------- the build


def cached_kube_binaries(
    kubernetes_version: str = KUBERNETES_VERSION, kine_version: str = KINE_VERSION
) -> KubeBinaries | None:
    """The binaries if they are already available (prebuilt dir or cache), else None."""
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        binaries = KubeBinaries(Path(override).expanduser(), kubernetes_version, kine_version)
        if not binaries.complete():
            raise KubeBuildError(
                f"{BIN_DIR_ENV}={override} does not contain executable "
                f"{', '.join((*KUBE_COMMANDS, 'kine'))}"
            )
        return binaries
    binaries = KubeBinaries(
        kube_cache_dir(kubernetes_version, kine_version) / "bin", kubernetes_version, kine_version
    )
    return binaries if binaries.complete() else None


def ensure_kube_binaries(
    *,
    kubernetes_version: str = KUBERNETES_VERSION,
    kine_version: str = KINE_VERSION,
    progress: Progress | None = default_progress,
) -> KubeBinaries:
    """Return the cached binaries, building them first if needed (minutes, the first time).

    Safe to call concurrently from several processes: one builds, the others wait on a lock.
    """
    return ensure_built(
        kube_cache_dir(kubernetes_version, kine_version),
        lambda: cached_kube_binaries(kubernetes_version, kine_version),
        lambda root, say: KubeBuilder(root, kubernetes_version, kine_version, say).run(),
        progress,
    )


def ensure_built(
    root: Path,
    cached: Callable[[], T | None],
    build: Callable[[Path, Progress], None],
    progress: Progress | None,
    missing: str = "is incomplete",
) -> T:
    """What ``cached()`` finds, else what it finds once ``build`` has built it into ``root``.
    One process builds (it holds ``<root>.lock``); the others wait, then find it built.
    ``missing``: what the error says of ``root/bin`` if the build left nothing to find."""
    found = cached()
    if found is not None:
        return found
    say: Progress = progress or (lambda _message: None)
    root.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(root.parent / f"{root.name}.lock", say):
        found = cached()
        if found is None:
            build(root, say)
            found = cached()
    if found is None:  # pragma: no cover - the builders raise instead
        raise KubeBuildError(f"build finished but {root / 'bin'} {missing}")
    return found


@contextlib.contextmanager
def file_lock(path: Path, say: Progress) -> Iterator[None]:
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another process is building the Kubernetes binaries; waiting for {path}")
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def find_go() -> Path:
    """The ``go`` command: ``$MODELPLANE_GO``, then PATH, then /usr/local/go/bin/go."""
    candidates = [os.environ.get("MODELPLANE_GO"), shutil.which("go"), "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and _is_executable(Path(candidate)):
            return Path(candidate)
    raise KubeBuildError(
        "building kube-apiserver and kine needs the Go toolchain (go >= "
        f"{'.'.join(map(str, MINIMUM_GO))}); none found on PATH (set MODELPLANE_GO), or set "
        f"{BIN_DIR_ENV} to a directory holding prebuilt kube-apiserver and kine"
    )


def go_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "GOTOOLCHAIN": "local",  # never download a toolchain
            "CGO_ENABLED": "0",  # static binaries; kine uses pure-Go SQLite
            "GOWORK": "off",
            "GO111MODULE": "on",
            "GOFLAGS": "",  # a user's -mod=vendor etc. must not leak in
        }
    )
    return env


class KubeBuilder:
    """Builds the control plane. Its Go steps and ``build_into_cache`` serve the dev fleet's
    builders too (``modelplane.devfleet.binaries``, ``modelplane.devfleet.prometheus``)."""

    def __init__(
        self, root: Path, kubernetes_version: str, kine_version: str, say: Progress
    ) -> None:
        self.root = root
        self.kubernetes_version = kubernetes_version
        self.kine_version = kine_version
        self.say = say
        self.go = find_go()
        self.env = go_environment()
        self.log_path = root / "build.log"
        self._log: IO[str] | None = None

    def run(self) -> None:
        self.build_into_cache(
            announce=(
                f"building kube-apiserver v{self.kubernetes_version} and kine "
                f"v{self.kine_version} from Go modules into {self.root} "
                "(the first build takes many minutes; log: "
                f"{self.log_path})"
            ),
            steps=self._build_all,
            info={"kubernetes_version": self.kubernetes_version, "kine_version": self.kine_version},
            built="the Kubernetes binaries",
        )

    def build_into_cache(
        self,
        *,
        announce: str,
        steps: Callable[[Path], None],
        info: Mapping[str, Any],
        built: str,
    ) -> None:
        """Say ``announce``, check Go, run ``steps`` into a temp dir that then becomes
        ``root/bin`` in one rename, and write ``root/build-info.json`` (``info``, the Go
        version, the time taken); the commands' output goes to ``root/build.log``."""
        self.root.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_path, "w") as log:
            self._log = log
            self.say(announce)
            self._check_go_version()
            tmp = Path(tempfile.mkdtemp(prefix="bin.tmp-", dir=self.root))
            try:
                steps(tmp)
                final = self.root / "bin"
                if final.exists():
                    shutil.rmtree(final)  # incomplete leftovers (we hold the lock)
                tmp.chmod(0o755)
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            elapsed = time.monotonic() - started
            record = {
                **info,
                "go": self._go_version_string(),
                "seconds": round(elapsed, 1),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (self.root / "build-info.json").write_text(json.dumps(record, indent=2) + "\n")
            self.say(f"built {built} in {elapsed / 60:.1f} min: {final}")

    # -- steps

    def _go_version_string(self) -> str:
        out = self._go(["env", "GOVERSION"], cwd=self.root, quiet=True).strip()
        return out

    def _check_go_version(self) -> None:
        version = self._go_version_string()
        match = re.match(r"go(\d+)\.(\d+)", version)
        if not match:
            raise KubeBuildError(f"cannot parse the Go version {version!r} of {self.go}")
        if (int(match.group(1)), int(match.group(2))) < MINIMUM_GO:
            raise KubeBuildError(
                f"{self.go} is {version}; building Kubernetes v{self.kubernetes_version} needs "
                f"go >= {'.'.join(map(str, MINIMUM_GO))}"
            )

    def _download(self, module: str, version: str) -> dict[str, Any]:
        out = self._go(["mod", "download", "-json", f"{module}@{version}"], cwd=self.root)
        try:
            info: dict[str, Any] = json.loads(out)
        except json.JSONDecodeError as exc:
            raise KubeBuildError(f"unexpected `go mod download` output for {module}") from exc
        if info.get("Error"):
            raise KubeBuildError(f"cannot download {module}@{version}: {info['Error']}")
        return info

    @staticmethod
    def _commit_and_date(info: Mapping[str, Any]) -> tuple[str, str]:
        origin = info.get("Origin") or {}
        commit = str(origin.get("Hash") or "unknown")
        date = "1970-01-01T00:00:00Z"
        info_path = info.get("Info")
        if info_path and Path(info_path).is_file():
            meta = json.loads(Path(info_path).read_text())
            date = str(meta.get("Time") or date)
            commit = str((meta.get("Origin") or {}).get("Hash") or commit)
        return commit, date

    def _build_all(self, out_dir: Path) -> None:
        self._build_apiserver(out_dir)
        self._build_kine(out_dir)
        self._smoke_test(out_dir)

    def _build_apiserver(self, out_dir: Path) -> None:
        version = f"v{self.kubernetes_version}"
        self.say(f"fetching {KUBERNETES_MODULE}@{version} through the Go module proxy")
        info = self._download(KUBERNETES_MODULE, version)
        gomod = Path(info["GoMod"]).read_text()
        commit, date = self._commit_and_date(info)
        src = self.root / "src" / "kube-apiserver"
        src.mkdir(parents=True, exist_ok=True)
        (src / "go.mod").write_text(render_apiserver_gomod(self.kubernetes_version, gomod))
        self.say("resolving kube-apiserver dependencies (go mod tidy)")
        self._go(["mod", "tidy"], cwd=src)
        self.say(f"compiling {', '.join(KUBE_COMMANDS)} {version} (the long part)")
        # One `go build` for every command: the packages they share are compiled once.
        self._go(
            [
                "build",
                "-trimpath",
                "-buildvcs=false",
                "-ldflags",
                " ".join(apiserver_ldflags(self.kubernetes_version, commit, date)),
                "-o",
                str(out_dir) + os.sep,
                *KUBE_PACKAGES,
            ],
            cwd=src,
            heartbeat="compiling the Kubernetes control plane",
        )

    def _build_kine(self, out_dir: Path) -> None:
        version = f"v{self.kine_version}"
        self.say(f"fetching {KINE_MODULE}@{version} through the Go module proxy")
        info = self._download(KINE_MODULE, version)
        gomod = Path(info["GoMod"]).read_text()
        commit, _ = self._commit_and_date(info)
        src = self.root / "src" / "kine"
        src.mkdir(parents=True, exist_ok=True)
        (src / "go.mod").write_text(render_kine_gomod(self.kine_version, gomod))
        self.say("resolving kine dependencies (go mod tidy)")
        self._go(["mod", "tidy"], cwd=src)
        self.say(f"compiling kine {version}")
        self._go(
            [
                "build",
                "-trimpath",
                "-buildvcs=false",
                "-ldflags",
                " ".join(kine_ldflags(self.kine_version, commit)),
                "-o",
                str(out_dir / "kine"),
                KINE_PACKAGE,
            ],
            cwd=src,
            heartbeat="compiling kine",
        )

    def _smoke_test(self, out_dir: Path) -> None:
        expected = f"v{self.kubernetes_version}"
        out = self._run([str(out_dir / "kube-apiserver"), "--version"], cwd=out_dir, quiet=True)
        if expected not in out:
            raise KubeBuildError(
                f"kube-apiserver --version printed {out.strip()!r}, not {expected}"
            )
        for command in KUBE_COMMANDS[1:3]:
            out = self._run([str(out_dir / command), "--version"], cwd=out_dir, quiet=True)
            if expected not in out:
                raise KubeBuildError(f"{command} --version printed {out.strip()!r}, not {expected}")
        out = self._run([str(out_dir / "kine"), "--version"], cwd=out_dir, quiet=True)
        if f"v{self.kine_version}" not in out:
            raise KubeBuildError(f"kine --version printed {out.strip()!r}")

    # -- process plumbing

    def _go(
        self, args: Sequence[str], *, cwd: Path, quiet: bool = False, heartbeat: str | None = None
    ) -> str:
        return self._run([str(self.go), *args], cwd=cwd, quiet=quiet, heartbeat=heartbeat)

    def _run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        quiet: bool = False,
        heartbeat: str | None = None,
    ) -> str:
        log = self._log
        if log is not None and not quiet:
            log.write(f"\n$ (cd {cwd} && {' '.join(argv)})\n")
            log.flush()
        with tempfile.TemporaryFile("w+") as stderr:
            try:
                proc = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env=self.env,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    stdin=subprocess.DEVNULL,
                    text=True,
                )
            except OSError as exc:
                raise KubeBuildError(f"cannot run {argv[0]}: {exc}") from exc
            started = time.monotonic()
            next_beat = started + HEARTBEAT_SECONDS
            stdout_chunks: list[str] = []
            try:
                while True:
                    try:
                        out, _ = proc.communicate(timeout=5)
                        stdout_chunks.append(out or "")
                        break
                    except subprocess.TimeoutExpired:
                        now = time.monotonic()
                        if heartbeat and now >= next_beat:
                            self.say(f"... still {heartbeat} ({(now - started) / 60:.0f} min)")
                            next_beat = now + HEARTBEAT_SECONDS
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            stderr.seek(0)
            err = stderr.read()
        stdout = "".join(stdout_chunks)
        if log is not None:
            log.write(err)
            if not quiet or proc.returncode:
                log.write(stdout)
            log.flush()
        if proc.returncode:
            tail = "\n".join((err or stdout).strip().splitlines()[-15:])
            raise KubeBuildError(
                f"`{Path(argv[0]).name} {' '.join(argv[1:3])}` failed in {cwd} "
                f"(exit {proc.returncode}); full log: {self.log_path}\n{tail}"
            )
        return stdout
