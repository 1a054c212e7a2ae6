"""Fixtures: a real echo server on loopback and the embedded proxy in front of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import trio

from faults.proxy import Proxy, ProxyServer, open_proxy_server


async def _echo(stream: trio.SocketStream) -> None:
    try:
        async for data in stream:
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


@dataclass
class Rig:
    server: ProxyServer
    proxy: Proxy
    upstream_port: int
    events: list[dict[str, Any]] = field(default_factory=list)
    clients: list[trio.SocketStream] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.proxy.listen.rsplit(":", 1)[1])

    async def connect(self) -> trio.SocketStream:
        stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        self.clients.append(stream)
        return stream

    async def close_clients(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            for stream in self.clients:
                stream.socket.close()

    def draws(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "draw"]


async def start_upstream(nursery: trio.Nursery, handler: Any = _echo) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def open_rig(nursery: trio.Nursery, seed: int = 0, handler: Any = _echo) -> Rig:
    port = await start_upstream(nursery, handler)
    events: list[dict[str, Any]] = []
    server: ProxyServer = await nursery.start(_serve_proxies, seed, events.append)
    proxy = server.create_proxy("echo", "127.0.0.1:0", f"127.0.0.1:{port}")
    rig = Rig(server, proxy, port, events)
    nursery.start_soon(rig.close_clients)
    return rig


async def _serve_proxies(seed: int, observer: Any, task_status: Any) -> None:
    async with open_proxy_server(seed=seed, observer=observer, dial_timeout=1.0) as server:
        task_status.started(server)
        await trio.sleep_forever()


@pytest.fixture
async def rig(nursery: trio.Nursery) -> AsyncIterator[Rig]:
    yield await open_rig(nursery)


async def receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = await stream.receive_some(n - len(got))
        if not data:
            raise EOFError(f"EOF after {len(got)} of {n} bytes")
        got += data
    return bytes(got)


async def receive_until_eof(stream: trio.SocketStream) -> bytes:
    got = bytearray()
    while data := await stream.receive_some(65536):
        got += data
    return bytes(got)
