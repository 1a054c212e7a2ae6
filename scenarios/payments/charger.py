"""The golden charger: charge each order once, however often the broker delivers it.

The reference implementation of the payments consumer (``consumer.py`` runs it). For every
JetStream delivery of an order it (1) skips the order if Postgres already holds
its charge, (2) asks the gateway to charge with the order id as idempotency key, (3) writes
the charge, the ledger entry and the balance in one transaction (``charges.order_id`` is
unique), and (4) acks only after the commit. Failures are retried with backoff; an order
whose ack is lost is simply delivered again and skipped at step 1.

The defective variants subclass it (``variants.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Awaitable
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
from nats.errors import Error as NatsError

from scenarios.payments._oplog import op

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    order_id     text PRIMARY KEY,
    account      text NOT NULL,
    amount_cents bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    id           bigserial PRIMARY KEY,
    order_id     text NOT NULL,
    account      text NOT NULL,
    amount_cents bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS balances (
    account       text PRIMARY KEY,
    balance_cents bigint NOT NULL
);
"""


#: Client-side deadline (seconds) of one database step (a transaction, or connecting): past
#: it the connection is reset and the step retried. ``statement_timeout`` is enforced by the
#: server, so it cannot help when the server's reply is what went missing.
DB_DEADLINE_S = 5.0
#: TCP keepalives and ``tcp_user_timeout`` of the database connection (libpq parameters).
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 3,
    "tcp_user_timeout": 5000,
}
#: What a gateway call may raise that is worth retrying with the same idempotency key:
#: socket errors and timeouts, a garbled or cut response (``http.client.HTTPException``:
#: ``BadStatusLine``, ``RemoteDisconnected``, ``IncompleteRead``, ...), a body that is not JSON.
GATEWAY_ERRORS = (OSError, urllib.error.URLError, http.client.HTTPException, ValueError)

T = TypeVar("T")


class Retry(Exception):
    """A step failed in a way worth trying again."""


class DatabaseStuck(Retry):
    """A database step got no answer within its deadline; the connection was reset."""


class GoldenCharger:
    """The reference implementation."""

    description = (
        "idempotency key per order, enforced in Postgres and at the gateway; "
        "ack after commit; retries with backoff"
    )
    schema = SCHEMA

    def __init__(self, dsn: str, gateway: str) -> None:
        self.dsn = dsn
        self.gateway = gateway
        self.db: psycopg.AsyncConnection[Any] | None = None
        self.db_deadline_s = DB_DEADLINE_S

    async def db_step(self, step: Awaitable[T]) -> T:
        """Run one database step under the client-side deadline: a silent or desynchronised
        connection (its reply lost, say) is reset and ``DatabaseStuck`` raised, never waited
        on forever."""
        try:
            async with asyncio.timeout(self.db_deadline_s):
                return await step
        except TimeoutError:
            await self.reset_db()
            raise DatabaseStuck(
                f"database: no answer within {self.db_deadline_s:g}s, connection reset"
            ) from None

    async def connect_db(self) -> psycopg.AsyncConnection[Any]:
        if self.db is not None and not self.db.closed:
            return self.db
        options = psycopg.conninfo.conninfo_to_dict(self.dsn).get("options") or ""
        self.db = await psycopg.AsyncConnection.connect(
            self.dsn,
            connect_timeout=2,
            autocommit=False,
            options=f"{options} -c statement_timeout=3000".strip(),
            **KEEPALIVES,
        )
        async with self.db.transaction():
            await self.db.execute(self.schema)
        return self.db

    async def reset_db(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await db.close()
            except Exception:
                pass

    async def already_charged(self, order_id: str) -> bool:
        db = await self.connect_db()
        async with db.transaction():
            cur = await db.execute("SELECT 1 FROM charges WHERE order_id = %s", (order_id,))
            return await cur.fetchone() is not None

    def gateway_request(self, order: dict[str, Any]) -> dict[str, Any]:
        return {
            "order_id": order["order_id"],
            "amount_cents": order["amount_cents"],
            "idempotency_key": order["order_id"],
        }

    async def charge_gateway(self, order: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(self.gateway_request(order)).encode()

        def post() -> dict[str, Any]:
            request = urllib.request.Request(
                self.gateway + "/charge",
                data=body,
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=2) as response:
                result: dict[str, Any] = json.loads(response.read())
                return result

        try:
            return await asyncio.to_thread(post)
        except GATEWAY_ERRORS as exc:
            raise Retry(f"gateway: {type(exc).__name__}: {exc}") from exc

    async def record(self, order: dict[str, Any]) -> None:
        db = await self.connect_db()
        async with db.transaction():
            cur = await db.execute(
                "INSERT INTO charges (order_id, account, amount_cents) VALUES (%s, %s, %s)"
                " ON CONFLICT (order_id) DO NOTHING",
                (order["order_id"], order["account"], order["amount_cents"]),
            )
            if cur.rowcount == 1:
                await self._book(db, order)

    async def _book(self, db: psycopg.AsyncConnection[Any], order: dict[str, Any]) -> None:
        await db.execute(
            "INSERT INTO ledger (order_id, account, amount_cents) VALUES (%s, %s, %s)",
            (order["order_id"], order["account"], order["amount_cents"]),
        )
        await db.execute(
            "INSERT INTO balances (account, balance_cents) VALUES (%s, %s)"
            " ON CONFLICT (account) DO UPDATE"
            " SET balance_cents = balances.balance_cents + EXCLUDED.balance_cents",
            (order["account"], order["amount_cents"]),
        )

    async def after_gateway(self, msg: Any, order_id: str) -> bool:
        """Called once the gateway has charged, before the booking; True if it acked the
        message. The golden consumer does nothing here: it acks only after the commit."""
        return False

    async def ack(self, msg: Any, order_id: str) -> None:
        try:
            await msg.ack()
        except (NatsError, TimeoutError) as exc:
            op("info", "ack", order_id, error=type(exc).__name__)

    async def handle(self, msg: Any) -> None:
        order = json.loads(msg.data)
        order_id = order["order_id"]
        delivery = msg.metadata.num_delivered
        op("invoke", "charge", order_id, delivery=delivery)
        acked = False
        for attempt in range(1000):
            try:
                if await self.db_step(self.already_charged(order_id)):
                    op("ok", "charge", order_id, skipped=True, delivery=delivery)
                else:
                    await self.charge_gateway(order)
                    acked = acked or await self.after_gateway(msg, order_id)
                    await self.db_step(self.record(order))
                    op("ok", "charge", order_id, delivery=delivery)
                break
            except (Retry, psycopg.Error, OSError) as exc:
                op("info", "charge", order_id, error=f"{type(exc).__name__}: {exc}"[:200])
                if isinstance(exc, psycopg.Error | OSError):
                    await self.reset_db()
                await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        if not acked:
            await self.ack(msg, order_id)  # only after the commit: a lost ack means a redelivery
