"""The Automation API driver: the only code that talks to the Pulumi engine.

Public face: :class:`modelplane.Fleet` (``modelplane.driver.fleet``). The pure parts
(fingerprints, events, tier runner, placement diff, markdown) import no Pulumi.
"""
