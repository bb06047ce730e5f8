"""The component provider plugin of modelplane's package (PulumiPlugin.yaml): hosts the
package-facing components of modelplane.package under the package name `modelplane`."""

from pulumi.provider.experimental import component_provider_host

from modelplane import __version__
from modelplane.package import COMPONENTS, PACKAGE_NAME

if __name__ == "__main__":
    component_provider_host(components=COMPONENTS, name=PACKAGE_NAME, version=__version__)
