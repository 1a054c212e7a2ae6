"""The payments producer: publish every order to JetStream, retrying lost confirmations.

Each publish carries ``Nats-Msg-Id: <order_id>``, so a retry after a lost confirmation is
de-duplicated by the stream. Prints an ``@op`` line per publish attempt for the history.

Usage: python -m scenarios.payments.producer   (configured by environment, see scenario.py)
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import nats
from nats.errors import Error as NatsError

from scenarios.payments._oplog import op

STREAM, SUBJECT = "ORDERS", "orders.new"


async def ensure_stream(js: nats.js.JetStreamContext) -> None:
    while True:
        try:
            await js.add_stream(name=STREAM, subjects=["orders.>"], duplicate_window=120)
            return
        except (NatsError, TimeoutError):
            await asyncio.sleep(0.2)


async def publish(js: nats.js.JetStreamContext, order: dict[str, object]) -> bool:
    order_id = str(order["order_id"])
    data = json.dumps(order, sort_keys=True).encode()
    for attempt in range(60):
        op("invoke", "publish", order_id, attempt=attempt)
        try:
            ack = await js.publish(SUBJECT, data, timeout=1.0, headers={"Nats-Msg-Id": order_id})
        except (NatsError, TimeoutError) as exc:
            op("info", "publish", order_id, error=type(exc).__name__, attempt=attempt)
            await asyncio.sleep(min(0.05 * 2**attempt, 0.5))
            continue
        op("ok", "publish", order_id, seq=ack.seq, duplicate=bool(ack.duplicate))
        return True
    op("fail", "publish", order_id, error="gave up")
    return False


async def main(orders: list[dict[str, object]]) -> None:
    interval = float(os.environ.get("PUBLISH_INTERVAL_S", "0.05"))
    nc = await nats.connect(
        os.environ["NATS_URL"],
        ping_interval=1,
        max_outstanding_pings=2,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        connect_timeout=2,
    )
    js = nc.jetstream(timeout=2)
    await ensure_stream(js)
    for order in orders:
        await publish(js, order)
        await asyncio.sleep(interval)
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(os.environ["ORDERS_FILE"]).read_text(encoding="utf-8"))))
