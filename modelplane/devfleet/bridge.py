"""TCP relays between the host and the dev fleet's network namespace.

The host reaches the fleet's API servers and front doors on 127.x loopback addresses only;
each relay listens there and connects to the same service inside the namespace. The process
binds every host listener first, then moves itself into the namespace (``setns``), so every
connection it opens afterwards is made inside. It is a plain byte relay (TLS to the API servers
passes through untouched).

Run as ``python -m modelplane.devfleet.bridge --config <fleet dir>/bridge.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from modelplane.devfleet import netns

BUFFER = 256 * 1024


@dataclass(frozen=True)
class Route:
    listen_host: str
    listen_port: int
    target_host: str
    target_port: int

    def to_json(self) -> dict[str, object]:
        return {
            "listen": f"{self.listen_host}:{self.listen_port}",
            "target": f"{self.target_host}:{self.target_port}",
        }

    @classmethod
    def from_json(cls, data: dict[str, str]) -> Route:
        lh, lp = str(data["listen"]).rsplit(":", 1)
        th, tp = str(data["target"]).rsplit(":", 1)
        return cls(lh, int(lp), th, int(tp))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(BUFFER)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()


async def _handle(route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(route.target_host, route.target_port)
    except OSError:
        writer.close()
        return
    sock = up_writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        for w in (writer, up_writer):
            with contextlib.suppress(Exception):
                w.close()


def bind(route: Route) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((route.listen_host, route.listen_port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(routes: list[tuple[Route, socket.socket]]) -> None:
    servers = []
    # The event loop holds its tasks weakly: a relay whose two sockets both wait (reading
    # paused while the other side drains) is otherwise garbage, its task destroyed while
    # pending ("Task was destroyed but it is pending!") and the connection hangs for good
    # (an engine run through it never finishes). Every live relay is held here.
    live: set[asyncio.Task[None]] = set()
    for route, sock in routes:

        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, route=route) -> None:
            task = asyncio.current_task()
            if task is not None:
                live.add(task)
            try:
                sock = w.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await _handle(route, r, w)
            finally:
                live.discard(task)  # type: ignore[arg-type]

        servers.append(await asyncio.start_server(handler, sock=sock))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("bridge ready", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modelplane.devfleet.bridge")
    parser.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text())
    routes = [Route.from_json(r) for r in config["routes"]]
    try:
        bound = [(route, bind(route)) for route in routes]  # in the host's namespace
    except OSError as exc:
        print(f"bridge: cannot listen: {exc}", file=sys.stderr, flush=True)
        return 1
    netns.enter(config["netns"])  # every connection from now on is made inside
    asyncio.run(serve(bound))
    return 0


if __name__ == "__main__":
    sys.exit(main())
