"""An external PostgreSQL or NATS that is unreachable, is something else, or refuses the
login is a harness error: exit 3, one line naming the service, its address and what it
answered, within its connect timeout; the trace's end says the same exit code.

Against real listeners: a closed port, a TCP listener that never speaks, one that speaks
another protocol, the machine's Redis (:6379, "not NATS") and PostgreSQL (:5432), real
nats-servers with a password and without JetStream."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.services import external_nats, external_postgres
from chaos.services.nats import (
    EXTERNAL_CONNECT_TIMEOUT_S,
    check_external_nats,
    nats_server_binary,
)
from chaos.services.postgres import check_external_postgres
from ground.errors import ServiceError
from replay.trace import read_trace


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there any more


@contextlib.contextmanager
def _silent_listener() -> Iterator[int]:
    """A TCP port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@contextlib.contextmanager
def _talker(greeting: bytes) -> Iterator[int]:
    """A TCP port whose server greets every connection with ``greeting`` (an SSH server,
    say) and then waits."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    conns: list[socket.socket] = []
    stop = False

    def serve() -> None:
        while not stop:
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(greeting)
            conns.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop = True
        thread.join()
        for conn in conns:
            conn.close()
        server.close()


def _reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


needs_redis = pytest.mark.skipif(not _reachable(6379), reason="no Redis on 127.0.0.1:6379")
needs_postgres = pytest.mark.skipif(not _reachable(5432), reason="no PostgreSQL on 127.0.0.1:5432")


async def _nats_refusal(url: str, timeout_s: float = 1.0) -> str:
    with pytest.raises(ServiceError) as caught:
        await check_external_nats(external_nats(url), timeout_s)
    return str(caught.value)


async def _pg_refusal(dsn: str) -> str:
    with pytest.raises(ServiceError) as caught:
        await check_external_postgres(external_postgres(dsn), 2)
    return str(caught.value)


# -- NATS ------------------------------------------------------------------------------------


async def test_nats_on_a_closed_port_is_refused() -> None:
    port = _closed_port()
    assert await _nats_refusal(f"nats://127.0.0.1:{port}") == (
        f"the external NATS at 127.0.0.1:{port}: connection refused"
    )


async def test_nats_that_never_speaks_is_no_nats() -> None:
    with _silent_listener() as port:
        assert await _nats_refusal(f"nats://127.0.0.1:{port}", 0.5) == (
            f"the external NATS at 127.0.0.1:{port}: no answer within 0.5 s (not a NATS server?)"
        )


async def test_nats_that_speaks_another_protocol_is_named() -> None:
    with _talker(b"SSH-2.0-OpenSSH_9.2\r\n") as port:
        message = await _nats_refusal(f"nats://127.0.0.1:{port}")
    assert message == (
        f"the external NATS at 127.0.0.1:{port}: it answered b'SSH-2.0-OpenSSH_9.2', not a "
        "NATS INFO greeting (not a NATS server)"
    )


@needs_redis
async def test_a_redis_server_is_not_nats() -> None:
    assert await _nats_refusal("nats://127.0.0.1:6379", 0.5) == (
        "the external NATS at 127.0.0.1:6379: no answer within 0.5 s (not a NATS server?)"
    )


@contextlib.contextmanager
def _nats_server(tmp_path: Path, *args: str) -> Iterator[int]:
    """A real nats-server on a free port with ``args``; stopped after the block."""
    port = _closed_port()
    server = subprocess.Popen(
        [str(nats_server_binary()), "-a", "127.0.0.1", "-p", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not _reachable(port):
            assert server.poll() is None, "nats-server exited"
            assert time.monotonic() < deadline, "nats-server did not listen"
            time.sleep(0.05)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
async def test_nats_refusing_the_login_and_without_jetstream(tmp_path: Path) -> None:
    store = tmp_path / "js"
    with _nats_server(
        tmp_path, "--user", "app", "--pass", "s3cret", "-js", "-sd", str(store)
    ) as port:
        message = await _nats_refusal(f"nats://app:wrong@127.0.0.1:{port}", 5)
        assert message == (
            f"the external NATS at 127.0.0.1:{port}: it refused the login: Authorization Violation"
        )
        assert "wrong" not in message  # the password is never printed
        await check_external_nats(external_nats(f"nats://app:s3cret@127.0.0.1:{port}"), 5)
    with _nats_server(tmp_path) as port:  # no -js
        assert await _nats_refusal(f"nats://127.0.0.1:{port}", 5) == (
            f"the external NATS at 127.0.0.1:{port}: it has no JetStream (start nats-server "
            "with -js)"
        )


# -- PostgreSQL ------------------------------------------------------------------------------


async def test_postgres_on_a_closed_port_is_refused() -> None:
    port = _closed_port()
    assert await _pg_refusal(f"postgresql://u:p@127.0.0.1:{port}/db") == (
        f"the external PostgreSQL at 127.0.0.1:{port}: Connection refused"
    )


async def test_postgres_that_never_speaks_times_out_in_its_connect_timeout() -> None:
    with _silent_listener() as port:  # libpq's own timeout ends the wait (ConnectionTimeout)
        message = await _pg_refusal(f"postgresql://u:p@127.0.0.1:{port}/db")
    assert message == (
        f"the external PostgreSQL at 127.0.0.1:{port}: no answer within 2 s (is a PostgreSQL "
        "server listening there?)"
    )


async def test_postgres_that_speaks_another_protocol_is_named() -> None:
    with _talker(b"INFO {}\r\n") as port:  # a NATS server
        message = await _pg_refusal(f"postgresql://u:p@127.0.0.1:{port}/db")
    assert message == (
        f"the external PostgreSQL at 127.0.0.1:{port}: received invalid response to SSL "
        "negotiation: I"
    )


@needs_postgres
async def test_postgres_refusing_the_login_says_what_it_answered() -> None:
    message = await _pg_refusal("postgresql://nobody_here:pw@127.0.0.1:5432/postgres")
    assert message.startswith("the external PostgreSQL at 127.0.0.1:5432: FATAL: ")
    assert "nobody_here" in message
    assert "pw" not in message.split("FATAL")[1].replace("nobody_here", "")


# -- chaos run: exit 3, one line, the trace agrees -------------------------------------------


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "CHAOS_REGISTRY_DIR": str(tmp_path / "registry")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", "payments", "--out", str(tmp_path / "t.trace"),
         *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    return done, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("service", ["postgres-closed", "nats-closed", "nats-silent", "nats-redis"])
def test_chaos_run_with_a_bad_external_service_is_exit_3_in_one_line(
    tmp_path: Path, service: str
) -> None:
    """`--postgres-dsn postgresql://u:p@127.0.0.1:1/db` was a 95-line traceback and exit 1
    (the trace said 3); `--nats-url nats://127.0.0.1:1` a 170-line one after 35 s."""
    if service == "nats-redis" and not _reachable(6379):
        pytest.skip("no Redis on 127.0.0.1:6379")
    with _silent_listener() as silent:
        port = {"postgres-closed": 1, "nats-closed": 1, "nats-silent": silent, "nats-redis": 6379}
        if service.startswith("postgres"):
            args = ["--postgres-dsn", f"postgresql://u:p@127.0.0.1:{port[service]}/db"]
            name = "PostgreSQL"
        else:
            args = ["--nats-url", f"nats://127.0.0.1:{port[service]}"]
            name = "NATS"
        done, took = _run(tmp_path, *args)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"chaos: error: the external {name} at 127.0.0.1:{port[service]}: "
    )
    end = read_trace(tmp_path / "t.trace").end
    assert end is not None
    assert (end["outcome"], end["exit_code"]) == ("error", 3)
    # within the connect timeout (plus the run's start-up), not the 35 s of nats-py's retries
    assert took < EXTERNAL_CONNECT_TIMEOUT_S + 25, took
    assert not list((tmp_path / "registry").glob("*.run")), "the run left its registration"


def test_an_empty_postgres_dsn_is_bad_input(tmp_path: Path) -> None:
    """`--postgres-dsn ''` silently ran on the embedded server."""
    done, _ = _run(tmp_path, "--postgres-dsn", "")
    assert done.returncode == 2
    assert done.stderr == (
        "chaos: error: bad postgres dsn '': empty (give postgresql://USER@HOST/DB)\n"
    )
    assert not (tmp_path / "t.trace").exists()
