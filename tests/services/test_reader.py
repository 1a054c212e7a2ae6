"""The harness's reader of candidate-written stores, against a real embedded PostgreSQL.

A "writer" role (what a candidate gets from ``create_role``) builds every shape a reward
hacker could leave where the harness reads; the reader must read plain data, refuse the
rest with ``Unreadable``, and never run the writer's code (each function the writer
defines raises when called, so a read that ran one would fail with that function's
message, not the reader's refusal).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import trio

from chaos.services import (
    PostgresReader,
    PostgresService,
    create_reader,
    create_role,
    harness_dsn,
    open_postgres,
    open_run_dir,
    require_passwords,
)
from ground.errors import Unreadable

pytestmark = pytest.mark.slow

#: A function of the writer's: if anything ever calls it, the statement fails saying so.
TRAP = """
CREATE FUNCTION trap() RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'writer code ran as %', current_user; END $$;
CREATE FUNCTION tripped() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'writer code ran as %', current_user; END $$;
"""


@dataclass
class Cluster:
    pg: PostgresService
    writer: str  # the writer's DSN
    reader: PostgresReader


def _sql(dsn: str, text: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(text.encode())


@asynccontextmanager
async def cluster(tmp_path: Path, **reader_options: float) -> AsyncIterator[Cluster]:
    with open_run_dir() as run:
        async with open_postgres(run) as pg:
            await trio.to_thread.run_sync(require_passwords, pg)
            role = await trio.to_thread.run_sync(create_role, pg, "writer")
            reader = await trio.to_thread.run_sync(
                lambda: create_reader(pg, writers={"public": ["writer"]}, **reader_options)
            )
            writer = role.dsn(f"{pg.host}:{pg.port}", pg.database)
            await trio.to_thread.run_sync(_sql, writer, TRAP)
            try:
                yield Cluster(pg, writer, reader)
            finally:
                reader.close()


async def read(c: Cluster, table: str, columns: list[str]) -> object:
    """The rows, or the refusal's message."""
    try:
        return await trio.to_thread.run_sync(c.reader.rows, "public", table, columns)
    except Unreadable as exc:
        return f"refused: {exc}"


async def test_plain_tables_read_whatever_policies_and_operators_the_writer_left(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await trio.to_thread.run_sync(
            _sql,
            c.writer,
            """
            CREATE TABLE charges (order_id text, amount_cents bigint, note text);
            INSERT INTO charges VALUES ('o-1', 100, 'x'), ('o-2', 200, NULL);
            ALTER TABLE charges ENABLE ROW LEVEL SECURITY;
            ALTER TABLE charges FORCE ROW LEVEL SECURITY;
            CREATE POLICY hide ON charges USING (order_id = 'o-1' AND tripped());
            CREATE FUNCTION text_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'writer operator ran as %', current_user; END $$;
            CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = text_eq);
            CREATE FUNCTION pg_total_relation_size(regclass) RETURNS bigint
                LANGUAGE sql AS 'SELECT 1/0';
            """,
        )
        rows = await read(c, "charges", ["order_id", "amount_cents"])
        assert isinstance(rows, list)
        assert sorted(rows, key=lambda r: r["order_id"]) == [
            {"order_id": "o-1", "amount_cents": 100},
            {"order_id": "o-2", "amount_cents": 200},
        ]
        assert await read(c, "nothing_here", ["x"]) is None


@pytest.mark.parametrize(
    ("ddl", "refusal"),
    [
        ("CREATE VIEW t AS SELECT trap() AS x", "a view, not an ordinary table"),
        ("CREATE MATERIALIZED VIEW t AS SELECT 'a'::text AS x", "a materialized view"),
        (
            "CREATE TABLE t (x text) PARTITION BY LIST (x);"
            " CREATE TABLE t_a PARTITION OF t FOR VALUES IN ('a')",
            "a partitioned table",
        ),
        (
            "CREATE TABLE t (x text); CREATE TABLE t_child () INHERITS (t)",
            "a table with inheritance children",
        ),
        (
            "CREATE TABLE t (x text); CREATE RULE r AS ON UPDATE TO t DO INSTEAD NOTHING",
            "a table with rules",
        ),
        (
            "CREATE DOMAIN checked AS text CHECK (VALUE IS NOT NULL); CREATE TABLE t (x checked)",
            "public.checked, not a built-in type",
        ),
        (
            "CREATE TYPE mood AS ENUM ('ok'); CREATE TABLE t (x mood)",
            "public.mood, not a built-in type",
        ),
        ("CREATE TABLE t (y text)", "has no column 'x'"),
        ("CREATE SEQUENCE t", "a sequence"),
        (
            "CREATE TABLE t (x text); REVOKE SELECT ON t FROM chaos_reader",
            "permission denied",
        ),
    ],
)
async def test_anything_but_plain_data_is_refused_and_never_run(
    tmp_path: Path, ddl: str, refusal: str
) -> None:
    async with cluster(tmp_path) as c:
        await trio.to_thread.run_sync(_sql, c.writer, ddl)
        found = await read(c, "t", ["x"])
        assert isinstance(found, str), found
        assert refusal in found
        assert "writer code ran" not in found


async def test_a_lock_held_forever_is_unreadable_not_a_hang(tmp_path: Path) -> None:
    async with cluster(tmp_path, lock_timeout_s=0.5) as c:
        await trio.to_thread.run_sync(_sql, c.writer, "CREATE TABLE t (x text)")
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with psycopg.connect(c.writer) as conn:
                conn.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
                holding.set()
                release.wait(30)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, hold)
            await trio.to_thread.run_sync(holding.wait)
            found = await read(c, "t", ["x"])
            release.set()
        assert found == "refused: public.t: a lock on it was held past 0.5 s"
        assert await read(c, "t", ["x"]) == []  # the same reader reads once it is free


async def test_caps_on_rows_and_size(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        c.reader.max_rows = 10
        await trio.to_thread.run_sync(
            _sql,
            c.writer,
            "CREATE TABLE t (x text); INSERT INTO t SELECT g::text FROM generate_series(1, 11) g",
        )
        assert await read(c, "t", ["x"]) == "refused: public.t: more than 10 rows"
        c.reader.max_rows, c.reader.max_bytes = 100, 1024
        found = await read(c, "t", ["x"])
        assert isinstance(found, str)
        assert "over the reader's 1 KiB" in found


async def test_the_writer_cannot_lock_the_reader_out_by_taking_every_connection(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await trio.to_thread.run_sync(_sql, c.writer, "CREATE TABLE t (x text)")
        held: list[psycopg.Connection[object]] = []

        def flood() -> str:
            for _ in range(200):
                try:
                    held.append(psycopg.connect(c.writer))
                except psycopg.OperationalError as exc:
                    return str(exc)
            return "no limit"

        try:
            stopped = await trio.to_thread.run_sync(flood)
            assert "too many connections for role" in stopped
            assert len(held) == 20  # create_role's CONNECTION LIMIT
            assert await read(c, "t", ["x"]) == []
        finally:
            for conn in held:
                conn.close()


def test_harness_dsn_adds_the_guard_to_any_dsn() -> None:
    dsn = harness_dsn("postgresql://postgres:pw@127.0.0.1:5/db?options=-c%20work_mem%3D4MB")
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    assert params["options"] == (
        "-c work_mem=4MB -c search_path=pg_catalog,pg_temp "
        "-c restrict_nonsystem_relation_kind=view,foreign-table"
    )
    assert params["password"] == "pw"
