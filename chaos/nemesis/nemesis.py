"""The Nemesis: for each fault, wait for its trigger, apply it, hold it, heal it.

::

    trigger ──► apply (the applier of LAYER[kind]) ──► hold ──► heal (shielded)
                                                        │
        duration_s, else the workload's end  ◄──────────┤  (lasting faults)
        heal_after_s (a crash's restart)     ◄──────────┤
        the run's end                        ◄──────────┘  (message toxics)

Every fault is a task of the nemesis nursery and its heal runs in a ``finally``: when the
hold ends, or when the nemesis is cancelled (end of run, error, Ctrl-C), the fault is
removed, shielded from that cancellation. Each step is an ``info`` operation of process
``nemesis`` in the history: ``apply``, ``heal``, or ``not_triggered``.

The run calls ``end()`` before it cancels the nemesis at its planned end; a nemesis
cancelled without it is being stopped early (a signal, an error, a timeout): then a heal
that only brings the system back (``Applied.when_stopped`` False: a crash's restart, which
waits up to a minute for the service to be ready) is skipped, or cancelled if it has begun.

A live run (``chaos.hypothesis.ChaosMachine``) has no schedule up front: ``inject`` applies a
fault now, held and healed the same way, and hands back what ends it early (a heal step).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from chaos.nemesis.applier import Applied, Applier, params_of
from chaos.nemesis.clock import ClockApplier
from chaos.nemesis.message import MessageApplier
from chaos.nemesis.network import NetworkApplier
from chaos.nemesis.process import ProcessApplier
from chaos.nemesis.protocol import NemesisContext
from chaos.nemesis.triggers import check_trigger, wait_for
from faults.kinds import LAYER, TARGET_KIND, FaultLayer, TargetKind
from faults.model import FaultEvent, FaultSchedule
from faults.triggers import AtTime
from invariants.history import NEMESIS

#: The applier of each fault layer (``faults.kinds.LAYER`` picks the layer of a kind).
APPLIERS: Mapping[FaultLayer, Applier[Any]] = {
    FaultLayer.NETWORK: NetworkApplier(),
    FaultLayer.MESSAGE: MessageApplier(),
    FaultLayer.PROCESS: ProcessApplier(),
    FaultLayer.CLOCK: ClockApplier(),
}

#: How to find a target of each kind in a run (``faults.kinds.TARGET_KIND`` says which).
RESOLVERS: Mapping[TargetKind, Callable[[NemesisContext, str], Any]] = {
    TargetKind.LINK: lambda ctx, name: ctx.link(name),
    TargetKind.SUBJECT: lambda ctx, name: ctx.subject(name),
    TargetKind.SERVICE: lambda ctx, name: ctx.service(name),
}


def resolve_target(ctx: NemesisContext, event: FaultEvent) -> Any:
    """The link, subject or service ``event`` targets (ConfigError if the run has none)."""
    return RESOLVERS[TARGET_KIND[event.kind]](ctx, event.target.name)


class Nemesis:
    """Runs one schedule against one run."""

    def __init__(self, ctx: NemesisContext, schedule: FaultSchedule) -> None:
        self.ctx = ctx
        self.schedule = schedule
        #: Set by the run when the workload returns: lasting faults heal then.
        self.workload_done = trio.Event()
        #: Ids of the faults applied so far, in order.
        self.applied: list[str] = []
        self._ended = False  # the run reached its planned end (``end``)
        self._stopped = False  # cancelled before it: restarts are left undone
        self._restoring: set[trio.CancelScope] = set()  # heals that only bring back
        self._nursery: trio.Nursery | None = None
        self._running = trio.Event()
        #: A token per fault with something due on a timer: to fire at a time, to heal after
        #: a delay or when the workload ends, a heal (a restart) under way.
        self._due: set[object] = set()

    @property
    def busy(self) -> bool:
        """Whether something of the schedule is still due on a timer: a fault to fire at a
        time, one held until a delay ends (a pause, a crash's restart), a heal under way.
        Faults waiting for a message, a connection or bytes are not: those need traffic,
        which the run records (the settle detector's ``busy``)."""
        return bool(self._due)

    def check(self) -> None:
        """Every target and trigger of the schedule exists in this run (ConfigError if not)."""
        for event in self.schedule.events:
            resolve_target(self.ctx, event)
            check_trigger(self.ctx, event.trigger)

    def end(self) -> None:
        """The run is at its planned end: every applied fault heals (restarts included) when
        ``run`` is cancelled next."""
        self._ended = True

    async def run(self) -> None:
        """Run every fault; returns only when cancelled (the run decides when faults end)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._running.set()
            for event in self.schedule.events:
                nursery.start_soon(self._fault, event)
            try:
                await trio.sleep_forever()
            finally:
                if not self._ended:  # stopped early: no service is brought back
                    self._stopped = True
                    for scope in self._restoring:
                        scope.cancel()

    async def inject(self, event: FaultEvent) -> Callable[[], Awaitable[None]]:
        """Apply ``event`` now, whatever its trigger says (a live run's step); once it is
        applied, return ``heal``: it ends the fault early and returns once it has healed.
        It lasts as a scheduled fault would: its ``duration_s``, else until the workload
        ends; a crash restarts after its delay."""
        await self._running.wait()
        assert self._nursery is not None
        heal_now, healed = trio.Event(), trio.Event()
        await self._nursery.start(self._applied, event, heal_now, healed)

        async def heal() -> None:
            heal_now.set()
            await healed.wait()

        return heal

    async def _fault(self, event: FaultEvent) -> None:
        due = object()
        if isinstance(event.trigger, AtTime):
            self._due.add(due)  # until it fired and then healed: ``_applied`` takes it on
        try:
            await wait_for(self.ctx, event.trigger)
        except BaseException as exc:
            self._due.discard(due)
            if isinstance(exc, trio.Cancelled):
                self._record("not_triggered", event)
            raise
        await self._applied(event, due=due)

    async def _applied(
        self,
        event: FaultEvent,
        heal_now: trio.Event | None = None,
        healed: trio.Event | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
        *,
        due: object | None = None,
    ) -> None:
        """Apply ``event``, hold it, heal it (shielded); ``heal_now`` ends the hold early,
        ``healed`` is set once it healed. ``busy`` from here until healed (no await between
        the trigger and this), except while a fault held until the run's end is held."""
        due = object() if due is None else due
        self._due.add(due)
        try:
            await self._apply_hold_heal(event, heal_now, healed, task_status, due)
        finally:
            self._due.discard(due)

    async def _apply_hold_heal(
        self,
        event: FaultEvent,
        heal_now: trio.Event | None,
        healed: trio.Event | None,
        task_status: trio.TaskStatus[None],
        due: object,
    ) -> None:
        applier = APPLIERS[LAYER[event.kind]]
        applied = await applier.apply(self.ctx, event, resolve_target(self.ctx, event))
        self.applied.append(event.id)
        self._record("apply", event)
        task_status.started()
        try:
            async with trio.open_nursery() as hold:
                if heal_now is not None:
                    hold.start_soon(_cancel_when, heal_now, hold.cancel_scope)
                if applied.until_run_end:
                    self._due.discard(due)  # nothing due before the run ends
                await self._hold(event, applied)
                hold.cancel_scope.cancel()
        finally:
            try:
                self._due.add(due)  # a heal (a restart) under way
                with trio.CancelScope(shield=True) as healing:
                    if applied.when_stopped:
                        await applied.heal()
                        self._record("heal", event)
                    elif not self._stopped:
                        self._restoring.add(healing)  # cancelled by ``run`` if stopped early
                        try:
                            await applied.heal()
                            self._record("heal", event)
                        finally:
                            self._restoring.discard(healing)
            finally:
                if healed is not None:
                    healed.set()

    async def _hold(self, event: FaultEvent, applied: Applied) -> None:
        """Until the fault is due to heal (cancellation ends it early)."""
        if applied.until_run_end:
            await trio.sleep_forever()
        elif applied.heal_after_s is not None:
            await trio.sleep(applied.heal_after_s)
        else:
            lasts = math.inf if event.duration_s is None else event.duration_s
            with trio.move_on_after(lasts):
                await self.workload_done.wait()

    def _record(self, phase: str, event: FaultEvent) -> None:
        self.ctx.recorder.record(
            NEMESIS,
            "info",
            event.kind.value,
            {
                "phase": phase,
                "fault_id": event.id,
                "target": str(event.target),
                **params_of(event),
            },
        )


async def _cancel_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
