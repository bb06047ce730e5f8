"""Many stand-in listeners in one asyncio loop (``StandinHost``), and that host on its own
thread for non-async code (``StandinHostThread``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from modelplane.devfleet.standin_listener import StandinListener
from modelplane.devfleet.standin_types import StandinConfig, StandinIdentity, StandinStats

T = TypeVar("T")


class StandinHost:
    """Many stand-in listeners in one asyncio loop, added and removed at runtime.

    All methods run on the loop that owns the host (use ``StandinHostThread`` from other
    threads). ``grace`` is the default time in-flight requests get to finish on remove/stop.
    """

    def __init__(self, *, grace: float = 5.0) -> None:
        self.grace = grace
        self._servers: dict[str, StandinListener] = {}

    async def add(
        self,
        key: str,
        host: str,
        port: int,
        identity: StandinIdentity,
        config: StandinConfig | None = None,
    ) -> int:
        """Start a listener on host:port (0 picks a free port); return the bound port.

        Raises ValueError when ``key`` is taken and OSError when the address cannot be bound.
        """
        if key in self._servers:
            raise ValueError(f"stand-in {key!r} already exists")
        server = StandinListener(identity, config or StandinConfig())
        self._servers[key] = server
        try:
            return await server.start(host, port)
        except BaseException:
            if self._servers.get(key) is server:
                del self._servers[key]
            raise

    async def remove(self, key: str, grace: float | None = None) -> bool:
        """Stop a listener gracefully; False when there is none under ``key``.

        The port refuses new connections at once; health answers 503 from then on; requests in
        flight (running or waiting) get ``grace`` seconds to finish, then are cut.
        """
        server = self._servers.pop(key, None)
        if server is None:
            return False
        await server.stop(self.grace if grace is None else grace)
        return True

    def keys(self) -> list[str]:
        return sorted(self._servers)

    def address(self, key: str) -> tuple[str, int]:
        server = self._servers[key]
        return server.host, server.port

    def stats(self, key: str) -> StandinStats:
        return self._servers[key].stats()

    def set_ready(self, key: str, ready: bool) -> None:
        """Hold a listener unready (False) or let it be ready once loaded (True)."""
        self._servers[key].held_ready = ready

    async def stop(self, grace: float | None = None) -> None:
        """Remove every listener, all draining at once within ``grace``."""
        await asyncio.gather(*(self.remove(key, grace) for key in list(self._servers)))

    async def __aenter__(self) -> StandinHost:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class StandinHostThread:
    """A ``StandinHost`` on its own event loop in a daemon thread, callable from any thread."""

    def __init__(self, *, grace: float = 5.0, timeout: float = 30.0) -> None:
        self.grace = grace
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._host: StandinHost | None = None

    def start(self) -> StandinHostThread:
        if self._loop is not None:
            raise RuntimeError("StandinHostThread already started")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="standin-host", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        self._host = StandinHost(grace=self.grace)
        return self

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._loop is None:
            coro.close()
            raise RuntimeError("StandinHostThread is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(self.timeout if timeout is None else timeout)

    def _host_(self) -> StandinHost:
        if self._host is None:
            raise RuntimeError("StandinHostThread is not running")
        return self._host

    def add(
        self,
        key: str,
        host: str,
        port: int,
        identity: StandinIdentity,
        config: StandinConfig | None = None,
    ) -> int:
        return self._call(self._host_().add(key, host, port, identity, config))

    def remove(self, key: str, grace: float | None = None) -> bool:
        wait = (self.grace if grace is None else grace) + self.timeout
        return self._call(self._host_().remove(key, grace), timeout=wait)

    def keys(self) -> list[str]:
        return self._on_loop(lambda h: h.keys())

    def address(self, key: str) -> tuple[str, int]:
        return self._on_loop(lambda h: h.address(key))

    def stats(self, key: str) -> StandinStats:
        return self._on_loop(lambda h: h.stats(key))

    def set_ready(self, key: str, ready: bool) -> None:
        self._on_loop(lambda h: h.set_ready(key, ready))

    def _on_loop(self, fn: Callable[[StandinHost], T]) -> T:
        host = self._host_()

        async def run() -> T:
            return fn(host)

        return self._call(run())

    def stop(self, grace: float | None = None) -> None:
        """Drain every listener (within ``grace``), then stop the loop and join the thread."""
        if self._loop is None or self._thread is None:
            return
        wait = (self.grace if grace is None else grace) + self.timeout
        try:
            self._call(self._host_().stop(grace), timeout=wait)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.timeout)
            self._loop.close()
            self._loop = self._thread = self._host = None

    def __enter__(self) -> StandinHostThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
