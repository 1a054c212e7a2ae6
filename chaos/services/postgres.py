"""Embedded PostgreSQL per run (a copy of a cached template cluster), or an external one."""

from __future__ import annotations

import ctypes
import secrets
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psycopg
import trio
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from chaos.services._pg_template import PG_SUPERUSER, chown_tree, prepare_postgres
from chaos.services.ports import free_port, tcp_accepting
from chaos.services.process import LogSink, ManagedProcess, open_process_service
from ground.errors import ConfigError, ServiceError

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
    # Slots only the superuser and the harness's reader (pg_use_reserved_connections) may
    # take: a program that opens every connection it can does not lock the harness out.
    "reserved_connections": "5",
    # No prepared transactions: one would hold its locks after its program is gone.
    "max_prepared_transactions": "0",
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
    if not dsn.strip():  # libpq would read it as "all defaults": never what was meant
        raise ConfigError(f"bad postgres dsn {dsn!r}: empty (give postgresql://USER@HOST/DB)")
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


#: Seconds a run waits for an external server to answer before it is a harness error.
EXTERNAL_CONNECT_TIMEOUT_S = 5


def _login(dsn: str, timeout_s: int) -> None:
    with psycopg.connect(dsn, connect_timeout=timeout_s, autocommit=True) as conn:
        conn.execute("SELECT 1")


def _what_it_answered(exc: psycopg.Error, timeout_s: int) -> str:
    """The server's own words from psycopg's message (``FATAL: role "u" does not exist``,
    ``Connection refused``), without the address psycopg repeats."""
    if isinstance(exc, psycopg.errors.ConnectionTimeout):
        return f"no answer within {timeout_s} s (is a PostgreSQL server listening there?)"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return " ".join(first.rpartition(" failed: ")[2].split())


async def check_external_postgres(
    service: PostgresService, timeout_s: int = EXTERNAL_CONNECT_TIMEOUT_S
) -> None:
    """Log in to an external PostgreSQL and run SELECT 1 within ``timeout_s`` (libpq waits
    at least 2 s): ServiceError (exit 3) naming the server, its address and what it
    answered (refused, a wrong role or password, not PostgreSQL, silence)."""
    where = f"the external PostgreSQL at {service.host}:{service.port}"
    with trio.move_on_after(timeout_s + 2):  # libpq's own timeout first; then stop waiting
        try:
            await trio.to_thread.run_sync(_login, service.dsn, timeout_s, abandon_on_cancel=True)
        except psycopg.Error as exc:
            raise ServiceError(f"{where}: {_what_it_answered(exc, timeout_s)}") from None
        return
    raise ServiceError(f"{where}: no answer within {timeout_s} s")


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
            # its own folder: the server user may not reach the caller's working directory
            # (a root-only tmp dir), and postgres refuses to start there
            cwd=data if runtime.run_as is not None else None,
        ) as process:
            service.process = process
            yield service
    finally:
        _release_shared_memory(root / "data")
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(lambda: shutil.rmtree(root, ignore_errors=True))


# -- who may connect as whom ---------------------------------------------------------------

#: The session settings of the harness's connections to a server where programs under test
#: have objects (``harness_dsn``; the reader's too, ``chaos.services.reader``): only
#: the system catalogs on the search path (pg_temp last, as the docs advise), and the server
#: refuses to expand a view or reach a foreign table that is not a system one.
GUARD = {
    "search_path": "pg_catalog,pg_temp",
    "restrict_nonsystem_relation_kind": "view,foreign-table",
}


def session_options(settings: Mapping[str, str]) -> str:
    """``-c NAME=VALUE ...``: what libpq's ``options`` sets for a session."""
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


def harness_dsn(dsn: str) -> str:
    """``dsn`` with the guard's session settings added to its ``options``: for the harness's
    own (superuser) connections to a server where a program under test has objects."""
    params = conninfo_to_dict(dsn)
    extra = session_options(GUARD)
    params["options"] = f"{params.get('options') or ''} {extra}".strip()
    return make_conninfo("", **params)


