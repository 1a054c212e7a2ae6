"""HTTP/1.1 mechanics of the API: keep-alive, pipelining, chunked bodies, limits, timeouts,
malformed input, isolation between client connections."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import h11
import pytest
import trio

from faults.proxy import ProxyServer, open_proxy_server
from faults.proxy import http as http_module
from faults.proxy._http_routes import handle
from faults.proxy._http_wire import HttpRequest, HttpResponse
from faults.proxy.errors import BindError
from faults.proxy.http import HttpLimits, open_http_api, open_toxiproxy, serve_http
from ground.errors import ConfigError
from tests.faults.proxy.http_helpers import call, port_of, read_all, read_reply

LIMITS = HttpLimits(max_body=1 << 20, request_timeout=0.3, idle_timeout=0.5)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with open_toxiproxy(seed=1, limits=LIMITS) as (_server, url):
        yield port_of(url)


async def _connect(port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port)


def _responses(data: bytes) -> list[tuple[int, bytes]]:
    """Split a byte stream of Content-Length framed responses into (status, body)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        match = re.search(rb"(?i)content-length: (\d+)", head)
        length = int(match.group(1)) if match else 0
        out.append((status, rest[:length]))
        data = rest[length:]
    return out


async def test_keep_alive_serves_several_requests_on_one_connection(port: int) -> None:
    stream = await _connect(port)
    async with stream:
        conn = h11.Connection(h11.CLIENT)
        for _ in range(3):
            request = h11.Request(method="GET", target="/proxies", headers=[("Host", "a")])
            await stream.send_all(conn.send(request) + (conn.send(h11.EndOfMessage()) or b""))
            reply = await read_reply(stream, conn)
            assert (reply.status, reply.json()) == (200, {})
            conn.start_next_cycle()


async def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    body = b'{"name": "pipe", "upstream": "127.0.0.1:9"}'
    wire = (
        b"GET /version HTTP/1.1\r\nHost: a\r\n\r\n"
        b"POST /proxies HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s"
        b"GET /proxies/pipe HTTP/1.1\r\nHost: a\r\n\r\n"
        b"DELETE /proxies/pipe HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    ) % (len(body), body)
    stream = await _connect(port)
    async with stream:
        await stream.send_all(wire)
        replies = _responses(await read_all(stream))
    assert [status for status, _ in replies] == [200, 201, 200, 204]
    assert json.loads(replies[2][1])["name"] == "pipe"


async def test_chunked_request_body(port: int) -> None:
    parts = [b'{"name": "chunk"', b', "upstream": "127.0.0.1:9"}']
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    stream = await _connect(port)
    async with stream:
        await stream.send_all(
            b"POST /proxies HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" + chunks
        )
        replies = _responses(await read_all(stream))
    assert replies[0][0] == 201
    assert json.loads(replies[0][1])["name"] == "chunk"


async def test_expect_100_continue(port: int) -> None:
    body = b'{"name": "cont", "upstream": "127.0.0.1:9"}'
    stream = await _connect(port)
    async with stream:
        await stream.send_all(
            b"POST /proxies HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        )
        with trio.fail_after(5):
            interim = await stream.receive_some(65536)
        assert interim.startswith(b"HTTP/1.1 100 ")
        await stream.send_all(body)
        final = await read_all(stream)
    assert final.startswith(b"HTTP/1.1 201 ")


async def test_oversized_content_length_is_413_and_closes(port: int) -> None:
    stream = await _connect(port)
    async with stream:
        await stream.send_all(
            b"POST /proxies HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n{" % (2 << 20)
        )
        replies = _responses(await read_all(stream))
    assert len(replies) == 1
    status, body = replies[0]
    assert status == 413
    assert json.loads(body) == {
        "error": "bad request body: larger than 1048576 bytes",
        "status": 413,
    }


async def test_oversized_chunked_body_is_413(port: int) -> None:
    stream = await _connect(port)
    async with stream:
        await stream.send_all(
            b"POST /populate HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n%s\r\n" % (64 << 10, b" " * (64 << 10))
        try:
            for _ in range(20):
                await stream.send_all(chunk)
        except trio.BrokenResourceError:
            pass  # the server answered and closed while we were still sending
        data = await read_all(stream)
    assert data.startswith(b"HTTP/1.1 413 "), data[:80]


@pytest.mark.parametrize(
    "wire",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /version HTTP/1.1\r\n\r\n",  # no Host
        b"POST /proxies HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
        b"POST /proxies HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /version HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n",
    ],
)
async def test_malformed_http_is_400_and_closes(port: int, wire: bytes) -> None:
    stream = await _connect(port)
    async with stream:
        await stream.send_all(wire)
        replies = _responses(await read_all(stream))
    assert len(replies) == 1
    status, body = replies[0]
    assert status == 400
    assert json.loads(body)["error"].startswith("bad request")
    assert (await call(port, "GET", "/version")).status == 200


async def test_oversized_headers_are_431(port: int) -> None:
    stream = await _connect(port)
    async with stream:
        await stream.send_all(
            b"GET /version HTTP/1.1\r\nHost: a\r\nX-Big: %s\r\n\r\n" % (b"x" * (64 << 10))
        )
        replies = _responses(await read_all(stream))
    assert replies[0][0] == 431


async def test_slow_client_gets_408_and_does_not_block_others(port: int) -> None:
    slow = await _connect(port)
    async with slow:
        await slow.send_all(b"POST /proxies HTTP/1.1\r\nHost: a\r\nContent-Length: 50\r\n\r\n{")
        with trio.fail_after(0.25):  # well within the slow client's deadline
            assert (await call(port, "GET", "/version")).status == 200
        replies = _responses(await read_all(slow))
    assert [status for status, _ in replies] == [408]
    assert json.loads(replies[0][1]) == {"error": "request timeout", "status": 408}


async def test_partial_request_line_gets_408(port: int) -> None:
    slow = await _connect(port)
    async with slow:
        await slow.send_all(b"GET /vers")
        replies = _responses(await read_all(slow))
    assert [status for status, _ in replies] == [408]


async def test_idle_keep_alive_connection_is_closed_quietly(port: int) -> None:
    stream = await _connect(port)
    async with stream:
        await stream.send_all(b"GET /version HTTP/1.1\r\nHost: a\r\n\r\n")
        replies = _responses(await read_all(stream))  # returns once the idle timeout closes
    assert [status for status, _ in replies] == [200]


async def test_head_gets_headers_only(port: int) -> None:
    stream = await _connect(port)
    async with stream:
        await stream.send_all(b"HEAD /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        data = await read_all(stream)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 ")
    assert body == b""
    assert (await call(port, "HEAD", "/version")).status == 405


async def test_http_1_0_is_answered_and_closed(port: int) -> None:
    stream = await _connect(port)
    async with stream:
        await stream.send_all(b"GET /proxies HTTP/1.0\r\n\r\n")
        replies = _responses(await read_all(stream))
    assert replies == [(200, b"{}")]


async def test_client_vanishing_mid_request_does_not_affect_others(port: int) -> None:
    for _ in range(5):
        stream = await _connect(port)
        await stream.send_all(b"POST /proxies HTTP/1.1\r\nHost: a\r\nContent-Length: 99\r\n\r\n{")
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        await stream.aclose()
    assert (await call(port, "GET", "/version")).status == 200


async def test_unexpected_handler_error_ends_only_that_connection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = handle

    def flaky(server: ProxyServer, request: HttpRequest) -> HttpResponse:
        if request.target == "/boom":
            raise RuntimeError("boom")
        return real(server, request)

    monkeypatch.setattr(http_module, "handle", flaky)
    async with open_toxiproxy() as (_server, url):
        stream = await _connect(port_of(url))
        async with stream:
            await stream.send_all(b"GET /boom HTTP/1.1\r\nHost: a\r\n\r\n")
            assert await read_all(stream) == b""
        assert (await call(port_of(url), "GET", "/version")).status == 200
    assert "unexpected error" in caplog.text


async def test_serve_http_reports_the_bound_port() -> None:
    async with open_proxy_server() as server, trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve_http, server, "127.0.0.1", 0))
        assert bound > 0
        assert (await call(bound, "GET", "/proxies")).status == 200
        nursery.cancel_scope.cancel()


