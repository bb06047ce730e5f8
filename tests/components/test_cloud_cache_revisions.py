"""A ModelCache's new revision reaches replicas through the rollout (cloud review N3): each
source (`repo@revision`) downloads into a directory of its own, the source is part of the
revision of every deployment that mounts the cache, `up` waits for the new download before
the rollout, replicas read their revision's directory, and what no replica reads is pruned.
Select with `pytest -k cloud`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.loader import load_fleet
from modelplane.api.model_cache import ModelCache, cache_source, source_dir
from modelplane.api.names import replica_name
from modelplane.components.model_cache import CURRENT, cache_jobs, job_name
from modelplane.components.model_deployment import ROOT_SOURCE, ModelDeploymentComponent
from modelplane.driver.fingerprint import owned_inputs
from modelplane.driver.rollouts import prepare, templates_env
from modelplane.rollout import CacheUse, cache_use, revision, template
from modelplane.stacks import StackUnit, Tier
from tests.components.workload_helpers import (
    CACHE,
    CODER,
    DEPLOYMENT,
    LWS,
    deployment,
    replica,
    target,
)
from tests.driver.test_rollouts import CLUSTERS, KEY, locked
from tests.pulumi_mocks import MockRun
from tests.spec_docs import gpu_class, write_fleet


def _fleet(tmp: Path, cache_revision: str, image: str = "vllm:a") -> Any:
    docs: list[dict[str, Any]] = [gpu_class()]
    for name in CLUSTERS:
        docs.append(
            {
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "InferenceCluster",
                "metadata": {"name": name},
                "spec": {
                    "cluster": {
                        "source": "Existing",
                        "existing": {
                            "secretRef": {"name": "kubeconfigs", "key": name},
                            "cache": {"storageClassName": "rwx"},
                        },
                    },
                    "nodePools": [{"name": "gpu", "className": "l4", "nodeCount": 4}],
                },
            }
        )
    docs.append(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelCache",
            "metadata": {"name": "weights", "namespace": "team"},
            "spec": {
                "source": "HuggingFace",
                "huggingFace": {"repo": "org/model", "revision": cache_revision},
                "sizeGiB": 10,
            },
        }
    )
    docs.append(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": "m", "namespace": "team"},
            "spec": {
                "replicas": 3,
                "modelCacheRef": {"name": "weights"},
                "workers": {
                    "topology": {"tensor": 1},
                    "resources": {"cpu": "1", "memory": "1Gi"},
                    "template": {"spec": {"containers": [{"name": "engine", "image": image}]}},
                },
            },
        }
    )
    root = tmp / f"{cache_revision}-{image.replace(':', '-')}"
    loaded = load_fleet(write_fleet(root, copy.deepcopy(docs)))
    assert not loaded.errors, loaded.errors
    return loaded.fleet


def test_cloud_cache_revision_is_part_of_every_mounting_deployments_revision(
    tmp_path: Path,
) -> None:
    v1, v2 = _fleet(tmp_path, "v1"), _fleet(tmp_path, "v2")
    dep1, dep2 = v1.deployments[KEY], v2.deployments[KEY]
    assert template(dep1, v1.caches)["modelCache"] == "org/model@v1"
    assert revision(dep1, v1.caches) != revision(dep2, v2.caches)
    # Only the source counts: the same source is the same revision.
    assert revision(dep1, v1.caches) == revision(
        _fleet(tmp_path / "b", "v1").deployments[KEY], v1.caches
    )
    # A deployment without a cache keeps the revision it had.
    plain = deployment(CODER.replace("  modelCacheRef: {name: coder}\n", ""))
    assert "modelCache" not in template(plain, v1.caches)


def test_cloud_cache_revision_change_is_a_rollout_not_an_all_at_once_change(
    tmp_path: Path,
) -> None:
    v1, v2 = _fleet(tmp_path, "v1"), _fleet(tmp_path, "v2")
    first = prepare(v1, locked([None, None, None]), {})
    a = revision(v1.deployments[KEY], v1.caches)
    second = prepare(v2, first.lock, first.records, now=5.0)
    b = revision(v2.deployments[KEY], v2.caches)
    # Every replica keeps reading v1 until the rollout reaches it.
    assert [r.revision for r in second.lock.replicas_of(KEY)] == [a, a, a]
    assert second.rolling == [KEY]
    record = second.records[KEY]
    assert (record.target, record.stable) == (b, a)
    # The cache stack keeps both sources while replicas read v1 and move to v2.
    templates = json.loads(templates_env(second.lock, second.records) or "{}")
    revisions = {KEY: [r.revision for r in second.lock.replicas_of(KEY)] + [b]}
    use = cache_use(
        v2.caches["team/weights"],
        v2.deployments,
        revisions,
        {KEY: {**templates.get(KEY, {}), b: record.templates[b]}},
    )
    assert use == CacheUse(("org/model@v1", "org/model@v2"), root=False)
    # The cache stack runs again when the replicas' revisions change (its fingerprint).
    unit = StackUnit("cache-team-weights", Tier.CACHES, "ModelCache", "team/weights")
    moved = locked([b, a, a])
    assert owned_inputs(v2, second.lock, unit) != owned_inputs(v2, moved, unit)


OLD_TEMPLATE = {"roles": {}, "modelCacheRef": "weights", "modelCache": "org/model@v1"}
ROOT_TEMPLATE = {"roles": {}, "modelCacheRef": "weights"}  # recorded before sources
OTHER_CACHE = {"roles": {}, "modelCacheRef": "other", "modelCache": "x/y@z"}

USE = [
    # (name, revisions of team/m's replicas, templates, expected use)
    ("own-alone", ["cur"], {}, (("org/model@v2",), False)),
    (
        "an-older-source-in-use",
        ["old", "cur"],
        {"old": OLD_TEMPLATE},
        (("org/model@v1", "org/model@v2"), False),
    ),
    ("the-root-layout-in-use", ["old"], {"old": ROOT_TEMPLATE}, (("org/model@v2",), True)),
    ("another-caches-template", ["old"], {"old": OTHER_CACHE}, (("org/model@v2",), False)),
    ("a-revision-without-template", ["lost", None], {}, (("org/model@v2",), False)),
]


@pytest.mark.parametrize(
    ("revisions", "templates", "expected"), [u[1:] for u in USE], ids=[u[0] for u in USE]
)
def test_cloud_cache_use_keeps_every_source_a_replica_reads(
    tmp_path: Path,
    revisions: list[str | None],
    templates: dict[str, Any],
    expected: tuple[Any, ...],
) -> None:
    fleet = _fleet(tmp_path, "v2")
    use = cache_use(
        fleet.caches["team/weights"], fleet.deployments, {KEY: revisions}, {KEY: templates}
    )
    assert use == CacheUse(*expected)


def _cache(revision: str) -> ModelCache:
    return CACHE.model_copy(
        update={
            "spec": CACHE.spec.model_copy(
                update={
                    "hugging_face": CACHE.spec.hugging_face.model_copy(  # type: ignore[union-attr]
                        update={"revision": revision}
                    )
                }
            )
        }
    )


JOBS = [
    # (name, use, render_only, awaited sources)
    ("first-download-not-awaited", (("Qwen/Qwen3-Coder-480B-A35B-Instruct@v2",), False), False, []),
    (
        "a-new-revision-awaited",
        (
            ("Qwen/Qwen3-Coder-480B-A35B-Instruct@v1", "Qwen/Qwen3-Coder-480B-A35B-Instruct@v2"),
            False,
        ),
        False,
        ["Qwen/Qwen3-Coder-480B-A35B-Instruct@v2"],
    ),
    (
        "moving-off-the-root-awaited",
        (("Qwen/Qwen3-Coder-480B-A35B-Instruct@v2",), True),
        False,
        ["Qwen/Qwen3-Coder-480B-A35B-Instruct@v2"],
    ),
    (
        "render-to-never-awaited",
        (
            ("Qwen/Qwen3-Coder-480B-A35B-Instruct@v1", "Qwen/Qwen3-Coder-480B-A35B-Instruct@v2"),
            False,
        ),
        True,
        [],
    ),
]


@pytest.mark.parametrize(
    ("use", "render_only", "awaited"), [j[1:] for j in JOBS], ids=[j[0] for j in JOBS]
)
def test_cloud_cache_one_download_per_source_then_the_prune(
    use: tuple[Any, ...], render_only: bool, awaited: list[str]
) -> None:
    from tests import k8s_schemas

    cache = _cache("v2")
    jobs = cache_jobs(
        cache,
        {"modelplane.ai/modelcache": "coder"},
        CacheUse(*use),
        with_token=False,
        render_only=render_only,
    )
    *downloads, prune = jobs
    sources = []
    for job in downloads:
        env = {
            e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        source = f"{env['MODELPLANE_REPO']}@{env['MODELPLANE_REVISION']}"
        sources.append(source)
        assert env["MODELPLANE_DIR"] == source_dir(source)
        assert job["metadata"]["name"] == job_name(cache, source)
        annotations = job["metadata"]["annotations"]
        assert ("pulumi.com/skipAwait" not in annotations) == (source in awaited)
        if source in awaited:
            assert int(annotations["pulumi.com/timeoutSeconds"]) >= 3600
        # `status` reports the cache's own source's Job.
        assert job["metadata"]["labels"][CURRENT] == str(source == cache_source(cache)).lower()
        assert k8s_schemas.errors(job) == []
    assert sources == list(use[0])
    assert len({j["metadata"]["name"] for j in downloads}) == len(downloads)
    keep = {
        e["name"]: e["value"] for e in prune["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert keep["MODELPLANE_KEEP"].split() == sorted(
        source_dir(s).rsplit("/", 1)[1] for s in use[0]
    )
    assert keep["MODELPLANE_KEEP_ROOT"] == str(use[1]).lower()
    assert prune["metadata"]["labels"][CURRENT] == "false"


def _deploy(sources: dict[str, str]) -> MockRun:
    run = MockRun()
    dep = deployment(CODER.replace("  workers:\n    count: 3\n", "  workers:\n    count: 1\n"))
    locked = [replica(dep, {"unified": "h200"}, i) for i in range(3)]

    def program() -> ModelDeploymentComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return ModelDeploymentComponent(
            dep.metadata.name,
            dep,
            locked,
            {"west": target(provider)},
            cache=_cache("v2"),
            sources=sources,
        )

    run.run(program)
    return run


def test_cloud_cache_replicas_read_their_revisions_directory() -> None:
    """r0 at the cache's own source, r1 still at v1, r2 from before sources (the root)."""
    names = [replica_name("coder", "west", i) for i in range(3)]
    run = _deploy({names[1]: "Qwen/Qwen3-Coder-480B-A35B-Instruct@v1", names[2]: ROOT_SOURCE})
    pods = {}
    for workload in [*run.of_type(DEPLOYMENT), *run.of_type(LWS)]:
        name = workload.get("metadata.name")
        spec = workload.get("spec.template.spec") or workload.get(
            "spec.leaderWorkerTemplate.leaderTemplate.spec"
        )
        pods[name] = spec
    assert len(pods) == 3, sorted(pods)
    expected = {
        0: ("Qwen/Qwen3-Coder-480B-A35B-Instruct@v2", True),
        1: ("Qwen/Qwen3-Coder-480B-A35B-Instruct@v1", True),
        2: ("Qwen/Qwen3-Coder-480B-A35B-Instruct@v2", False),  # the root: as before directories
    }
    for name, pod in pods.items():
        i = next(i for i, n in enumerate(names) if name.startswith(n))
        ready, in_directory = expected[i]
        wait = pod["initContainers"][0]
        assert {e["name"]: e["value"] for e in wait["env"]} == {"MODELPLANE_CACHE_READY": ready}
        mount = next(
            m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/mnt/models"
        )
        if in_directory:
            assert mount["subPath"] == source_dir(ready)
            assert f"/mnt/models/{source_dir(ready)}/.modelplane-hydrated" in wait["command"][-1]
        else:
            assert "subPath" not in mount
            assert "/mnt/models/.modelplane-hydrated" in wait["command"][-1]


