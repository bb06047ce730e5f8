"""When and how the cloud upgrades an InferenceCluster's nodes (GKE, EKS): `spec.maintenance`
and `spec.nodePools[].upgrade` (docs/api.md, "Node upgrades and maintenance windows").

A GPU pool serves a model: an upgrade must never take its nodes down before replacements
are up. The defaults say so (GKE: surge 1, unavailable 0; EKS: one node at a time, with the
eviction bounded by the PodDisruptionBudgets and never forced).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import Field, field_validator, model_validator

from modelplane.api.base import Strict

DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_RRULE = re.compile(r"^FREQ=(DAILY|WEEKLY;BYDAY=([A-Z]{2}(,[A-Z]{2})*))$")
_HOURS = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?$")
MIN_WINDOW = timedelta(hours=4)  # GKE counts only windows of at least 4 contiguous hours
MAX_WINDOW = timedelta(hours=24)
MIN_AVAILABILITY = timedelta(hours=48)  # GKE: at least 48 h per 32 rolling days
GKE_DEFAULT_SURGE = 1
GKE_DEFAULT_UNAVAILABLE = 0
EKS_DEFAULT_UNAVAILABLE = 1  # EKS' minimum; it surges on its own (see docs/api.md)


def _window_length(value: str) -> timedelta:
    match = _HOURS.fullmatch(value)
    if not value or match is None:
        raise ValueError(f"{value!r} is not a duration in hours and minutes (e.g. 4h, 6h30m)")
    hours, minutes = (int(g) if g else 0 for g in match.groups())
    return timedelta(hours=hours, minutes=minutes)


class MaintenanceWindow(Strict):
    start: str
    """The first window's start, RFC 3339 in UTC (e.g. 2026-01-03T01:00:00Z)."""
    duration: str
    """How long each window lasts, 4h..24h (e.g. 6h, 4h30m)."""
    recurrence: str
    """RFC 5545 RRULE: FREQ=DAILY, or FREQ=WEEKLY;BYDAY=SA,SU (days MO..SU, in UTC)."""

    @field_validator("start")
    @classmethod
    def _utc_start(cls, value: str) -> str:
        if not value.endswith("Z"):
            raise ValueError(f"{value!r}: give the time in UTC, ending in Z (2026-01-03T01:00:00Z)")
        try:
            datetime.fromisoformat(value[:-1] + "+00:00")
        except ValueError:
            raise ValueError(f"{value!r} is not an RFC 3339 time (2026-01-03T01:00:00Z)") from None
        return value

    @field_validator("duration")
    @classmethod
    def _length(cls, value: str) -> str:
        length = _window_length(value)
        if not MIN_WINDOW <= length <= MAX_WINDOW:
            raise ValueError(f"{value} is outside 4h..24h (GKE counts windows of 4h or more)")
        return value

    @field_validator("recurrence")
    @classmethod
    def _rrule(cls, value: str) -> str:
        match = _RRULE.fullmatch(value)
        if match is None:
            raise ValueError(f"{value!r}: use FREQ=DAILY or FREQ=WEEKLY;BYDAY=<days, e.g. SA,SU>")
        days = match.group(2).split(",") if match.group(2) else []
        bad = [d for d in days if d not in DAYS]
        if bad or len(set(days)) != len(days):
            raise ValueError(f"{value!r}: BYDAY takes distinct days of MO,TU,WE,TH,FR,SA,SU")
        return value

    @model_validator(mode="after")
    def _enough_time(self) -> MaintenanceWindow:
        # GKE rejects a policy with less than 48 h of windows in any 32 days: a weekly
        # rule gets 4 whole weeks in the worst 32 days.
        days = (
            self.recurrence.split("BYDAY=")[1].count(",") + 1 if "BYDAY" in self.recurrence else 0
        )
        per_32_days = self.length * (32 if days == 0 else 4 * days)
        if per_32_days < MIN_AVAILABILITY:
            raise ValueError(
                f"{self.duration} on {days} day(s) a week gives {per_32_days} of maintenance in "
                "the worst 32 days; GKE needs at least 48h: make the window longer or more "
                "frequent"
            )
        return self

    @property
    def length(self) -> timedelta:
        return _window_length(self.duration)

    @property
    def end(self) -> str:
        """The first window's end, RFC 3339 UTC."""
        start = datetime.fromisoformat(self.start[:-1] + "+00:00")
        return (start + self.length).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Maintenance(Strict):
    window: MaintenanceWindow | None = None
    """GKE only: when GKE may upgrade the control plane (and, with nodeUpgrades: Automatic,
    the nodes); absent: any time (Automatic) or DEFAULT_GKE_WINDOW (Manual)."""
    node_upgrades: Literal["Manual", "Automatic"] | None = None
    """GKE only. Manual (default): a maintenance exclusion keeps GKE from upgrading the nodes
    (and the control plane's minor) until the minor's end of support; the operator upgrades
    them through `modelplane drain` (docs/api.md). Automatic: GKE upgrades the nodes inside
    the window, force-evicting a serving pod its PodDisruptionBudget holds for an hour."""

    @property
    def manual_node_upgrades(self) -> bool:
        return self.node_upgrades != "Automatic"


