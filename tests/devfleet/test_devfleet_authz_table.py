"""The dev fleet's authz reads one cluster's callers table, never a merge (security review L10,
docs/architecture.md "Security"): only a `modelplane-callers` Secret the gateway stack made,
the newest where several clusters hold one; None unless every API server answered; a Secret
it saw that is gone keeps its table. Pure: fake clusters, no API server."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from modelplane.devcluster.rest import KubeRestError
from modelplane.devfleet.authz import GATEWAY_LABELS, CallersSecret, gateway_table

T1, T2, T3 = "2026-01-01T10:00:00Z", "2026-01-01T10:00:05Z", "2026-01-01T10:01:00Z"
DOOR = "Basic bW9kZWxwbGFuZTpkb29y"
TABLE = {"callers": {"hash-dev": "dev"}, "open": False, "frontDoor": DOOR}
OTHER = {"callers": {"hash-evil": "evil"}, "open": False, "frontDoor": "Basic ZXZpbDpldmls"}


def secret(table: Any, created: str = T1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A `modelplane-callers` Secret as the API server answers it (the gateway's labels unless
    ``labels``)."""
    raw = base64.b64encode(json.dumps(table).encode()).decode()
    meta = {"labels": GATEWAY_LABELS if labels is None else labels, "creationTimestamp": created}
    return {"metadata": meta, "data": {"callers.json": raw}}


class Cluster:
    """A cluster whose API server answers the callers Secret with ``answer``: a Secret, an
    HTTP status (an error) or an OSError (no answer)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def rest(self) -> Cluster:
        return self

    def get(self, path: str, *, timeout: float) -> Any:
        assert path.endswith("/namespaces/modelplane-system/secrets/modelplane-callers")
        if isinstance(self.answer, dict):
            return self.answer
        if isinstance(self.answer, int):
            raise KubeRestError(self.answer, "error")
        raise self.answer


def table(*answers: Any) -> dict[str, Any] | None:
    return gateway_table([Cluster(a) for a in answers])  # type: ignore[misc]


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        pytest.param([secret(TABLE), 404, 404], TABLE, id="first-cluster"),
        pytest.param([404, secret(TABLE), 404], TABLE, id="second-cluster"),
        pytest.param([404, 404, 404], {}, id="nowhere-no-callers"),
        # Another cluster's Secret neither adds its caller nor replaces the front door's
        # credentials: one table, the newest (the first listed on a tie), never a merge.
        pytest.param([secret(TABLE, T2), secret(OTHER, T1)], TABLE, id="extra-caller-refused"),
        pytest.param([secret(OTHER, T1), secret(TABLE, T2)], TABLE, id="newest-wins"),
        pytest.param([secret(TABLE, T1), secret(OTHER, T1)], TABLE, id="tie-first-listed"),
        pytest.param(
            [secret(TABLE, T1), secret({"frontDoor": "Basic eDp5"}, T1)],
            TABLE,
            id="front-door-not-replaced",
        ),
        # A gateway moved: the new cluster's Secret is the newer one.
        pytest.param([secret(OTHER, T1), secret(TABLE, T3), 404], TABLE, id="moved-gateway"),
        # A Secret the gateway stack did not make is not read.
        pytest.param([secret(TABLE), secret(OTHER, T3, labels={})], TABLE, id="unlabelled-ignored"),
        pytest.param(
            [secret(OTHER, T3, labels={"app.kubernetes.io/managed-by": "modelplane"}), 404],
            {},
            id="partly-labelled-ignored",
        ),
        pytest.param(
            [secret(OTHER, T3, labels={**GATEWAY_LABELS, "app.kubernetes.io/component": "x"})],
            {},
            id="other-component-ignored",
        ),
        pytest.param(
            [{"metadata": {"labels": GATEWAY_LABELS}, "data": {}}, secret(TABLE)],
            TABLE,
            id="no-callers-json-ignored",
        ),
        # The gateway cluster does not answer (busy, or a timeout): the last table is kept,
        # whatever the others say -- it used to read as "no callers" and refuse everyone.
        pytest.param([OSError("timed out"), 404, 404], None, id="no-answer"),
        pytest.param([TimeoutError(), secret(TABLE)], None, id="timeout"),
        pytest.param([500, 404, 404], None, id="server-error"),
        pytest.param([secret(TABLE), 403], None, id="forbidden"),
        pytest.param([secret("not an object"), 404], None, id="not-an-object"),
        pytest.param(
            [{"metadata": {"labels": GATEWAY_LABELS}, "data": {"callers.json": "%%"}}],
            None,
            id="not-base64-json",
        ),
    ],
)
def test_security_dev_authz_reads_one_clusters_table(
    answers: list[Any], expected: dict[str, Any] | None
) -> None:
    assert table(*answers) == expected


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # The provider replaces the Secret: deleted, then created under its name. Kubelet keeps
        # the deleted Secret's files in a running pod; so does the dev fleet's authz (CI once
        # saw every caller refused for a second of a key rotation).
        pytest.param([(secret(TABLE), 404), (404, 404)], [TABLE, TABLE], id="gone-keeps-last"),
        pytest.param(
            [(secret(TABLE), 404), (404, 404), (secret(OTHER, T2), 404)],
            [TABLE, TABLE, OTHER],
            id="replaced",
        ),
        # Gone on the gateway's cluster, an older Secret elsewhere: the kept one is newer.
        pytest.param(
            [(secret(TABLE, T2), secret(OTHER, T1)), (404, secret(OTHER, T1))],
            [TABLE, TABLE],
            id="kept-is-newer",
        ),
        # A newer Secret elsewhere (the gateway moved) wins over the kept one.
        pytest.param(
            [(secret(OTHER, T1), 404), (404, secret(TABLE, T2))], [OTHER, TABLE], id="moved"
        ),
        # Replaced by a Secret the gateway stack did not make: the last table is kept.
        pytest.param(
            [(secret(TABLE), 404), (secret(OTHER, T3, labels={}), 404)],
            [TABLE, TABLE],
            id="unlabelled-replacement",
        ),
        # No answer while the Secret is gone: None, then the kept table again.
        pytest.param(
            [(secret(TABLE), 404), (0, 404), (404, 404)], [TABLE, None, TABLE], id="no-answer"
        ),
        # Never seen: gone is no callers.
        pytest.param([(404, 404)], [{}], id="never-seen"),
    ],
)
def test_security_dev_authz_keeps_a_seen_secrets_table_while_it_is_gone(
    steps: list[tuple[Any, Any]], expected: list[dict[str, Any] | None]
) -> None:
    seen: dict[int, CallersSecret] = {}
    clusters = [Cluster(None), Cluster(None)]
    found = []
    for answers in steps:
        for cluster, answer in zip(clusters, answers, strict=True):
            cluster.answer = OSError("no answer") if answer == 0 else answer
        found.append(gateway_table(clusters, seen))  # type: ignore[arg-type]
    assert found == expected


def test_security_dev_authz_labels_are_the_gateway_stacks() -> None:
    """The labels the dev fleet's authz requires are the ones modelplane/components/gateway.py gives the
    `modelplane-callers` Secret."""
    from modelplane.components.gateway import CALLERS_SECRET, authz_manifests

    [made] = [m for m in authz_manifests("{}") if m["kind"] == "Secret"]
    assert made["metadata"]["name"] == CALLERS_SECRET
    assert GATEWAY_LABELS.items() <= made["metadata"]["labels"].items()
