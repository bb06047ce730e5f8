"""Paths between the fleet's clusters: VPC peering and HA VPN (docs/api.md, "Paths")."""
