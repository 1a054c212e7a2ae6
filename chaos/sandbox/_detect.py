"""Detecting a candidate that reaches a dependency without its link (``bypassed link``).

The servers say who is connected to them: PostgreSQL's ``pg_stat_activity`` (client address
and port of every backend) and NATS's ``/connz`` (ip and port of every client). Every
connection a proxy opened upstream has a local address the proxy knows. A server-side
client address that no proxy opened is a direct connection; it is the candidate's when one
of the candidate's processes owns that socket (its ``/proc/PID/fd`` holds the socket inode
that ``/proc/PID/net/tcp`` lists with that address). The candidate's own sockets are checked
from its side too: one connected to a dependency's real port is a bypass whatever the
server lists. The sandbox samples this about once a second, in root mode too (where the
network namespace already refuses such connections: defence in depth).
"""

from __future__ import annotations

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


def socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


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


def owned_connections(pids: Iterable[int]) -> dict[Endpoint, Endpoint]:
    """local -> remote of every TCP socket the processes ``pids`` hold."""
    found: dict[Endpoint, Endpoint] = {}
    tables: dict[str, dict[int, tuple[Endpoint, Endpoint]]] = {}
    for pid in pids:
        inodes = socket_inodes(pid)
        if not inodes:
            continue
        try:
            netns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        table = tables.get(netns)
        if table is None:
            table = tables[netns] = tcp_table(pid)
        for inode in inodes:
            if inode in table:
                local, remote = table[inode]
                found[local] = remote
    return found


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
            conn = self._pg[dsn] = psycopg.connect(dsn, connect_timeout=2, autocommit=True)
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
        """One line per bypass found: the candidate's socket, the server, how it was seen."""
        mine = owned_connections(candidate_pids)
        if not mine:
            return []
        found: dict[Endpoint, str] = {}
        for client, dep_name in self.server_clients().items():
            if any(_same(client, p) for p in self.proxied):
                continue
            for local in mine:
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


