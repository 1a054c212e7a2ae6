"""Parsing and binding ``host:port`` addresses the way Toxiproxy reports them."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket

import trio

from faults.proxy.errors import BadRequest, BindError


def split_host_port(address: str, what: str) -> tuple[str, int]:
    """``"localhost:80"`` -> ``("localhost", 80)``; ``"[::1]:80"`` -> ``("::1", 80)``."""
    if not isinstance(address, str) or ":" not in address:
        raise BadRequest(f"bad request body: {what} must be host:port, got {address!r}")
    host, _, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5) or not (
        0 <= int(port_text) <= 65535
    ):
        raise BadRequest(f"bad request body: {what} has an invalid port in {address!r}")
    return host, int(port_text)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve_listen(listen: str) -> tuple[str, int]:
    """The IP address and port a listen string binds: ``localhost`` is 127.0.0.1, an empty
    host every interface, an IP literal in its canonical form (``[0::1]`` is ``::1``)."""
    host, port = split_host_port(listen, "listen")
    if host in ("", "localhost"):
        host = "127.0.0.1" if host == "localhost" else "0.0.0.0"
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        raise BadRequest(
            f"bad request body: listen host must be an IP address or localhost, got {host!r}"
        ) from None


def same_listen(a: str, b: str) -> bool:
    """Whether two listen strings mean the same address (``localhost:7070`` and
    ``127.0.0.1:7070`` do), as Toxiproxy resolves them before comparing."""
    try:
        return resolve_listen(a) == resolve_listen(b)
    except BadRequest:
        return a == b


def bind_listener(listen: str) -> tuple[trio.socket.SocketType, str]:
    """Bind and listen now (synchronously); return the socket and the real address."""
    host, port = resolve_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        where = join_host_port(host, port)
        raise BindError(f"listen tcp {where}: socket: {exc.strerror}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason = "address already in use"
        elif exc.errno == errno.EADDRNOTAVAIL:
            reason = "cannot assign requested address"
        raise BindError(f"listen tcp {join_host_port(host, port)}: bind: {reason}") from None
    except (OverflowError, UnicodeError, ValueError) as exc:
        sock.close()
        raise BadRequest(f"bad request body: listen {listen!r} is not valid: {exc}") from None
    bound_host, bound_port = sock.getsockname()[:2]
    return trio.socket.from_stdlib_socket(sock), join_host_port(bound_host, bound_port)
