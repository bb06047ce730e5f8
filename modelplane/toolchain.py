"""Every Go binary modelplane needs, built concurrently by one command and cached per user.

``python -m modelplane.toolchain install`` (part of ``make setup``) makes sure of five sets:

- the Pulumi engine (CLI, Python language host, Kubernetes provider): ``modelplane.engine``;
- the Kubernetes control plane (kube-apiserver, kube-scheduler, kube-controller-manager,
  kine): ``modelplane.gobuild.kube``;
- the dev fleet's kwok, LeaderWorkerSet controller and Traefik: ``modelplane.gobuild.fleet``;
- the dev fleet's Prometheus (Kubernetes discovery only): ``modelplane.gobuild.prometheus``;
- actionlint, which the tests run on the GitHub workflows: ``modelplane.gobuild.actionlint``.

Each set is one Go build (a wrapper module and one ``go build``; actionlint one ``go install``),
and they run at the same time, so a cold machine waits for the longest one rather than the sum
(the Go build cache is shared; each set has its own lock, so concurrent callers wait instead of
building twice). A cached set is
found in milliseconds. ``status`` prints what is cached without building anything.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

Progress = Callable[[str], None]

_print_lock = threading.Lock()


def _say(prefix: str) -> Progress:
    def say(message: str) -> None:
        text = message if message.startswith("[") else f"[{prefix}] {message}"
        with _print_lock:
            print(text, flush=True)

    return say


@dataclass
class Outcome:
    name: str
    location: Path | None
    seconds: float
    error: str | None = None


def _engine(say: Progress) -> Path:
    from modelplane.engine import ensure_engine

    return ensure_engine(say) / "bin"


def _kube(say: Progress) -> Path:
    from modelplane.gobuild.kube import ensure_kube_binaries

    return ensure_kube_binaries(progress=say).bin_dir


def _fleet(say: Progress) -> Path:
    from modelplane.gobuild.fleet import ensure_fleet_binaries

    return ensure_fleet_binaries(progress=say).bin_dir


def _prometheus(say: Progress) -> Path:
    from modelplane.gobuild.prometheus import ensure_prometheus

    return ensure_prometheus(progress=say).parent


def _actionlint(say: Progress) -> Path:
    from modelplane.gobuild.actionlint import ensure_actionlint

    return ensure_actionlint(progress=say).parent


SETS: dict[str, Callable[[Progress], Path]] = {
    "engine": _engine,
    "kube": _kube,
    "devfleet": _fleet,
    "prometheus": _prometheus,
    "actionlint": _actionlint,
}
# What `install` builds when no set is named (`make setup`): Prometheus is optional (only
# `dev-fleet up --prometheus` uses it; a cold build of its module is 25-45 min on 2 cores).
DEFAULT_SETS = ("engine", "kube", "devfleet", "actionlint")


def _run_one(name: str) -> Outcome:
    started = time.monotonic()
    try:
        location = SETS[name](_say(name))
    except Exception as exc:  # each set reports its own failure; the others go on
        return Outcome(name, None, time.monotonic() - started, f"{type(exc).__name__}: {exc}")
    return Outcome(name, location, time.monotonic() - started)


def install(names: list[str]) -> list[Outcome]:
    """Build (or find) the named sets concurrently; one outcome per set, in order."""
    with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="toolchain") as pool:
        return list(pool.map(_run_one, names))


def status() -> dict[str, Path | None]:
    from modelplane.engine.bootstrap import find_engine
    from modelplane.gobuild.actionlint import cached_actionlint
    from modelplane.gobuild.fleet import cached_fleet_binaries
    from modelplane.gobuild.kube import cached_kube_binaries
    from modelplane.gobuild.prometheus import cached_prometheus

    engine = find_engine()
    kube = cached_kube_binaries()
    fleet = cached_fleet_binaries()
    return {
        "engine": engine / "bin" if engine else None,
        "kube": kube.bin_dir if kube else None,
        "devfleet": fleet.bin_dir if fleet else None,
        "prometheus": prometheus.parent if (prometheus := cached_prometheus()) else None,
        "actionlint": actionlint.parent if (actionlint := cached_actionlint()) else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m modelplane.toolchain",
        description="Find or build every Go binary modelplane uses, concurrently, into the "
        "per-user cache.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser(
        "install",
        help=f"find or build the binaries (by default: {', '.join(DEFAULT_SETS)})",
    )
    inst.add_argument(
        "sets", nargs="*", help=f"these sets instead ({', '.join(SETS)}; `all` for every one)"
    )
    sub.add_parser("status", help="print what is cached, building nothing")
    args = parser.parse_args(argv)
    if args.command == "status":
        missing = False
        for name, location in status().items():
            optional = name not in DEFAULT_SETS
            where = location or ("not built (optional)" if optional else "not built")
            print(f"{name:10} {where}")
            missing = missing or (location is None and not optional)
        return 1 if missing else 0
    if "all" in args.sets:
        args.sets = list(SETS)
    unknown = [name for name in args.sets if name not in SETS]
    if unknown:
        parser.error(f"unknown set(s) {', '.join(unknown)}; choose from {', '.join(SETS)}")
    names = list(dict.fromkeys(args.sets)) or list(DEFAULT_SETS)
    started = time.monotonic()
    outcomes = install(names)
    failed = [o for o in outcomes if o.error]
    for outcome in outcomes:
        where = outcome.location if outcome.location else outcome.error
        print(f"[toolchain] {outcome.name}: {where} ({outcome.seconds:.0f}s)", flush=True)
    print(f"[toolchain] done in {time.monotonic() - started:.0f}s", flush=True)
    if failed:
        for outcome in failed:
            print(f"modelplane toolchain: {outcome.name} failed: {outcome.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
