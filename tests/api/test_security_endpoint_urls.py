"""Security L5 (docs/api.md "ModelService and ModelEndpoint"): a ModelEndpoint never names
what the front door must not expose to its clients: the node, the cloud's metadata service,
the cluster's API server, a Service of a reserved namespace (the authorization service would
hand out the front door's credentials)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from modelplane.api.model_service import ModelEndpoint
from tests.factories import document

URLS = [
    # (url, refused)
    ("https://api.together.xyz/", False),
    ("http://10.254.0.10:9000/", False),  # private addresses are endpoints (on-prem)
    ("http://[fd12::1]/", False),
    ("http://vllm.llm-team.svc.cluster.local:8000/", False),  # another team's Service
    ("http://external.modelplane.test:9000/", False),
    ("http://127.0.0.1:8080/", True),
    ("http://127.8.8.8/", True),
    ("http://[::1]/", True),
    ("http://[::ffff:127.0.0.1]/", True),
    ("http://169.254.169.254/latest/meta-data/", True),
    ("http://[fe80::1]/", True),
    ("http://[fd00:ec2::254]/", True),
    ("http://0.0.0.0/", True),
    ("http://224.0.0.1/", True),
    ("http://localhost:8080/", True),
    ("http://api.localhost/", True),
    ("http://metadata/", True),
    ("http://metadata.google.internal/computeMetadata/v1/", True),
    ("https://kubernetes/", True),
    ("https://kubernetes.default.svc/", True),
    ("http://modelplane-authz.modelplane-system:8080/", True),
    ("http://modelplane-authz.modelplane-system.svc.cluster.local:8080/", True),
    ("http://kube-dns.kube-system.svc.cluster.local:53/", True),
    ("http://mp-traefik.traefik-system/", True),
]


@pytest.mark.parametrize(("url", "refused"), URLS, ids=[u for u, _ in URLS])
def test_security_endpoint_url_never_internal(url: str, refused: bool) -> None:
    spec = document("ModelEndpoint", {"name": "ep", "namespace": "ml"}, {"url": url})
    if not refused:
        assert ModelEndpoint.model_validate(spec).spec.url == url
        return
    with pytest.raises(ValidationError, match="never a ModelEndpoint"):
        ModelEndpoint.model_validate(spec)
