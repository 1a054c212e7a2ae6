"""The leases scenario: workers take a lease in Postgres to run a singleton job that writes to
a store behind a fencing check.

See README.md beside this file: it is the specification (the system, timing semantics,
failure modes, invariants, what counts as recovered, the variants and their diagnosis).
"""

from __future__ import annotations

import functools
import json
import secrets
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import trio

import chaos.scenario
import scenarios.leases.checkers  # noqa: F401  (registers the pack's checkers)
from chaos.context import RunContext
from chaos.scenario import Scenario, Signal, TaskSpec
from chaos.services import free_port, harness_dsn
from ground.errors import Unreadable
from invariants.history import HARNESS, NEMESIS
from invariants.leases import EVIDENCE_KEY
from scenarios.leases import auditor, database, store
from scenarios.leases.checkers import FAULT_CHANGES

#: The lease's time to live (seconds): every margin of the scenario derives from it.
TTL_S = 2.0
WORKERS = ("worker-1", "worker-2", "worker-3")
#: The harness-owned services whose history operations are the evidence.
STORE, AUDITOR = "store", "lease-audit"
#: worker-1 takes the lease first, alone; the workload starts once it has written this often.
WARMUP_WRITES = 8
WORKLOAD_S = 8.0
#: Settled: this long after the last fault or the workload's end, with a write since.
QUIET_S = 1.5
STARTUP_TIMEOUT_S = 20.0
#: The worker's ready line (TASK.md).
WORKER_READY = "worker ready"


def _get_json(url: str) -> Any:
    """A harness read of the store (patient: a loaded machine is slow, not broken)."""
    for attempt in (1, 2, 3):
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except OSError:
            if attempt == 3:
                raise
    raise AssertionError("unreachable")


