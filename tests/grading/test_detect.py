"""The bypass detector's comparison, on real sockets of this process (no services)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.sandbox import _detect
from chaos.sandbox._detect import BypassDetector, Dependency, Endpoint, owned_connections


class Listed(BypassDetector):
    """A detector whose servers list the clients it is given (the servers' side)."""

    listed: dict[Endpoint, str]

    def server_clients(self) -> dict[Endpoint, str]:
        return self.listed


@pytest.fixture
def connection() -> Iterator[tuple[Endpoint, Endpoint]]:
    """A real TCP connection held by this process: (client's local end, server address)."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        yield client.getsockname(), server.getsockname()
    finally:
        for s in (client, accepted, server):
            s.close()


def test_owned_connections_reads_this_process_sockets(
    connection: tuple[Endpoint, Endpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    local, remote = connection
    found = owned_connections([os.getpid()])
    assert found[local] == remote
    assert found[remote] == local  # the accepted end
    # where the kernel refuses to copy a descriptor: the same, from /proc/PID/net/tcp
    monkeypatch.setattr(_detect, "_socket_ends", lambda pid, fds: None)
    assert owned_connections([os.getpid()]) == found


def test_a_client_the_server_lists_but_no_proxy_opened_is_a_bypass(
    connection: tuple[Endpoint, Endpoint],
) -> None:
    local, _ = connection
    elsewhere = Dependency("postgres", ("127.0.0.1", 1))  # not what the socket dials
    detector = Listed([elsewhere])
    detector.listed = {local: "postgres"}
    (line,) = detector.find([os.getpid()])
    assert f"lists a client at {local[0]}:{local[1]}" in line
    detector.proxied.add(local)  # a proxy's upstream connection: fine
    assert detector.find([os.getpid()]) == []
    assert detector.find([]) == []  # not the candidate's socket: not its bypass


def test_a_socket_connected_to_a_dependency_is_a_bypass_whatever_the_server_says(
    connection: tuple[Endpoint, Endpoint],
) -> None:
    _, remote = connection
    detector = Listed([Dependency("nats", remote)])
    detector.listed = {}
    (line,) = detector.find([os.getpid()])
    assert f"connected to nats at {remote[0]}:{remote[1]} directly" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_what_a_candidate_uid_left_in_shared_folders_is_removed(tmp_path: Path) -> None:
    from chaos.sandbox._uids import UID_BASE, remove_owned

    theirs, other, mine = tmp_path / "faketime_shm_123", tmp_path / "theirs-too", tmp_path / "x"
    theirs.write_text("x")
    other.mkdir()
    (other / "inner").write_text("x")
    mine.write_text("x")
    for path in (theirs, other, other / "inner"):
        os.chown(path, UID_BASE + 7, UID_BASE + 7)
    os.chown(mine, UID_BASE + 8, UID_BASE + 8)
    remove_owned(UID_BASE + 7, [tmp_path])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


def test_the_servers_are_asked_only_for_a_socket_not_connected_to_a_link() -> None:
    """A socket whose one peer is a link (a proxy) is no server's client: a candidate holding
    only such sockets (and listeners) costs no server a query; any other socket, it does."""
    server = socket.create_server(("127.0.0.1", 0))
    link = server.getsockname()
    child = subprocess.Popen(  # the candidate: one connection, to the "link"
        [sys.executable, "-c", f"import socket,sys; s=socket.create_connection({link!r}); "
         "print(s.getsockname()[1], flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        local = ("127.0.0.1", int(child.stdout.readline()))
        asked: list[int] = []

        class Counting(Listed):
            def server_clients(self) -> dict[Endpoint, str]:
                asked.append(1)
                return self.listed

        detector = Counting([Dependency("postgres", ("127.0.0.1", 1))])
        detector.listed = {local: "postgres"}
        assert len(detector.find([child.pid])) == 1
        assert len(asked) == 1  # not a link: asked
        detector.links = {link}
        assert detector.find([child.pid]) == []
        assert len(asked) == 1  # its link: not asked
    finally:
        child.kill()
        child.communicate()
        server.close()


_IN_OWN_NETNS = """
import ctypes, socket, sys
from chaos.services._netns import _loopback_up
assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0
_loopback_up()
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname())
print(client.getsockname()[1], flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root")
def test_a_socket_in_another_network_namespace_is_no_client_of_the_servers() -> None:
    """At root isolation the candidate's sockets are in its own network namespace, whose
    ports are its own: a server's client at the same address (a client of the harness's
    side, by chance) is not the candidate's socket."""
    child = subprocess.Popen(
        [sys.executable, "-c", _IN_OWN_NETNS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        local = ("127.0.0.1", int(child.stdout.readline()))
        assert local in owned_connections([child.pid])  # its socket, seen
        detector = Listed([Dependency("postgres", ("127.0.0.1", 1))])
        detector.listed = {local: "postgres"}  # the same address, in the harness's namespace
        assert detector.find([child.pid]) == []
    finally:
        child.kill()
        child.communicate()