def test_cloud_cache_status_reports_the_caches_own_source() -> None:
    from modelplane.observe.cluster import observe_caches

    def job(name: str, current: str | None, succeeded: int) -> dict[str, Any]:
        labels = {"modelplane.ai/modelcache": "weights"}
        if current is not None:
            labels[CURRENT] = current
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {"succeeded": succeeded},
        }

    class Reader:
        def __init__(self, jobs: list[dict[str, Any]]) -> None:
            self.jobs = jobs

        def items(self, path: str, **_: Any) -> list[dict[str, Any]]:
            return self.jobs

    # The new revision still downloading: Hydrating, whatever the old one and the prune say.
    jobs = [job("z-old", "false", 1), job("a-new", "true", 0), job("prune", "false", 1)]
    for order in (jobs, list(reversed(jobs))):
        state = observe_caches(Reader(order), ["team/weights"])  # type: ignore[arg-type]
        assert state["team/weights"].state == "Hydrating"
    done = [job("old", "false", 0), job("new", "true", 1)]
    assert observe_caches(Reader(done), ["team/weights"])["team/weights"].state == "Hydrated"  # type: ignore[arg-type]


def test_cloud_cache_sources_keep_a_digest_directory_each() -> None:
    a, b = source_dir("org/model@main"), source_dir("org/model@refs/pr/1")
    assert a.startswith("revisions/") and b.startswith("revisions/") and a != b
    assert "/" not in a.removeprefix("revisions/") and ".." not in b
