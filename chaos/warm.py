"""Warm services: one PostgreSQL cluster and one nats-server kept between the runs of a worker.

::

    chaos.warm_pool      WarmPool ──► WarmWorker (python -m chaos.warm_worker, one per job)
    chaos.warm_worker        run, run, run ... each with the worker's
    chaos.warm (here)        WarmServices: one registered run dir "chaos-warm-*": postgres + nats
                 per run: CREATE DATABASE run_N TEMPLATE chaos_template   (fresh tables)
                          the run's own services, proxies, run dir, trace (as a cold run)
                          then: DROP DATABASE WITH (FORCE) run_N and any other the run
                          made, DROP ROLE each role it made, delete every stream,
                          and wait until nothing of the run is left (``check_clean``)

A cold run (``chaos run``) pays for an interpreter, the harness's imports, a copy of the
template cluster and a PostgreSQL and nats-server start and stop, every time; a warm worker
pays for them once. Each run still gets a database that no other run has touched and a
JetStream with no stream, consumer, message or connection of an earlier run: ``check_clean``
checks it before every run and the worker refuses to go on (``ServiceError``) otherwise.

Only scenarios that ask for it (``Scenario.warm_services = True``) get the warm services:
a fresh database isolates tables, and every other database and role a run made is dropped
(the roles with what they own), but nothing else of the cluster is reset (tablespaces,
settings), and the warm servers are nobody's fault target. Others still run in the worker
(no interpreter start), with services of their own.

This module is the kept services alone, below the run (``RunOptions.warm`` takes them); the
worker process that runs scenarios on them is ``chaos.warm_worker`` and the pool of workers a
batch dispatches to is ``chaos.warm_pool``. ``CHAOS_WARM=0`` makes ``chaos sweep`` start one
cold ``chaos run`` per seed instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos.services import (
    NatsService,
    PostgresService,
    harness_dsn,
    open_nats,
    open_postgres,
    require_passwords,
)
from ground._moved import moved
from ground.errors import ServiceError

if TYPE_CHECKING:
    from chaos.context import RunContext
    from chaos.recorder import Recorder

TEMPLATE_DB = "chaos_template"
_KEEP_DBS = {"postgres", "template0", "template1", TEMPLATE_DB}
#: How long the servers may take to forget a finished run (closing connections) before the
#: worker gives up on them.
CLEAN_TIMEOUT_S = 10.0
_CLEAN_POLL_S = 0.02


def default_jobs() -> int:
    """The default ``--jobs`` of a sweep: 4 per CPU (at most 64). A payments run spends most
    of its wall time waiting (workload pacing, redelivery timers, settling) at about 0.8
    CPU-seconds, so on 2 cores throughput still grows at 8 jobs (docs/sweep.md)."""
    return max(1, min(64, 4 * (os.cpu_count() or 1)))


def enabled() -> bool:
    """Whether sweeps use warm workers: yes unless ``CHAOS_WARM`` is ``0``/``no``/``off``."""
    return os.environ.get("CHAOS_WARM", "1").strip().lower() not in {"0", "no", "off", "false"}


# -- the warm services ------------------------------------------------------------------------


def psycopg_error() -> type[Exception]:
    import psycopg

    return psycopg.Error


def _sql(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(harness_dsn(dsn), connect_timeout=3, autocommit=True) as conn:
        cur = conn.execute(sql.encode())
        return list(cur.fetchall()) if cur.description else []


#: The roles a run made: every role but the superusers and PostgreSQL's own.
_RUN_ROLES = "SELECT rolname FROM pg_roles WHERE NOT rolsuper AND rolname NOT LIKE 'pg\\_%'"


#: The kept databases no program may connect to (``CONNECT`` and ``TEMPORARY`` revoked from
#: PUBLIC): what a role made in them (a large object, say) would outlive its run's database,
#: keep ``DROP ROLE`` from working and the next run on the worker from starting clean.
KEPT_CLOSED = ("postgres", "template1")
_CLOSE_KEPT = f"REVOKE CONNECT, TEMPORARY ON DATABASE {', '.join(KEPT_CLOSED)} FROM PUBLIC"
_CONNECTABLE = "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname"


def _drop_roles(dsn: str) -> None:
    """Drop every role a run made, with what it owns in every database that takes
    connections (``DROP OWNED`` reaches only the database it runs in), after ending its
    sessions (a query left running outlives its program's connection)."""
    from psycopg import sql

    roles = [str(role) for (role,) in _sql(dsn, _RUN_ROLES)]
    if not roles:
        return
    names = sql.SQL(", ").join(sql.Identifier(r) for r in roles)
    with psycopg_connect(dsn) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE usename = ANY(%s) AND pid <> pg_backend_pid()",
            (roles,),
        )
    for (database,) in _sql(dsn, _CONNECTABLE):
        with psycopg_connect(_with_database(dsn, str(database))) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(names))
    with psycopg_connect(dsn) as conn:
        for role in roles:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _drop_databases(dsn: str) -> None:
    """Drop every database but the kept ones (``WITH (FORCE)``: their sessions end)."""
    from psycopg import sql

    with psycopg_connect(dsn) as conn:
        for (database,) in conn.execute("SELECT datname FROM pg_database").fetchall():
            if str(database) not in _KEEP_DBS:
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                conn.execute(drop.format(sql.Identifier(str(database))))