#: The embedded cluster's pg_hba.conf once a run requires passwords: every connection is
#: TCP (no unix socket) and proves its role with a password.
PASSWORD_HBA = """\
# written by chaos-harness: every connection proves who it is
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""
_CONNECT_TIMEOUT_S = 30  # the harness's own connections: a loaded machine is slow, not broken
#: How many connections a program's role may hold at once (``create_role``).
CONNECTION_LIMIT = 20


@dataclass(frozen=True)
class PostgresRole:
    """A login role with its password (``create_role``): what a program is given instead of
    the superuser."""

    name: str
    password: str = field(repr=False)

    def dsn(self, address: str, database: str, *, schema: str | None = None) -> str:
        """A URL that logs in as this role at ``address`` (``host:port``, a link's)."""
        url = f"postgresql://{quote(self.name)}:{quote(self.password)}@{address}/{quote(database)}"
        if schema is not None and schema != "public":
            url += f"?options=-csearch_path%3D{quote(schema)}"
        return url


def require_passwords(service: PostgresService) -> None:
    """Make an embedded cluster authenticate every connection by password (it is created
    trusting every local connection): the superuser gets a fresh random password, the
    cluster's pg_hba.conf requires ``scram-sha-256`` and is reloaded, and ``service.dsn``
    carries the password from then on (so only the harness, which holds the service, can
    log in as the superuser). A no-op for an external server."""
    if service.process is None or service.data_dir is None:
        return
    password = secrets.token_hex(16)
    with psycopg.connect(service.dsn, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(service.user), sql.Literal(password)
            )
        )
        row = conn.execute("SHOW hba_file").fetchone()
        if row is None:
            raise ServiceError("postgres: no hba_file")
        Path(row[0]).write_text(PASSWORD_HBA)
        ok = conn.execute("SELECT pg_reload_conf()").fetchone()
        if not ok or not ok[0]:
            raise ServiceError("postgres: could not reload its configuration")
    service.dsn = (
        f"postgresql://{quote(service.user)}:{password}@{service.host}:{service.port}/"
        f"{quote(service.database)}"
    )


def create_role(
    service: PostgresService,
    name: str,
    *,
    schema: str = "public",
    database: str | None = None,
    create: bool = True,
    connection_limit: int = CONNECTION_LIMIT,
) -> PostgresRole:
    """As the harness: a login role ``name`` with a fresh password and no special power
    (``NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOREPLICATION``), at most
    ``connection_limit`` connections at once, allowed to connect to ``database`` (default
    the service's) and to use ``schema`` (and, with ``create``, to create objects in it: it
    then owns what it creates). Give it more with ordinary GRANTs. ``drop_role`` removes it
    (external servers)."""
    password = secrets.token_hex(16)
    role = sql.Identifier(name)
    db = sql.Identifier(database or service.database)
    with psycopg.connect(service.dsn, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(
            sql.SQL(
                "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS "
                "NOREPLICATION NOINHERIT CONNECTION LIMIT {} PASSWORD {}"
            ).format(role, sql.Literal(int(connection_limit)), sql.Literal(password))
        )
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, role))
        privileges = sql.SQL("USAGE, CREATE" if create else "USAGE")
        conn.execute(
            sql.SQL("GRANT {} ON SCHEMA {} TO {}").format(privileges, sql.Identifier(schema), role)
        )
    return PostgresRole(name, password)


def drop_role(service: PostgresService, name: str, *, database: str | None = None) -> None:
    """Remove a role ``create_role`` (or ``create_reader``) made, with whatever it still owns
    and was granted in ``database`` (default the service's)."""
    role = sql.Identifier(name)
    dsn = service.dsn if database is None else make_conninfo(service.dsn, dbname=database)
    with psycopg.connect(
        harness_dsn(dsn), autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
        if exists:
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(role))
            conn.execute(sql.SQL("DROP ROLE {}").format(role))
