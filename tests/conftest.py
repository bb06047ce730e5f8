"""Shared pytest configuration: the real kube-apiserver fixture lives in tests/fixtures."""

pytest_plugins = ["tests.fixtures.apiserver"]
