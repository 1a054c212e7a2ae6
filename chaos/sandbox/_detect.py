"""Detecting a candidate that reaches a dependency without its link (``bypassed link``).

The servers say who is connected to them: PostgreSQL's ``pg_stat_activity`` (client address
and port of every backend) and NATS's ``/connz`` (ip and port of every client). Every
connection a proxy opened upstream has a local address the proxy knows. A server-side
client address that no proxy opened is a direct connection; it is the candidate's when one
of the candidate's processes owns that socket (one of its ``/proc/PID/fd`` is a socket with
that address: read from a copy of the descriptor, ``pidfd_getfd``, or else found in
``/proc/PID/net/tcp`` by its inode). The servers are asked only when the candidate holds a
socket that is neither a listener nor connected to one of its links. The candidate's own
sockets are checked from its side too: one connected to a dependency's real port is a
bypass whatever the server lists. The sandbox samples this about once a second, in root
mode too (where the network namespace already refuses such connections: defence in depth).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import socket
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio

from chaos.sandbox.candidate import BYPASS
from chaos.services.postgres import harness_dsn

Endpoint = tuple[str, int]


def _hex_endpoint(text: str) -> Endpoint:
    """``0100007F:1F90`` (/proc/net/tcp) -> ("127.0.0.1", 8080); IPv6 likewise."""
    addr, port = text.split(":")
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        host = socket.inet_ntop(socket.AF_INET6, words)
        if host.startswith("::ffff:"):
            host = host[7:]
    return host, int(port, 16)


def tcp_table(pid: int) -> dict[int, tuple[Endpoint, Endpoint]]:
    """inode -> (local, remote) for every TCP socket of the network namespace of ``pid``."""
    table: dict[int, tuple[Endpoint, Endpoint]] = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            try:
                table[int(fields[9])] = (_hex_endpoint(fields[1]), _hex_endpoint(fields[2]))
            except ValueError:
                continue
    return table


_PIDFD_GETFD = 438  # the same number on every architecture (Linux 5.6)
_SIOCGSKNS = 0x894C  # a socket's network namespace, as a new descriptor (Linux 4.9)
_libc = ctypes.CDLL(None, use_errno=True)


def _endpoint(address: Any) -> Endpoint:
    host = str(address[0])
    return (host[7:] if host.startswith("::ffff:") else host), int(address[1])


def _socket_netns(sock: socket.socket) -> int | None:
    """The inode of the network namespace ``sock`` belongs to (None if unknown)."""
    try:
        ns = fcntl.ioctl(sock.fileno(), _SIOCGSKNS)
    except OSError:
        return None
    try:
        return os.fstat(ns).st_ino
    finally:
        os.close(ns)


def _netns(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _socket_ends(
    pid: int, fds: Iterable[int]
) -> dict[Endpoint, tuple[Endpoint, int | None]] | None:
    """local -> (remote, network namespace) of the TCP sockets among ``pid``'s ``fds``, read
    from the sockets themselves (a copy of each descriptor, ``pidfd_getfd``, closed at once);
    None when the kernel refuses (then ``/proc/PID/net/tcp`` is read instead). A listener, or
    a socket not connected, has the remote ``("0.0.0.0", 0)``, as in ``/proc/net/tcp``."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return {}
    except (OSError, AttributeError):
        return None
    found: dict[Endpoint, tuple[Endpoint, int | None]] = {}
    try:
        for fd in fds:
            copy = _libc.syscall(_PIDFD_GETFD, pidfd, fd, 0)
            if copy < 0:
                if ctypes.get_errno() == errno.EBADF:
                    continue  # closed meanwhile
                return None
            with socket.socket(fileno=copy) as sock:
                if sock.type != socket.SOCK_STREAM or sock.family not in (
                    socket.AF_INET,
                    socket.AF_INET6,
                ):
                    continue
                try:
                    local = _endpoint(sock.getsockname())
                except OSError:
                    continue
                try:
                    remote = _endpoint(sock.getpeername())
                except OSError:
                    remote = ("0.0.0.0", 0)
                found[local] = (remote, _socket_netns(sock))
    finally:
        os.close(pidfd)
    return found


def socket_fds(pid: int) -> dict[int, int]:
    """fd -> socket inode of every socket ``pid`` holds."""
    fds: dict[int, int] = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return fds
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            fds[int(name)] = int(target[8:-1])
    return fds


def _owned(pids: Iterable[int]) -> dict[Endpoint, tuple[Endpoint, int | None]]:
    """local -> (remote, network namespace inode or None) of every TCP socket ``pids``
    hold: from the sockets themselves when the kernel lets this process copy their
    descriptors (root: a few system calls a socket), else from ``/proc/PID/net/tcp`` (which
    walks the kernel's whole connection table: about 10 ms a read on a machine with much
    memory)."""
    found: dict[Endpoint, tuple[Endpoint, int | None]] = {}
    tables: dict[int | None, dict[int, tuple[Endpoint, Endpoint]]] = {}
    for pid in pids:
        fds = socket_fds(pid)
        if not fds:
            continue
        ends = _socket_ends(pid, fds)
        if ends is not None:
            found.update(ends)
            continue
        netns = _netns(pid)
        if netns is None:
            continue
        table = tables.get(netns)
        if table is None:
            table = tables[netns] = tcp_table(pid)
        for inode in fds.values():
            if inode in table:
                local, remote = table[inode]
                found[local] = (remote, netns)
    return found


