"""Each toxic against a real echo server over real sockets, with timing tolerances."""

from __future__ import annotations

import errno
import os
import socket

import pytest
import trio

from faults.proxy import open_proxy_server
from tests.faults.proxy.conftest import (
    Rig,
    open_rig,
    receive_exactly,
    receive_until_eof,
    start_upstream,
)

# Generous: these machines are shared. Lower bounds are what the toxic guarantees.
SLACK = 0.5


async def round_trip(stream: trio.SocketStream, payload: bytes = b"ping") -> float:
    start = trio.current_time()
    await stream.send_all(payload)
    assert await receive_exactly(stream, len(payload)) == payload
    return trio.current_time() - start


async def test_no_toxics_passes_bytes_intact(rig: Rig) -> None:
    payload = os.urandom(3_000_000)
    stream = await rig.connect()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.send_all, payload)
        assert await receive_exactly(stream, len(payload)) == payload
    await stream.aclose()


async def test_latency_delays_each_round_trip(rig: Rig) -> None:
    stream = await rig.connect()
    await round_trip(stream)
    rig.proxy.add_toxic("latency", attributes={"latency": 150})
    for _ in range(3):
        rt = await round_trip(stream)
        assert 0.150 <= rt < 0.150 + SLACK
    rig.proxy.remove_toxic("latency_downstream")
    assert await round_trip(stream) < 0.150


async def test_latency_jitter_stays_in_bounds_and_is_recorded(rig: Rig) -> None:
    rig.proxy.add_toxic("latency", attributes={"latency": 100, "jitter": 50})
    stream = await rig.connect()
    times = [await round_trip(stream) for _ in range(8)]
    offsets = [d["value"] for d in rig.draws() if d["stream"] == "jitter"]
    assert len(offsets) == 8
    assert all(-50 <= o < 50 for o in offsets)
    for rt, offset in zip(times, offsets, strict=True):
        assert rt >= (100 + offset) / 1000 - 0.002
        assert rt < (100 + offset) / 1000 + SLACK


async def test_latency_does_not_accumulate_across_chunks(rig: Rig) -> None:
    rig.proxy.add_toxic("latency", stream="upstream", attributes={"latency": 200})
    stream = await rig.connect()
    start = trio.current_time()
    for i in range(5):
        await stream.send_all(b"%d" % i)
        await trio.sleep(0.02)
    await receive_exactly(stream, 5)
    # Five chunks sent over ~0.1 s each wait 0.2 s from their own read: ~0.3 s, not 1 s.
    assert trio.current_time() - start < 0.2 + 0.1 + SLACK


async def test_bandwidth_paces_to_rate(rig: Rig) -> None:
    rig.proxy.add_toxic("bandwidth", attributes={"rate": 200})  # 200 KB/s
    stream = await rig.connect()
    payload = os.urandom(100_000)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.send_all, payload)
        assert await receive_exactly(stream, len(payload)) == payload
    elapsed = trio.current_time() - start
    assert 0.4 <= elapsed < 0.5 + SLACK


async def test_bandwidth_zero_stalls_until_removed(rig: Rig) -> None:
    rig.proxy.add_toxic("bandwidth", attributes={"rate": 0})
    stream = await rig.connect()
    await stream.send_all(b"held")
    with trio.move_on_after(0.3) as scope:
        await stream.receive_some(10)
    assert scope.cancelled_caught
    rig.proxy.remove_toxic("bandwidth_downstream")
    assert await receive_exactly(stream, 4) == b"held"


async def test_limit_data_forwards_exact_byte_count_then_closes(rig: Rig) -> None:
    rig.proxy.add_toxic("limit_data", attributes={"bytes": 1000})
    stream = await rig.connect()
    await stream.send_all(os.urandom(600))
    await stream.send_all(os.urandom(600))
    with trio.fail_after(5):
        got = await receive_until_eof(stream)
    assert len(got) == 1000


