"""A conformance suite every data-passing toxic must pass, over real sockets.

For each toxic: bytes stay intact and in order when it is added, updated and removed
mid-stream; EOF from the client reaches the server; cancelling the server ends cleanly.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio

from faults.proxy import open_proxy_server
from tests.faults.proxy.conftest import Rig, open_rig, receive_exactly, start_upstream

PASSING: list[tuple[str, dict[str, Any]]] = [
    ("noop", {}),
    ("latency", {"latency": 20, "jitter": 10}),
    ("bandwidth", {"rate": 20_000}),
    ("slow_close", {"delay": 10}),
    ("slicer", {"average_size": 512, "size_variation": 256, "delay": 5}),
    ("limit_data", {"bytes": 10_000_000}),
    ("nats_observe", {}),
    ("nats_drop_ack", {"count": 1}),
    ("nats_duplicate_publish", {"count": 1, "subject": "none."}),
]


@pytest.mark.parametrize(("kind", "attrs"), PASSING, ids=[k for k, _ in PASSING])
@pytest.mark.parametrize("stream", ["upstream", "downstream"])
async def test_add_update_remove_mid_stream_keeps_every_byte(
    rig: Rig, kind: str, attrs: dict[str, Any], stream: str
) -> None:
    client = await rig.connect()
    payload = os.urandom(600_000)

    async def churn() -> None:
        await trio.sleep(0.01)
        rig.proxy.add_toxic(kind, name="t", stream=stream, attributes=attrs)
        await trio.sleep(0.05)
        rig.proxy.update_toxic("t", toxicity=1.0)
        await trio.sleep(0.05)
        rig.proxy.remove_toxic("t")

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.send_all, payload)
            nursery.start_soon(churn)
            assert await receive_exactly(client, len(payload)) == payload


@pytest.mark.parametrize(("kind", "attrs"), PASSING, ids=[k for k, _ in PASSING])
async def test_client_eof_reaches_the_server(
    nursery: trio.Nursery, kind: str, attrs: dict[str, Any]
) -> None:
    got: list[bytes] = []
    done = trio.Event()

    async def record(stream: trio.SocketStream) -> None:
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
        got.append(data)
        done.set()

    rig = await open_rig(nursery, handler=record)
    rig.proxy.add_toxic(kind, stream="upstream", attributes=attrs)
    client = await rig.connect()
    await client.send_all(b"last words")
    await client.send_eof()
    with trio.fail_after(10):
        await done.wait()
    assert got == [b"last words"]


@pytest.mark.parametrize(("kind", "attrs"), PASSING, ids=[k for k, _ in PASSING])
async def test_cancelling_the_server_mid_stream_ends_cleanly(
    kind: str, attrs: dict[str, Any]
) -> None:
    async with trio.open_nursery() as nursery:
        port = await start_upstream(nursery)
        with trio.move_on_after(0.3):
            async with open_proxy_server() as server:
                proxy = server.create_proxy("p", "127.0.0.1:0", f"127.0.0.1:{port}")
                proxy.add_toxic(kind, attributes=attrs)
                client = await trio.open_tcp_stream(*_host_port(proxy.listen))
                nursery.start_soon(_stream_forever, client)
                await trio.sleep_forever()
        nursery.cancel_scope.cancel()


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host, int(port)


async def _stream_forever(client: trio.SocketStream) -> None:
    try:
        while True:
            await client.send_all(b"x" * 4096)
            await client.receive_some(65536)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        client.socket.close()
