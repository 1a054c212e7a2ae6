"""One client connection through a proxy: two directions, closed together."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from faults.proxy._direction import Direction, Stream, Streams
from faults.proxy._stage import Emit
from ground.rng import derive_rng

if TYPE_CHECKING:
    from faults.proxy._spec import ToxicSpec


class Connection:
    """Client <-> upstream. EOF or an error on either side closes both (no half-close).

    Built by its proxy with what it needs: the toxics of each stream, the run ``seed`` and
    proxy ``name`` its random streams derive from, the proxy's ``emit``, and the fast
    path's busy-poll budget.
    """

    def __init__(
        self,
        index: int,
        client: trio.SocketStream,
        server: trio.SocketStream,
        *,
        upstream: Sequence[ToxicSpec],
        downstream: Sequence[ToxicSpec],
        seed: int,
        proxy: str,
        emit: Emit,
        busy_poll_s: float = 0.0,
    ) -> None:
        self.index = index
        self.client = client
        self.server = server
        self.reset = False
        self.reason = "eof"
        self._scope = trio.CancelScope()
        self._seed = seed
        self._proxy = proxy

        def direction(stream: Stream, src: trio.SocketStream, dst: trio.SocketStream) -> Direction:
            specs = upstream if stream == "upstream" else downstream
            return Direction(
                stream,
                src,
                dst,
                specs,
                index=index,
                emit=emit,
                streams=self._streams(stream),
                abort=self.abort,
                busy_poll_s=busy_poll_s,
            )

        self.upstream = direction("upstream", client, server)
        self.downstream = direction("downstream", server, client)

    def _streams(self, direction: Stream) -> Streams:
        seed, proxy, index = self._seed, self._proxy, self.index

        def streams(toxic: str, stream: str) -> random.Random:
            return derive_rng(seed, stream, proxy, toxic, index, direction)

        return streams

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
