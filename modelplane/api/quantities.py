"""Kubernetes quantities as spec field types (parsing lives in modelplane.cel.quantity)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from modelplane.cel.quantity import parse_quantity


def _check_quantity(value: str) -> str:
    try:
        parse_quantity(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity ({exc})") from None
    if parse_quantity(value).sign() < 0:
        raise ValueError(f"quantity {value!r} must not be negative")
    return value


QuantityStr = Annotated[str, AfterValidator(_check_quantity)]
