"""The one way a component gets a Kubernetes provider: explicit, never the ambient kubeconfig."""

from __future__ import annotations

import os

import pulumi
import pulumi_kubernetes as kubernetes


def cluster_provider(
    name: str,
    *,
    kubeconfig: pulumi.Input[str] | None,
    render_to: str | None,
    opts: pulumi.ResourceOptions | None,
) -> kubernetes.Provider:
    """A ``kubernetes.Provider`` for one cluster.

    - ``kubeconfig``: the cluster's kubeconfig (wrapped as a secret, whatever the caller passed);
    - ``render_to``: instead of applying, write manifests to that directory (made absolute; the
      provider's ``render_yaml_to_directory`` mode, which cannot be combined with a kubeconfig).

    Exactly one must be given: with neither, the provider would silently fall back to the
    ambient kubeconfig (``~/.kube/config``, ``$KUBECONFIG``), which modelplane never uses.
    Server-side apply keeps the provider's default (on).
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
            render_yaml_to_directory=os.path.abspath(os.path.expanduser(render_to)),
            opts=opts,
        )
    return kubernetes.Provider(
        name,
        kubeconfig=pulumi.Output.secret(kubeconfig),
        opts=opts,
    )