def psycopg_connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(harness_dsn(dsn), connect_timeout=3, autocommit=True)


def _with_database(dsn: str, database: str) -> str:
    """``dsn`` (a URL, with the superuser's password) pointing at ``database``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _get_json(url: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=3) as response:
        return json.loads(response.read())


def _delete_streams(url: str) -> None:
    import asyncio

    import nats

    async def delete() -> None:
        nc = await nats.connect(url, connect_timeout=3, max_reconnect_attempts=1)
        try:
            js = nc.jetstream()
            for info in await js.streams_info():
                await js.delete_stream(str(info.config.name))
        finally:
            await nc.close()

    asyncio.run(delete())


@dataclass
class Leftovers:
    """What an earlier run left on the warm servers (empty: clean)."""

    databases: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    pg_connections: int = 0
    streams: int = 0
    consumers: int = 0
    messages: int = 0
    nats_connections: int = 0
    nats_users: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(vars(self).values())

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in vars(self).items() if v)


class WarmServices:
    """A PostgreSQL cluster and a nats-server shared by the runs of one worker, one at a time.

    ``postgres(ctx)`` gives a run a fresh database made from ``chaos_template`` (dropped when
    the run ends), ``nats(ctx)`` the server (every stream deleted when the run ends). Their
    log lines go to the current run's trace, as a cold run's servers' do."""

    def __init__(self, pg: PostgresService, nats: NatsService) -> None:
        self.pg = pg
        self.nats = nats
        self.runs = 0
        self.recorder: Recorder | None = None
        self._busy = False

    def log_sink(self, service: str, stream: str, line: str) -> None:
        if self.recorder is not None:
            self.recorder.log_line(service, stream, line)

    async def postgres(self, ctx: RunContext) -> PostgresService:
        self.runs += 1
        name = f"run_{self.runs}"
        await trio.to_thread.run_sync(
            _sql,
            self.pg.dsn,
            f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB} STRATEGY FILE_COPY",
        )

        async def drop() -> None:
            # Bounded even if the server hangs: the thread is left behind after 10 s.
            with trio.CancelScope(shield=True), trio.move_on_after(CLEAN_TIMEOUT_S):
                # Its database, and any other the run created (a database per tenant).
                await trio.to_thread.run_sync(_drop_databases, self.pg.dsn, abandon_on_cancel=True)
                # Roles are cluster-wide: those the run made (its programs' roles) go too.
                await trio.to_thread.run_sync(_drop_roles, self.pg.dsn, abandon_on_cancel=True)

        ctx.stack.push_async_callback(drop)
        pg = self.pg
        return PostgresService(_with_database(pg.dsn, name), pg.host, pg.port, pg.user, name)

    async def nats_for(self, ctx: RunContext) -> NatsService:
        n = self.nats
        # The run's copy: its users (``add_users``) go on the shared server and are removed
        # with its streams when the run ends.
        mine = NatsService(n.url, n.host, n.port, n.monitor_port, n.process, auth=n.auth)

        async def wipe() -> None:
            with trio.CancelScope(shield=True), trio.move_on_after(CLEAN_TIMEOUT_S):
                await mine.remove_users(mine.added)
                await trio.to_thread.run_sync(
                    _delete_streams, self.nats.url, abandon_on_cancel=True
                )

        ctx.stack.push_async_callback(wipe)
        return mine

    async def leftovers(self) -> Leftovers:
        """What is on the servers besides the empty template: databases, client connections
        (other than this query's), streams, consumers, messages, NATS connections and users."""
        rows = await trio.to_thread.run_sync(
            _sql,
            self.pg.dsn,
            "SELECT (SELECT array_agg(datname::text ORDER BY datname) FROM pg_database),"
            " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            "  AND pid <> pg_backend_pid())",
        )
        found = Leftovers()
        databases, connections = rows[0]
        found.databases = [d for d in databases or [] if d not in _KEEP_DBS]
        roles = await trio.to_thread.run_sync(_sql, self.pg.dsn, _RUN_ROLES)
        found.roles = sorted(str(r) for (r,) in roles)
        found.pg_connections = int(connections)
        base = f"http://{self.nats.host}:{self.nats.monitor_port}"
        jsz = await trio.to_thread.run_sync(_get_json, f"{base}/jsz")
        connz = await trio.to_thread.run_sync(_get_json, f"{base}/connz")
        found.streams = int(jsz.get("streams", 0))
        found.consumers = int(jsz.get("consumers", 0))
        found.messages = int(jsz.get("messages", 0))
        found.nats_connections = int(connz.get("num_connections", 0))
        found.nats_users = sorted(self.nats.auth.users) if self.nats.auth else []
        return found

    async def check_clean(self, timeout_s: float = CLEAN_TIMEOUT_S) -> None:
        """Wait until no database, connection, stream, consumer or message of an earlier run
        is left; ``ServiceError`` naming what is left if that takes over ``timeout_s``."""
        found: Leftovers | str = Leftovers()
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    found = await self.leftovers()
                except (OSError, ValueError, psycopg_error()) as exc:  # a busy or dying server
                    found = f"{type(exc).__name__}: {exc}"
                if not found:
                    return
                await trio.sleep(_CLEAN_POLL_S)
        what = found if isinstance(found, str) else f"an earlier run's {found.describe()}"
        raise ServiceError(f"the warm services are not clean: {what}")

    @asynccontextmanager
    async def lease(self, recorder: Recorder) -> AsyncIterator[WarmServices]:
        """The services for one run (``RunOptions.warm``): clean before, its logs meanwhile."""
        if self._busy:
            raise ServiceError("the warm services serve one run at a time")
        self._busy = True
        try:
            self.recorder = recorder
            yield self
        finally:
            self.recorder = None
            self._busy = False