DEFAULT_GKE_WINDOW = MaintenanceWindow(
    start="2026-01-03T01:00:00Z", duration="6h", recurrence="FREQ=WEEKLY;BYDAY=SA,SU"
)
"""With nodeUpgrades: Manual and no window: the window GKE needs beside an exclusion (only
control-plane patch upgrades happen in it: Saturdays and Sundays, 01:00-07:00 UTC)."""


class PoolUpgrade(Strict):
    strategy: Literal["Surge", "BlueGreen"] = "Surge"
    """Surge (default): nodes replaced a few at a time; BlueGreen (GKE only): a whole new set
    of nodes first, then the old ones drained one at a time."""
    max_surge: int | None = Field(default=None, ge=0, le=100)
    """Surge, GKE only: extra nodes created during the upgrade (default 1)."""
    max_unavailable: int | None = Field(default=None, ge=0, le=100)
    """Surge: nodes down at once (GKE default 0; EKS default and minimum 1)."""

    @model_validator(mode="after")
    def _consistent(self) -> PoolUpgrade:
        sized = self.max_surge is not None or self.max_unavailable is not None
        if self.strategy == "BlueGreen" and sized:
            raise ValueError("maxSurge and maxUnavailable are for strategy Surge, not BlueGreen")
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("maxSurge and maxUnavailable cannot both be 0 (no node could change)")
        return self

    def gke(self) -> tuple[int, int]:
        """(maxSurge, maxUnavailable) on GKE, defaults filled in."""
        surge = GKE_DEFAULT_SURGE if self.max_surge is None else self.max_surge
        down = GKE_DEFAULT_UNAVAILABLE if self.max_unavailable is None else self.max_unavailable
        return surge, down


def cloud_problems(
    source: str, maintenance: Maintenance | None, upgrades: list[PoolUpgrade | None]
) -> list[tuple[str, str]]:
    """What the cluster's source does not support, as (path, message)."""
    problems: list[tuple[str, str]] = []
    if source == "Existing":
        why = (
            "only for GKE and EKS clusters (modelplane does not manage an existing cluster's nodes)"
        )
        if maintenance is not None:
            problems.append(("maintenance", why))
        problems += [(f"nodePools[{i}].upgrade", why) for i, u in enumerate(upgrades) if u]
        return problems
    if source == "EKS" and maintenance is not None and maintenance.node_upgrades is not None:
        problems.append(
            (
                "maintenance.nodeUpgrades",
                "GKE only: EKS never upgrades a node group by itself (`up` changes its "
                "version); remove it",
            )
        )
    if source == "EKS" and maintenance is not None and maintenance.window is not None:
        problems.append(
            (
                "maintenance.window",
                "EKS has no maintenance window: it upgrades a node group only when `up` changes "
                "its version (kubernetesVersion), so `up` is the window; remove it",
            )
        )
    for i, upgrade in enumerate(upgrades):
        if source != "EKS" or upgrade is None:
            continue
        if upgrade.strategy == "BlueGreen":
            problems.append((f"nodePools[{i}].upgrade.strategy", "BlueGreen is GKE only"))
        if upgrade.max_surge is not None:
            problems.append(
                (
                    f"nodePools[{i}].upgrade.maxSurge",
                    "not settable on EKS: a managed node group always launches new nodes "
                    "before it drains old ones; remove it",
                )
            )
        if upgrade.max_unavailable == 0:
            problems.append(
                (f"nodePools[{i}].upgrade.maxUnavailable", "EKS needs at least 1 (default 1)")
            )
    return problems


__all__ = [
    "DEFAULT_GKE_WINDOW",
    "Maintenance",
    "MaintenanceWindow",
    "PoolUpgrade",
    "cloud_problems",
]
