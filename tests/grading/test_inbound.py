"""A link into a sandboxed candidate: the real proxy dials from inside a real network
namespace, where the candidate's server listens (tenants' API)."""

from __future__ import annotations

import pytest
import trio

from chaos.sandbox.process import namespaces_available
from chaos.services import free_port
from chaos.services._netns import NetNamespace
from tests.faults.proxy.conftest import open_rig, receive_exactly

pytestmark = pytest.mark.skipif(not namespaces_available(), reason="needs network namespaces")


async def _echo_in(netns: NetNamespace, port: int, nursery: trio.Nursery) -> None:
    (sock,) = netns.listen([("127.0.0.1", port)])
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))

    async def serve(stream: trio.SocketStream) -> None:
        async for data in stream:
            await stream.send_all(data)

    nursery.start_soon(trio.serve_listeners, serve, [listener])


async def _through(port: int) -> bytes | None:
    """What comes back through the proxy at ``port`` for b"ping" (None: it was closed)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"ping")
        with trio.move_on_after(5):
            try:
                return await receive_exactly(stream, 4)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
        return None


async def test_a_proxy_reaches_a_server_only_the_namespace_holds(nursery: trio.Nursery) -> None:
    netns = NetNamespace()
    try:
        rig = await open_rig(nursery)
        port = free_port()
        await _echo_in(netns, port, nursery)
        proxy = rig.server.create_proxy("client-api", "127.0.0.1:0", f"127.0.0.1:{port}")
        proxy_port = int(proxy.listen.rsplit(":", 1)[1])
        assert await _through(proxy_port) is None  # nothing listens there outside
        proxy.dialer = netns.dial
        assert await _through(proxy_port) == b"ping"
        assert await _through(proxy_port) == b"ping"
        proxy.dialer = None
        assert await _through(proxy_port) is None
        dialled = [e for e in rig.events if e["event"] == "connection_opened"
                   and e.get("proxy") == "client-api"]  # fmt: skip
        assert len(dialled) == 2
    finally:
        netns.close()