def owned_connections(pids: Iterable[int]) -> dict[Endpoint, Endpoint]:
    """local -> remote of every TCP socket the processes ``pids`` hold."""
    return {local: remote for local, (remote, _) in _owned(pids).items()}


def _same(a: Endpoint, b: Endpoint) -> bool:
    return a[1] == b[1] and (a[0] == b[0] or {a[0], b[0]} == {"127.0.0.1", "localhost"})


@dataclass
class Dependency:
    """A real server the candidate must reach only through links."""

    name: str
    address: Endpoint
    #: How to ask it for its clients: a PostgreSQL DSN, or a NATS monitor URL.
    postgres_dsn: str | None = None
    nats_monitor: str | None = None


@dataclass
class BypassDetector:
    """Compares the servers' client lists with the proxies' upstream connections."""

    dependencies: list[Dependency]
    #: Local addresses of every upstream connection a proxy opened (filled by hooks).
    proxied: set[Endpoint] = field(default_factory=set)
    #: The listen addresses of the candidate's own links (its proxies).
    links: set[Endpoint] = field(default_factory=set)
    _pg: dict[str, Any] = field(default_factory=dict)

    def server_clients(self) -> dict[Endpoint, str]:
        """Client address -> dependency name, as each server lists them (sync: a thread)."""
        clients: dict[Endpoint, str] = {}
        for dep in self.dependencies:
            try:
                if dep.postgres_dsn is not None:
                    for ep in self._postgres_clients(dep.postgres_dsn):
                        clients[ep] = dep.name
                elif dep.nats_monitor is not None:
                    for ep in _nats_clients(dep.nats_monitor):
                        clients[ep] = dep.name
            except (OSError, ValueError, psycopg.Error):
                continue  # a partitioned or restarting server: ask again next time
        return clients

    def _postgres_clients(self, dsn: str) -> list[Endpoint]:
        conn = self._pg.get(dsn)
        if conn is None or conn.closed:
            # the system view only, whatever the candidate left on the search path
            conn = self._pg[dsn] = psycopg.connect(
                harness_dsn(dsn), connect_timeout=2, autocommit=True
            )
        rows = conn.execute(
            "SELECT host(client_addr), client_port FROM pg_stat_activity"
            " WHERE client_port IS NOT NULL AND client_port > 0 AND pid <> pg_backend_pid()"
        ).fetchall()
        return [(str(h), int(p)) for h, p in rows if h is not None]

    def close(self) -> None:
        for conn in self._pg.values():
            try:
                conn.close()
            except psycopg.Error:
                pass
        self._pg.clear()

    def find(self, candidate_pids: Iterable[int]) -> list[str]:
        """One line per bypass found: the candidate's socket, the server, how it was seen.
        Only its sockets in the servers' network namespace (the harness's) can be clients a
        server lists: one in the candidate's own namespace (root isolation) may have the
        same address as a client of the harness's side by chance, and is none of them."""
        owned = _owned(candidate_pids)
        if not owned:
            return []
        mine = {local: remote for local, (remote, _) in owned.items()}
        here = _netns("self")
        beside = {local: remote for local, (remote, ns) in owned.items()
                  if ns is None or here is None or ns == here}  # fmt: skip
        found: dict[Endpoint, str] = {}
        servers = self.server_clients() if self._unexplained(beside) else {}
        for client, dep_name in servers.items():
            if any(_same(client, p) for p in self.proxied):
                continue
            for local in beside:
                if _same(client, local):
                    found[local] = f"{dep_name} lists a client at {client[0]}:{client[1]}"
        for local, remote in mine.items():
            for dep in self.dependencies:
                if _same(remote, dep.address) and local not in found:
                    found[local] = f"its socket is connected to {dep.name}'s own address"
        return [
            f"connected to {_dep_of(mine[local], self.dependencies)} directly from "
            f"{local[0]}:{local[1]}, not through its link ({how})"
            for local, how in sorted(found.items())
        ]

    def _unexplained(self, mine: dict[Endpoint, Endpoint]) -> bool:
        """Whether any of the candidate's sockets could be a client the servers list that no
        proxy opened: any but a listener and a connection to one of its links (a socket has
        one peer: if that is a proxy, no server sees that socket). Only then are the
        servers asked (a query to each, every second, per candidate instance)."""
        return any(
            remote[1] != 0 and not any(_same(remote, link) for link in self.links)
            for remote in mine.values()
        )


def endpoint(address: str) -> Endpoint:
    """``host:port`` (a link's listen address) as an endpoint."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _dep_of(remote: Endpoint, deps: list[Dependency]) -> str:
    for dep in deps:
        if _same(remote, dep.address):
            return f"{dep.name} at {remote[0]}:{remote[1]}"
    return f"{remote[0]}:{remote[1]}"


def _nats_clients(monitor: str) -> list[Endpoint]:
    with urllib.request.urlopen(f"{monitor}/connz?limit=4096", timeout=2) as response:
        data = json.loads(response.read())
    return [(str(c["ip"]), int(c["port"])) for c in data.get("connections", []) if "ip" in c]


async def watch_tripwire(
    sock: trio.socket.SocketType, what: str, contain: Callable[[str, str], None]
) -> None:
    """Accept on a tripwire listening where a dependency's real port would be, inside the
    candidate's network namespace: any connection is a bypass (``contain``), closed at once."""
    async with trio.SocketListener(sock) as listener:
        while True:
            try:
                stream = await listener.accept()
            except (trio.ClosedResourceError, OSError):
                return
            stream.socket.close()
            contain(
                BYPASS, f"dialled {what} from inside its network namespace, not through its link"
            )
