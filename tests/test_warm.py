"""Warm workers (chaos.warm): runs share a PostgreSQL cluster and a nats-server, never state."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import nats
import psutil
import psycopg
import pytest
import trio
from psycopg.conninfo import make_conninfo

from chaos.services import default_run_parent, open_run_dir
from chaos.warm import WarmServices, open_warm_services
from chaos.warm_pool import open_warm_pool
from ground.errors import ServiceError


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="chaos-warm-runs-", dir=default_run_parent()))
    root.chmod(0o755)
    registry = Path(tempfile.mkdtemp(prefix="chaos-warm-reg-"))
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    monkeypatch.setenv("CHAOS_REGISTRY_DIR", str(registry))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(registry, ignore_errors=True)


class _Run:
    """What WarmServices needs of a run's context: its exit stack."""

    def __init__(self, stack: AsyncExitStack) -> None:
        self.stack = stack


def _sql(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.encode())
        return list(cur.fetchall()) if cur.description else []


async def _a_run_leaving_everything(
    warm: WarmServices, stack: AsyncExitStack, outer: AsyncExitStack
) -> None:
    """Tables, rows, an open database connection, a database of its own making (tenants
    makes one per tenant) with a connection to it, a stream with messages and a durable
    consumer with unacked deliveries: everything a run could leave behind."""
    pg = await warm.postgres(_Run(stack))  # type: ignore[arg-type]
    nats_service = await warm.nats_for(_Run(stack))  # type: ignore[arg-type]
    await trio.to_thread.run_sync(
        _sql, pg.dsn, "CREATE TABLE charges (order_id text); INSERT INTO charges VALUES ('o-1')"
    )
    await trio.to_thread.run_sync(_sql, pg.dsn, "CREATE DATABASE tenant_a")
    held = await trio.to_thread.run_sync(lambda: psycopg.connect(pg.dsn, autocommit=True))
    outer.callback(held.close)  # still open when the run's database is dropped
    other = make_conninfo(pg.dsn, dbname="tenant_a")
    held_other = await trio.to_thread.run_sync(lambda: psycopg.connect(other, autocommit=True))
    outer.callback(held_other.close)

    def use_nats() -> None:
        import asyncio

        async def go() -> None:
            nc = await nats.connect(nats_service.url)
            js = nc.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.new"])
            await js.publish("orders.new", b"o-1")
            await js.publish("orders.new", b"o-2")
            sub = await js.pull_subscribe("orders.new", "charger")
            await sub.fetch(1, timeout=2)  # delivered, never acked
            await nc.close()

        asyncio.run(go())

    await trio.to_thread.run_sync(use_nats)
    found = await warm.leftovers()
    assert found.databases == sorted([pg.database, "tenant_a"])
    assert found.pg_connections >= 2
    assert (found.streams, found.consumers, found.messages) == (1, 1, 2)


@pytest.mark.slow
async def test_nothing_of_one_run_is_visible_to_the_next(run_root: Path) -> None:
    with open_run_dir(prefix="chaos-warm-") as run_dir:
        async with open_warm_services(run_dir) as warm:
            async with AsyncExitStack() as outer:
                async with AsyncExitStack() as stack:
                    await _a_run_leaving_everything(warm, stack, outer)
                await warm.check_clean(timeout_s=10)
                assert not await warm.leftovers()
            async with AsyncExitStack() as stack:
                pg = await warm.postgres(_Run(stack))  # type: ignore[arg-type]
                tables = await trio.to_thread.run_sync(
                    _sql,
                    pg.dsn,
                    "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
                )
                assert tables == [(0,)]
                activity = await trio.to_thread.run_sync(
                    _sql,
                    pg.dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = 'run_1'",
                )
                assert activity == [(0,)]
                assert pg.database == "run_2"


@pytest.mark.slow
async def test_a_runs_role_reaches_its_own_database_only_and_goes_whole(run_root: Path) -> None:
    """The kept databases refuse a run's role (``CONNECT`` is not PUBLIC's there): a large
    object it made in ``template1`` once outlived its run's database and kept its role from
    being dropped, so the next run on the worker found the server unclean
    (``tests/grading/adversaries/payments_kept_server.py``). And were a role given a way in,
    the run's end still drops it whole: its sessions ended, what it owns dropped in every
    database that takes connections."""
    from chaos.services import create_role

    with open_run_dir(prefix="chaos-warm-") as run_dir:
        async with open_warm_services(run_dir) as warm:
            async with AsyncExitStack() as stack:
                pg = await warm.postgres(_Run(stack))  # type: ignore[arg-type]
                role = await trio.to_thread.run_sync(create_role, pg, "intruder")
                own = role.dsn(f"{pg.host}:{pg.port}", pg.database)
                for database in ("postgres", "template1"):
                    other = own.replace(f"/{pg.database}", f"/{database}")
                    with pytest.raises(psycopg.OperationalError, match="permission denied"):
                        await trio.to_thread.run_sync(_sql, other, "SELECT 1")
                # the harness lets it in anyway: objects there, a query left running
                admin = pg.dsn.replace(f"/{pg.database}", "/postgres")
                await trio.to_thread.run_sync(
                    _sql, admin, 'GRANT CONNECT ON DATABASE postgres, template1 TO "intruder"'
                )
                for database in ("postgres", "template1"):
                    other = own.replace(f"/{pg.database}", f"/{database}")
                    await trio.to_thread.run_sync(_sql, other, "SELECT lo_from_bytea(0, 'x')")
                sleeper = await trio.to_thread.run_sync(
                    lambda: psycopg.connect(own.replace(f"/{pg.database}", "/postgres"))
                )
                stack.callback(sleeper.close)
                sleeper.pgconn.send_query(b"SELECT pg_sleep(3600)")
            await warm.check_clean(timeout_s=10)
            assert not await warm.leftovers()


