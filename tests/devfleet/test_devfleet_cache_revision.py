"""A ModelCache's new revision on the dev fleet (cloud review N3): the new weights download
beside the old ones, `up` waits for that download (the dev fleet's stand-in takes
`HYDRATE_SECONDS`: stages.py), then the rollout moves the replicas one step at a time, with a
client calling the service throughout: no request fails. The next `up` drops the old source's
download and prunes it. Select with `pytest -k "cache_revision or cloud"`.

Stand-ins: the download (a kwok stage completes the Job's pod after a few seconds; nothing is
fetched), the volume (hostPath placeholders: the prune's deletions are not observable, its
keep list is). Real: the Job controller, Pulumi's wait for the Job, the rollout, the routes.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api

from modelplane.api.model_cache import ModelCache, source_dir
from modelplane.components.model_cache import job_name
from modelplane.devfleet import fleet as devfleet
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

CACHE = "weights"
REPO = "org/model"
UP_SLACK = 900.0


def models(revision: str) -> str:
    cache = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": CACHE, "namespace": "demo"},
        "spec": {
            "source": "HuggingFace",
            "huggingFace": {"repo": REPO, "revision": revision},
            "sizeGiB": 1,
        },
    }
    dep = fx.model_deployment("qwen", replicas=3, gpu=fx.GPU_16GI, cpu="2", memory="8Gi")
    dep["spec"]["modelCacheRef"] = {"name": CACHE}
    engine = dep["spec"]["workers"]["template"]["spec"]["containers"][0]
    engine["env"] = [{"name": "MODELPLANE_STANDIN_LOAD_TIME", "value": "2"}]
    return fx.specs_yaml(cache, dep, fx.model_service("chat", "qwen"))


def cache_model(revision: str) -> ModelCache:
    return ModelCache.model_validate(
        {
            "metadata": {"name": CACHE, "namespace": "demo"},
            "spec": {
                "source": "HuggingFace",
                "huggingFace": {"repo": REPO, "revision": revision},
                "sizeGiB": 1,
            },
        }
    )


def up(deployer: fx.Deployer, fleet_dir: Path) -> None:
    run = deployer.run("up", str(fleet_dir), "--yes", timeout=UP_SLACK)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.fixture(scope="module")
def served(deployer: fx.Deployer, dev_fleet: devfleet.DevFleet) -> Iterator[dict[str, Any]]:
    fleet_dir = deployer.dev_specs("cacherev", models=models("v1"))
    up(deployer, fleet_dir)
    services = fx.wait_for(
        "service URLs", lambda: deployer.fleet(fleet_dir).status().gateway.get("services"), 60
    )
    url = services["demo/chat"]
    fx.wait_for("demo/chat answering", lambda: fx.post_chat(url)[0] == 200, 120)
    yield {"dir": fleet_dir, "url": url}


def _epoch(stamp: Any) -> float:
    return float(calendar.timegm(stamp.utctimetuple())) if stamp is not None else float("inf")


def _jobs(dev_fleet: devfleet.DevFleet) -> dict[str, dict[str, Any]]:
    """Per cluster, its cache Jobs by name (their completion time, and env)."""
    out: dict[str, dict[str, Any]] = {}
    for cluster in dev_fleet.clusters:
        batch = BatchV1Api(fx.api_client(cluster))
        jobs = batch.list_namespaced_job("demo", label_selector=f"modelplane.ai/modelcache={CACHE}")
        out[cluster.name] = {
            j.metadata.name: {
                "done": _epoch(j.status.completion_time),
                "env": {e.name: e.value for e in j.spec.template.spec.containers[0].env or []},
            }
            for j in jobs.items
        }
    return out


def _pods(dev_fleet: devfleet.DevFleet) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for cluster in dev_fleet.clusters:
        core = CoreV1Api(fx.api_client(cluster))
        pods = core.list_namespaced_pod("demo", label_selector="modelplane.ai/deployment=qwen")
        out[cluster.name] = [p for p in pods.items if p.metadata.deletion_timestamp is None]
    return out


def test_cache_revision_downloads_first_then_rolls_out_without_a_failed_request(
    served: dict[str, Any], deployer: fx.Deployer, dev_fleet: devfleet.DevFleet
) -> None:
    fleet_dir, url = Path(served["dir"]), served["url"]
    v1, v2 = f"{REPO}@v1", f"{REPO}@v2"
    before = _jobs(dev_fleet)
    for cluster, jobs in before.items():
        assert job_name(cache_model("v1"), v1) in jobs, (cluster, sorted(jobs))

    (fleet_dir / "models.yaml").write_text(models("v2"))
    started = time.time()
    with fx.Load(url, pace=fx.DRILL_PACE) as load:
        up(deployer, fleet_dir)
    statuses = [status for _, status, _ in load.results]
    assert statuses and all(s == 200 for s in statuses), [s for s in statuses if s != 200][:20]

    jobs = _jobs(dev_fleet)

    def three() -> dict[str, list[Any]] | None:
        found = _pods(dev_fleet)
        return found if sum(map(len, found.values())) == 3 else None

    pods = fx.wait_for("3 qwen pods", three)
    new_job = job_name(cache_model("v2"), v2)
    for cluster, found in jobs.items():
        # Beside the old download, which replicas read until the rollout moved them.
        assert {new_job, job_name(cache_model("v1"), v1)} <= set(found), (cluster, sorted(found))
        downloaded = found[new_job]["done"]
        assert started - 1 <= downloaded < float("inf"), (cluster, found[new_job])
        assert found[new_job]["env"]["MODELPLANE_DIR"] == source_dir(v2)
        for pod in pods[cluster]:
            wait = pod.spec.init_containers[0]
            assert {e.name: e.value for e in wait.env} == {"MODELPLANE_CACHE_READY": v2}
            mount = next(
                m for m in pod.spec.containers[0].volume_mounts if m.mount_path == "/mnt/models"
            )
            assert mount.sub_path == source_dir(v2)
            # Replaced only once this cluster's download was complete.
            assert _epoch(pod.metadata.creation_timestamp) >= downloaded - 1, (
                cluster,
                pod.metadata.name,
                pod.metadata.creation_timestamp,
                downloaded,
            )

    # The next `up`: no replica reads v1 any more: its download goes, the prune keeps v2 alone.
    up(deployer, fleet_dir)
    after = _jobs(dev_fleet)
    for cluster, found in after.items():
        assert job_name(cache_model("v1"), v1) not in found, (cluster, sorted(found))
        prunes = [j for name, j in found.items() if "-prune-" in name]
        assert [p["env"]["MODELPLANE_KEEP"] for p in prunes] == [
            source_dir(v2).rsplit("/", 1)[1]
        ], (cluster, sorted(found))
        assert [p["env"]["MODELPLANE_KEEP_ROOT"] for p in prunes] == ["false"]
