"""The dev fleet: real control planes with simulated GPU nodes (kwok) whose serving pods answer
real HTTP requests, for trying modelplane and for its tests."""