async def test_limit_data_upstream_counts_per_connection(nursery: trio.Nursery) -> None:
    received: list[bytes] = []

    async def record(stream: trio.SocketStream) -> None:
        received.append(await receive_until_eof(stream))

    rig = await open_rig(nursery, handler=record)
    rig.proxy.add_toxic("limit_data", stream="upstream", attributes={"bytes": 10})
    for _ in range(2):
        stream = await rig.connect()
        await stream.send_all(b"0123456789abcdef")
        with trio.fail_after(5):
            assert await receive_until_eof(stream) == b""
        await stream.aclose()
    with trio.fail_after(5):
        while len(received) < 2:
            await trio.sleep(0.01)
    assert received == [b"0123456789", b"0123456789"]


async def test_timeout_closes_after_idle_period(rig: Rig) -> None:
    rig.proxy.add_toxic("timeout", attributes={"timeout": 200})
    stream = await rig.connect()
    start = trio.current_time()
    await stream.send_all(b"dropped")
    with trio.fail_after(5):
        assert await receive_until_eof(stream) == b""
    assert 0.2 - 0.01 <= trio.current_time() - start < 0.2 + SLACK


async def test_timeout_zero_holds_and_removal_closes(rig: Rig) -> None:
    rig.proxy.add_toxic("timeout", attributes={"timeout": 0})
    stream = await rig.connect()
    await stream.send_all(b"x")
    with trio.move_on_after(0.3) as scope:
        await stream.receive_some(10)
    assert scope.cancelled_caught
    rig.proxy.remove_toxic("timeout_downstream")
    with trio.fail_after(5):
        assert await receive_until_eof(stream) == b""


async def test_reset_peer_gives_econnreset(rig: Rig) -> None:
    rig.proxy.add_toxic("reset_peer", attributes={"timeout": 100})
    sock = trio.socket.socket()
    await sock.connect(("127.0.0.1", rig.port))
    rig.clients.append(trio.SocketStream(sock))
    start = trio.current_time()
    await sock.send(b"hello")
    with trio.fail_after(5), pytest.raises(ConnectionResetError) as info:
        while await sock.recv(100):
            pass
    assert info.value.errno == errno.ECONNRESET
    assert trio.current_time() - start >= 0.1 - 0.01
    sock.close()


async def test_reset_peer_that_lost_its_draw_leaves_close_alone(rig: Rig) -> None:
    rig.proxy.add_toxic("reset_peer", toxicity=0.0, attributes={"timeout": 0})
    stream = await rig.connect()
    assert await round_trip(stream) < SLACK
    await stream.aclose()


async def test_slicer_keeps_bytes_intact(rig: Rig) -> None:
    rig.proxy.add_toxic(
        "slicer",
        stream="upstream",
        attributes={"average_size": 64, "size_variation": 32, "delay": 10},
    )
    stream = await rig.connect()
    payload = os.urandom(20_000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.send_all, payload)
        assert await receive_exactly(stream, len(payload)) == payload


async def test_slicer_splits_into_small_pieces(nursery: trio.Nursery) -> None:
    reads: list[int] = []

    async def record_reads(stream: trio.SocketStream) -> None:
        while data := await stream.receive_some(65536):
            reads.append(len(data))

    rig = await open_rig(nursery, handler=record_reads)
    rig.proxy.add_toxic(
        "slicer",
        stream="upstream",
        attributes={"average_size": 100, "size_variation": 20, "delay": 2000},
    )
    stream = await rig.connect()
    await stream.send_all(os.urandom(2000))
    with trio.fail_after(5):
        while sum(reads) < 2000:
            await trio.sleep(0.01)
    assert len(reads) >= 10
    assert max(reads) <= 2 * 120  # a read may join two pieces at most, with 2 ms between


async def test_slow_close_delays_the_close(nursery: trio.Nursery) -> None:
    closed_at: list[float] = []

    async def wait_for_eof(stream: trio.SocketStream) -> None:
        while await stream.receive_some(100):
            pass
        closed_at.append(trio.current_time())

    rig = await open_rig(nursery, handler=wait_for_eof)
    rig.proxy.add_toxic("slow_close", stream="upstream", attributes={"delay": 300})
    stream = await rig.connect()
    await stream.send_all(b"bye")
    start = trio.current_time()
    await stream.aclose()
    with trio.fail_after(5):
        while not closed_at:
            await trio.sleep(0.01)
    assert 0.3 - 0.01 <= closed_at[0] - start < 0.3 + SLACK


