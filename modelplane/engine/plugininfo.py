"""Asking an engine binary for its version: `pulumi version`, or a plugin's GetPluginInfo RPC."""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

from .versions import parse_cli_version, strip_v

QUIET_ENV = {
    "PULUMI_SKIP_UPDATE_CHECK": "true",
    "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
}


def cli_version(pulumi: Path | str, timeout: float = 30.0) -> str | None:
    """The version `pulumi version` prints (without `v`), or None if it fails or prints none."""
    try:
        proc = subprocess.run(
            [str(pulumi), "version"],
            env={**os.environ, **QUIET_ENV},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return parse_cli_version(proc.stdout)


def plugin_version(binary: Path | str, kind: str, timeout: float = 30.0) -> str | None:
    """Start a plugin, call its GetPluginInfo over gRPC and stop it; the version without `v`.

    `kind` is `resource` (a provider) or `language` (a language host). Returns None if the
    binary does not start, does not print its port, or does not answer.
    """
    import grpc  # imported lazily: only checks need it
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import language_pb2_grpc, provider_pb2_grpc

    try:
        proc = subprocess.Popen(
            [str(binary)],
            env={**os.environ, **QUIET_ENV},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    try:
        port = _read_port(proc, timeout)
        if port is None:
            return None
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            if kind == "resource":
                stub = provider_pb2_grpc.ResourceProviderStub(channel)
            else:
                stub = language_pb2_grpc.LanguageRuntimeStub(channel)
            info = stub.GetPluginInfo(empty_pb2.Empty(), timeout=timeout)
        return strip_v(info.version) if info.version else None
    except grpc.RpcError:
        return None
    finally:
        proc.kill()
        proc.wait()


def _read_port(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The port a plugin prints on the first line of its stdout."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if not ready:
            return None
        chunk = os.read(proc.stdout.fileno(), 1)
        if not chunk:
            return None
        line += chunk
    text = line.decode(errors="replace").strip()
    return int(text) if text.isdigit() else None
