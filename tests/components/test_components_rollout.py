"""Fleet rollouts in the rendered workloads (issue 21, part 1): during a rollout each replica
renders at its own locked revision -- replicas the rollout has not reached keep their old pod
template (from the templates the driver passes in `MODELPLANE_REVISION_TEMPLATES`), and a
replica at the spec's revision or without a recorded one renders the spec as before (no
change, so no restart, for fleets deployed before rollouts)."""

from __future__ import annotations

import json

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.placement_lock import LockedReplica
from modelplane.components.model_deployment import ModelDeploymentComponent
from modelplane.program import TEMPLATES_ENV, replicas_at_revision
from modelplane.rollout import revision, template
from tests.components.workload_helpers import (
    DEPLOYMENT,
    LWS,
    PD,
    SMALL,
    deployment,
    replica,
    target,
)
from tests.pulumi_mocks import MockRun

OLD, NEW = "vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.12.0"


def images(run: MockRun) -> dict[str, set[str]]:
    """Workload name -> the images of its engine containers (Deployments, LeaderWorkerSets)."""
    out: dict[str, set[str]] = {}
    templates = [(d, d.get("spec.template.spec")) for d in run.of_type(DEPLOYMENT)]
    for lws in run.of_type(LWS):
        for which in ("leaderTemplate", "workerTemplate"):
            templates.append((lws, lws.get(f"spec.leaderWorkerTemplate.{which}.spec")))
    for workload, spec in templates:
        for c in (spec or {}).get("containers", []):
            if c["name"] == "engine":
                out.setdefault(workload.get("metadata.name"), set()).add(c["image"])
    return out


CASES = [
    # (name, spec text, recorded revisions per replica: "old", "new" or None, expected images)
    ("mid-rollout", SMALL, ["new", "old", "old"], [NEW, OLD, OLD]),
    ("before-rollouts-no-revision", SMALL, [None, None, None], [NEW, NEW, NEW]),
    ("prefill-decode", PD, ["old", "new"], [OLD, NEW]),
]


@pytest.mark.parametrize(
    ("text", "recorded", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_replicas_render_at_their_own_revision(
    monkeypatch: pytest.MonkeyPatch, text: str, recorded: list[str | None], expected: list[str]
) -> None:
    old = deployment(text)
    new = deployment(text.replace(OLD, NEW))
    revisions = {"old": revision(old), "new": revision(new), None: None}
    assert revisions["old"] != revisions["new"]
    pools = {r: "mixed" for r in old.spec.roles}
    locked: list[LockedReplica] = [
        replica(new, pools, i).model_copy(update={"revision": revisions[rec]})
        for i, rec in enumerate(recorded)
    ]
    monkeypatch.setenv(TEMPLATES_ENV, json.dumps({new.key: {revisions["old"]: template(old)}}))
    at, _ = replicas_at_revision(new, locked)
    assert set(at) == {r.name for r, rec in zip(locked, recorded, strict=True) if rec == "old"}
    run = MockRun()

    def program() -> ModelDeploymentComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return ModelDeploymentComponent(
            new.metadata.name, new, locked, {"west": target(provider)}, at_revision=at
        )

    run.run(program)
    rendered = images(run)
    for r, image in zip(locked, expected, strict=True):
        mine = {name: imgs for name, imgs in rendered.items() if name.startswith(r.name)}
        assert mine and all(imgs == {image} for imgs in mine.values()), (r.name, mine)


def test_without_the_template_a_replica_renders_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = deployment(SMALL), deployment(SMALL.replace(OLD, NEW))
    locked = [replica(new, {"unified": "mixed"}).model_copy(update={"revision": revision(old)})]
    monkeypatch.delenv(TEMPLATES_ENV, raising=False)
    assert replicas_at_revision(new, locked) == ({}, {})
    monkeypatch.setenv(TEMPLATES_ENV, "not json")
    assert replicas_at_revision(new, locked) == ({}, {})