async def test_toxicity_zero_never_applies(rig: Rig) -> None:
    rig.proxy.add_toxic("latency", toxicity=0.0, attributes={"latency": 1000})
    stream = await rig.connect()
    assert await round_trip(stream) < 0.5
    draws = [d for d in rig.draws() if d["stream"] == "toxicity"]
    assert draws
    assert not draws[0]["applied"]


async def test_adding_a_toxic_applies_to_live_connections(rig: Rig) -> None:
    stream = await rig.connect()
    assert await round_trip(stream) < 0.2
    rig.proxy.add_toxic("latency", stream="upstream", attributes={"latency": 200})
    assert await round_trip(stream) >= 0.2


async def test_updating_a_toxic_restarts_it(rig: Rig) -> None:
    rig.proxy.add_toxic("latency", attributes={"latency": 300})
    stream = await rig.connect()
    assert await round_trip(stream) >= 0.3
    rig.proxy.update_toxic("latency_downstream", attributes={"latency": 50})
    assert 0.05 <= await round_trip(stream) < 0.3
    draws = [d for d in rig.draws() if d["stream"] == "toxicity"]
    assert len(draws) == 2  # drawn again on update


async def test_removing_latency_mid_stream_loses_no_byte(rig: Rig) -> None:
    rig.proxy.add_toxic("latency", attributes={"latency": 300})
    stream = await rig.connect()
    payload = b"".join(b"%08d" % i for i in range(2000))
    await stream.send_all(payload)
    await trio.sleep(0.1)  # the echo is held in the latency stage now
    rig.proxy.remove_toxic("latency_downstream")
    with trio.fail_after(5):
        assert await receive_exactly(stream, len(payload)) == payload


async def test_flapping_toxics_under_load_keep_every_byte_in_order(rig: Rig) -> None:
    stream = await rig.connect()
    payload = os.urandom(2_000_000)

    async def flap() -> None:
        kinds = [
            ("latency", {"latency": 5, "jitter": 5}),
            ("slicer", {"average_size": 4096, "size_variation": 1024}),
            ("bandwidth", {"rate": 50_000}),
            ("noop", {}),
        ]
        for i in range(40):
            kind, attrs = kinds[i % len(kinds)]
            stream_name = "upstream" if i % 2 else "downstream"
            name = f"t{i}"
            rig.proxy.add_toxic(kind, name=name, stream=stream_name, attributes=attrs)
            await trio.sleep(0.01)
            if i % 3 == 0:
                rig.proxy.update_toxic(name, toxicity=1.0)
            if i >= 2:
                rig.proxy.remove_toxic(f"t{i - 2}")
        rig.proxy.remove_all_toxics()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, payload)
            nursery.start_soon(flap)
            assert await receive_exactly(stream, len(payload)) == payload


async def _draws_for(seed: int) -> dict[tuple[object, ...], list[object]]:
    async with trio.open_nursery() as nursery:
        rig = await open_rig(nursery, seed=seed)
        rig.proxy.add_toxic("latency", toxicity=0.5, attributes={"latency": 1, "jitter": 5})
        rig.proxy.add_toxic(
            "slicer", stream="upstream", attributes={"average_size": 3, "size_variation": 2}
        )
        for _ in range(4):
            stream = await rig.connect()
            for _ in range(3):
                await round_trip(stream, b"abcdefgh")
            await stream.aclose()
        nursery.cancel_scope.cancel()
    streams: dict[tuple[object, ...], list[object]] = {}
    for d in rig.draws():
        key = (d["toxic"], d["conn"], d["direction"], d["stream"])
        streams.setdefault(key, []).append(d["value"])
    return streams


async def test_same_seed_gives_identical_draws() -> None:
    first = await _draws_for(seed=42)
    second = await _draws_for(seed=42)
    other = await _draws_for(seed=43)
    assert first == second
    assert len(first) >= 8  # toxicity per toxic, connection and direction; jitter
    assert first != other


