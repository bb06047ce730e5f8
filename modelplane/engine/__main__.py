"""`python -m modelplane.engine install|where|check [--strict]`."""

from __future__ import annotations

import argparse
import sys
import time

from . import engine_root, ensure_engine
from .bootstrap import EngineBuildFailed, EngineNotFound
from .cache import cache_base
from .check import check_engine
from .gotool import GoError, format_elapsed
from .versions import VersionNotFound, wanted_versions

EXPECTED_FAILURES = (
    EngineNotFound,
    EngineBuildFailed,
    GoError,
    VersionNotFound,
    LookupError,
    OSError,
)


def _print(message: str) -> None:
    print(message, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m modelplane.engine",
        description="Find or build the Pulumi engine (CLI, Python host, Kubernetes provider).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install", help="find the engine, or build it into the user cache")
    install.add_argument(
        "--rebuild", action="store_true", help="build again even if the engine is cached"
    )
    sub.add_parser("where", help="print the engine root (its bin/ holds the binaries)")
    check = sub.add_parser("check", help="run each binary and compare versions")
    check.add_argument(
        "--strict",
        action="store_true",
        help="also fail when the engine's versions differ from the installed Python packages",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            start = time.monotonic()
            root = ensure_engine(_print, rebuild=args.rebuild)
            _print(f"[engine] ready: {root} ({format_elapsed(time.monotonic() - start)})")
            _print(f"[engine] binaries: {root / 'bin'}")
            return 0
        if args.command == "where":
            print(engine_root())
            return 0
        root = engine_root()
        result = check_engine(root, wanted_versions(), strict=args.strict)
        _print(f"engine: {root}")
        for line in result.lines:
            _print(f"  {line}")
        for note in result.notes:
            _print(f"  note: {note}")
        for problem in result.problems:
            print(f"  PROBLEM: {problem}", file=sys.stderr)
        return 0 if result.ok else 1
    except KeyboardInterrupt:
        print("interrupted (the cache is left as it was)", file=sys.stderr)
        return 130
    except EXPECTED_FAILURES as exc:
        print(f"modelplane engine: {exc}", file=sys.stderr)
        print(f"(cache: {cache_base()})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
