"""`python -m modelplane.engine install|where|check [--strict]`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from modelplane.gobuild.gotool import GoError, format_elapsed

from . import engine_root, ensure_engine
from .bootstrap import EngineBuildFailed, EngineNotFound, cache_base
from .check import check_engine
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


def _install_plugins(root: Path) -> None:
    """Install every pinned provider plugin the engine does not have (needs the network).

    Failing to is not an error of the install: the local fleet needs only the Kubernetes
    provider; cloud stacks then fail with a message naming the missing plugin.
    """
    from .check import plugin_environment
    from .plugins import install_plugins, pinned_plugins

    env = plugin_environment(root)
    wanted = [p for name, p in sorted(pinned_plugins().items()) if name != "kubernetes"]
    for result in install_plugins(root / "bin" / "pulumi", wanted, env, progress=_print):
        if result.ok:
            _print(f"[engine] plugin {result.plugin.name} {result.plugin.version}: {result.detail}")
        else:
            _print(
                f"[engine] plugin {result.plugin.name} {result.plugin.version}: not installed "
                f"({result.detail}); stacks that need it fail until `"
                f"{result.plugin.install_command}` succeeds"
            )


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
    install.add_argument(
        "--no-plugins",
        action="store_true",
        help="do not install the pinned cloud provider plugins (gcp, aws, eks)",
    )
    sub.add_parser("where", help="print the engine root (its bin/ holds the binaries)")
    check = sub.add_parser("check", help="run each binary and compare versions")
    check.add_argument(
        "--fleet",
        metavar="DIR",
        help="also say which of the fleet's stacks need a plugin this machine does not have",
    )
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
            if not args.no_plugins:
                _install_plugins(root)
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
        problems = list(result.problems)
        if args.fleet:
            from .check import fleet_plugin_problems

            problems += fleet_plugin_problems(Path(args.fleet), root)
        for problem in problems:
            print(f"  PROBLEM: {problem}", file=sys.stderr)
        return 0 if not problems else 1
    except KeyboardInterrupt:
        print("interrupted (the cache is left as it was)", file=sys.stderr)
        return 130
    except EXPECTED_FAILURES as exc:
        print(f"modelplane engine: {exc}", file=sys.stderr)
        print(f"(cache: {cache_base()})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
