"""Waiting for a fault's trigger, one way per trigger type.

::

    at_time        sleep until the workload's start + offset_s
    on_connection  the link's n-th accepted connection (a connection hook; no polling)
    after_bytes    the link's byte count reaches n_bytes (polled every 5 ms: the proxy's
                   fast path counts bytes in a worker thread)
    on_message     the subject's n-th delivery (the run counts deliveries the proxy sees)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from chaos.nemesis.protocol import NemesisContext
from faults.triggers import AfterBytes, AtTime, OnConnection, OnMessage

#: How often ``after_bytes`` looks at the byte count.
POLL_S = 0.005

AnyTrigger = AtTime | OnConnection | AfterBytes | OnMessage


async def _at_time(ctx: NemesisContext, trigger: AtTime) -> None:
    await trio.sleep_until(ctx.workload_t0 + trigger.offset_s)


async def _on_connection(ctx: NemesisContext, trigger: OnConnection) -> None:
    link, n = ctx.link(trigger.link), trigger.n
    reached = trio.Event()

    def count(_connection: object) -> None:
        if link.connection_count >= n:
            reached.set()

    unregister = link.on_connection(count)
    try:
        if link.connection_count < n:
            await reached.wait()
    finally:
        unregister()


async def _after_bytes(ctx: NemesisContext, trigger: AfterBytes) -> None:
    link = ctx.link(trigger.link)
    while True:  # no event to wait for: the count grows in the proxy's worker threads
        if link.bytes_total >= trigger.n_bytes:
            return
        await trio.sleep(POLL_S)


async def _on_message(ctx: NemesisContext, trigger: OnMessage) -> None:
    await ctx.wait_deliveries(trigger.subject, trigger.n)


@dataclass(frozen=True)
class _Way:
    #: Raises ConfigError when the trigger names a link or subject the run does not have.
    check: Callable[[NemesisContext, Any], object]
    wait: Callable[[NemesisContext, Any], Awaitable[None]]


_WAYS: dict[str, _Way] = {
    "at_time": _Way(lambda ctx, t: None, _at_time),
    "on_connection": _Way(lambda ctx, t: ctx.link(t.link), _on_connection),
    "after_bytes": _Way(lambda ctx, t: ctx.link(t.link), _after_bytes),
    "on_message": _Way(lambda ctx, t: ctx.subject(t.subject), _on_message),
}


def check_trigger(ctx: NemesisContext, trigger: AnyTrigger) -> None:
    """The link or subject the trigger watches exists in this run (ConfigError otherwise)."""
    _WAYS[trigger.type].check(ctx, trigger)


async def wait_for(ctx: NemesisContext, trigger: AnyTrigger) -> None:
    """Return once ``trigger`` has fired."""
    await _WAYS[trigger.type].wait(ctx, trigger)
