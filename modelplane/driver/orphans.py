"""Objects left on a cluster that came back after `reconcile` dropped them from the state.

When a cluster's API is unreachable, `reconcile` removes the objects managed through its
provider from the deployment stacks' state (they cannot be deleted there). Each is first
recorded (`.modelplane/orphans.json`, kept by `modelplane.driver.state`: cluster,
apiVersion, kind, namespace, name, uid; never a secret). When the cluster answers again,
`delete_orphans` deletes them -- with a `uid` precondition, so an object re-created since
under the same name is never touched -- and forgets those that are gone. Namespaces are
never deleted (other objects may live in them).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from modelplane.driver.state import Orphan, RuntimeState
from modelplane.observe.kube import KubeError, KubeReader, http_error_text

__all__ = ["KubeDeleter", "Orphan", "delete_orphans", "orphan_of"]

SKIP_KINDS = frozenset({"Namespace"})
SKIP_GROUPS = ("helm.sh/", "yaml")  # components, not objects with a REST path


def orphan_of(cluster: str, stack: str, resource: Mapping[str, Any]) -> Orphan | None:
    """The object a Kubernetes resource of a stack's state stands for (None: not an object
    modelplane may delete, e.g. a provider, a component or a Namespace)."""
    token = str(resource.get("type", ""))
    parts = token.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes" or parts[1].startswith(SKIP_GROUPS):
        return None
    group_version, kind = parts[1], parts[2]
    if kind in SKIP_KINDS:
        return None
    api_version = (
        group_version[len("core/") :] if group_version.startswith("core/") else group_version
    )
    outputs = resource.get("outputs") or {}
    meta = outputs.get("metadata") if isinstance(outputs, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    ident = str(resource.get("id") or "")
    namespace, _, name = ident.rpartition("/")
    name = str(meta.get("name") or name)
    namespace = str(meta.get("namespace") or namespace) or None
    if not name:
        return None
    uid = meta.get("uid")
    return Orphan(cluster, api_version, kind, namespace, name, str(uid) if uid else None, stack)


class KubeDeleter(KubeReader):
    """DELETE with preconditions, through the same connection settings as the reader."""

    def __init__(self, reader: KubeReader) -> None:
        self.__dict__.update(reader.__dict__)
        self._plural: dict[tuple[str, str], tuple[str, bool] | None] = {}

    def resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        """(plural, namespaced) of a kind, from API discovery; None when not served."""
        key = (api_version, kind)
        if key not in self._plural:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            found = None
            try:
                listing = self.get(base)
            except KubeError as exc:
                if exc.status != 404:
                    raise
                listing = {}
            for res in listing.get("resources") or []:
                if res.get("kind") == kind and "/" not in str(res.get("name")):
                    found = (str(res["name"]), bool(res.get("namespaced")))
                    break
            self._plural[key] = found
        return self._plural[key]

    def delete(self, orphan: Orphan) -> str:
        """`deleted`, `gone` (already absent or replaced by a newer object) or raises."""
        found = self.resource(orphan.api_version, orphan.kind)
        if found is None:
            return "gone"  # the kind is not served any more: nothing of it is left
        plural, namespaced = found
        base = "/api/v1" if orphan.api_version == "v1" else f"/apis/{orphan.api_version}"
        ns = f"/namespaces/{orphan.namespace}" if namespaced and orphan.namespace else ""
        path = f"{base}{ns}/{plural}/{orphan.name}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
        }
        if orphan.uid:
            body["preconditions"] = {"uid": orphan.uid}
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(
            self.server + path, data=json.dumps(body).encode(), method="DELETE", headers=headers
        )
        try:
            with self._open(request):  # never follows a redirect (KubeReader)
                return "deleted"
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 409):  # absent, or the uid is another object's now
                return "gone"
            raise KubeError(exc.code, f"{path}: {http_error_text(exc)}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise KubeError(0, f"cannot reach {self.server}: {reason}") from None


def delete_orphans(
    state: RuntimeState, readers: Mapping[str, KubeReader]
) -> tuple[list[str], list[str]]:
    """Delete the recorded orphans of every cluster in `readers` (clusters that answer);
    forget those that are gone. Returns (what was deleted or found gone, errors)."""
    orphans = state.orphans()
    if not orphans:
        return [], []
    keep: list[Orphan] = []
    done: list[str] = []
    errors: list[str] = []
    deleters = {c: KubeDeleter(r) for c, r in readers.items()}
    for orphan in orphans:
        deleter = deleters.get(orphan.cluster)
        if deleter is None:
            keep.append(orphan)
            continue
        try:
            outcome = deleter.delete(orphan)
        except KubeError as exc:
            keep.append(orphan)
            errors.append(f"{orphan.describe()}: {exc}")
            continue
        done.append(f"{orphan.describe()} ({outcome})")
    state.set_orphans(keep)
    return done, errors