@asynccontextmanager
async def open_warm_services(run_dir: Path) -> AsyncIterator[WarmServices]:
    """Start the warm PostgreSQL and nats-server in ``run_dir`` (a registered run dir) and make
    the template database; everything stops and goes when the block ends."""
    holder: list[WarmServices] = []

    def sink(service: str, stream: str, line: str) -> None:
        if holder:
            holder[0].log_sink(service, stream, line)

    async with (
        open_postgres(run_dir, log_sink=sink) as pg,
        open_nats(run_dir, log_sink=sink) as nats,
    ):
        # As a cold run's: only the harness logs in as the superuser (programs get roles).
        await trio.to_thread.run_sync(require_passwords, pg)
        await trio.to_thread.run_sync(
            _sql,
            pg.dsn,
            f"CREATE DATABASE {TEMPLATE_DB} TEMPLATE template0 IS_TEMPLATE true "
            "ALLOW_CONNECTIONS false",
        )
        # A run's programs connect to its own database only (the superuser still can).
        await trio.to_thread.run_sync(_sql, pg.dsn, _CLOSE_KEPT)
        warm = WarmServices(pg, nats)
        holder.append(warm)
        yield warm


#: Old paths of names that moved (a DeprecationWarning naming the new one, for one release).
__getattr__ = moved(
    "chaos.warm",
    {
        **dict.fromkeys(["run_one", "serve", "main"], "chaos.warm_worker"),
        **dict.fromkeys(
            ["WorkerGone", "WarmWorker", "open_warm_worker", "WarmPool", "open_warm_pool"],
            "chaos.warm_pool",
        ),
    },
)

if __name__ == "__main__":  # the old ``python -m chaos.warm``: the worker, with a warning
    __getattr__("main")()
