"""The payments scenario: orders over JetStream, charged at a gateway and booked in Postgres.

See README.md beside this file: it is the specification (failure modes, invariants,
delivery semantics, what counts as recovered, the variants).
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
import urllib.request
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import psycopg
import trio

import scenarios.payments.checkers  # noqa: F401  (registers the pack's checkers)
from chaos.context import RunContext
from chaos.nemesis import Subject
from chaos.scenario import Budgets, Scenario, Signal, TaskSpec, variant_descriptions
from chaos.services import (
    NatsService,
    NatsUser,
    PostgresRole,
    PostgresService,
    create_role,
    drop_role,
    harness_dsn,
    jetstream_consumer,
    jetstream_publisher,
)
from chaos.settle import STUCK, Stuck
from chaos.workload import PlannedWork
from ground.errors import Unreadable
from invariants.history import HARNESS

HERE = Path(__file__).resolve().parent
ORDERS = 30
ACCOUNTS = 5
ACK_WAIT_S = 2.0
#: The consumer's durable (TASK.md), and the producer's private inbox prefix (no other user
#: may read or answer what the stream confirms to it).
DURABLE = "charger"
PRODUCER_INBOX = "_INBOX_PRODUCER"
#: A nemesis event of a fault being applied (the value as JSON with sorted keys).
_APPLIED = r'"phase":\s*"apply"'


#: While orders are missing, how often ``settled`` asks the broker whether anything is pending.
_PROBE_EVERY_S = 0.5


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as response:
        return json.loads(response.read())


def _with_schema(dsn: str, schema: str) -> str:
    """``dsn`` with ``search_path`` set to ``schema``."""
    if schema == "public":
        return dsn
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options=-csearch_path%3D{schema}"


def _execute(dsn: str, sql: str) -> None:
    """One statement as the superuser, guarded (the consumer may have objects by now)."""
    with psycopg.connect(harness_dsn(dsn), connect_timeout=3, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _create_stream(url: str, stream: str, subject: str) -> None:
    """As the harness, before any program runs: the stream, as the spec configures it (its
    programs' own ``add_stream`` of it is then a no-op; neither may change it)."""

    async def create() -> None:
        nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
        try:
            await nc.jetstream(timeout=5).add_stream(
                name=stream, subjects=[subject], duplicate_window=120
            )
        finally:
            await nc.close()

    asyncio.run(create())


def _delete_stream(url: str, stream: str) -> None:
    async def delete() -> None:
        nc = await nats.connect(url, connect_timeout=3, max_reconnect_attempts=1)
        try:
            await nc.jetstream().delete_stream(stream)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await nc.close()

    asyncio.run(delete())


class Payments(Scenario):
    id = "payments"
    description = "orders over JetStream, charged once at a gateway, booked once in Postgres"
    variants = variant_descriptions("scenarios.payments.variants")
    invariants = ("exactly_once", "no_lost_messages", "consistent_final_state")
    consistency = ("consistent_final_state",)
    catches = {
        "no-idempotency": "exactly_once",
        "ack-before-commit": "no_lost_messages",
        "gateway-retry-no-key": "exactly_once",
        "wall-clock-dedupe": "exactly_once",
    }
    signals = {
        "no-idempotency": (
            Signal("an ack was lost", process="proxy", f="frame_dropped"),
            Signal(
                "an order was delivered again",
                process="proxy",
                f="nats_delivery",
                match=r'"delivery":\s*[2-9]',
            ),
        ),
        "ack-before-commit": (
            Signal("the consumer was crashed", process="nemesis", f="crash", match=_APPLIED),
            Signal(
                "acks reached the broker (the lost order's before its booking committed)",
                process="proxy",
                f="nats_ack",
                match=r'"proxy":\s*"consumer-nats"',
            ),
            Signal(
                "the consumer was started again",
                process="service:consumer",
                f="start",
                match=r'"restart":\s*true',
            ),
        ),
        "gateway-retry-no-key": (
            Signal(
                "a fault on the consumer's gateway link",
                process="nemesis",
                match=_APPLIED + r',\s*"target":\s*"link:consumer-gateway"',
            ),
            Signal(
                "a gateway call failed and the consumer retried the charge",
                process="consumer",
                type="info",
                f="charge",
            ),
            Signal(
                "the gateway executed a charge that carried no idempotency key",
                process=HARNESS,
                f="final_state",
                match=r'"idempotency_key":\s*null',
            ),
        ),
        "wall-clock-dedupe": (
            Signal(
                "the consumer's wall clock was skewed",
                process="nemesis",
                f="clock_skew",
                match=_APPLIED,
            ),
            Signal("an ack was lost", process="proxy", f="frame_dropped"),
            Signal(
                "an order was delivered again",
                process="proxy",
                f="nats_delivery",
                match=r'"delivery":\s*[2-9]',
            ),
        ),
    }
    subjects = {
        "orders": Subject(
            nats_subject="orders.new",
            stream="ORDERS",
            consume_link="consumer-nats",
            publish_link="producer-nats",
        )
    }
    settle_timeout_s = 30.0
    warm_services = True  # all its state: tables of one database, one stream
    # What its three services import (docs/sweep.md, "The zygote"), forked on warm workers.
    zygote_preload = (
        "asyncio",
        "json",
        "http.client",
        "http.server",
        "urllib.request",
        "psycopg",
        "psycopg.conninfo",
        "nats",
        "nats.errors",
        "nats.js.api",
        "ground.errors",
    )
    task = TaskSpec(
        service="consumer",
        summary="the payments consumer: charge every order exactly once, however often the "
        "broker delivers it",
        env=("NATS_URL", "PG_DSN", "GATEWAY_URL", "ACK_WAIT_S", "ORDERS_STREAM", "ORDERS_SUBJECT"),
        libraries=("nats-py", "psycopg[binary]"),
        solution="consumer.py",
        private_sections=("The golden implementation", "Variants"),
        side_effect="charge_customer",
        budgets=Budgets(settle_p95_s=15.0, cpu_s=10.0),
    )

    def orders(self, ctx: RunContext) -> list[dict[str, Any]]:
        rng = ctx.rng("orders")
        return [
            {
                "order_id": f"o-{i:03d}",
                "account": f"acct-{rng.randint(1, ACCOUNTS)}",
                "amount_cents": rng.randint(100, 10_000),
            }
            for i in range(1, ORDERS + 1)
        ]

    async def setup(self, ctx: RunContext) -> None:
        port_file = ctx.run_dir / "gateway.port"
        gateway = await ctx.start_service(  # starts while Postgres and NATS come up
            "gateway",
            [
                ctx.python(),
                "-m",
                "scenarios.payments.gateway",
                "0",  # the gateway binds a port of the kernel's choosing: no race for it
                str(ctx.run_dir / "gateway.jsonl"),
                str(port_file),
            ],
            ready_line="gateway listening",
            wait=False,
        )
        pg = await ctx.postgres()
        nats = await ctx.nats()
        await ctx.ready(gateway)
        gateway_port = int(port_file.read_text(encoding="utf-8"))
        names = await self._isolate(ctx, pg.dsn, nats.url)
        role = await self._role(ctx, pg)
        users = await self._broker(ctx, nats)
        nats_for_consumer = ctx.add_link("consumer-nats", f"{nats.host}:{nats.port}")
        pg_for_consumer = ctx.add_link("consumer-postgres", f"{pg.host}:{pg.port}")
        gateway_for_consumer = ctx.add_link("consumer-gateway", f"127.0.0.1:{gateway_port}")
        nats_for_producer = ctx.add_link("producer-nats", f"{nats.host}:{nats.port}")
        ctx.state.update(
            pg=pg,
            nats=nats,
            gateway=f"http://127.0.0.1:{gateway_port}",
            producer_nats=users["producer"].url(nats_for_producer),
            orders=self.orders(ctx),
            names=names,
        )
        consumer = await ctx.start_service(
            "consumer",
            [ctx.python(), "-m", "scenarios.payments.consumer"],
            env={
                **names,
                "VARIANT": ctx.variant,
                "NATS_URL": users["consumer"].url(nats_for_consumer),
                "PG_DSN": role.dsn(pg_for_consumer, pg.database, schema=ctx.state["schema"]),
                "GATEWAY_URL": f"http://{gateway_for_consumer}",
                "ACK_WAIT_S": str(ACK_WAIT_S),
            },
            ready_line="consumer ready",
            wait=False,
        )
        await ctx.ready(consumer)

    async def _role(self, ctx: RunContext, pg: PostgresService) -> PostgresRole:
        """The consumer's own role: it may connect and create (and so own) tables in the
        run's schema, nothing else; the harness keeps the superuser (README, "The
        database"), and reads the consumer's tables as its reader (``ctx.state["reader"]``),
        which never runs anything of the consumer's."""
        schema = ctx.state["schema"]
        name = "payments_consumer" if schema == "public" else f"{schema}_consumer"
        role = await trio.to_thread.run_sync(
            functools.partial(create_role, pg, name, schema=schema)
        )
        if ctx.shared_services:

            async def drop() -> None:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await trio.to_thread.run_sync(drop_role, pg, name)

            ctx.stack.push_async_callback(drop)
        ctx.state["reader"] = await ctx.postgres_reader(pg, writers={schema: [name]})
        return role

    async def _broker(self, ctx: RunContext, nats: NatsService) -> dict[str, NatsUser]:
        """The stream, made by the harness, and a NATS user each for the consumer and the
        producer with only what the spec gives them (README, "The broker"): the consumer
        consumes and acks through its durable, the producer publishes and reads its
        confirmations on an inbox no one else can read or answer."""
        subject = ctx.subject("orders")
        await trio.to_thread.run_sync(
            _create_stream, nats.url, subject.stream, subject.nats_subject
        )
        return await nats.add_users(
            {
                "consumer": jetstream_consumer(subject.stream, DURABLE),
                "producer": jetstream_publisher(
                    subject.stream, subject.nats_subject, PRODUCER_INBOX
                ),
            }
        )

    async def _isolate(self, ctx: RunContext, dsn: str, nats_url: str) -> dict[str, str]:
        """On shared (external) services, give this run a schema and a stream of its own,
        dropped when the run ends. Embedded services are the run's alone: fixed names."""
        if not ctx.shared_services:
            ctx.state["schema"] = "public"
            return {}
        token = secrets.token_hex(4)
        schema, stream, subject = f"chaos_{token}", f"ORDERS_{token}", f"orders_{token}.new"
        ctx.state["schema"] = schema
        ctx.subjects["orders"] = replace(
            ctx.subjects["orders"], nats_subject=subject, stream=stream
        )
        await trio.to_thread.run_sync(_execute, dsn, f"CREATE SCHEMA {schema}")

        async def drop() -> None:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await trio.to_thread.run_sync(_execute, dsn, f"DROP SCHEMA {schema} CASCADE")
                await trio.to_thread.run_sync(_delete_stream, nats_url, stream)

        ctx.stack.push_async_callback(drop)
        return {"ORDERS_STREAM": stream, "ORDERS_SUBJECT": subject}

    async def workload(self, ctx: RunContext) -> None:
        orders_file = ctx.run_dir / "orders.json"
        orders_file.write_text(json.dumps(ctx.state["orders"]))
        await ctx.run_to_completion(
            "producer",
            [ctx.python(), "-m", "scenarios.payments.producer"],
            env={
                **ctx.state["names"],
                "NATS_URL": ctx.state["producer_nats"],
                "NATS_INBOX_PREFIX": PRODUCER_INBOX,
                "ORDERS_FILE": str(orders_file),
            },
        )

    def planned_work(self, ctx: RunContext) -> list[PlannedWork]:
        """The producer publishes every order (``chaos.workload``)."""
        keys = tuple(str(o["order_id"]) for o in ctx.state["orders"])
        return [PlannedWork("producer", "publish", keys, unit="order")]

    def published(self, ctx: RunContext) -> list[str]:
        seen: dict[str, None] = {}
        for e in ctx.recorder.events:
            if e["process"] == "producer" and e["type"] == "ok" and e["f"] == "publish":
                seen[str(e["value"])] = None
        return list(seen)

    async def _rows(self, ctx: RunContext, table: str, columns: list[str]) -> list[dict[str, Any]]:
        """The consumer's table as the harness's reader sees it: plain data or ``Unreadable``
        (a table it never made reads as empty)."""
        reader = ctx.state["reader"]
        rows = await trio.to_thread.run_sync(reader.rows, ctx.state["schema"], table, columns)
        return rows or []

    async def settled(self, ctx: RunContext) -> bool | Stuck:
        """Every published order charged in Postgres and nothing pending at the broker.
        ``STUCK`` when an order has no charge and the broker holds nothing for the consumer
        (no message undelivered, none delivered and unacked): no redelivery will come, so
        nothing will book it (an order acked before its booking committed, lost with a
        crash); the harness ends the wait once that has held for ``settle_stuck_s``.
        While orders are missing the broker is asked at most every ``_PROBE_EVERY_S`` (the
        checks come after every burst of events; its last answer stands in between)."""
        published = set(self.published(ctx))
        try:
            rows = await self._rows(ctx, "charges", ["order_id"])
        except Unreadable:
            return False  # final_state says why (a lock may also just be taking its time)
        charged = published <= {r["order_id"] for r in rows}
        if not ctx.state["nats"].monitor_port:
            return charged
        now = trio.current_time()
        last = ctx.state.get("broker_probe")
        if charged or last is None or now - last[0] >= _PROBE_EVERY_S:
            last = (now, await self._broker_pending(ctx))
            ctx.state["broker_probe"] = last
        consumers, pending = last[1]
        if charged:
            return not pending
        return STUCK if consumers and not pending else False

    async def _broker_pending(self, ctx: RunContext) -> tuple[int, bool]:
        """How many consumers the orders stream has, and whether any holds a message
        undelivered or delivered and unacked (the nats-server's monitoring endpoint)."""
        nats = ctx.state["nats"]
        jsz = await trio.to_thread.run_sync(
            _get_json, f"http://{nats.host}:{nats.monitor_port}/jsz?consumers=true&accounts=true"
        )
        stream_name = ctx.subject("orders").stream
        consumers = [
            consumer
            for account in jsz.get("account_details", [])
            for stream in account.get("stream_detail", [])
            if stream.get("name") == stream_name
            for consumer in stream.get("consumer_detail", [])
        ]
        pending = any(c.get("num_ack_pending") or c.get("num_pending") for c in consumers)
        return len(consumers), pending

    def side_effects(self, name: str, final_state: Mapping[str, Any]) -> Counter[str]:
        """``charge_customer``: charges the gateway executed, per order id."""
        if name != "charge_customer":
            return super().side_effects(name, final_state)
        return Counter(str(c["order_id"]) for c in final_state["gateway_charges"])

    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        charges = await self._rows(ctx, "charges", ["order_id", "amount_cents"])
        ledger = await self._rows(ctx, "ledger", ["id", "order_id", "account", "amount_cents"])
        balances = await self._rows(ctx, "balances", ["account", "balance_cents"])
        charges.sort(key=lambda r: str(r["order_id"]))
        ledger.sort(key=lambda r: str(r["id"]).rjust(20))
        balances.sort(key=lambda r: str(r["account"]))
        gateway = await trio.to_thread.run_sync(_get_json, ctx.state["gateway"] + "/charges")
        return {
            "published": self.published(ctx),
            "orders": {
                o["order_id"]: {"account": o["account"], "amount_cents": o["amount_cents"]}
                for o in ctx.state["orders"]
            },
            "gateway_charges": [
                {k: c[k] for k in ("order_id", "idempotency_key", "amount_cents")} for c in gateway
            ],
            "charges": [
                {"order_id": r["order_id"], "amount_cents": int(r["amount_cents"])} for r in charges
            ],
            "ledger": [
                {
                    "order_id": r["order_id"],
                    "account": r["account"],
                    "amount_cents": int(r["amount_cents"]),
                }
                for r in ledger
            ],
            "balances": {r["account"]: int(r["balance_cents"]) for r in balances},
        }


SCENARIO = Payments()

__all__ = ["SCENARIO", "Payments"]
