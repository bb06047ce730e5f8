"""kwok's pod stages, adapted so a serving pod's readiness is truthful on the dev fleet.

kwok's vendored ``pod-ready`` stage turns a scheduled pod Running *and* Ready in one step. A
real kubelet keeps a pod with a readiness probe unready until the probe passes, and a model
server passes only once its weights are loaded. So the dev fleet splits the stage in two:

- ``pod-ready`` (kwok's, unchanged) for every pod without a serving port (``http`` or
  ``pd-proxy``, the ports the pod agent runs a stand-in on): hydration Jobs, endpoint pickers;
- kwok's ``pod-complete`` (a Job's pod Succeeds) at once for every Job but a ModelCache's
  download, whose pod completes after ``HYDRATE_SECONDS`` (``pod-complete-model-cache``):
  a stand-in for a download, so `up` waits for a new revision's weights before the
  rollout to it, as on a cluster;
- ``pod-running-unready`` for serving pods: Running with an IP, but ``Ready`` and
  ``ContainersReady`` False (reason ``ContainersNotReady``) and every container not ready.
  The pod agent (``agent.py``) marks the pod Ready once its stand-ins answer the pod's
  readiness probes, as a kubelet would.

Pure: YAML text in, manifests out.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from modelplane.devfleet.agent import SERVING_PORT_NAMES
from modelplane.errors import EnvironmentProblem

POD_READY_STAGE = "pod-ready"
UNREADY_STAGE = "pod-running-unready"
POD_COMPLETE_STAGE = "pod-complete"
CACHE_COMPLETE_STAGE = "pod-complete-model-cache"
HYDRATE_SECONDS = 4.0  # the stand-in download of a ModelCache source
CACHE_LABEL_KEY = '.metadata.labels["modelplane.ai/modelcache"]'
# Every container port name of the pod (none: an empty result, which `NotIn` accepts).
PORT_NAMES_KEY = ".spec.containers[]?.ports[]?.name"

_REPLACEMENTS = (
    # (kwok's text, the unready one)
    (
        '  status: "True"\n  type: Ready\n',
        '  status: "False"\n  reason: ContainersNotReady\n  type: Ready\n',
    ),
    (
        '  status: "True"\n  type: ContainersReady\n',
        '  status: "False"\n  reason: ContainersNotReady\n  type: ContainersReady\n',
    ),
    (
        "  ready: true\n  restartCount: 0\n  state:\n    running:",
        "  ready: false\n  started: true\n  restartCount: 0\n  state:\n    running:",
    ),
)


class StageError(EnvironmentProblem, ValueError):
    """The vendored stage is not the one this adaptation was written for."""


def pod_ready_stages(text: str) -> list[dict[str, Any]]:
    """kwok's ``pod-ready`` stage (YAML) -> [pod-ready for non-serving pods, the unready one]."""
    stage = yaml.safe_load(text)
    if not isinstance(stage, dict) or stage.get("metadata", {}).get("name") != POD_READY_STAGE:
        raise StageError(f"expected kwok's {POD_READY_STAGE!r} stage")
    names = sorted(SERVING_PORT_NAMES)
    ready = copy.deepcopy(stage)
    ready["spec"]["selector"]["matchExpressions"].append(
        {"key": PORT_NAMES_KEY, "operator": "NotIn", "values": names}
    )
    unready = copy.deepcopy(stage)
    unready["metadata"]["name"] = UNREADY_STAGE
    unready["spec"]["selector"]["matchExpressions"].append(
        {"key": PORT_NAMES_KEY, "operator": "In", "values": names}
    )
    template = unready["spec"]["next"]["statusTemplate"]
    for old, new in _REPLACEMENTS:
        if template.count(old) != 1:
            raise StageError(f"kwok's {POD_READY_STAGE} status template changed: {old!r}")
        template = template.replace(old, new)
    unready["spec"]["next"]["statusTemplate"] = template
    return [ready, unready]


def pod_complete_stages(text: str) -> list[dict[str, Any]]:
    """kwok's ``pod-complete`` stage (YAML) -> [pod-complete for every other Job's pod, the
    ModelCache download's, delayed by ``HYDRATE_SECONDS``]."""
    stage = yaml.safe_load(text)
    if not isinstance(stage, dict) or stage.get("metadata", {}).get("name") != POD_COMPLETE_STAGE:
        raise StageError(f"expected kwok's {POD_COMPLETE_STAGE!r} stage")
    others = copy.deepcopy(stage)
    others["spec"]["selector"]["matchExpressions"].append(
        {"key": CACHE_LABEL_KEY, "operator": "DoesNotExist"}
    )
    download = copy.deepcopy(stage)
    download["metadata"]["name"] = CACHE_COMPLETE_STAGE
    download["spec"]["selector"]["matchExpressions"].append(
        {"key": CACHE_LABEL_KEY, "operator": "Exists"}
    )
    download["spec"]["delay"] = {"durationMilliseconds": int(HYDRATE_SECONDS * 1000)}
    return [others, download]
