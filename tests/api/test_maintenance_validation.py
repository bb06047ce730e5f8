"""InferenceCluster `spec.maintenance` and `spec.nodePools[].upgrade` (api.md, "Node upgrades
and maintenance windows"): strict types, clear errors naming file, object and field, every
error at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelplane.api.loader import load_fleet
from tests.spec_docs import existing_cluster, gpu_class, write_fleet

WINDOW = {
    "start": "2026-01-03T01:00:00Z",
    "duration": "6h",
    "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
}


def _window(**change: str) -> dict[str, Any]:
    """``spec.maintenance`` with WINDOW, ``change`` applied."""
    return {"maintenance": {"window": {**WINDOW, **change}}}


def _cluster(source: str, **spec: Any) -> dict[str, Any]:
    doc = existing_cluster()
    if source == "GKE":
        doc["spec"]["cluster"] = {"source": "GKE", "gke": {"project": "p", "region": "us-central1"}}
        doc["spec"]["nodePools"][0]["zones"] = ["us-central1-a"]
    elif source == "EKS":
        doc["spec"]["cluster"] = {"source": "EKS", "eks": {"region": "us-west-2"}}
        doc["spec"]["nodePools"][0]["zones"] = ["us-west-2a"]
    pool = spec.pop("upgrade", None)
    if pool is not None:
        doc["spec"]["nodePools"][0]["upgrade"] = pool
    doc["spec"].update(spec)
    return doc


def _errors(tmp_path: Path, cluster: dict[str, Any]) -> list[Any]:
    write_fleet(tmp_path, [gpu_class(provider="GKE"), cluster])
    # the EKS cluster has no EKS recipe in this class: that error is not what these test
    return [e for e in load_fleet(tmp_path).errors if "provisioning recipe" not in e.message]


@pytest.mark.parametrize(
    ("source", "spec"),
    [
        ("GKE", {"maintenance": {"window": WINDOW}}),
        ("GKE", _window(recurrence="FREQ=DAILY", duration="4h")),
        ("GKE", {"upgrade": {"maxSurge": 2, "maxUnavailable": 0}}),
        ("GKE", {"upgrade": {"maxSurge": 0, "maxUnavailable": 1}}),
        ("GKE", {"upgrade": {"strategy": "BlueGreen"}}),
        ("EKS", {"upgrade": {"maxUnavailable": 2}}),
        ("EKS", {"maintenance": {}}),
        ("GKE", {"maintenance": {"nodeUpgrades": "Manual"}}),
        ("GKE", {"maintenance": {"nodeUpgrades": "Automatic", "window": WINDOW}}),
    ],
)
def test_valid_settings(tmp_path: Path, source: str, spec: dict[str, Any]) -> None:
    assert _errors(tmp_path, _cluster(source, **spec)) == []


P = "spec.nodePools[0].upgrade"
W = "spec.maintenance.window"


@pytest.mark.parametrize(
    ("source", "spec", "path", "fragment"),
    [
        ("GKE", {"upgrade": {"maxSurge": "1"}}, f"{P}.maxSurge", "must be an integer"),
        ("GKE", {"upgrade": {"maxSurge": True}}, f"{P}.maxSurge", "must be an integer"),
        (
            "GKE",
            {"upgrade": {"maxUnavailable": 101}},
            f"{P}.maxUnavailable",
            "less than or equal to 100",
        ),
        ("GKE", {"upgrade": {"maxSurge": 0, "maxUnavailable": 0}}, P, "cannot both be 0"),
        ("GKE", {"upgrade": {"strategy": "BlueGreen", "maxSurge": 1}}, P, "for strategy Surge"),
        ("GKE", {"upgrade": {"strategy": "Rolling"}}, f"{P}.strategy", "'Surge' or 'BlueGreen'"),
        ("GKE", {"upgrade": {"surge": 1}}, f"{P}.surge", "unknown field"),
        ("GKE", _window(start="2026-01-03T01:00:00"), f"{W}.start", "UTC"),
        ("GKE", _window(start="Saturday 1am Z"), f"{W}.start", "RFC 3339"),
        ("GKE", _window(duration="3h"), f"{W}.duration", "4h..24h"),
        ("GKE", _window(duration="6 hours"), f"{W}.duration", "hours and minutes"),
        ("GKE", _window(recurrence="FREQ=MONTHLY"), f"{W}.recurrence", "FREQ=DAILY"),
        ("GKE", _window(recurrence="FREQ=WEEKLY;BYDAY=SA,XX"), f"{W}.recurrence", "distinct days"),
        ("GKE", _window(recurrence="FREQ=WEEKLY;BYDAY=SU"), W, "at least 48h"),
        ("EKS", {"maintenance": {"window": WINDOW}}, W, "EKS has no maintenance window"),
        (
            "EKS",
            {"maintenance": {"nodeUpgrades": "Manual"}},
            "spec.maintenance.nodeUpgrades",
            "GKE only: EKS never upgrades a node group by itself",
        ),
        (
            "GKE",
            {"maintenance": {"nodeUpgrades": "Sometimes"}},
            "spec.maintenance.nodeUpgrades",
            "'Manual' or 'Automatic'",
        ),
        ("EKS", {"upgrade": {"maxSurge": 1}}, f"{P}.maxSurge", "not settable on EKS"),
        ("EKS", {"upgrade": {"maxUnavailable": 0}}, f"{P}.maxUnavailable", "at least 1"),
        ("EKS", {"upgrade": {"strategy": "BlueGreen"}}, f"{P}.strategy", "GKE only"),
        ("Existing", {"upgrade": {"maxSurge": 1}}, P, "only for GKE and EKS"),
        (
            "Existing",
            {"maintenance": {"window": WINDOW}},
            "spec.maintenance",
            "only for GKE and EKS",
        ),
    ],
)
def test_bad_settings_name_the_field(
    tmp_path: Path, source: str, spec: dict[str, Any], path: str, fragment: str
) -> None:
    errors = _errors(tmp_path, _cluster(source, **spec))
    matching = [e for e in errors if e.path == path and fragment in e.message]
    assert matching, f"no error {path} ~ {fragment!r}; got:\n" + "\n".join(map(str, errors))
    assert all(
        e.object == "InferenceCluster c1" and e.file.endswith("fleet.yaml") for e in matching
    )


def test_every_problem_at_once(tmp_path: Path) -> None:
    cluster = _cluster(
        "EKS", maintenance={"window": WINDOW}, upgrade={"maxSurge": 1, "maxUnavailable": 0}
    )
    paths = sorted(e.path for e in _errors(tmp_path, cluster))
    assert paths == [W, f"{P}.maxSurge", f"{P}.maxUnavailable"]
