"""Warm workers: one PostgreSQL cluster and one nats-server kept between the runs of a worker.

::

    sweep ──► WarmWorker (python -m chaos.warm, one per job) ──► run, run, run ...
                 │  one registered run dir "chaos-warm-*": postgres + nats-server
                 └─ per run: CREATE DATABASE run_N TEMPLATE chaos_template   (fresh tables)
                             the run's own services, proxies, run dir, trace (as a cold run)
                             then: DROP DATABASE run_N WITH (FORCE), delete every stream,
                             and wait until nothing of the run is left (``check_clean``)

A cold run (``chaos run``) pays for an interpreter, the harness's imports, a copy of the
template cluster and a PostgreSQL and nats-server start and stop, every time; a warm worker
pays for them once. Each run still gets a database that no other run has touched and a
JetStream with no stream, consumer, message or connection of an earlier run: ``check_clean``
checks it before every run and the worker refuses to go on (``ServiceError``) otherwise.

Only scenarios that ask for it (``Scenario.warm_services = True``) get the warm services:
a fresh database isolates tables, not cluster-wide objects such as roles, and the warm
servers are nobody's fault target. Others still run in the worker (no interpreter start),
with services of their own.

The worker speaks JSON lines: one request per line on stdin (``scenario``, ``variant``,
``seed``, ``out``, and optionally ``schedule``: a fault schedule as ``chaos run --schedule``
takes it, its seed the request's), one answer per line on its stdout (``exit_code``,
``verdict`` as ``chaos run --json`` prints it, ``error``; ``retire`` when its servers are no
longer clean: it then stops them and exits, and a pool starts a fresh worker). A run that fails
is an answer (exit code 3, or 2 for bad input), never the end of the worker. It stops its
services and exits when stdin closes, and on SIGINT/SIGTERM/SIGHUP as ``chaos run`` does. If it
is SIGKILLed, its servers die with it (parent-death signal) and the next harness command or
``chaos gc`` removes its dir: the warm services are a registered run like any other.
``CHAOS_WARM=0`` makes ``chaos sweep`` start one cold ``chaos run`` per seed instead.

A scenario that lists modules in ``Scenario.zygote_preload`` gets a zygote in the worker
(``chaos.services.zygote``): its own Python services are forked from a pre-imported
interpreter instead of exec'd (``CHAOS_ZYGOTE=0``: exec'd).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos import _signals
from chaos.errors import EXIT_BAD_INPUT, EXIT_HARNESS, ChaosError, ConfigError, ServiceError
from chaos.services import (
    NatsService,
    PostgresService,
    open_nats,
    open_postgres,
    open_run_dir,
    require_passwords,
    zygote,
)
from chaos.services._spawn import PIPE, Child, spawn
from chaos.stress import SWEEP_JOBS_ENV

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

    with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
        cur = conn.execute(sql.encode())
        return list(cur.fetchall()) if cur.description else []


#: The roles a run made: every role but the superusers and PostgreSQL's own.
_RUN_ROLES = "SELECT rolname FROM pg_roles WHERE NOT rolsuper AND rolname NOT LIKE 'pg\\_%'"


def _drop_roles(dsn: str) -> None:
    from psycopg import sql

    for (role,) in _sql(dsn, _RUN_ROLES):
        name = sql.Identifier(role)
        with psycopg_connect(dsn) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(name))
            conn.execute(sql.SQL("DROP ROLE {}").format(name))


def psycopg_connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, connect_timeout=3, autocommit=True)


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
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await trio.to_thread.run_sync(
                    _sql, self.pg.dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )
                # Roles are cluster-wide: those the run made (its programs' roles) go too.
                await trio.to_thread.run_sync(_drop_roles, self.pg.dsn)

        ctx.stack.push_async_callback(drop)
        pg = self.pg
        return PostgresService(_with_database(pg.dsn, name), pg.host, pg.port, pg.user, name)

    async def nats_for(self, ctx: RunContext) -> NatsService:
        async def wipe() -> None:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await trio.to_thread.run_sync(_delete_streams, self.nats.url)

        ctx.stack.push_async_callback(wipe)
        n = self.nats
        return NatsService(n.url, n.host, n.port, n.monitor_port)

    async def leftovers(self) -> Leftovers:
        """What is on the servers besides the empty template: databases, client connections
        (other than this query's), streams, consumers, messages, NATS connections."""
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
        warm = WarmServices(pg, nats)
        holder.append(warm)
        yield warm


# -- the worker process ------------------------------------------------------------------------


async def run_one(
    request: Mapping[str, Any], warm: WarmServices | None, scenarios: dict[str, Any]
) -> dict[str, Any]:
    """One run in this process; the answer a worker prints (``exit_code``, ``verdict``,
    ``error``, ``wall_s``). The per-run entry point of a warm worker: ``chaos sweep`` and
    other dispatchers call it through ``WarmWorker.run``."""
    from chaos.run import RunOptions, run_scenario
    from chaos.scenario import load_scenario

    started = time.monotonic()
    try:
        name, seed = str(request["scenario"]), int(request["seed"])
        variant = str(request.get("variant", "golden"))
        out = Path(request["out"]) if request.get("out") else None
        timeout = request.get("settle_timeout_s")
        settle_timeout_s = None if timeout is None else float(timeout)
        raw_schedule = request.get("schedule")
        if raw_schedule is not None and not isinstance(raw_schedule, dict):
            raise TypeError(f"schedule must be an object, got {type(raw_schedule).__name__}")
    except (KeyError, ValueError, TypeError) as exc:
        return _answer(EXIT_BAD_INPUT, None, f"bad request: {exc!r}", started)
    try:
        if name not in scenarios:
            scenarios[name] = load_scenario(name)
        scenario = scenarios[name]
        schedule = None
        if raw_schedule is not None:  # as ``chaos run --schedule`` reads and checks it
            from chaos.schedule_file import check_schedule_targets
            from faults.model import FaultSchedule

            schedule = FaultSchedule.from_dict(raw_schedule)
            check_schedule_targets(scenario, variant, schedule)
            if schedule.seed != seed:
                raise ConfigError(f"the schedule's seed {schedule.seed} is not the seed {seed}")
        use_warm = warm if getattr(scenario, "warm_services", False) else None
        if use_warm is not None:
            try:
                await use_warm.check_clean()
            except ServiceError as exc:  # this worker's servers are of no more use
                return {**_failed(exc, started), "retire": True}
        options = RunOptions(
            scenario,
            seed,
            variant=variant,
            out=out,
            settle_timeout_s=settle_timeout_s,
            warm=use_warm,
            schedule=schedule,
        )
        result = await run_scenario(options)
    except Exception as exc:  # one run's failure is its answer, not the worker's
        return _failed(exc, started)
    return _answer(result.exit_code, result.to_json(), "", started)


def _failed(exc: Exception, started: float) -> dict[str, Any]:
    """The answer for a run that raised: a ChaosError (alone or grouped by nurseries) as its
    one line and exit code, as ``chaos run`` prints it; anything else a harness error with
    its traceback on the worker's stderr. Either way the worker goes on."""
    first: BaseException = exc
    while isinstance(first, BaseExceptionGroup) and first.exceptions:
        first = first.exceptions[0]
    if isinstance(first, ConfigError):
        return _answer(EXIT_BAD_INPUT, None, str(first), started)
    if not isinstance(first, ChaosError):
        traceback.print_exception(exc, file=sys.stderr)
    message = str(first) if isinstance(first, ChaosError) else f"{type(first).__name__}: {first}"
    return _answer(EXIT_HARNESS, None, message, started)


def _answer(
    code: int, verdict: dict[str, Any] | None, error: str, started: float
) -> dict[str, Any]:
    return {
        "exit_code": code,
        "verdict": verdict,
        "error": error,
        "wall_s": round(time.monotonic() - started, 3),
    }


async def serve(requests: trio.abc.ReceiveStream, answers: trio.abc.SendStream) -> None:
    """Answer JSON-line requests until ``requests`` ends, with warm services started at the
    first request of a scenario that wants them."""
    scenarios: dict[str, Any] = {}
    buffer = bytearray()
    with open_run_dir(prefix="chaos-warm-") as run_dir:
        async with _lazy_warm(run_dir) as get_warm, zygote.open_zygotes(run_dir) as get_zygote:
            while True:
                while b"\n" not in buffer:
                    chunk = await requests.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                line, _, rest = bytes(buffer).partition(b"\n")
                buffer = bytearray(rest)
                try:
                    request = json.loads(line)
                except ValueError:
                    request = {}
                warm = await get_warm(request, scenarios)
                found = scenarios.get(request.get("scenario"))  # loaded by get_warm
                forks = await get_zygote(getattr(found, "zygote_preload", ()))
                with zygote.using(forks):
                    answer = await run_one(request, warm, scenarios)
                await answers.send_all(json.dumps(answer, sort_keys=True).encode() + b"\n")
                if answer.get("retire"):
                    return  # stops the servers; a pool starts a new worker


@asynccontextmanager
async def _lazy_warm(run_dir: Path) -> AsyncIterator[Any]:
    from chaos.scenario import load_scenario

    async with trio.open_nursery() as nursery:
        holder: list[WarmServices] = []
        stop = trio.Event()

        async def keep(task_status: Any) -> None:
            async with open_warm_services(run_dir) as warm:
                holder.append(warm)
                task_status.started()
                await stop.wait()

        async def get(request: Mapping[str, Any], scenarios: dict[str, Any]) -> WarmServices | None:
            name = request.get("scenario")
            if not isinstance(name, str):
                return None
            try:
                if name not in scenarios:
                    scenarios[name] = load_scenario(name)
            except ConfigError:
                return None
            if not getattr(scenarios[name], "warm_services", False):
                return None
            if not holder:
                await nursery.start(keep)
            return holder[0]

        try:
            yield get
        finally:
            stop.set()


def main() -> None:
    """``python -m chaos.warm``: a worker; answers go to the real stdout, anything else any
    code prints goes to stderr, so a stray print cannot break the protocol."""
    _signals.install()
    answers_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    async def worker() -> None:
        async with (
            trio.lowlevel.FdStream(os.dup(0)) as requests,
            trio.lowlevel.FdStream(answers_fd) as answers,
        ):
            await serve(requests, answers)

    try:
        _signals.run(worker)
    except _signals.Interrupted as exc:
        _signals.ignore_further()
        raise SystemExit(exc.exit_code) from None
    except ChaosError as exc:
        _signals.ignore_further()
        print(f"chaos warm worker: error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_HARNESS) from None
    finally:
        _signals.ignore_further()


# -- the client: a worker seen from a dispatcher ---------------------------------------------


class WorkerGone(ChaosError):
    """The worker process ended before it answered."""


class WarmWorker:
    """A ``python -m chaos.warm`` child: ``await worker.run(request)`` -> its answer. Open with
    ``open_warm_worker()``; one request at a time."""

    def __init__(self, child: Child, requests: trio.lowlevel.FdStream) -> None:
        self.child = child
        self._requests = requests
        self._buffer = bytearray()
        self._lock = trio.Lock()
        self.stderr_tail: list[str] = []
        #: Cancelled to let the worker go (a pool does it when the worker ended).
        self.scope = trio.CancelScope()

    @property
    def alive(self) -> bool:
        return self.child.returncode is None

    async def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request, return the answer; ``WorkerGone`` if the worker ends first."""
        async with self._lock:
            try:
                await self._requests.send_all(json.dumps(dict(request)).encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                raise WorkerGone(self._gone_message()) from None
            assert self.child.stdout is not None
            while b"\n" not in self._buffer:
                chunk = await self.child.stdout.receive_some(65536)
                if not chunk:
                    await self.child.wait()
                    raise WorkerGone(self._gone_message())
                self._buffer += chunk
            line, _, rest = bytes(self._buffer).partition(b"\n")
            self._buffer = bytearray(rest)
            answer: dict[str, Any] = json.loads(line)
            return answer

    def _gone_message(self) -> str:
        code = self.child.returncode
        lines = [line.strip(" |+-") for line in self.stderr_tail]
        lines = [line for line in lines if line]
        last = lines[-1] if lines else "no output"
        return f"the warm worker ended (exit code {code}): {last}"


async def _pump_stderr(worker: WarmWorker) -> None:
    stream = worker.child.stderr
    if stream is None:
        return
    pending = b""
    async with stream:
        while chunk := await stream.receive_some(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            worker.stderr_tail.extend(x.decode(errors="replace") for x in lines if x.strip())
            del worker.stderr_tail[:-20]


@asynccontextmanager
async def open_warm_worker(
    stop_grace_s: float = 60.0, concurrency: int | None = None
) -> AsyncIterator[WarmWorker]:
    """Start a worker process (own session; SIGTERM if this process dies); on exit close its
    stdin and wait for it to stop its services; if cancelled, interrupt it as Ctrl-C would.
    ``concurrency``: how many runs the batch keeps going at once (each trace records it)."""
    read, write = os.pipe()
    env = {**os.environ, SWEEP_JOBS_ENV: str(concurrency)} if concurrency else None
    try:
        child = spawn(
            [sys.executable, "-m", "chaos.warm"],
            env=env,
            stdin=read,
            stdout=PIPE,
            stderr=PIPE,
            start_new_session=True,
            pdeathsig=signal.SIGTERM,
        )
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    requests = trio.lowlevel.FdStream(write)
    worker = WarmWorker(child, requests)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_stderr, worker)
        try:
            yield worker
        except BaseException:
            with trio.CancelScope(shield=True):
                await requests.aclose()
                await _interrupt(child, stop_grace_s)
            raise
        else:
            with trio.CancelScope(shield=True):
                await requests.aclose()
                with trio.move_on_after(stop_grace_s):
                    await child.wait()
                    return
                await _interrupt(child, stop_grace_s)


async def _interrupt(child: Child, grace_s: float) -> None:
    if child.returncode is not None:
        await child.wait()
        return
    child.send_signal(signal.SIGINT)
    forwarded = False
    with trio.move_on_after(grace_s):
        while True:
            with trio.move_on_after(0.1):
                await child.wait()
                return
            if _signals.hurrying() and not forwarded:
                child.send_signal(signal.SIGINT)
                forwarded = True
    child.kill()
    await child.wait()


class WarmPool:
    """Up to ``size`` warm workers, started when first needed: ``await pool.run(request)``
    runs on an idle one. A worker that ended (crashed, killed) is replaced at the next
    request; its request's answer is ``WorkerGone``."""

    def __init__(self, nursery: trio.Nursery, size: int, concurrency: int | None = None) -> None:
        if size < 1:
            raise ConfigError(f"a warm pool needs at least one worker, got {size}")
        self._nursery = nursery
        self._limiter = trio.CapacityLimiter(size)
        self._idle: list[WarmWorker] = []
        self._stop = trio.Event()
        self.started = 0
        self._concurrency = concurrency

    async def _keep(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with open_warm_worker(concurrency=self._concurrency) as worker:
            self.started += 1
            task_status.started(worker)
            with worker.scope:
                await self._stop.wait()

    async def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        async with self._limiter:
            worker = self._idle.pop() if self._idle else await self._nursery.start(self._keep)
            try:
                answer = await worker.run(request)
            except WorkerGone:
                worker.scope.cancel()
                raise
            if answer.get("retire"):
                worker.scope.cancel()  # it is stopping; the next request starts a new one
            else:
                self._idle.append(worker)
            return answer

    def close(self) -> None:
        self._stop.set()


@asynccontextmanager
async def open_warm_pool(size: int, concurrency: int | None = None) -> AsyncIterator[WarmPool]:
    """A ``WarmPool``; on exit every worker stops its services (interrupted if cancelled).
    ``concurrency``: what each run's trace records as its batch's (default: none)."""
    async with trio.open_nursery() as nursery:
        pool = WarmPool(nursery, size, concurrency)
        try:
            yield pool
        finally:
            pool.close()


if __name__ == "__main__":
    main()
