"""Test helpers for the HTTP API: a raw h11 client and a real TCP echo server (trio)."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import h11
import trio

_NO_BODY = object()


@dataclass(frozen=True)
class Reply:
    """One HTTP response as the client saw it."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        """The message of a Toxiproxy error body (asserting its shape)."""
        payload = self.json()
        assert payload["status"] == self.status, payload
        return str(payload["error"])


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def call(
    port: int,
    method: str,
    path: str,
    body: Any = _NO_BODY,
    *,
    raw: bytes | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> Reply:
    """Send one request on a fresh connection (JSON ``body`` or ``raw`` bytes)."""
    if raw is None:
        raw = b"" if body is _NO_BODY else json.dumps(body).encode()
    conn = h11.Connection(h11.CLIENT)
    all_headers = [("Host", "api"), ("Connection", "close"), *headers]
    if method not in ("GET", "HEAD", "DELETE") or raw:
        all_headers.append(("Content-Length", str(len(raw))))
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            out = conn.send(h11.Request(method=method, target=path, headers=all_headers))
            out += conn.send(h11.Data(data=raw)) or b""
            out += conn.send(h11.EndOfMessage()) or b""
            await stream.send_all(out)
            return await read_reply(stream, conn)


async def read_reply(stream: trio.abc.ReceiveStream, conn: h11.Connection) -> Reply:
    """Read one response from ``stream`` with the client-side ``conn``."""
    head: h11.Response | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(event, h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            headers = {k.decode().lower(): v.decode() for k, v in head.headers}
            return Reply(head.status_code, headers, body)
        else:
            raise AssertionError(f"unexpected event {event!r}")


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def _echo(stream: trio.SocketStream) -> None:
    async with stream:
        try:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)
        except trio.BrokenResourceError:
            pass


@asynccontextmanager
async def open_echo_server() -> AsyncIterator[int]:
    """A real TCP echo server on 127.0.0.1; yields its port."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, _echo, 0, host="127.0.0.1")
        )
        try:
            yield listeners[0].socket.getsockname()[1]
        finally:
            nursery.cancel_scope.cancel()
