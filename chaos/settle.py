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

A check may also answer ``STUCK``: not settled, and it cannot settle by waiting (a payments
order lost for good: nothing pending at the broker, no charge for it). The detector then gives
up early instead of waiting out the scenario's ``settle_timeout_s``: once every check for
``stuck_s`` answered ``STUCK`` (checked at each event, as always, and at least every
``poll_s``) while nothing was timed pending (``busy``: a fault still to fire at a time, to heal
after a delay, a crashed service still to come back). Any other answer, or ``busy``, starts
that wait again. Events alone do not: an idle consumer's polls are events too. ``STUCK`` is
falsy, so code that reads the answer as a bool reads "not settled".
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
#: How long every check must answer ``STUCK``, nothing timed pending, to end the wait (the
#: default of ``Scenario.settle_stuck_s``).
STUCK_S = 2.0


class Stuck:
    """The type of ``STUCK`` (one instance): falsy, and says what it is."""

    _instance: Stuck | None = None

    def __new__(cls) -> Stuck:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "STUCK"


#: ``Scenario.settled``'s third answer: not settled, and waiting will not change that
#: (nothing left in the system will do the missing work).
STUCK = Stuck()


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
    check: Callable[[], Awaitable[bool | Stuck]], limit_s: float, interval_s: float = 0.2
) -> bool:
    """The former detector: ``check`` every ``interval_s`` until it holds twice in a row
    (``STUCK`` counts as false: it waits out ``limit_s``)."""
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
    check: Callable[[], Awaitable[bool | Stuck]],
    activity: Activity,
    limit_s: float,
    *,
    quiet_s: float = QUIET_S,
    poll_s: float = POLL_S,
    stuck_s: float = STUCK_S,
    busy: Callable[[], bool] = lambda: False,
) -> bool | Stuck:
    """True once ``check`` held twice with no event recorded from the start of the first to
    the end of the second, except what the checks record themselves (a scenario's probe may
    record its requests); ``STUCK`` once every check for ``stuck_s`` answered ``STUCK`` with
    ``busy()`` false; False if neither happened within ``limit_s``. A check that raises
    ``OSError`` or ``ServiceError`` counts as false."""
    own = 0  # events recorded while a check ran: the check's own

    def outside() -> int:
        return activity.count - own

    with trio.move_on_after(limit_s):
        first: int | None = None  # events outside checks when a passing check started
        stuck_since: float | None = None  # when the checks began to answer STUCK
        while True:
            await _quiet(activity, quiet_s)
            mark, before = outside(), activity.count
            try:
                answer = await check()
            except (OSError, ServiceError):
                answer = False
            own += activity.count - before
            if answer is STUCK and not busy():
                first = None
                if stuck_since is None:
                    stuck_since = trio.current_time()
                elif trio.current_time() - stuck_since >= stuck_s:
                    return STUCK
                with trio.move_on_after(poll_s):
                    await activity.wait_changed()
                continue
            stuck_since = None
            ok = bool(answer)
            if ok and first is not None and outside() == first:
                return True
            if ok:
                first = mark
                continue  # confirm after another quiet_s
            first = None
            with trio.move_on_after(poll_s):
                await activity.wait_changed()
    return False
