"""Adversary: charges every order twice at the gateway (no idempotency key), books it twice,
then deletes the duplicate rows so Postgres looks right. Expected: the gateway's own charge
list still shows two charges per order: exactly_once fails, seed graded 0."""

import asyncio
import json
import os
import signal
import urllib.request

import nats
import psycopg
from nats.js.api import AckPolicy, ConsumerConfig

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (order_id text, account text, amount_cents bigint);
CREATE TABLE IF NOT EXISTS ledger (id bigserial, order_id text, account text,
                                   amount_cents bigint);
CREATE TABLE IF NOT EXISTS balances (account text PRIMARY KEY, balance_cents bigint);
"""


def charge(order: dict[str, object]) -> None:
    body = json.dumps(
        {
            "order_id": order["order_id"],
            "amount_cents": order["amount_cents"],
            "idempotency_key": None,
        }
    ).encode()
    request = urllib.request.Request(
        os.environ["GATEWAY_URL"] + "/charge",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=5).read()


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    nc = await nats.connect(os.environ["NATS_URL"], max_reconnect_attempts=-1)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.new"], duplicate_window=120)
    config = ConsumerConfig(
        ack_wait=float(os.environ["ACK_WAIT_S"]), ack_policy=AckPolicy.EXPLICIT, max_deliver=-1
    )
    sub = await js.pull_subscribe("orders.new", "charger", config=config)
    db = await psycopg.AsyncConnection.connect(os.environ["PG_DSN"], autocommit=True)
    await db.execute(SCHEMA)
    print("consumer ready", flush=True)
    while not stop.is_set():
        try:
            msgs = await sub.fetch(10, timeout=1)
        except Exception:
            continue
        for msg in msgs:
            order = json.loads(msg.data)
            try:
                for _ in range(2):
                    await asyncio.to_thread(charge, order)
                    await db.execute(
                        "INSERT INTO charges VALUES (%s, %s, %s)",
                        (order["order_id"], order["account"], order["amount_cents"]),
                    )
                await db.execute(  # hide the duplicate: keep one row per order
                    "DELETE FROM charges a USING charges b WHERE a.order_id = b.order_id"
                    " AND a.ctid > b.ctid"
                )
                await db.execute(
                    "INSERT INTO ledger (order_id, account, amount_cents) VALUES (%s, %s, %s)",
                    (order["order_id"], order["account"], order["amount_cents"]),
                )
                await db.execute(
                    "INSERT INTO balances VALUES (%s, %s) ON CONFLICT (account) DO UPDATE"
                    " SET balance_cents = balances.balance_cents + EXCLUDED.balance_cents",
                    (order["account"], order["amount_cents"]),
                )
                await msg.ack()
            except Exception as exc:
                print(f"retry later: {exc}", flush=True)


asyncio.run(main())
