"""The images of modelplane's own containers (security review M10, docs/architecture.md
"Security"), and the platform's overrides of them.

Both defaults are Docker Official Images by tag: no registry API could be reached from where
they were chosen to check a digest, and the stored copies of docker-library/repo-info disagree
with each other on the tags' index digests (every rebuild of one platform moves the index), so
no digest here could be verified as one Docker Hub serves. A platform pins them instead with
InferenceGateway `spec.images` (each a reference by digest, validated: a tag alone is
refused), e.g. its own mirror's copy; every cluster's objects then use the pinned reference.
"""

from __future__ import annotations

from modelplane.api.inference_gateway import InferenceGateway

FRONT_DOOR_IMAGE = "python:3.12-alpine"
"""The key check (`modelplane-authz`) and the OpenAI router: `python3` and its standard library
(the code comes from a ConfigMap)."""
MODEL_CACHE_IMAGE = "python:3.12-slim"
"""The ModelCache download and prune Jobs and the replicas' wait for the cache (one pull per
node): CPython 3.12 with pip on glibc, for the pinned, hashed wheels of
modelplane/components/manifests/hydrate-requirements.txt (manylinux x86_64 and aarch64)."""


def front_door_image(gateway: InferenceGateway | None) -> str:
    """authz's and the router's image: the platform's pinned override, else the default."""
    override = gateway.spec.images.front_door if gateway is not None else None
    return override or FRONT_DOOR_IMAGE


def model_cache_image(gateway: InferenceGateway | None) -> str:
    """The cache Jobs' and the wait's image: the platform's pinned override, else the default."""
    override = gateway.spec.images.model_cache if gateway is not None else None
    return override or MODEL_CACHE_IMAGE
