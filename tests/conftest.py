"""Shared pytest configuration: the real kube-apiserver and dev-fleet fixtures live in
tests/fixtures."""

pytest_plugins = ["tests.fixtures.apiserver", "tests.fixtures.devfleet"]
