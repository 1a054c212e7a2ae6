"""Free TCP ports and a TCP accept probe for local services."""

from __future__ import annotations

import socket

import trio


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on `host` that was free a moment ago (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


async def tcp_accepting(host: str, port: int, connect_timeout: float = 1.0) -> bool:
    """Whether a TCP connect to host:port succeeds within `connect_timeout` seconds."""
    with trio.move_on_after(connect_timeout):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False
