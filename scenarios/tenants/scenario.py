"""The tenants scenario: a multi-tenant notes API on Postgres with row-level security.

See README.md beside this file: it is the specification (the system, tenancy semantics,
failure modes, invariants, what counts as recovered, the variants and their diagnosis).
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Mapping
from typing import Any

import psycopg
import trio
from psycopg import sql
from psycopg.conninfo import make_conninfo

import scenarios.tenants.checkers  # noqa: F401  (registers the pack's checkers)
from chaos.context import RunContext
from chaos.scenario import Scenario, Signal, TaskSpec, variant_descriptions
from chaos.services import PostgresReader, free_port, harness_dsn
from chaos.workload import PlannedWork
from invariants.history import HARNESS
from scenarios.tenants._client import Client, Step

#: The tenants, in the order each round of the workload serves them.
TENANTS = ("acme", "globex", "initech")
#: Rounds of the workload: each creates one note per tenant, then lists each tenant's notes.
ROUNDS = 5
#: The pause between two requests of the workload (a client's think time).
PACE_S = 0.04

_REPLAYED = r"idempotency: replayed key"
#: Signal patterns search values as JSON with sorted keys; spacing is not relied on.
_DB_FAULT_APPLIED = r'"phase":\s*"apply",\s*"target":\s*"link:api-postgres"'


def plan(rng: random.Random) -> list[Step]:
    """The workload: ROUNDS rounds of one create per tenant (key ``k-<round>``: keys are
    unique per tenant only), then one list per tenant. Request ``i`` (0-based) is the
    ``i+1``-th connection on ``client-api`` when nothing was retried before it. Each note
    is unique (a tag drawn from ``rng``) and names its tenant, for people reading traces."""
    steps: list[Step] = []
    for r in range(1, ROUNDS + 1):
        for tenant in TENANTS:
            note = f"{tenant} note {r} #{rng.getrandbits(24):06x}"
            steps.append(Step("create", tenant, key=f"k-{r}", body=note))
        steps += [Step("list", t) for t in TENANTS]
    return steps


def _provision(dsn: str, names: Mapping[str, str], shared: bool) -> None:
    """As the superuser: the two roles, the database, its ``app`` schema (owned by the
    owner role), and statement logging for both roles (the diagnosis reads it)."""
    owner, app, db = (sql.Identifier(names[k]) for k in ("owner", "app", "db"))
    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        for role, password in ((owner, names["owner_password"]), (app, names["app_password"])):
            conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE "
                    "PASSWORD {}"
                ).format(role, sql.Literal(password))
            )
            if not shared:
                conn.execute(sql.SQL("ALTER ROLE {} SET log_statement = 'all'").format(role))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(db))
        conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}, {}").format(db, owner, app))
    with psycopg.connect(make_conninfo(dsn, dbname=names["db"]), autocommit=True) as conn:
        conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
        conn.execute(sql.SQL("CREATE SCHEMA app AUTHORIZATION {}").format(owner))


def _drop(dsn: str, names: Mapping[str, str]) -> None:
    with psycopg.connect(harness_dsn(dsn), connect_timeout=5, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(names["db"]))
        )
        for role in ("owner", "app"):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(names[role])))


def _create_key(value: Any) -> str:
    """A create operation's key in the plan: ``tenant/idempotency key``."""
    return f"{value['tenant']}/{value['key']}"


def _catalog(dsn: str) -> dict[str, Any]:
    """What schema ``app`` holds, for diagnosis (no checker reads it): the system catalogs
    only, read as the superuser with the guard's search path (``harness_dsn``)."""
    with psycopg.connect(harness_dsn(dsn), connect_timeout=5, autocommit=True) as conn:
        kind = conn.execute(
            "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'app' AND c.relname = 'items'"
        ).fetchone()
        table = "missing" if kind is None else "table" if kind[0] == "r" else "not a table"
        tables: dict[str, Any] = {}
        for name, rls, force in conn.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'app' AND c.relkind IN ('r', 'p') ORDER BY c.relname"
        ):
            tables[name] = {"force": force, "policies": [], "rls": rls}
        for table_name, policy in conn.execute(
            "SELECT tablename, policyname FROM pg_policies WHERE schemaname = 'app'"
            " ORDER BY tablename, policyname"
        ):
            tables.setdefault(table_name, {"force": None, "policies": [], "rls": None})
            tables[table_name]["policies"].append(policy)
        functions = {
            name: {"security_definer": definer}
            for name, definer in conn.execute(
                "SELECT p.proname, p.prosecdef FROM pg_proc p"
                " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'app'"
                " ORDER BY p.proname"
            )
        }
    return {"items_table": table, "tables": tables, "functions": functions}


