"""The bypass detector's comparison, on real sockets of this process (no services)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    connection: tuple[Endpoint, Endpoint],
) -> None:
    local, remote = connection
    assert owned_connections([os.getpid()])[local] == remote


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
