"""The local dev fleet: simulated clusters whose serving pods answer real HTTP requests."""
