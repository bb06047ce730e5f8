"""The one way a component gets a Kubernetes provider: explicit, never the ambient kubeconfig."""

from __future__ import annotations

import os
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

#: Every provider input whose default the Python SDK would read from the environment
#: (``KUBECONFIG``, ``PULUMI_K8S_*``), set explicitly to the provider's documented default so
#: that ``modelplane up`` and a plain ``pulumi up -s`` (with whatever the user exported)
#: record the same inputs and never see a change the other made. (Provider 4.25, the one the
#: engine builds and the SDK pinned to it, has no ``enablePatchForce`` or
#: ``upsertExistingObjects``.) One is not the default: ``enable_secret_mutable``. Without it
#: the provider replaces a Secret whose data changed, and a Secret of a fixed name is
#: deleted before it is made again: a gateway's check that reads it (the workload gateways'
#: htpasswd, the front door's injected credentials) fails in between, and its routes answer
#: 404 or 500 while a key is rotated. With it the data is updated in place (the provider
#: treats the flag as an update of itself, never a replacement of what it manages).
EXPLICIT_DEFAULTS: dict[str, Any] = {
    "delete_unreachable": False,
    "enable_config_map_mutable": False,
    "enable_secret_mutable": True,
    "enable_server_side_apply": True,
    "skip_update_unreachable": False,
    "suppress_deprecation_warnings": False,
    "suppress_helm_hook_warnings": False,
}


def render_directory(render_to: str) -> str:
    """``render_to`` as the provider records it: relative to the working directory, the
    program's folder, which is also the provider's (the engine starts both there), so a moved
    checkout or another machine's CI against the same state records the same path and
    previews no change (an absolute path would replace every manifest: the provider replaces
    its resources when the directory changes)."""
    return os.path.relpath(os.path.realpath(os.path.expanduser(render_to)), os.getcwd())


def cluster_provider(
    name: str,
    *,
    kubeconfig: pulumi.Input[str] | None,
    render_to: str | None,
    opts: pulumi.ResourceOptions | None,
) -> kubernetes.Provider:
    """A ``kubernetes.Provider`` for one cluster.

    - ``kubeconfig``: the cluster's kubeconfig (wrapped as a secret, whatever the caller passed);
    - ``render_to``: instead of applying, write manifests to that directory (the provider's
      ``render_yaml_to_directory`` mode, which cannot be combined with a kubeconfig), recorded
      relative to the program's folder (:func:`render_directory`).

    Exactly one must be given: with neither, the provider would silently fall back to the
    ambient kubeconfig (``~/.kube/config``, ``$KUBECONFIG``), which modelplane never uses.
    Server-side apply keeps the provider's default (on). Inputs the SDK would otherwise take
    from the environment are set explicitly (:data:`EXPLICIT_DEFAULTS`; in render mode
    ``kubeconfig`` is the empty string, which the provider accepts next to
    ``render_yaml_to_directory``), so an exported ``KUBECONFIG`` never leaks in.
    """
    if (kubeconfig is None) == (render_to is None):
        raise ValueError(
            f"cluster provider {name!r}: pass exactly one of kubeconfig or render_to "
            "(the ambient kubeconfig is never used)"
        )
    if render_to is not None:
        if not render_to.strip():
            raise ValueError(f"cluster provider {name!r}: render_to is empty")
        return kubernetes.Provider(
            name,
            render_yaml_to_directory=render_directory(render_to),
            kubeconfig="",
            # Replaced (the directory changed: every resource is replaced with it) delete
            # first: a replacement created first writes its file, which deleting the old
            # resource then removes (tests/driver/test_engine_render_paths.py).
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(delete_before_replace=True)
            ),
            **EXPLICIT_DEFAULTS,
        )
    assert kubeconfig is not None  # exactly one of the two was given, and not render_to
    return kubernetes.Provider(
        name,
        kubeconfig=pulumi.Output.secret(kubeconfig),
        opts=opts,
        **EXPLICIT_DEFAULTS,
    )