async def test_disable_closes_listener_and_connections_enable_rebinds(rig: Rig) -> None:
    stream = await rig.connect()
    await round_trip(stream)
    port = rig.port
    rig.server.update_proxy("echo", enabled=False)
    with trio.fail_after(5):
        assert await receive_until_eof(stream) == b""
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", port)
    rig.server.update_proxy("echo", enabled=True)
    assert rig.port == port
    again = await rig.connect()
    await round_trip(again)


async def test_failed_dial_closes_the_client(nursery: trio.Nursery) -> None:
    rig = await open_rig(nursery)
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    rig.server.update_proxy("echo", upstream=f"127.0.0.1:{dead_port}")
    stream = await rig.connect()
    with trio.fail_after(5):
        assert await receive_until_eof(stream) == b""
    assert any(e["event"] == "dial_failed" for e in rig.events)


async def test_slow_upstream_dial_does_not_stall_other_accepts(nursery: trio.Nursery) -> None:
    rig = await open_rig(nursery)
    # An upstream that never completes a handshake: a full accept queue, never accepted.
    stall = trio.socket.socket()
    await stall.bind(("127.0.0.1", 0))
    stall.listen(0)
    stall_port = stall.getsockname()[1]
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        try:
            f.connect(("127.0.0.1", stall_port))
        except BlockingIOError:
            pass
        fillers.append(f)
    slow = rig.server.create_proxy("slow", "127.0.0.1:0", f"127.0.0.1:{stall_port}")
    slow_port = int(slow.listen.rsplit(":", 1)[1])
    start = trio.current_time()
    clients = [await trio.open_tcp_stream("127.0.0.1", slow_port) for _ in range(3)]
    rig.clients.extend(clients)
    echo = await rig.connect()
    assert await round_trip(echo) < SLACK  # other proxies unaffected meanwhile
    with trio.fail_after(5):
        for client in clients:
            assert await receive_until_eof(client) == b""
    # Three dials ran side by side: about one dial timeout (1 s), not three.
    assert trio.current_time() - start < 1.0 + 1.0
    for f in fillers:
        f.close()
    stall.close()


async def test_leaving_the_server_closes_everything() -> None:
    async with trio.open_nursery() as nursery:
        port = await start_upstream(nursery)
        async with open_proxy_server() as server:
            proxy = server.create_proxy("p", "127.0.0.1:0", f"127.0.0.1:{port}")
            listen_port = int(proxy.listen.rsplit(":", 1)[1])
            stream = await trio.open_tcp_stream("127.0.0.1", listen_port)
            await round_trip(stream)
        with trio.fail_after(5):
            assert await receive_until_eof(stream) == b""
        await stream.aclose()
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", listen_port)
        nursery.cancel_scope.cancel()


async def test_busy_polling_fast_path_keeps_bytes_and_yields_to_toxics() -> None:
    async with trio.open_nursery() as nursery:
        port = await start_upstream(nursery)
        async with open_proxy_server(busy_poll_us=300) as server:
            proxy = server.create_proxy("p", "127.0.0.1:0", f"127.0.0.1:{port}")
            stream = await trio.open_tcp_stream("127.0.0.1", int(proxy.listen.rsplit(":")[1]))
            payload = os.urandom(1_000_000)
            async with trio.open_nursery() as io:
                io.start_soon(stream.send_all, payload)
                assert await receive_exactly(stream, len(payload)) == payload
            proxy.add_toxic("latency", attributes={"latency": 150})
            assert await round_trip(stream) >= 0.150
            proxy.remove_toxic("latency_downstream")
            assert await round_trip(stream) < 0.150
            await stream.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("bad", [-1, 2_000_000])
async def test_busy_poll_budget_is_checked(bad: int) -> None:
    from ground.errors import ConfigError

    with pytest.raises(ConfigError, match="busy_poll_us must be between 0 and 1000000"):
        async with open_proxy_server(busy_poll_us=bad):
            pass
