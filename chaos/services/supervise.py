"""Supervision: a service under test that exits on its own is restarted, as in production.

::

    start ──► runs ──► exits ──┬─ the harness stopped or killed it (a crash fault, the run's
                               │  end): not ours; wait for whoever starts it next
                               └─ on its own (died): record ``restart`` (code, attempt,
                                  backoff), sleep the backoff, start it again (ready probe);
                                  a start that lived ``reset_after_s`` resets the backoff
                                  (a clean exit, code 0, only with ``clean_exit``)

The supervisor reaches the process only through ``Supervisable`` (``ManagedProcess``
satisfies it), so its decisions are unit-tested on a fake under trio's ``MockClock``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from ground.errors import ConfigError, ServiceError


@dataclass(frozen=True)
class RestartPolicy:
    """How a supervised service is restarted after it exits on its own.

    The n-th restart in a row waits ``initial_backoff_s * multiplier**(n-1)``, at most
    ``max_backoff_s``; a start that stayed up ``reset_after_s`` seconds starts the count
    again. ``max_restarts`` (None: no limit) bounds the restarts of one run.
    ``RestartPolicy.never()`` leaves a service that exits dead (the run sees it). Like
    systemd's ``Restart=on-failure``, a clean exit (code 0) is left alone unless
    ``clean_exit`` is set (``Restart=always``).
    """

    restart: bool = True
    clean_exit: bool = False
    initial_backoff_s: float = 0.1
    multiplier: float = 2.0
    max_backoff_s: float = 2.0
    reset_after_s: float = 10.0
    max_restarts: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.initial_backoff_s <= self.max_backoff_s:
            raise ConfigError(
                f"restart policy: need 0 <= initial_backoff_s <= max_backoff_s, got "
                f"{self.initial_backoff_s} and {self.max_backoff_s}"
            )
        if self.multiplier < 1:
            raise ConfigError(f"restart policy: multiplier must be >= 1, got {self.multiplier}")
        if not self.reset_after_s > 0:
            raise ConfigError(
                f"restart policy: reset_after_s must be > 0, got {self.reset_after_s}"
            )
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ConfigError(f"restart policy: max_restarts must be >= 0, got {self.max_restarts}")

    @classmethod
    def never(cls) -> RestartPolicy:
        return cls(restart=False)

    def backoff(self, streak: int) -> float:
        """The wait before restart number ``streak`` of a run of quick exits (1-based)."""
        return float(
            min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (streak - 1))
        )


class Supervisable(Protocol):
    """What the supervisor needs of a process (``chaos.services.ManagedProcess``)."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def starts(self) -> int: ...

    @property
    def exited(self) -> trio.Event: ...

    @property
    def died(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    async def start(self, *, wait_ready: bool = True) -> bool: ...

    async def wait_started(self, after: int) -> None: ...


#: ``record(f, value)``: one supervision event (``restart``, ``start``, ``gave_up``).
Record = Callable[[str, dict[str, Any]], None]


async def supervise(process: Supervisable, policy: RestartPolicy, record: Record) -> None:
    """Watch ``process`` for as long as the caller's scope lives, restarting it per ``policy``
    whenever it exits on its own. Exits the harness caused are left to the harness."""
    if not policy.restart:
        return
    streak = 0
    restarts = 0
    while True:
        starts = process.starts
        born = trio.current_time()
        await process.exited.wait()
        if not process.died or (process.returncode == 0 and not policy.clean_exit):
            # Stopped or killed by the harness (a crash fault restarts it itself), or done.
            await process.wait_started(after=starts)
            continue
        if trio.current_time() - born >= policy.reset_after_s:
            streak = 0
        if policy.max_restarts is not None and restarts >= policy.max_restarts:
            record("gave_up", {"code": process.returncode, "restarts": restarts})
            return
        streak += 1
        restarts += 1
        delay = policy.backoff(streak)
        record(
            "restart",
            {"code": process.returncode, "attempt": streak, "backoff_s": round(delay, 3)},
        )
        await trio.sleep(delay)
        if process.starts != starts:
            continue  # someone else started it meanwhile (a crash fault's heal)
        try:
            started = await process.start()
        except ServiceError:
            continue  # it died again before it was ready (or never got ready): next round
        if started:  # (not when a crash fault killed it meanwhile: that fault restarts it)
            record("start", {"restart": True, "supervised": True})


__all__ = ["Record", "Supervisable", "supervise"]
