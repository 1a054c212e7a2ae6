"""A starting point for the payments consumer: it runs, but charges nothing yet.

It reads its configuration, says it is ready and waits for SIGTERM. Replace the body of
``main`` with the consumer TASK.md describes.
"""

from __future__ import annotations

import asyncio
import os
import signal


async def main() -> None:
    nats_url = os.environ["NATS_URL"]  # the broker (JetStream)
    pg_dsn = os.environ["PG_DSN"]  # the database
    gateway_url = os.environ["GATEWAY_URL"]  # POST {gateway_url}/charge
    ack_wait = float(os.environ.get("ACK_WAIT_S", "2"))
    stream = os.environ.get("ORDERS_STREAM", "ORDERS")
    subject = os.environ.get("ORDERS_SUBJECT", "orders.new")
    del nats_url, pg_dsn, gateway_url, ack_wait, stream, subject  # TODO: use them

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("consumer ready", flush=True)
    await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
