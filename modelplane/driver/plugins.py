"""Which provider plugins a stack needs, and the per-stack check before the engine runs it.

A cluster stack of a GKE cluster needs the ``gcp`` plugin, of an EKS cluster ``aws`` and
``eks``; every stack needs ``kubernetes`` (the engine's own). When the engine may not
download plugins (the default) and one is missing, the stack fails before the engine starts,
with a message naming the plugin and how to get it, instead of the engine's
"no resource plugin 'pulumi-resource-gcp' found" deep in its output.

The knowledge lives with the plugins in `modelplane.engine.plugins` (the engine's own
``check --fleet`` uses it too, and the engine never imports the driver).
"""

from __future__ import annotations

from modelplane.engine.plugins import missing_for_stack, stack_plugins

__all__ = ["missing_for_stack", "stack_plugins"]
