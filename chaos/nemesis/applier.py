"""What an applier is: one per fault layer, applying a fault and handing back its heal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from chaos.nemesis.protocol import NemesisContext
from faults.kinds import FaultKind
from faults.model import FaultEvent

#: Undoes one applied fault; the nemesis runs it shielded from cancellation.
Heal = Callable[[], Awaitable[None]]

T_contra = TypeVar("T_contra", contravariant=True)


@dataclass(frozen=True)
class Applied:
    """An applied fault: how to heal it and how long it lasts.

    By default the schedule decides (its ``duration_s``, else the workload's end); a fault
    may instead heal itself after ``heal_after_s`` (a crash restarts) or stay until the run
    ends (``until_run_end``: message toxics, which spend their own count). A heal that only
    brings the system back (``when_stopped`` False: a crash's restart) is skipped, or cut
    short, when the run is stopped before its end: the teardown stops every service anyway.
    """

    heal: Heal
    heal_after_s: float | None = None
    until_run_end: bool = False
    when_stopped: bool = True


class Applier(Protocol[T_contra]):
    """Applies the fault kinds of one layer to a target (a link, subject or service)."""

    @property
    def kinds(self) -> frozenset[FaultKind]:
        """The kinds it applies: every kind ``faults.kinds.LAYER`` gives its layer."""
        ...

    async def apply(self, ctx: NemesisContext, event: FaultEvent, target: T_contra) -> Applied:
        """Apply ``event`` to ``target`` (resolved by ``TARGET_KIND``); return its heal."""
        ...


def params_of(event: FaultEvent) -> dict[str, Any]:
    """The event's parameters as plain data (defaults filled in)."""
    return event.params.model_dump()