def _items(reader: PostgresReader) -> list[dict[str, str | None]]:
    """Every row of ``app.items``, as the harness's reader reads it (row-level security
    bypassed, nothing of the service's run; ``Unreadable`` for anything but plain data)."""
    rows = reader.rows("app", "items", ["id", "tenant_id", "body"]) or []

    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    found = [
        {"id": text(r["id"]), "tenant": text(r["tenant_id"]), "body": text(r["body"])} for r in rows
    ]
    return sorted(found, key=lambda r: str(r["id"]))


class Tenants(Scenario):
    id = "tenants"
    description = "a multi-tenant notes API on Postgres: row-level security, pooled connections"
    variants = variant_descriptions("scenarios.tenants.variants")
    invariants = ("tenant_isolation", "no_cross_tenant_writes", "read_your_writes")
    consistency = ("no_cross_tenant_writes",)
    catches = {
        "session-tenant": "tenant_isolation",
        "missing-policy": "tenant_isolation",
        "definer-function": "tenant_isolation",
    }
    signals = {
        "session-tenant": (
            Signal(
                "a fault on the API's database link (a reset, or a stall past its timeout)",
                process="nemesis",
                match=_DB_FAULT_APPLIED,
            ),
            Signal(
                "the API retried a transaction on another pooled connection",
                process="service:api",
                f="log",
                match=r"retrying in .* on another connection",
            ),
            Signal(
                "the tenant is set with SET (a session setting) in a request's first transaction",
                process="service:postgres",
                f="log",
                match=r"statement: BEGIN; SET app\.tenant = ",
            ),
            Signal(
                "a transaction ran with no tenant setting of its own (the retry)",
                process="service:postgres",
                f="log",
                match=r"statement: BEGIN; SELECT (app\.create_item|coalesce)",
            ),
        ),
        "missing-policy": (
            Signal(
                "a fault lost the answer to a create that had committed (a reset)",
                process="nemesis",
                match=r'"phase":\s*"apply"',
            ),
            Signal(
                "the API answered a retried create from its idempotency record",
                process="service:api",
                f="log",
                match=_REPLAYED,
            ),
            Signal(
                "app.requests has no row-level security (and so no policy)",
                process=HARNESS,
                f="table",
                match=r'"policies":\s*\[\],\s*"rls":\s*false,\s*"table":\s*"app\.requests"',
            ),
        ),
        "definer-function": (
            Signal(
                "a fault lost the answer to a create that had committed (a reset)",
                process="nemesis",
                match=r'"phase":\s*"apply"',
            ),
            Signal(
                "the API answered a retried create from its idempotency record",
                process="service:api",
                f="log",
                match=_REPLAYED,
            ),
            Signal(
                "app.create_item was created SECURITY DEFINER",
                process="service:postgres",
                f="log",
                match=r"SECURITY DEFINER",
            ),
            Signal(
                "the catalog: app.create_item runs as its owner",
                process=HARNESS,
                f="function",
                match=r'"function":\s*"app\.create_item",\s*"security_definer":\s*true',
            ),
        ),
    }
    task = TaskSpec(
        service="api",
        summary=(
            "a multi-tenant notes API (POST/GET /items, X-Tenant, Idempotency-Key) on "
            "PostgreSQL with row-level security, through a faulty link"
        ),
        env=("PORT", "DATABASE_URL", "OWNER_DATABASE_URL", "APP_ROLE"),
        libraries=("psycopg[binary]",),
        solution="server.py",
        private_sections=("The golden implementation", "Variants", "Reproducibility"),
    )
    settle_timeout_s = 8.0
    # Its state: a database and two roles per tenant, which a warm worker drops when the run
    # ends (docs/sweep.md, "Warm workers").
    warm_services = True
    # What its service imports (docs/sweep.md, "The zygote"), forked on warm workers.
    zygote_preload = ("asyncio", "json", "psycopg", "psycopg.errors", "psycopg.sql")

    async def setup(self, ctx: RunContext) -> None:
        pg = await ctx.postgres()
        token = secrets.token_hex(4)
        suffix = f"_{token}" if ctx.shared_services else ""
        names = {
            "owner": f"tenants_owner{suffix}",
            "app": f"tenants_app{suffix}",
            "db": f"tenants{suffix}",
            "owner_password": secrets.token_hex(8),
            "app_password": secrets.token_hex(8),
        }
        await trio.to_thread.run_sync(_provision, pg.dsn, names, ctx.shared_services)
        if ctx.shared_services:

            async def drop() -> None:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await trio.to_thread.run_sync(_drop, pg.dsn, names)

            ctx.stack.push_async_callback(drop)
        # what the service's roles create in app, the harness reads as its reader
        reader = await ctx.postgres_reader(
            pg, database=names["db"], writers={"app": [names["owner"], names["app"]]}
        )
        db_link = ctx.add_link("api-postgres", f"{pg.host}:{pg.port}")
        port = free_port()
        ctx.state.update(
            names=names,
            reader=reader,
            admin_dsn=make_conninfo(pg.dsn, dbname=names["db"]),
            client_api=ctx.add_link("client-api", f"127.0.0.1:{port}"),
        )

        def dsn(role: str) -> str:
            return f"postgresql://{names[role]}:{names[role + '_password']}@{db_link}/{names['db']}"

        await ctx.start_service(
            "api",
            [ctx.python(), "-m", "scenarios.tenants.server"],
            env={
                "PORT": str(port),
                "DATABASE_URL": dsn("app"),
                "OWNER_DATABASE_URL": dsn("owner"),
                "APP_ROLE": names["app"],
                "VARIANT": ctx.variant,
            },
            ready_line="api ready",
        )

    async def workload(self, ctx: RunContext) -> None:
        client = Client(ctx.state["client_api"], ctx.recorder)
        for step in plan(ctx.rng("notes")):
            await client.perform(step)
            await trio.sleep(PACE_S)

    def planned_work(self, ctx: RunContext) -> list[PlannedWork]:
        """Every create of the plan is acknowledged (``chaos.workload``)."""
        keys = tuple(f"{s.tenant}/{s.key}" for s in plan(ctx.rng("notes")) if s.f == "create")
        return [PlannedWork("client", "create", keys, key=_create_key, unit="create")]

    def acknowledged(self, ctx: RunContext) -> dict[str, set[str]]:
        """Tenant -> the notes the API acknowledged to the workload."""
        out: dict[str, set[str]] = {t: set() for t in TENANTS}
        for e in ctx.recorder.events:
            if e["process"] == "client" and e["type"] == "ok" and e["f"] == "create":
                out[e["value"]["tenant"]].add(e["value"]["body"])
        return out

    async def settled(self, ctx: RunContext) -> bool:
        """Recovered: every tenant's list is served and shows every note acknowledged to it
        (each probe is recorded: the probes are evidence too)."""
        probe = Client(
            ctx.state["client_api"], ctx.recorder, process="probe", backoff_s=(), timeout_s=5.0
        )
        acked = self.acknowledged(ctx)
        recovered = True
        for tenant in TENANTS:
            value = await probe.perform(Step("list", tenant))
            if value is None or not acked[tenant] <= {i["body"] for i in value["items"]}:
                recovered = False
        return recovered

    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        schema = await trio.to_thread.run_sync(_catalog, ctx.state["admin_dsn"])
        # The catalog, one short line each in the trace (what the diagnosis paths read),
        # recorded before the items are read: a refused read still leaves them.
        for name, table in schema["tables"].items():
            ctx.recorder.record(HARNESS, "info", "table", {"table": f"app.{name}", **table})
        for name, function in schema["functions"].items():
            ctx.recorder.record(
                HARNESS, "info", "function", {"function": f"app.{name}", **function}
            )
        items = await trio.to_thread.run_sync(_items, ctx.state["reader"])
        return {"tenants": list(TENANTS), "items": items, "schema": schema}


SCENARIO = Tenants()

__all__ = ["SCENARIO", "TENANTS", "Tenants", "plan"]
