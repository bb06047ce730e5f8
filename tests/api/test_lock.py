"""The placement lock: stable format, round trip, missing file, bad content."""

from __future__ import annotations

import pytest
import yaml

from modelplane.api.errors import FleetInvalid
from modelplane.api.placement_lock import PlacementLock
from modelplane.lock import dump_lock, read_lock, write_lock

LOCK = {
    "deployments": {
        "ml-team/zeta": {"replicas": []},
        "ml-team/alpha": {
            "replicas": [
                {"name": "alpha-22222", "cluster": "b", "index": 0, "pools": {"unified": "p"}},
                {
                    "name": "alpha-11111",
                    "cluster": "a",
                    "index": 1,
                    "pools": {"decode": "d", "prefill": "p"},
                },
                {"name": "alpha-00000", "cluster": "a", "index": 0, "pools": {"unified": "p"}},
            ]
        },
    }
}

EXPECTED = """\
apiVersion: modelplane.ai/v1alpha1
kind: PlacementLock
deployments:
  ml-team/alpha:
    replicas:
    - name: alpha-00000
      cluster: a
      index: 0
      pools: {unified: p}
    - name: alpha-11111
      cluster: a
      index: 1
      pools: {prefill: p, decode: d}
    - name: alpha-22222
      cluster: b
      index: 0
      pools: {unified: p}
  ml-team/zeta:
    replicas: []
"""


def test_dump_sorts_deployments_and_replicas():
    assert dump_lock(PlacementLock.model_validate(LOCK)) == EXPECTED


def test_round_trip_and_byte_stable_rewrite(tmp_path):
    path = tmp_path / "modelplane.lock.yaml"
    lock = PlacementLock.model_validate(LOCK)
    assert write_lock(path, lock) is True
    before = path.read_bytes()
    assert read_lock(path) == PlacementLock.model_validate(yaml.safe_load(EXPECTED))
    assert write_lock(path, read_lock(path)) is False
    assert path.read_bytes() == before


def test_missing_lock_is_empty(tmp_path):
    assert read_lock(tmp_path / "nope.yaml") == PlacementLock()


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (
            "deployments: {a/b: {replicas: [{name: X, cluster: c, index: 0, pools: {unified: p}}]}}",
            "deployments.a/b.replicas[0].name",
        ),
        (
            "deployments: {a/b: {replicas: [{name: x, cluster: c, index: -1, pools: {unified: p}}]}}",
            "deployments.a/b.replicas[0].index",
        ),
        (
            "deployments: {a/b: {replicas: [{name: x, cluster: c, index: 0, pools: {prefill: p}}]}}",
            "deployments.a/b.replicas[0].pools",
        ),
    ],
)
def test_bad_lock_names_file_and_field(tmp_path, text, path):
    lock_file = tmp_path / "modelplane.lock.yaml"
    lock_file.write_text(text)
    with pytest.raises(FleetInvalid) as info:
        read_lock(lock_file)
    assert [(e.file, e.path) for e in info.value.errors] == [(str(lock_file), path)]
