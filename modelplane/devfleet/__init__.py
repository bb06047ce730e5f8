"""The dev fleet: real control planes with simulated GPU nodes (kwok), for trying modelplane
and for its tests."""
