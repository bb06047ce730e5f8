"""The real Traefik (the dev fleet's cached build) for the gateway tests: its binary and a free
loopback port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def traefik_binary() -> Path:
    from modelplane.gobuild.fleet import cached_fleet_binaries

    found = cached_fleet_binaries()
    if found is None:
        pytest.skip("no cached Traefik build (make setup)")
    return found.traefik


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
