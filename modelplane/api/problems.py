"""Validation problems raised from model validators that know the exact sub-field at fault."""

from __future__ import annotations

from modelplane.errors import UserError


class FieldProblems(UserError, ValueError):
    """Several (relative path, message) problems found by one model validator.

    The loader expands each into its own error, with the path appended to the
    validator's location, so users see `spec.nodePools[1].zones` rather than `spec`.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in problems))


def raise_if(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise FieldProblems(problems)
