"""The fleet's network: the address plan (pure)."""

from modelplane.network.addresses import (
    AddressPlan,
    addresses_of,
    plan_addresses,
    with_addresses,
)

__all__ = ["AddressPlan", "addresses_of", "plan_addresses", "with_addresses"]