def _epoch(text: str | None) -> float | str | None:
    """A timestamp as the reader gives it (text, UTC) in seconds since the epoch; None for an
    infinite one, the text itself for one Python cannot hold (diagnosis only)."""
    if text is None or text.endswith("infinity"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return text


def _number(text: str | None) -> int | str | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return text


def _ops(ctx: RunContext, process: str, f: str, type_: str = "ok") -> list[dict[str, Any]]:
    return [
        e
        for e in ctx.recorder.events
        if e["process"] == process and e["f"] == f and e["type"] == type_
    ]


async def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``check`` (over the recorder's events: they come with no notification)."""
    with trio.move_on_after(timeout_s):
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.02)
        return True
    return False


class Leases(Scenario):
    id = "leases"
    description = "a singleton job under a Postgres lease, writing to a store that checks fencing"
    variants = chaos.scenario.variant_descriptions("scenarios.leases.variants")
    invariants = ("fencing_tokens", "exclusive_leases", "job_recovered", "lease_failover")
    consistency = ("fencing_tokens", "exclusive_leases")
    catches = {
        "no-fencing": "fencing_tokens",
        "wall-clock-expiry": "exclusive_leases",
        "renew-without-owner-check": "fencing_tokens",
    }
    signals = {
        "no-fencing": (
            Signal("the nemesis paused a worker", process=NEMESIS, f="pause", match='"apply"'),
            Signal(
                "the lease was granted to another worker",
                process=AUDITOR,
                f="grant",
                type="ok",
                match='"holder": "worker-[23]"',
            ),
            Signal(
                "the store accepted a write that carried no fencing token",
                process=STORE,
                f="write",
                type="ok",
                match='"token": null',
            ),
        ),
        "wall-clock-expiry": (
            Signal(
                "the nemesis moved a worker's wall clock",
                process=NEMESIS,
                f="clock_skew",
                match='"apply"',
            ),
            Signal(
                "the lease was granted to another worker",
                process=AUDITOR,
                f="grant",
                type="ok",
                match='"holder": "worker-[23]"',
            ),
        ),
        "renew-without-owner-check": (
            Signal(
                "the nemesis cut a worker's database link",
                process=NEMESIS,
                f="partition",
                match='"apply"',
            ),
            Signal(
                "a worker renewed a lease granted to another",
                process=AUDITOR,
                f="renew",
                type="ok",
                match=r'"by": "([^"]+)", "expires_at": [^,]+, "holder": "(?!\1")',
            ),
            Signal(
                "the store accepted worker-1's write under a later worker's token",
                process=STORE,
                f="write",
                type="ok",
                match=r'"token": ([2-9]|\d\d+), "writer": "worker-1"',
            ),
        ),
    }
    task = TaskSpec(
        service="worker",
        summary=(
            "a worker that takes a lease in Postgres and, while it holds it, runs a singleton "
            "job writing to a store that checks fencing tokens; three of them run at once"
        ),
        env=("WORKER_ID", "PG_DSN", "STORE_URL", "STORE_KEY", "LEASE_NAME", "LEASE_TTL_S"),
        libraries=("psycopg[binary]",),
        solution="worker.py",
        side_effect="job_write",
        private_sections=("The golden implementation", "Variants", "Validation"),
    )
    settle_timeout_s = 20.0
    own_postgres = "it creates roles and requires passwords"
    # Its state: tables of one database and the roles its run creates, which a warm worker
    # drops with the run's database (docs/sweep.md, "Warm workers").
    warm_services = True
    # What its services import (docs/sweep.md, "The zygote"), forked on warm workers.
    zygote_preload = ("asyncio", "json", "http.server", "psycopg", "psycopg.sql", "ground.jsonhttp")

    async def setup(self, ctx: RunContext) -> None:
        store_port = free_port()
        keys = {w: secrets.token_hex(16) for w in WORKERS}
        store_service = await ctx.start_service(
            STORE,
            [ctx.python(), "-m", "scenarios.leases.store", str(store_port)],
            env={"STORE_KEYS": json.dumps({key: w for w, key in keys.items()})},
            ready_line=store.READY_LINE,
            wait=False,
        )
        pg = await ctx.postgres()
        access = await trio.to_thread.run_sync(
            functools.partial(
                database.prepare,
                pg.dsn,
                pg.host,
                pg.port,
                pg.user,
                pg.database,
                list(WORKERS),
                TTL_S,
                secure=False,  # the run's cluster already requires passwords
            )
        )
        audit = await ctx.start_service(
            AUDITOR,
            [ctx.python(), "-m", "scenarios.leases.auditor"],
            env={
                "PG_DSN": harness_dsn(access.admin_dsn),
                "ROLES": json.dumps(access.role_names()),
                "SCHEMA": access.schema,
            },
            ready_line=auditor.READY_LINE,
            wait=False,
        )
        # the harness reads the lease and its audit as its reader, never as the superuser
        reader = await ctx.postgres_reader(
            pg, tables=[(access.schema, "leases"), (access.schema, "lease_audit")]
        )
        await ctx.ready(store_service, audit)
        envs = {}
        for w in WORKERS:
            pg_link = ctx.add_link(f"{w}-postgres", f"{pg.host}:{pg.port}")
            store_link = ctx.add_link(f"{w}-store", f"127.0.0.1:{store_port}")
            envs[w] = {
                "WORKER_ID": w,
                "PG_DSN": access.worker_dsn(w, pg_link, pg.database),
                "STORE_URL": f"http://{store_link}",
                "STORE_KEY": keys[w],
                "LEASE_NAME": database.LEASE_NAME,
                "LEASE_TTL_S": str(TTL_S),
                "VARIANT": ctx.variant,
            }
        ctx.state.update(access=access, reader=reader, store=f"http://127.0.0.1:{store_port}")
        argv = [ctx.python(), "-m", "scenarios.leases.worker"]
        first, *others = WORKERS
        # worker-1 alone first, so the same worker holds the lease on every run
        await ctx.start_service(first, argv, env=envs[first], ready_line=WORKER_READY)
        took = await _until(
            lambda: any(e["value"].get("holder") == first for e in _ops(ctx, AUDITOR, "grant")),
            STARTUP_TIMEOUT_S,
        )
        started = [
            await ctx.start_service(w, argv, env=envs[w], ready_line=WORKER_READY, wait=False)
            for w in others
        ]
        await ctx.ready(*started)
        if not took:
            return  # a worker that never takes the lease: nothing to wait for
        # faults count connections and bytes from here on the same way on every run
        await _until(
            lambda: (
                sum(e["value"].get("writer") == first for e in _ops(ctx, STORE, "write"))
                >= WARMUP_WRITES
            ),
            STARTUP_TIMEOUT_S,
        )

    async def workload(self, ctx: RunContext) -> None:
        await trio.sleep(WORKLOAD_S)

    def _last_disturbance_ns(self, ctx: RunContext) -> int:
        """When the workload ended or a fault was last applied or healed (run time, ns)."""
        times = [
            e["time_ns"]
            for e in ctx.recorder.events
            if (e["process"] == NEMESIS and e["value"].get("phase") in FAULT_CHANGES)
            or (e["process"] == HARNESS and e["f"] == "workload")
        ]
        return max(times, default=0)

    async def settled(self, ctx: RunContext) -> bool:
        last = self._last_disturbance_ns(ctx)
        if ctx.recorder.now_ns() - last < QUIET_S * 1e9:
            return False
        if not any(e["time_ns"] > last for e in _ops(ctx, STORE, "write")):
            return False  # the job has not run again since
        try:
            stats = await trio.to_thread.run_sync(_get_json, ctx.state["store"] + "/stats")
            rows = await self._rows(ctx, ["id"])
        except Unreadable:
            return False  # not known yet: ask again (final_state says why, if it lasts)
        decided = len(_ops(ctx, STORE, "write")) + len(_ops(ctx, STORE, "write", "fail"))
        facts = sum(len(_ops(ctx, AUDITOR, f)) for f in ("grant", "renew", "release"))
        return bool(stats["decisions"] == decided and len(rows) == facts)

    async def _rows(
        self, ctx: RunContext, columns: list[str], table: str = "lease_audit"
    ) -> list[dict[str, Any]]:
        """The harness's reader's rows of ``table``, every value as text (``-infinity``)."""
        reader, schema = ctx.state["reader"], ctx.state["access"].schema
        rows = await trio.to_thread.run_sync(
            functools.partial(reader.rows, schema, table, columns, text=True)
        )
        return rows or []

    def side_effects(self, name: str, final_state: Mapping[str, Any]) -> Counter[str]:
        """``job_write``: entries the store accepted, per writer."""
        if name != "job_write":
            return super().side_effects(name, final_state)
        return Counter(str(e["writer"]) for e in final_state["store"]["entries"])

    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        entries = await trio.to_thread.run_sync(_get_json, ctx.state["store"] + "/log")
        state = await trio.to_thread.run_sync(_get_json, ctx.state["store"] + "/state")
        roles = ctx.state["access"].role_names()
        audit = await self._rows(
            ctx, ["id", "kind", "token", "actor", "holder", "at", "until", "expires_at"]
        )
        lease = await self._rows(ctx, ["name", "holder", "token", "expires_at"], "leases")
        for row in audit:
            row.update(
                {k: _number(row[k]) for k in ("id", "token")},
                **{k: _epoch(row[k]) for k in ("at", "until", "expires_at")},
            )
        for row in lease:
            row.update(token=_number(row["token"]), expires_at=_epoch(row["expires_at"]))
        audit.sort(key=lambda r: r["id"])  # the harness's own table: ids are numbers
        started = [
            e["time_ns"]
            for e in ctx.recorder.events
            if e["process"] == HARNESS
            and e["f"] == "workload"
            and e["value"].get("phase") == "start"
        ]
        return {
            # run time (s): what lease_failover judges, from the workload's start to now
            "window_s": [started[0] / 1e9 if started else None, ctx.recorder.now_ns() / 1e9],
            EVIDENCE_KEY: {"authority": AUDITOR, "resource": STORE, "tolerance_s": 0.0},
            "ttl_s": TTL_S,
            "workers": list(WORKERS),
            "store": {"entries": entries, "highest": state["highest"]},
            "audit": [{**r, "actor": roles.get(str(r["actor"]), r["actor"])} for r in audit],
            "lease": lease,
        }


SCENARIO = Leases()

__all__ = ["SCENARIO", "Leases"]
