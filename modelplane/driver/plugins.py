"""Which provider plugins a stack needs, and the per-stack check before the engine runs it.

A cluster stack of a GKE cluster needs the ``gcp`` plugin, of an EKS cluster ``aws`` and
``eks``; every stack needs ``kubernetes`` (the engine's own). When the engine may not
download plugins (the default) and one is missing, the stack fails before the engine starts,
with a message naming the plugin and how to get it, instead of the engine's
"no resource plugin 'pulumi-resource-gcp' found" deep in its output.
"""

from __future__ import annotations

from collections.abc import Mapping

from modelplane.api.fleet import FleetSpec
from modelplane.stacks import StackUnit

CLOUD_PLUGINS = {"GKE": ("gcp",), "EKS": ("aws", "eks"), "Existing": ()}


def stack_plugins(fleet: FleetSpec, unit: StackUnit) -> set[str]:
    """The resource plugins the stack's program uses."""
    names = {"kubernetes"}
    if unit.kind == "InferenceCluster" and unit.key in fleet.clusters:
        source = fleet.clusters[unit.key].spec.cluster.source
        names.update(CLOUD_PLUGINS.get(source, ()))
    return names


def missing_for_stack(fleet: FleetSpec, unit: StackUnit, environ: Mapping[str, str]) -> str | None:
    """The error for a stack whose plugins the engine would not find (None: all there)."""
    from modelplane.engine.plugins import acquisition_enabled, missing_message, missing_plugins

    if acquisition_enabled(environ):
        return None
    missing = missing_plugins(stack_plugins(fleet, unit), environ)
    return missing_message(unit.name, missing) if missing else None
