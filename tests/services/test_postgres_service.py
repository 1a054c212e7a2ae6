"""Embedded PostgreSQL: starts from the template cache, answers queries, leaves nothing behind."""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

import psycopg
import pytest
import trio
from svc_helpers import assert_reaped, children_of, pids_mentioning, proc_state

from chaos.services import external_postgres, open_postgres, open_run_dir
from chaos.services._pg_template import PG_SYSTEM_USER, prepare_postgres
from ground.errors import ConfigError


def _query(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def _connect_within_1s(dsn: str) -> None:
    psycopg.connect(dsn, connect_timeout=1).close()


async def query(dsn: str, sql: str) -> list[tuple[object, ...]]:
    return await trio.to_thread.run_sync(_query, dsn, sql)


@pytest.mark.slow
async def test_postgres_accepts_queries_as_a_non_root_user() -> None:
    with open_run_dir() as run:
        async with open_postgres(run) as pg:
            assert pg.process is not None
            assert pg.dsn == f"postgresql://postgres@127.0.0.1:{pg.port}/postgres"
            await query(pg.dsn, "CREATE TABLE t (x int); INSERT INTO t VALUES (41), (1)")
            assert await query(pg.dsn, "SELECT sum(x) FROM t") == [(42,)]
            settings = await query(
                pg.dsn,
                "SELECT current_setting('fsync'), current_setting('synchronous_commit'),"
                " current_setting('full_page_writes'), current_setting('listen_addresses')",
            )
            assert settings == [("off", "on", "off", "127.0.0.1")]
            owner = os.stat(f"/proc/{pg.process.pid}").st_uid
            if os.geteuid() == 0:
                assert owner == pwd.getpwnam(PG_SYSTEM_USER).pw_uid
            assert owner != 0


@pytest.mark.slow
async def test_template_is_reused_and_teardown_leaves_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime = await prepare_postgres()
    built_at = runtime.template.stat().st_mtime_ns
    timings = []
    for _ in range(2):
        with open_run_dir() as run:
            started = time.monotonic()
            async with open_postgres(run) as pg:
                timings.append(time.monotonic() - started)
                assert pg.process is not None
                assert pg.data_dir is not None
                backend = (await query(pg.dsn, "SELECT pg_backend_pid()"))[0][0]
                pid, data_dir = pg.process.pid or 0, pg.data_dir
            assert_reaped(pid)
            assert isinstance(backend, int)
            assert_reaped(backend)
            assert not data_dir.exists()
            assert list(run.iterdir()) == []
        assert not run.exists()
    assert runtime.template.stat().st_mtime_ns == built_at
    with capsys.disabled():
        print(f"\npostgres startup from template: {', '.join(f'{t:.3f}s' for t in timings)}")


@pytest.mark.slow
async def test_kill_and_restart_keeps_acknowledged_commits() -> None:
    with open_run_dir() as run:
        async with open_postgres(run) as pg:
            assert pg.process is not None
            await query(pg.dsn, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
            first = pg.process.pid or 0
            helpers = children_of(first)  # checkpointer, walwriter, ...: each its own session
            assert helpers
            await pg.process.kill()
            assert not await pg.ping()
            for pid in [first, *helpers]:
                assert_reaped(pid)
            await pg.process.restart()
            assert pg.process.pid != first
            assert await query(pg.dsn, "SELECT x FROM kept") == [(7,)]


@pytest.mark.slow
@pytest.mark.parametrize("cancel_after", [0.02, 0.15, 0.3])
async def test_cancellation_mid_startup_leaves_nothing_behind(cancel_after: float) -> None:
    await prepare_postgres()
    with open_run_dir() as run:
        with trio.move_on_after(cancel_after):
            async with open_postgres(run):
                await trio.sleep_forever()
        assert pids_mentioning(str(run)) == []
        assert list(run.iterdir()) == []


@pytest.mark.slow
async def test_external_postgres_talks_to_a_running_server() -> None:
    with open_run_dir() as run:
        async with open_postgres(run) as pg:
            ext = external_postgres(pg.dsn)
            assert (ext.host, ext.port, ext.user, ext.database) == (
                "127.0.0.1",
                pg.port,
                "postgres",
                "postgres",
            )
            assert ext.process is None
            assert await ext.ping()
    assert not await ext.ping()


def test_external_postgres_parses_keyword_dsns() -> None:
    ext = external_postgres("host=db.internal port=6543 user=app dbname=orders")
    assert (ext.host, ext.port, ext.user, ext.database) == ("db.internal", 6543, "app", "orders")


@pytest.mark.parametrize("dsn", ["host=a port=notaport", "postgresql://x:y@h:99999999/db", "=="])
def test_bad_dsn_is_a_config_error(dsn: str) -> None:
    with pytest.raises(ConfigError, match="bad postgres dsn"):
        external_postgres(dsn)


@pytest.mark.slow
async def test_pause_freezes_every_server_process() -> None:
    with open_run_dir() as run:
        async with open_postgres(run) as pg:
            assert pg.process is not None
            pids = [pg.process.pid or 0, *children_of(pg.process.pid or 0)]
            pg.process.pause()
            await trio.sleep(0.1)
            # a backend that was on its way out (the readiness probe's) may be gone by now
            assert {_state_or_gone(pid) for pid in pids} - {"gone"} == {"T"}
            with pytest.raises(psycopg.OperationalError):
                await trio.to_thread.run_sync(_connect_within_1s, pg.dsn)
            pg.process.resume()
            assert await query(pg.dsn, "SELECT 1") == [(1,)]


def _state_or_gone(pid: int) -> str:
    try:
        return proc_state(pid)
    except FileNotFoundError:
        return "gone"


def _dsm_files() -> set[str]:
    uid = pwd.getpwnam(PG_SYSTEM_USER).pw_uid if os.geteuid() == 0 else os.geteuid()
    return {p.name for p in Path("/dev/shm").glob("PostgreSQL.*") if p.stat().st_uid == uid}


def _shm_ids() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[1]) for line in lines}


@pytest.mark.slow
async def test_a_killed_server_leaves_no_shared_memory_behind() -> None:
    dsm_before = _dsm_files()
    with open_run_dir() as run:
        async with open_postgres(run) as pg:
            assert pg.process is not None
            assert pg.data_dir is not None
            pid_file = await trio.Path(pg.data_dir / "postmaster.pid").read_text()
            shmid = int(pid_file.splitlines()[6].split()[1])
            assert shmid in _shm_ids()
            await pg.process.kill()
    assert shmid not in _shm_ids()
    assert _dsm_files() <= dsm_before
