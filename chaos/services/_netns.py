"""A network namespace holding only loopback and the sockets the harness binds in it.

Python 3.11 has no ``os.unshare``/``os.setns``: libc's, through ctypes. A network namespace
is per thread, so a short-lived thread unshares (or enters) it, binds what it is asked to,
and ends; the harness's own threads never leave their namespace. Sockets keep the namespace
they were created in: a proxy in the harness accepts on a listener that lives in the
candidate's namespace, while its upstream dials stay in the harness's.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import TypeVar

import trio

from ground.errors import ServiceError

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)


def _in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a fresh thread (its namespace changes die with it); re-raise its error."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="chaos-netns", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def _errno(what: str) -> ServiceError:
    return ServiceError(f"network namespace: {what}: {os.strerror(ctypes.get_errno())}")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


class NetNamespace:
    """A network namespace kept alive by an open file descriptor: a fresh one (loopback up),
    or, with ``from_path``, one that exists already (a container's)."""

    def __init__(self, fd: int | None = None) -> None:
        def make() -> int:
            if _libc.unshare(CLONE_NEWNET) != 0:
                raise _errno("unshare")
            _loopback_up()
            return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

        self.fd: int | None = fd if fd is not None else _in_thread(make)

    @classmethod
    def from_path(cls, path: str) -> NetNamespace:
        """The namespace at ``path`` (e.g. ``/proc/PID/ns/net``), held open."""
        try:
            return cls(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            raise ServiceError(f"network namespace {path}: {exc.strerror or exc}") from None

    def tcp_socket(self) -> socket.socket:
        """A TCP socket created inside the namespace (it dials from there)."""
        fd = self.fd
        if fd is None:
            raise ServiceError("network namespace closed")

        def make() -> socket.socket:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise _errno("setns")
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

        return _in_thread(make)

    @property
    def path(self) -> str:
        """A path another process can open to join this namespace (``setns``)."""
        if self.fd is None:
            raise ServiceError("network namespace closed")
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def listen(self, addresses: list[tuple[str, int]]) -> list[socket.socket]:
        """Bind and listen on each (host, port) inside the namespace."""
        fd = self.fd
        if fd is None:
            raise ServiceError("network namespace closed")

        def bind() -> list[socket.socket]:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise _errno("setns")
            sockets = []
            try:
                for host, port in addresses:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sockets.append(sock)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((host, port))
                    sock.listen(128)
            except OSError as exc:
                for sock in sockets:
                    sock.close()
                raise ServiceError(f"network namespace: cannot listen: {exc}") from None
            return sockets

        return _in_thread(bind)

    async def dial(self, host: str, port: int) -> trio.SocketStream:
        """Connect to ``host:port`` as seen from inside the namespace (a server the
        candidate listens on): a proxy's dialer for a link into the candidate."""
        sock = trio.socket.from_stdlib_socket(self.tcp_socket())
        try:
            await sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
