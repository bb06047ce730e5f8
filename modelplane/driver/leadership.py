"""`reconcile --leader-elect`: where the Lease lives and how the loop waits for it.

The Lease is on a management cluster: ``--lease-kubeconfig FILE``, or a cluster of the fleet
by name (``--lease-cluster NAME``, its kubeconfig as ``status`` finds it), else
``$KUBECONFIG``, else the in-cluster service account when running as a pod.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from modelplane.driver.errors import DriverError
from modelplane.driver.lease import LeaderElector, LeaseConfig
from modelplane.observe import kubeconfig_for

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _in_cluster_kubeconfig() -> str | None:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT", "443"),
    )
    if not host or not (SA_DIR / "token").is_file():
        return None
    server = f"https://{host}:{port}"
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: in-cluster\n"
        f"clusters: [{{name: in-cluster, cluster: {{server: '{server}', "
        f"certificate-authority: '{SA_DIR / 'ca.crt'}'}}}}]\n"
        "users: [{name: sa, user: {tokenFile: '" + str(SA_DIR / "token") + "'}}]\n"
        "contexts: [{name: in-cluster, context: {cluster: in-cluster, user: sa}}]\n"
    )


def lease_kubeconfig(
    fleet_dir: Path, kubeconfig: Path | None, cluster: str | None
) -> tuple[str, str]:
    """The management cluster's kubeconfig text and its base directory."""
    if kubeconfig is not None:
        try:
            return kubeconfig.read_text(encoding="utf-8"), str(kubeconfig.parent)
        except OSError as exc:
            raise DriverError(f"--lease-kubeconfig {kubeconfig}: {exc.strerror}") from None
    if cluster is not None:
        from modelplane.driver.fleet import Fleet

        f = Fleet.load(fleet_dir)
        if cluster not in f.spec.clusters:
            known = ", ".join(sorted(f.spec.clusters)) or "none"
            raise DriverError(f"--lease-cluster {cluster}: no such cluster (known: {known})")
        try:
            kubeconfigs = f.cluster_kubeconfigs()
        except DriverError:
            kubeconfigs = {}
        text, why = kubeconfig_for(f.spec, cluster, f.path, f.env, kubeconfigs)
        if text is None:
            raise DriverError(f"--lease-cluster {cluster}: {why}")
        return text, str(f.path)
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        path = Path(env)
        return lease_kubeconfig(fleet_dir, path, None)
    text = _in_cluster_kubeconfig()
    if text is None:
        raise DriverError(
            "--leader-elect needs a management cluster for its Lease: --lease-kubeconfig FILE, "
            "--lease-cluster NAME, $KUBECONFIG, or running in a pod with a service account"
        )
    return text, str(SA_DIR)


def elector(
    fleet_dir: Path,
    config: LeaseConfig,
    *,
    kubeconfig: Path | None = None,
    cluster: str | None = None,
    on_change: Callable[[bool, str], None] | None = None,
) -> LeaderElector:
    problems = config.problems()
    if problems:
        raise DriverError("leader election: " + "; ".join(problems))
    text, base = lease_kubeconfig(fleet_dir, kubeconfig, cluster)
    return LeaderElector.from_kubeconfig(text, base, config, on_change=on_change)
