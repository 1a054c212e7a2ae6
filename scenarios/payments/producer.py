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
from typing import Any

from nats.errors import Error as NatsError

from scenarios.payments._broker import SUBJECT, connect
from scenarios.payments._oplog import op


async def publish(js: Any, order: dict[str, object]) -> bool:
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
    nc, js = await connect(os.environ["NATS_URL"], os.environ.get("NATS_INBOX_PREFIX", "_INBOX"))
    for order in orders:
        await publish(js, order)
        await asyncio.sleep(interval)
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(os.environ["ORDERS_FILE"]).read_text(encoding="utf-8"))))
