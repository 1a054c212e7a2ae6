"""Embedded PostgreSQL per run (a copy of a cached template cluster), or an external one."""

from __future__ import annotations

import ctypes
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict

from chaos.errors import ConfigError
from chaos.services._pg_template import PG_SUPERUSER, chown_tree, prepare_postgres
from chaos.services.ports import free_port, tcp_accepting
from chaos.services.process import LogSink, ManagedProcess, open_process_service

HOST = "127.0.0.1"
_IPC_RMID = 0
# fsync/full_page_writes off only risk data on an OS crash; synchronous_commit stays on so a
# killed server (a fault the harness injects) never loses a commit it acknowledged.
DEFAULT_SETTINGS: Mapping[str, str] = {
    "listen_addresses": HOST,
    "unix_socket_directories": "",
    "fsync": "off",
    "synchronous_commit": "on",
    "full_page_writes": "off",
    "logging_collector": "off",
    # DSM segments as files in the data dir: a killed server cannot leak them into /dev/shm
    "dynamic_shared_memory_type": "mmap",
}


def _select_one(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


@dataclass
class PostgresService:
    """A PostgreSQL server a run talks to; `process` is None for an external server."""

    dsn: str
    host: str
    port: int
    user: str
    database: str
    process: ManagedProcess | None = None
    data_dir: Path | None = None

    async def ping(self) -> bool:
        """Whether the server accepts a connection and answers SELECT 1."""
        if not await tcp_accepting(self.host, self.port):
            return False
        return await trio.to_thread.run_sync(_select_one, self.dsn)


def external_postgres(dsn: str) -> PostgresService:
    """Describe a user's already-running PostgreSQL (nothing is started or stopped)."""
    try:
        params = conninfo_to_dict(dsn)
        port = int(params.get("port") or 5432)
        if not 0 < port < 65536:
            raise ValueError(f"port {port} out of range")
    except (psycopg.ProgrammingError, ValueError) as exc:
        raise ConfigError(f"bad postgres dsn {dsn!r}: {exc}") from exc
    host = str(params.get("host") or "localhost")
    user = str(params.get("user") or PG_SUPERUSER)
    return PostgresService(dsn, host, port, user, str(params.get("dbname") or user))


def _copy_cluster(template: Path, data: Path, run_as: tuple[int, int] | None) -> None:
    if run_as is not None:  # the server's OS user must reach the data dir
        for parent in (data.parent.parent, data.parent):
            parent.chmod(parent.stat().st_mode | 0o011)
    shutil.copytree(template, data, symlinks=True)
    data.chmod(0o700)
    if run_as is not None:
        chown_tree(data, *run_as)


def _release_shared_memory(data: Path) -> None:
    """Remove the SysV segment a killed server leaves (postmaster.pid line 7: key, shmid)."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
        shmid = int(lines[6].split()[1])
    except (OSError, IndexError, ValueError):
        return  # clean shutdown (no pid file) or nothing recorded
    ctypes.CDLL(None, use_errno=True).shmctl(shmid, _IPC_RMID, None)


@asynccontextmanager
async def open_postgres(
    tmp_root: Path,
    *,
    name: str = "postgres",
    log_sink: LogSink | None = None,
    settings: Mapping[str, str] | None = None,
    ready_timeout: float = 30.0,
    stop_grace: float = 10.0,
) -> AsyncIterator[PostgresService]:
    """Start a throwaway PostgreSQL on a free 127.0.0.1 port in `tmp_root`; remove it on exit."""
    runtime = await prepare_postgres()
    root = Path(tempfile.mkdtemp(prefix="postgres-", dir=tmp_root))
    try:
        data = root / "data"
        await trio.to_thread.run_sync(_copy_cluster, runtime.template, data, runtime.run_as)
        port = free_port(HOST)
        merged = {**DEFAULT_SETTINGS, **(settings or {}), "port": str(port)}
        argv = [str(runtime.bin_dir / "postgres"), "-D", str(data)]
        for key, value in merged.items():
            argv += ["-c", f"{key}={value}"]
        dsn = f"postgresql://{PG_SUPERUSER}@{HOST}:{port}/{PG_SUPERUSER}"
        service = PostgresService(dsn, HOST, port, PG_SUPERUSER, PG_SUPERUSER, data_dir=data)
        async with open_process_service(
            name,
            argv,
            log_sink=log_sink,
            ready=service.ping,
            ready_timeout=ready_timeout,
            stop_signal=signal.SIGINT,
            stop_grace=stop_grace,
            run_as=runtime.run_as,
        ) as process:
            service.process = process
            yield service
    finally:
        _release_shared_memory(root / "data")
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(lambda: shutil.rmtree(root, ignore_errors=True))
