"""modelplane's components as a Pulumi package (`pulumi package add <repo>/provider`).

The components of :mod:`modelplane.components` take validated pydantic models and Python
objects (a ``kubernetes.Provider``), which a program in another language cannot pass. The
package-facing components here take ``args`` that Pulumi's component provider host can describe
in a schema (:mod:`pulumi.provider.experimental`), build the validated models from them and
construct the existing component as their child. Their type tokens are
``modelplane:index:<Kind>`` (the host puts every component in module ``index``).

The plugin that hosts them is ``provider/`` at the repository root (``PulumiPlugin.yaml`` and
``__main__.py``); docs/architecture.md, "Using modelplane's components from another Pulumi
program".
"""

from modelplane.package.components import (
    COMPONENTS,
    PACKAGE_NAME,
    ServingStack,
    ServingStackArgs,
    WorkloadGateway,
    WorkloadGatewayArgs,
)

__all__ = [
    "COMPONENTS",
    "PACKAGE_NAME",
    "ServingStack",
    "ServingStackArgs",
    "WorkloadGateway",
    "WorkloadGatewayArgs",
]
