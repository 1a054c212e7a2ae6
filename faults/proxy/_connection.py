"""One client connection through a proxy: two directions, closed together."""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING

import trio

from faults.proxy._link import Direction

if TYPE_CHECKING:
    from faults.proxy.proxy import Proxy


class Connection:
    """Client <-> upstream. EOF or an error on either side closes both (no half-close)."""

    def __init__(
        self, proxy: Proxy, index: int, client: trio.SocketStream, server: trio.SocketStream
    ) -> None:
        self.proxy = proxy
        self.index = index
        self.client = client
        self.server = server
        self.reset = False
        self.reason = "eof"
        self._scope = trio.CancelScope()
        self.upstream = Direction(self, "upstream", client, server, proxy.specs("upstream"))
        self.downstream = Direction(self, "downstream", server, client, proxy.specs("downstream"))

    def direction(self, stream: str) -> Direction:
        return self.upstream if stream == "upstream" else self.downstream

    def abort(self, *, reset: bool = False, reason: str | None = None) -> None:
        """Close both sides now; with ``reset`` the peers see ECONNRESET (SO_LINGER 0)."""
        self.reset = self.reset or reset
        if reason is not None:
            self.reason = reason
        elif reset:
            self.reason = "reset"
        self.upstream.stop()
        self.downstream.stop()
        self._scope.cancel()

    async def run(self) -> None:
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._guard, self.upstream)
                    nursery.start_soon(self._guard, self.downstream)
        finally:
            self._close_sockets()

    async def _guard(self, direction: Direction) -> None:
        try:
            await direction.run()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.abort(reason="error")

    def _close_sockets(self) -> None:
        for stream in (self.client, self.server):
            sock = stream.socket
            if self.reset:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            sock.close()
