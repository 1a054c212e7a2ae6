"""An honest payments consumer written from the task folder alone (TASK.md, README.md), as a
person would: one file, importing nats-py and psycopg as installed for it (not bundled).

Exactly once by construction: the gateway's idempotency key is the order id (the same on
every redelivery, in every process), the booking is one transaction that inserts the
`charges` row only if the order has none (a unique index) and only then its ledger entry and
balance, and the message is acked after both. Any error: drop the connection, try again.
"""

import asyncio
import json
import os
import signal
import sys
import urllib.error
import urllib.request

import nats
import psycopg
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

STREAM = os.environ.get("ORDERS_STREAM", "ORDERS")
SUBJECT = os.environ.get("ORDERS_SUBJECT", "orders.new")
ACK_WAIT_S = float(os.environ["ACK_WAIT_S"])
GATEWAY = os.environ["GATEWAY_URL"].rstrip("/")
TIMEOUT_S = 2.0
SCHEMA = [
    "CREATE TABLE IF NOT EXISTS charges (order_id text, account text, amount_cents bigint)",
    "CREATE UNIQUE INDEX IF NOT EXISTS charges_one_per_order ON charges (order_id)",
    "CREATE TABLE IF NOT EXISTS ledger (id bigserial, order_id text, account text, "
    "amount_cents bigint)",
    "CREATE TABLE IF NOT EXISTS balances (account text PRIMARY KEY, balance_cents bigint)",
]


def charge(order):
    """POST the charge (idempotent: the key is the order id); raises until it answers."""
    body = json.dumps({"order_id": order["order_id"], "amount_cents": order["amount_cents"],
                       "idempotency_key": order["order_id"]}).encode()  # fmt: skip
    request = urllib.request.Request(
        f"{GATEWAY}/charge", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        response.read()


#: What a dependency that is cut, slow or reset raises: drop the connection, try again.
RETRIED = (TimeoutError, OSError, urllib.error.URLError, psycopg.Error, nats.errors.Error)


class Books:
    """The database, one connection at a time, dropped on any error."""

    def __init__(self):
        self.conn = None

    async def _connection(self):
        if self.conn is None or self.conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                os.environ["PG_DSN"], connect_timeout=3, autocommit=False
            )
            async with conn.transaction():
                for statement in SCHEMA:
                    await conn.execute(statement)
            self.conn = conn
        return self.conn

    async def _book(self, order):
        conn = await self._connection()
        async with conn.transaction():
            cur = await conn.execute(
                "INSERT INTO charges (order_id, account, amount_cents) VALUES (%s, %s, %s) "
                "ON CONFLICT (order_id) DO NOTHING RETURNING order_id",
                (order["order_id"], order["account"], order["amount_cents"]),
            )
            if await cur.fetchone() is None:
                return  # booked already (an earlier delivery whose ack was lost)
            await conn.execute(
                "INSERT INTO ledger (order_id, account, amount_cents) VALUES (%s, %s, %s)",
                (order["order_id"], order["account"], order["amount_cents"]),
            )
            await conn.execute(
                "INSERT INTO balances (account, balance_cents) VALUES (%s, %s) "
                "ON CONFLICT (account) DO UPDATE "
                "SET balance_cents = balances.balance_cents + EXCLUDED.balance_cents",
                (order["account"], order["amount_cents"]),
            )

    async def book(self, order):
        try:
            await asyncio.wait_for(self._book(order), TIMEOUT_S * 2)
        except BaseException:
            self.drop()
            raise

    def drop(self):
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.pgconn.finish()
            except Exception:
                pass


async def handle(msg, books):
    order = json.loads(msg.data)
    while True:
        try:
            await asyncio.to_thread(charge, order)
            await books.book(order)
            await msg.ack()
            return
        except RETRIED as exc:
            print(f"retrying {order['order_id']}: {type(exc).__name__}: {exc}", flush=True)
            await asyncio.sleep(0.2)


async def main():
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: os._exit(0))
    nc = await nats.connect(
        os.environ["NATS_URL"], max_reconnect_attempts=-1, reconnect_time_wait=0.2,
        connect_timeout=2,
    )  # fmt: skip
    js = nc.jetstream(timeout=TIMEOUT_S)
    while True:
        try:
            await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT],
                                             duplicate_window=120))  # fmt: skip
            break
        except nats.js.errors.BadRequestError:
            break  # it exists already
        except (TimeoutError, nats.errors.Error):
            await asyncio.sleep(0.2)
    config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S, max_deliver=-1)
    while True:
        try:
            sub = await js.pull_subscribe(SUBJECT, durable="charger", stream=STREAM,
                                          config=config)  # fmt: skip
            break
        except (TimeoutError, nats.errors.Error):
            await asyncio.sleep(0.2)
    books = Books()
    print("consumer ready", flush=True)
    while True:
        try:
            messages = await sub.fetch(10, timeout=1)
        except (TimeoutError, nats.errors.TimeoutError):
            continue
        except nats.errors.Error:
            await asyncio.sleep(0.2)
            continue
        for msg in messages:
            await handle(msg, books)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
