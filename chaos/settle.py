"""Settle detection driven by what the run records, not by a fixed poll.

A run is settled once the scenario's ``settled`` check holds twice in a row with nothing
recorded in between: no delivery, ack or publish seen by a proxy, no operation or log line
of a service, no fault step. Every recorded event wakes the detector, which then waits for
the run to be quiet for ``quiet_s`` (events come in bursts) before it checks; with no event
at all it still checks every ``poll_s`` (a state that changes without a recorded event, such
as a redelivery timer running out at the broker, is seen at the next poll).

::

    event ─► quiet_s with no event ─► check ─ false ─► wait for an event or poll_s ─┐
                                        │ true                                       │
                                        ▼                                            │
                    quiet_s ─► check again ─ true, no event since the first ─► settled
                                        └ otherwise ──────────────────────────────────┘

Two checks with no event between them replace the former "true twice, 200 ms apart": the
same guarantee (nothing moved between two consistent observations) without the fixed wait.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from ground.errors import ServiceError

#: How long the run must be quiet before a check, and between the two checks.
QUIET_S = 0.05
#: The longest time between two checks when nothing is recorded.
POLL_S = 0.2


class Activity(Protocol):
    """What the detector watches: a count of events and an event set at each new one."""

    @property
    def count(self) -> int: ...

    async def wait_changed(self) -> None: ...


async def _quiet(activity: Activity, quiet_s: float) -> None:
    """Return once no event has been recorded for ``quiet_s``."""
    while True:
        seen = activity.count
        await trio.sleep(quiet_s)
        if activity.count == seen:
            return


def polling() -> bool:
    """``CHAOS_SETTLE=poll``: the former detector (``poll_settled``), for benchmarks that
    measure against it (bench/sweep.py's baseline)."""
    return os.environ.get("CHAOS_SETTLE", "").strip().lower() == "poll"


async def poll_settled(
    check: Callable[[], Awaitable[bool]], limit_s: float, interval_s: float = 0.2
) -> bool:
    """The former detector: ``check`` every ``interval_s`` until it holds twice in a row."""
    streak = 0
    with trio.move_on_after(limit_s):
        while streak < 2:
            try:
                streak = streak + 1 if await check() else 0
            except (OSError, ServiceError):
                streak = 0
            await trio.sleep(interval_s)
        return True
    return False


async def wait_settled(
    check: Callable[[], Awaitable[bool]],
    activity: Activity,
    limit_s: float,
    *,
    quiet_s: float = QUIET_S,
    poll_s: float = POLL_S,
) -> bool:
    """True once ``check`` held twice with no event recorded from the start of the first to
    the end of the second, except what the checks record themselves (a scenario's probe may
    record its requests); False if that did not happen within ``limit_s``. A check that
    raises ``OSError`` or ``ServiceError`` counts as false."""
    own = 0  # events recorded while a check ran: the check's own

    def outside() -> int:
        return activity.count - own

    with trio.move_on_after(limit_s):
        first: int | None = None  # events outside checks when a passing check started
        while True:
            await _quiet(activity, quiet_s)
            mark, before = outside(), activity.count
            try:
                ok = await check()
            except (OSError, ServiceError):
                ok = False
            own += activity.count - before
            if ok and first is not None and outside() == first:
                return True
            if ok:
                first = mark
                continue  # confirm after another quiet_s
            first = None
            with trio.move_on_after(poll_s):
                await activity.wait_changed()
    return False
