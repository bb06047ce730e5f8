"""Prometheus' target relabeling (`relabel_configs`), evaluated in Python for the tests.

Prometheus (model/relabel) anchors every regex as `^(?s:<regex>)$` (RE2: Go's leftmost-first
matching, which Python's `re` shares for the syntax used here), joins `source_labels` with
`separator` (default `;`, a missing label is ""), and expands `$1`/`${1}` in `replacement`
(default `$1`; a group that took no part is ""). `replace` changes nothing when the regex does
not match and deletes the target when the result is empty; `keep`/`drop` end the target's
relabeling; `keepequal`/`dropequal` compare the joined source labels with `target_label`'s
value (Prometheus >= 2.41). Labels starting with `__` are dropped afterwards, except
`__address__`, `__metrics_path__` and `__scheme__` (kept here for the tests to read).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_GROUP = re.compile(r"\$(?:\{(\w+)\}|(\d+))")
_KEPT = ("__address__", "__metrics_path__", "__scheme__")


def _expand(template: str, match: re.Match[str]) -> str:
    def group(m: re.Match[str]) -> str:
        ref = m.group(1) or m.group(2)
        try:
            return match.group(int(ref) if ref.isdigit() else ref) or ""
        except IndexError:  # no such group: "" (as Go's Regexp.Expand)
            return ""

    return _GROUP.sub(group, template)


def relabel(
    labels: Mapping[str, str], configs: Sequence[Mapping[str, Any]]
) -> dict[str, str] | None:
    """The target's labels after `configs` (before `__` labels are dropped), or None when a
    rule drops it."""
    out = dict(labels)
    for config in configs:
        action = config.get("action", "replace")
        separator = config.get("separator", ";")
        value = separator.join(out.get(s, "") for s in config.get("source_labels", []))
        regex = re.compile(f"(?s:{config.get('regex', '(.*)')})")
        if action == "keep":
            if regex.fullmatch(value) is None:
                return None
        elif action == "drop":
            if regex.fullmatch(value) is not None:
                return None
        elif action in ("keepequal", "dropequal"):
            assert set(config) <= {"action", "source_labels", "target_label"}, config
            equal = value == out.get(config["target_label"], "")
            if equal != (action == "keepequal"):
                return None
        elif action == "replace":
            match = regex.fullmatch(value)
            if match is None:
                continue
            result = _expand(config.get("replacement", "$1"), match)
            if result:
                out[config["target_label"]] = result
            else:
                out.pop(config["target_label"], None)
        else:
            raise ValueError(f"relabel action {action!r} not emulated")
    return out


def target_labels(
    labels: Mapping[str, str], configs: Sequence[Mapping[str, Any]]
) -> dict[str, str] | None:
    """`relabel`, then the labels a scraped series carries (no `__` labels but the address,
    path and scheme)."""
    out = relabel(labels, configs)
    if out is None:
        return None
    return {k: v for k, v in out.items() if not k.startswith("__") or k in _KEPT}
