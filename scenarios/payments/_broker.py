"""The JetStream connection the producer and the consumer share: settings and the stream."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import nats
from nats.errors import Error as NatsError

#: Per-run names when the broker is shared (an external NATS); these defaults otherwise.
STREAM = os.environ.get("ORDERS_STREAM", "ORDERS")
SUBJECT = os.environ.get("ORDERS_SUBJECT", "orders.new")


async def connect(url: str, inbox_prefix: str = "_INBOX") -> tuple[Any, Any]:
    """Connect with a short ping interval (a blackholed link is noticed in ~2 s, not the
    default 120 s) and endless reconnects; make sure the stream exists (the harness made it:
    adding it again with the same configuration is a no-op). ``inbox_prefix``: where replies
    come (the producer's is its own). (client, jetstream)."""
    nc = await nats.connect(
        url,
        inbox_prefix=inbox_prefix,
        ping_interval=1,
        max_outstanding_pings=2,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        connect_timeout=2,
    )
    js = nc.jetstream(timeout=2)
    while True:
        try:
            await js.add_stream(name=STREAM, subjects=[SUBJECT], duplicate_window=120)
            return nc, js
        except (NatsError, TimeoutError):
            await asyncio.sleep(0.2)