@pytest.mark.slow
async def test_a_leftover_stops_the_worker(run_root: Path) -> None:
    with open_run_dir(prefix="chaos-warm-") as run_dir:
        async with open_warm_services(run_dir) as warm:

            def stray_stream() -> None:
                import asyncio

                async def go() -> None:
                    nc = await nats.connect(warm.nats.url)
                    await nc.jetstream().add_stream(name="STRAY", subjects=["stray"])
                    await nc.close()

                asyncio.run(go())

            await trio.to_thread.run_sync(stray_stream)
            with pytest.raises(ServiceError, match=r"earlier run's streams=1"):
                await warm.check_clean(timeout_s=0.5)


@pytest.mark.slow
async def test_a_pool_runs_payments_seeds_on_warm_services(tmp_path: Path, run_root: Path) -> None:
    async with open_warm_pool(1) as pool:
        bad = await pool.run({"scenario": "no-such-scenario", "seed": 1})
        assert (bad["exit_code"], bad["verdict"]) == (2, None)
        assert "unknown scenario" in bad["error"]
        malformed = await pool.run({"scenario": "payments"})
        assert malformed["exit_code"] == 2
        assert "bad request" in malformed["error"]
        answers = [
            await pool.run({"scenario": "payments", "seed": s, "out": str(tmp_path / f"{s}.t")})
            for s in (0, 1)
        ]
    for answer in answers:
        assert answer["exit_code"] == 0, answer
        assert answer["verdict"]["held"] is True
    assert pool.started == 1  # one worker: failed requests do not end it
    assert os.listdir(run_root) == []


def _start_worker() -> subprocess.Popen[bytes]:
    """A warm worker process in its own session (JSON requests on stdin)."""
    return subprocess.Popen(
        [sys.executable, "-m", "chaos.warm_worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.mark.slow
def test_sigkill_of_a_worker_leaves_nothing_once_gc_ran(tmp_path: Path, run_root: Path) -> None:
    worker = _start_worker()
    try:
        assert worker.stdin is not None
        assert worker.stdout is not None
        request = {"scenario": "payments", "seed": 3, "out": str(tmp_path / "3.trace")}
        worker.stdin.write(json.dumps(request).encode() + b"\n")
        worker.stdin.flush()
        answer = json.loads(worker.stdout.readline())
        assert answer["exit_code"] == 0, answer
        servers = [p for p in psutil.Process(worker.pid).children() if _is_server(p)]
        assert {_name(p) for p in servers} == {"postgres", "nats-server"}
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        psutil.wait_procs(servers, timeout=10)
        assert [d.name[: len("chaos-warm-")] for d in run_root.iterdir()] == ["chaos-warm-"]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()
    gc = subprocess.run(
        [sys.executable, "-m", "chaos", "gc", "--json"], capture_output=True, text=True, timeout=60
    )
    assert gc.returncode == 0, gc.stderr
    report = json.loads(gc.stdout)
    assert len(report["reaped"]) == 1
    assert list(run_root.iterdir()) == []
    assert list(Path(os.environ["CHAOS_REGISTRY_DIR"]).glob("*.run")) == []
    assert not [p for p in servers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _name(process: psutil.Process) -> str:
    try:
        return Path(process.cmdline()[0]).name
    except (psutil.Error, IndexError):
        return ""


def _is_server(process: psutil.Process) -> bool:
    return _name(process) in {"postgres", "nats-server"}


def _zygote_family(worker: int) -> list[psutil.Process]:
    """The worker's zygote and the services forked from it (their command line is the
    zygote's)."""
    found = []
    for p in psutil.Process(worker).children():
        try:
            if any("_zygote_main.py" in part for part in p.cmdline()):
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["gc", "run"])
def test_sigkill_of_a_worker_mid_run_leaves_no_zygote_or_forked_service(
    tmp_path: Path, run_root: Path, how: str
) -> None:
    worker = _start_worker()
    try:
        assert worker.stdin is not None
        request = {"scenario": "payments", "seed": 5, "out": str(tmp_path / "5.trace")}
        worker.stdin.write(json.dumps(request).encode() + b"\n")
        worker.stdin.flush()
        family: list[psutil.Process] = []
        deadline = 120
        while len(family) < 3 and deadline > 0:  # the zygote, the gateway, the consumer
            psutil.wait_procs([], timeout=0.05)
            deadline -= 0.05
            family = _zygote_family(worker.pid)
        assert len(family) >= 3, "the services were not forked from a zygote"
        # What the registry matches when the parent-death signal did not do it already:
        # every one carries the worker's marker (the zygote's environment block).
        markers = {p.environ().get("CHAOS_RUN_ID") for p in family}
        assert len(markers) == 1
        assert None not in markers
        everything = psutil.Process(worker.pid).children(recursive=True)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()
    if how == "gc":
        next_command = [sys.executable, "-m", "chaos", "gc", "--json"]
    else:
        out = str(tmp_path / "next.trace")
        next_command = [sys.executable, "-m", "chaos", "run", "payments", "--out", out]
    done = subprocess.run(next_command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    psutil.wait_procs(everything, timeout=5)
    assert not [p for p in everything if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert list(run_root.iterdir()) == []
    assert list(Path(os.environ["CHAOS_REGISTRY_DIR"]).glob("*.run")) == []
