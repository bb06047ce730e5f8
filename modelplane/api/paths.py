"""Format pydantic locations as Kubernetes-style field paths."""

from __future__ import annotations

from collections.abc import Iterable


def format_path(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before", "function-wrap"):
            continue
        elif "[" in str(part) or str(part).startswith(("list[", "dict[")):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def join_path(base: str, rel: str) -> str:
    if not rel:
        return base
    if not base:
        return rel
    return base + rel if rel.startswith("[") else f"{base}.{rel}"
