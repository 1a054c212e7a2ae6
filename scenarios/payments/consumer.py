"""The payments consumer process: pulls orders from JetStream and hands each to a charger.

The charger is the variant's (``VARIANT``, see ``variants.py``; golden: ``charger.py``).
Environment: NATS_URL, PG_DSN, GATEWAY_URL, ACK_WAIT_S, VARIANT.
"""

from __future__ import annotations

import asyncio
import os

import psycopg
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig

from scenarios.payments._broker import SUBJECT, connect
from scenarios.payments.charger import Retry
from scenarios.payments.variants import charger_for

DURABLE = "charger"


async def main() -> None:
    charger = charger_for(os.environ.get("VARIANT", "golden"))(
        os.environ["PG_DSN"], os.environ["GATEWAY_URL"]
    )
    ack_wait = float(os.environ.get("ACK_WAIT_S", "2"))
    _, js = await connect(os.environ["NATS_URL"])
    config = ConsumerConfig(ack_wait=ack_wait, ack_policy=AckPolicy.EXPLICIT, max_deliver=-1)
    while True:
        try:
            sub = await js.pull_subscribe(SUBJECT, DURABLE, config=config)
            break
        except (NatsError, TimeoutError):
            await asyncio.sleep(0.2)
    while True:
        try:
            await charger.db_step(charger.connect_db())
            break
        except (Retry, psycopg.Error, OSError):
            await charger.reset_db()
            await asyncio.sleep(0.2)
    print("consumer ready", flush=True)
    while True:
        try:
            msgs = await sub.fetch(10, timeout=1)
        except TimeoutError:
            continue
        except NatsError:
            await asyncio.sleep(0.1)
            continue
        for msg in msgs:
            await charger.handle(msg)


if __name__ == "__main__":
    asyncio.run(main())
