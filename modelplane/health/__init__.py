"""Fleet health: the observation as data and the pure rules over it (no I/O)."""
