"""One error root (`modelplane.errors`): every exception class derives from it, its families
say the exit code, the CLI handles it once, and engine failures are classified by one table."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from modelplane.api.errors import FleetInvalid, SpecError
from modelplane.cli import Verbs
from modelplane.driver.errors import (
    BackendError,
    DriverError,
    EngineFailed,
    EngineUnavailable,
    PassphraseMissing,
    StackLocked,
)
from modelplane.driver.operations import ENGINE_FAILURES, classify
from modelplane.errors import (
    EnvironmentProblem,
    ModelplaneError,
    Retryable,
    UserError,
    exit_code,
)

ROOT = Path(__file__).resolve().parents[2]


def _exception_classes() -> list[type[BaseException]]:
    """Every exception class defined in modelplane, components and stacks (read from the
    source, then imported)."""
    found = []
    for package in ("modelplane", "components", "stacks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.endswith("__main__.py"):
                continue
            names = [
                n.name
                for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.ClassDef) and n.bases
            ]
            if not names:
                continue
            module = importlib.import_module(
                rel[: -len(".py")].replace("/", ".").removesuffix(".__init__")
            )
            for name in names:
                cls = getattr(module, name, None)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found.append(cls)
    return found


def test_every_exception_class_derives_from_the_root() -> None:
    classes = _exception_classes()
    assert len(classes) >= 20, classes  # the scan finds them
    rootless = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, ModelplaneError)
    ]
    assert rootless == []


@pytest.mark.parametrize(
    ("error", "family", "code"),
    [
        (FleetInvalid([]), UserError, 2),
        (UserError("bad flag"), UserError, 2),
        (PassphraseMissing("no passphrase"), EnvironmentProblem, 1),
        (EngineUnavailable("no engine"), EnvironmentProblem, 1),
        (BackendError("bad url"), EnvironmentProblem, 1),
        (StackLocked("locked"), Retryable, 1),
        (EngineFailed("boom"), DriverError, 1),
        (DriverError("no stack named x"), DriverError, 1),
        (ValueError("a bug"), Exception, 1),
    ],
)
def test_families_say_the_exit_code(error: Exception, family: type, code: int) -> None:
    assert isinstance(error, family)
    assert exit_code(error) == code


def test_builtin_bases_are_kept_for_existing_except_clauses() -> None:
    from modelplane.cel.selector import CelCompileError
    from modelplane.secrets import PlaintextSecret, SecretNotFound

    assert issubclass(CelCompileError, ValueError) and issubclass(CelCompileError, UserError)
    assert issubclass(SecretNotFound, LookupError) and issubclass(PlaintextSecret, ValueError)
    assert Retryable("later", delay=5).delay == 5


def _app(error: Exception) -> typer.Typer:
    app = typer.Typer(cls=Verbs, add_completion=False)

    @app.command()
    def fail() -> None:
        raise error

    @app.command()
    def other() -> None:  # two verbs: a group, as the real CLI is
        pass

    return app


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (UserError("replicas must be >= 0"), 2, "error: replicas must be >= 0"),
        (EngineUnavailable("the Pulumi CLI is not installed"), 1, "error: the Pulumi CLI"),
        (StackLocked("stack gateway is locked"), 1, "error: stack gateway is locked"),
        (
            FleetInvalid(
                [SpecError("fleet.yaml", 0, "ModelDeployment a", "spec.replicas", "must be >= 0")]
            ),
            2,
            "must be >= 0",
        ),
    ],
)
def test_the_cli_handles_the_root_once(error: Exception, code: int, text: str) -> None:
    result = CliRunner().invoke(_app(error), ["fail"])
    assert result.exit_code == code, result.output
    assert text in result.output
    assert "Traceback" not in result.output


def test_a_bug_is_not_swallowed() -> None:
    result = CliRunner().invoke(_app(KeyError("bug")), ["fail"])
    assert isinstance(result.exception, KeyError)


def _command_error(kind: str, stderr: str) -> Exception:
    from pulumi.automation import errors
    from pulumi.automation._cmd import CommandResult

    return getattr(errors, kind)(CommandResult(stdout="", stderr=stderr, code=255))


@pytest.mark.parametrize(
    ("kind", "stderr", "expected", "text"),
    [
        (
            "ConcurrentUpdateError",
            "error: the stack is currently locked by 1 lock(s)",
            StackLocked,
            "gateway is locked by another update",
        ),
        ("CommandError", "warning: x\nerror: something broke", EngineFailed, "something broke"),
        ("StackNotFoundError", "error: no stack named 'gateway' found", EngineFailed, "no stack"),
        ("RuntimeError", "error: an unhandled error occurred: boom", EngineFailed, "boom"),
    ],
)
def test_engine_failures_are_classified_by_one_table(
    kind: str, stderr: str, expected: type, text: str
) -> None:
    error = classify(_command_error(kind, stderr), "gateway", None, "file:///f/.modelplane/state")
    assert type(error) is expected
    assert text in str(error)
    assert [name for name, _ in ENGINE_FAILURES][-1] == "CommandError"  # the catch-all last
