"""The lease table on a real PostgreSQL: the audit trail the checkers trust, what a worker's
role cannot do, and each lease statement's one property (golden and variants)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import trio

from chaos.services import PostgresService, open_postgres, open_run_dir
from scenarios.leases import variants
from scenarios.leases.database import Access, prepare
from scenarios.leases.lease import GoldenLease, wall_clock_now

pytestmark = pytest.mark.slow

TTL = 2.0
WORKERS = ["worker-1", "worker-2"]


@pytest.fixture
async def db() -> AsyncIterator[tuple[PostgresService, Access]]:
    with open_run_dir() as run:
        async with open_postgres(run) as pg:
            access = await trio.to_thread.run_sync(
                prepare, pg.dsn, pg.host, pg.port, pg.user, pg.database, WORKERS, TTL
            )
            yield pg, access


def dsn(pg: PostgresService, access: Access, worker: str) -> str:
    return access.worker_dsn(worker, f"{pg.host}:{pg.port}", pg.database)


async def call(cls: type[GoldenLease], dsn: str, worker: str, what: str) -> int | None:
    """One acquire or renew by a fresh lease object (its own asyncio loop, in a thread)."""

    async def once() -> int | None:
        lease = cls(dsn, worker, "job", TTL)
        try:
            return await (lease.acquire() if what == "acquire" else lease.renew())
        finally:
            await lease.close()

    return await trio.to_thread.run_sync(asyncio.run, once())


def _rows(dsn: str, query: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query.encode())
        names = [c.name for c in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


async def audit(access: Access) -> list[dict[str, Any]]:
    return await trio.to_thread.run_sync(
        _rows,
        access.admin_dsn,
        "SELECT kind, token, actor, holder, extract(epoch FROM until - at)::float8 AS ttl,"
        " extract(epoch FROM expires_at - at)::float8 AS written FROM lease_audit"
        " ORDER BY id",
    )


async def test_the_audit_trigger_runs_as_a_powerless_role_and_ignores_a_workers_objects(
    db: tuple[PostgresService, Access],
) -> None:
    """The trigger fires inside a worker's transaction: what that session creates (temp
    tables and functions shadowing the names the trigger uses) must not be picked up, and
    the function must not run as the superuser."""
    pg, access = db
    one = dsn(pg, access, "worker-1")
    owner = await trio.to_thread.run_sync(
        _rows,
        access.admin_dsn,
        "SELECT r.rolname, r.rolsuper, r.rolcanlogin FROM pg_proc p"
        " JOIN pg_roles r ON r.oid = p.proowner WHERE p.proname = 'lease_audit'",
    )
    assert owner == [{"rolname": "lease_recorder", "rolsuper": False, "rolcanlogin": False}]

    def shadow_then_take() -> None:
        with psycopg.connect(one, autocommit=False) as conn:
            conn.execute(
                "CREATE TEMP TABLE lease_audit (LIKE leases);"
                " CREATE TEMP TABLE leases_copy (x int);"
                " CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz"
                "  LANGUAGE sql AS $$ SELECT 'epoch'::timestamptz $$;"
                " SET search_path = pg_temp, public;"
                " UPDATE public.leases SET holder = 'worker-1', token = token + 1,"
                "  expires_at = now() + interval '2 s' WHERE name = 'job'"
            )
            conn.commit()
            left = conn.execute("SELECT count(*) FROM pg_temp.lease_audit").fetchone()
            assert left == (0,)

    await trio.to_thread.run_sync(shadow_then_take)
    rows = await trio.to_thread.run_sync(
        _rows,
        access.admin_dsn,
        "SELECT kind, actor, at > now() - interval '1 min' AS recent FROM lease_audit",
    )
    assert rows == [{"kind": "grant", "actor": "worker_1", "recent": True}]


async def test_the_audit_records_each_change_with_the_role_that_made_it(
    db: tuple[PostgresService, Access],
) -> None:
    pg, access = db
    one, two = dsn(pg, access, "worker-1"), dsn(pg, access, "worker-2")
    assert await call(GoldenLease, one, "worker-1", "acquire") == 1
    assert await call(GoldenLease, two, "worker-2", "acquire") is None  # held
    assert await call(GoldenLease, two, "worker-2", "renew") is None  # not its lease
    assert await call(GoldenLease, one, "worker-1", "renew") == 1

    def release() -> None:
        with psycopg.connect(one, autocommit=True) as conn:
            conn.execute("UPDATE leases SET holder = NULL WHERE name = 'job'")

    await trio.to_thread.run_sync(release)
    rows = await audit(access)
    assert [(r["kind"], r["token"], r["actor"], r["holder"]) for r in rows] == [
        ("grant", 1, "worker_1", "worker-1"),
        ("renew", 1, "worker_1", "worker-1"),
        ("release", 1, "worker_1", None),
    ]
    assert [r["ttl"] for r in rows] == pytest.approx([TTL, TTL, 0.0], abs=0.05)


async def test_a_role_can_neither_forge_the_audit_nor_act_as_another(
    db: tuple[PostgresService, Access],
) -> None:
    pg, access = db
    one = dsn(pg, access, "worker-1")
    attempts = [
        "SELECT * FROM lease_audit",
        "INSERT INTO lease_audit (kind, name, token, actor, at, until)"
        " VALUES ('grant', 'job', 9, 'worker_2', now(), now())",
        "ALTER TABLE leases DISABLE TRIGGER lease_audit",
        "SET session_replication_role = replica",
        "INSERT INTO leases (name) VALUES ('other')",
        "DELETE FROM leases",
        "TRUNCATE leases",
    ]

    def refused(statement: str) -> str:
        with psycopg.connect(one, autocommit=True) as conn:
            try:
                conn.execute(statement)
            except psycopg.Error as exc:
                return type(exc).__name__
        return "allowed"

    outcomes = [await trio.to_thread.run_sync(refused, s) for s in attempts]
    assert outcomes == ["InsufficientPrivilege"] * len(attempts)

    def login(dsn: str) -> str:
        try:
            psycopg.connect(dsn, connect_timeout=3).close()
        except psycopg.OperationalError as exc:
            text = str(exc)
            if "password authentication failed" in text or "no password supplied" in text:
                return "refused"
            return text
        return "allowed"

    role_two = access.roles["worker-2"][0]
    _, password_one = access.roles["worker-1"]
    tries = [
        pg.dsn,  # the superuser without a password: the cluster no longer trusts anyone
        f"postgresql://postgres:{password_one}@{pg.host}:{pg.port}/{pg.database}",
        f"postgresql://{role_two}:{password_one}@{pg.host}:{pg.port}/{pg.database}",
        one,
        access.admin_dsn,
    ]
    assert [await trio.to_thread.run_sync(login, t) for t in tries] == [
        "refused",
        "refused",
        "refused",
        "allowed",
        "allowed",
    ]


async def test_renewing_without_the_owner_check_renews_another_workers_lease(
    db: tuple[PostgresService, Access],
) -> None:
    pg, access = db
    one, two = dsn(pg, access, "worker-1"), dsn(pg, access, "worker-2")
    assert await call(GoldenLease, one, "worker-1", "acquire") == 1
    assert await call(variants.RenewWithoutOwnerCheck, two, "worker-2", "renew") == 1
    rows = await audit(access)
    assert [(r["kind"], r["actor"], r["holder"]) for r in rows] == [
        ("grant", "worker_1", "worker-1"),
        ("renew", "worker_2", "worker-1"),  # worker-2 renewed worker-1's lease
    ]


class ClockAhead(variants.WallClockExpiry):
    """The wall-clock variant on a worker whose clock runs a minute ahead."""

    def now_params(self) -> dict[str, Any]:
        return {"now": wall_clock_now() + timedelta(seconds=60)}


async def test_expiry_on_the_workers_clock_takes_a_lease_the_database_still_counts(
    db: tuple[PostgresService, Access],
) -> None:
    pg, access = db
    one, two = dsn(pg, access, "worker-1"), dsn(pg, access, "worker-2")
    assert await call(GoldenLease, one, "worker-1", "acquire") == 1
    assert await call(GoldenLease, two, "worker-2", "acquire") is None
    assert await call(ClockAhead, two, "worker-2", "acquire") == 2  # "expired", by its clock
    rows = await audit(access)
    assert [(r["kind"], r["token"], r["actor"]) for r in rows] == [
        ("grant", 1, "worker_1"),
        ("grant", 2, "worker_2"),
    ]
    # the audit caps the lease at the TTL, whatever expiry the worker wrote (a minute ahead)
    assert rows[1]["written"] == pytest.approx(60 + TTL, abs=1.0)
    assert [r["ttl"] for r in rows] == pytest.approx([TTL, TTL], abs=0.05)