async def test_open_http_api_over_an_existing_server() -> None:
    async with open_proxy_server(seed=4) as server:
        server.create_proxy("pre", "127.0.0.1:0", "127.0.0.1:9")
        async with open_http_api(server, "localhost", 0) as url:
            assert url.startswith("http://127.0.0.1:")
            listed = (await call(port_of(url), "GET", "/proxies")).json()
        assert list(listed) == ["pre"]
    assert server.proxies["pre"].enabled is False


async def test_api_port_in_use_is_a_plain_bind_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        with pytest.raises(BindError, match=f"listen tcp 127.0.0.1:{busy}: bind: address"):
            async with open_toxiproxy(port=busy):
                pass


@pytest.mark.parametrize(("host", "port"), [("example.com", 0), ("", 0), ("127.0.0.1", 70000)])
async def test_bad_api_address_is_a_config_error(host: str, port: int) -> None:
    with pytest.raises(ConfigError):
        async with open_toxiproxy(host, port):
            pass


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seed": -1}, "seed must be between 0 and 2**63-1, got -1"),
        ({"seed": 2**63}, "seed must be between 0 and 2**63-1, got 9223372036854775808"),
        ({"seed": True}, "seed must be an integer, got True"),
        ({"dial_timeout": 0}, "dial timeout must be a finite number > 0, got 0"),
        ({"dial_timeout": float("inf")}, "dial timeout must be a finite number > 0, got inf"),
        ({"dial_timeout": float("nan")}, "dial timeout must be a finite number > 0, got nan"),
        ({"busy_poll_us": float("nan")}, "busy_poll_us must be between 0 and 1000000, got nan"),
    ],
)
async def test_toxiproxy_takes_the_seeds_a_run_takes_and_checks_before_binding(
    options: dict[str, Any], message: str
) -> None:
    """``chaos proxy serve``'s options: a run seed (0..2**63-1, as ``chaos run``), finite
    timeouts; refused before the API port is bound (a taken port is not even noticed)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with pytest.raises(ConfigError) as caught:
            async with open_toxiproxy(port=taken.getsockname()[1], **options):
                pass
    assert str(caught.value) == message


async def test_a_server_takes_any_64_bit_seed_a_run_derives() -> None:
    async with open_proxy_server(seed=2**64 - 1) as server:
        assert server.seed == 2**64 - 1
    with pytest.raises(ConfigError, match=r"between 0 and 2\*\*64-1, got 18446744073709551616"):
        async with open_proxy_server(seed=2**64):
            pass
