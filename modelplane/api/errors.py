"""Spec errors: every problem carries file, document, object, field path and message."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from modelplane.errors import UserError


@dataclass(frozen=True, order=True)
class SpecError:
    file: str
    document: int  # 0-based index of the YAML document in the file
    object: str  # `Kind namespace/name`, `Kind name`, or "" when unknown
    path: str  # dotted field path, e.g. spec.nodePools[0].className
    message: str
    line: int = 0  # 1-based line of the field in the file; 0 when unknown
    column: int = 0  # 1-based column; 0 when unknown

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = f"{self.file}[{self.document}]"
        if self.line:
            where = f"{self.file}:{self.line}:{self.column}[{self.document}]"
        what = f" {self.object}" if self.object else ""
        field = f" {self.path}:" if self.path else ""
        return f"{where}{what}:{field} {self.message}"


class FleetInvalid(UserError):
    """Raised by library entry points with every error of a fleet."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = sorted(errors)
        super().__init__(
            f"{len(self.errors)} error(s) in the fleet:\n" + "\n".join(map(str, self.errors))
        )
