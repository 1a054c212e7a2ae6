"""A live run: faults injected step by step while the workload runs, the schedule written after.

::

    open_live_run(run, options, live)      on the floor's loop (chaos.floor)
      run(options + driver=live) ──► services up, workload starts ──► live.drive(ctx, nemesis)
                                                                         │ steps, any number:
      live.inject(kind, target, ...)   apply now (Nemesis.inject), recorded with the trigger
                                       of this moment: the last message waited for
                                       (on_message SUBJECT n), else the time (at_time)
      live.heal(fault=None)            end a lasting fault early (its duration: until now)
      live.wait_messages(n) / wait_seconds(s)    let the workload go on
      live.history() / await live.state()        what happened so far, the stores as now
      await live.finish()  ──► the driver returns the schedule ──► workload ends, settle,
                               final state, verdicts; the trace's schedule frame holds the
                               faults as injected, so ``chaos replay TRACE`` runs them again

The run is an ordinary ``run_scenario`` with a ``FaultDriver`` (``RunOptions.driver``); its
faults are held and healed by the run's nemesis as scheduled ones are (a lasting fault lasts
its drawn ``duration_s``, at most until the workload ends; a crash restarts after its delay;
message faults stay). A step taken after the run ended (a service died, the harness failed)
raises ``LiveRunEnded``; ``finish`` raises what ended it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import trio

from chaos.context import RunContext
from chaos.nemesis import Nemesis, NemesisContext
from chaos.run import RunOptions, RunResult
from faults.kinds import INSTANTANEOUS, TARGET_KIND, FaultKind
from faults.model import FaultEvent, FaultSchedule
from faults.space import FaultSpace
from ground.errors import ChaosError, ConfigError
from invariants.history import NEMESIS

#: The longest a wait step waits (the workload may have ended, or be stuck).
MAX_WAIT_S = 30.0
#: How long an abort waits for crashed services to restart before it stops the run.
RESTART_GRACE_S = 5.0


class LiveRunEnded(ChaosError):
    """A step came after the live run ended (it ended on an error, or was finished)."""


class LiveContext(NemesisContext, Protocol):
    """What a live run needs of the run beyond the nemesis's view: delivery counts."""

    def deliveries(self, subject: str) -> int: ...


@dataclass(eq=False)
class Fault:
    """A fault a live run applied: its event as the trace records it, and its early heal."""

    event: FaultEvent
    applied_at: float
    heal_now: Callable[[], Awaitable[None]] = field(repr=False)
    healed_at: float | None = None

    def __repr__(self) -> str:
        return f"Fault({self.event.id}: {self.event.kind.value} {self.event.target.name})"


def _kind(kind: str | FaultKind) -> FaultKind:
    try:
        return FaultKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in FaultKind)
        raise ConfigError(f"unknown fault kind {kind!r} (known: {known})") from None


class LiveRun:
    """The driver of a live run (``chaos.run.FaultDriver``) and the steps taken on it."""

    def __init__(
        self,
        space: FaultSpace,
        seed: int,
        *,
        read_state: Callable[[RunContext], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.space, self.seed = space, seed
        self._read_state = read_state
        self.faults: list[Fault] = []
        #: Every step taken, in order, as plain data (what a machine's memo is keyed by).
        self.steps: list[tuple[Any, ...]] = []
        self.started = trio.Event()
        self._finish = trio.Event()
        self._ended = trio.Event()
        self._ctx: LiveContext | None = None
        self._nemesis: Nemesis | None = None
        #: Where the next fault is recorded to start: (subject, n) of the last message
        #: waited for, or None (the time since the workload started).
        self._anchor: tuple[str, int] | None = None
        self._steps: set[trio.CancelScope] = set()
        self._abort_scope: trio.CancelScope | None = None
        self.result: RunResult | None = None
        self.error: BaseException | None = None

    # -- the driver -------------------------------------------------------------------------

    async def drive(self, ctx: LiveContext, nemesis: Nemesis) -> FaultSchedule:
        self._ctx, self._nemesis = ctx, nemesis
        self.started.set()
        await self._finish.wait()
        return self.schedule()

    def schedule(self) -> FaultSchedule:
        """The faults injected so far, in order, as a schedule of this run's space."""
        return FaultSchedule(
            seed=self.seed,
            space_hash=self.space.content_hash(),
            events=tuple(f.event for f in self.faults),
        )

    async def abort(self) -> None:
        """Stop the run without settling or checking (its services stop, its dir goes; its
        trace ends ``interrupted``, with no schedule). A crash still waiting to restart is
        let restart first (up to ``RESTART_GRACE_S``): a restart begun while the run is torn
        down waits out its ready timeout, its proxies gone."""
        self._finish.set()
        recorder = getattr(self._ctx, "recorder", None)
        with trio.move_on_after(RESTART_GRACE_S):
            while recorder is not None and self._restarts_pending():
                await recorder.wait_changed()  # a nemesis heal is a recorded event
        if self._abort_scope is not None:
            self._abort_scope.cancel()

    def _restarts_pending(self) -> bool:
        crashes = {f.event.id for f in self.faults if f.event.kind is FaultKind.CRASH}
        return bool(crashes - self._healed_ids())

    def ended(self, result: RunResult | None, error: BaseException | None) -> None:
        """The run ended (with its result, or on ``error``): later steps raise."""
        self.result, self.error = result, error
        self._finish.set()
        self._ended.set()
        for scope in self._steps:
            scope.cancel()

    @property
    def workload_done(self) -> bool:
        return self._nemesis is not None and self._nemesis.workload_done.is_set()

    # -- steps ------------------------------------------------------------------------------

    @asynccontextmanager
    async def _step(self, what: str) -> AsyncIterator[tuple[LiveContext, Nemesis]]:
        """A step on the run, cancelled (``LiveRunEnded``) if the run ends meanwhile."""
        if self._ended.is_set() or self._finish.is_set():
            raise LiveRunEnded(f"{what}: the run already ended{self._why()}")
        assert self._ctx is not None, "the run has not started"
        assert self._nemesis is not None
        with trio.CancelScope() as scope:
            self._steps.add(scope)
            try:
                yield self._ctx, self._nemesis
            finally:
                self._steps.discard(scope)
        if scope.cancelled_caught:
            raise LiveRunEnded(f"{what}: the run ended{self._why()}")

    def _why(self) -> str:
        return "" if self.error is None else f" ({type(self.error).__name__}: {self.error})"

    def _trigger(self, ctx: LiveContext) -> dict[str, Any]:
        if self._anchor is not None:
            subject, n = self._anchor
            return {"type": "on_message", "subject": subject, "n": n}
        offset = max(0.0, round(trio.current_time() - ctx.workload_t0, 3))
        return {"type": "at_time", "offset_s": offset}

    async def inject(
        self,
        kind: str | FaultKind,
        target: str,
        *,
        duration_s: float | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Fault:
        """Apply a fault now: ``kind`` on ``target`` (a link, service or subject name of this
        run) with ``params``, lasting ``duration_s`` (None: until the workload ends)."""
        fault_kind = _kind(kind)
        async with self._step(f"inject {fault_kind.value}") as (ctx, nemesis):
            event = FaultEvent.from_dict(
                {
                    "id": f"f{len(self.faults)}",
                    "kind": fault_kind,
                    "target": {"kind": TARGET_KIND[fault_kind], "name": target},
                    "params": dict(params or {}),
                    "trigger": self._trigger(ctx),
                    "duration_s": None if fault_kind in INSTANTANEOUS else duration_s,
                }
            )
            now = trio.current_time()
            heal_now = await nemesis.inject(event)
            fault = Fault(event, now, heal_now)
            self.faults.append(fault)
            self.steps.append(("inject", event.kind.value, target, event.params.model_dump_json(),
                               event.duration_s))  # fmt: skip
            return fault
        raise AssertionError("unreachable")  # pragma: no cover (_step raises or yields)

    async def heal(self, fault: Fault | None = None) -> Fault | None:
        """End a lasting fault now (by default the last one injected that still holds); its
        recorded duration becomes the time it lasted (unless it had already healed: at its
        duration or when the workload ended). Returns the fault, or None when none held."""
        async with self._step("heal"):
            fault = fault or self._last_held()
            self.steps.append(("heal", None if fault is None else fault.event.id))
            if fault is None or fault.healed_at is not None or fault.event.kind in INSTANTANEOUS:
                return fault
            now = trio.current_time()
            fault.healed_at = now
            lasted = round(now - fault.applied_at, 3)
            drawn = fault.event.duration_s
            if not self.workload_done and (drawn is None or lasted < drawn):
                fault.event = fault.event.model_copy(update={"duration_s": max(lasted, 0.001)})
            await fault.heal_now()
            return fault
        raise AssertionError("unreachable")  # pragma: no cover

    def _last_held(self) -> Fault | None:
        """The last lasting fault not healed yet (by a step, its duration or the workload's
        end)."""
        healed = self._healed_ids()
        for fault in reversed(self.faults):
            lasting = fault.event.kind not in INSTANTANEOUS
            if lasting and fault.healed_at is None and fault.event.id not in healed:
                return fault
        return None

    def _healed_ids(self) -> set[str]:
        """Ids of the faults the run's nemesis has healed (its ``heal`` records)."""
        return {
            str(e["value"].get("fault_id"))
            for e in self.history()
            if e.get("process") == NEMESIS and isinstance(e.get("value"), dict)
            and e["value"].get("phase") == "heal"
        }  # fmt: skip

    async def wait_messages(self, n: int, subject: str | None = None) -> int:
        """Until ``n`` more messages were delivered on ``subject`` (the space's first by
        default), the workload ended, or ``MAX_WAIT_S`` passed; faults injected next are
        recorded as starting on the last of them. Returns the delivery count."""
        name = subject or self._default_subject()
        async with self._step(f"wait for {n} messages") as (ctx, nemesis):
            self.steps.append(("wait_messages", name, n))
            target = ctx.deliveries(name) + n
            with trio.move_on_after(MAX_WAIT_S):
                async with trio.open_nursery() as race:

                    async def arrived() -> None:
                        await ctx.wait_deliveries(name, target)
                        race.cancel_scope.cancel()

                    async def workload_ended() -> None:
                        await nemesis.workload_done.wait()
                        race.cancel_scope.cancel()

                    race.start_soon(arrived)
                    race.start_soon(workload_ended)
            count = ctx.deliveries(name)
            self._anchor = (name, count) if count else None
            return count
        raise AssertionError("unreachable")  # pragma: no cover

    async def wait_seconds(self, seconds: float) -> None:
        """Let the workload run ``seconds``; faults injected next are recorded at the time."""
        async with self._step(f"wait {seconds} s"):
            self.steps.append(("wait_seconds", seconds))
            await trio.sleep(seconds)
            self._anchor = None

    def _default_subject(self) -> str:
        if not self.space.subjects:
            raise ConfigError("wait_messages needs a subject: the fault space declares none")
        return self.space.subjects[0]

    def history(self) -> list[dict[str, Any]]:
        """The run's history so far (a copy)."""
        events = getattr(getattr(self._ctx, "recorder", None), "events", [])
        return list(events)

    async def state(self) -> dict[str, Any]:
        """The scenario's final-state read, done now (what the stores hold so far)."""
        if self._read_state is None:
            raise ConfigError("this live run has no state reader")
        async with self._step("read the state") as (ctx, _):
            assert isinstance(ctx, RunContext)
            return await self._read_state(ctx)
        raise AssertionError("unreachable")  # pragma: no cover

    async def finish(self) -> RunResult:
        """No more steps: the workload finishes, the run settles and checks; its result."""
        self._finish.set()
        await self._ended.wait()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


RunFn = Callable[[RunOptions], Awaitable[RunResult]]


@asynccontextmanager
async def open_live_run(run: RunFn, options: RunOptions, live: LiveRun) -> AsyncIterator[LiveRun]:
    """Start ``run(options)`` driven by ``live``; yield once its workload runs; on exit,
    finish it (if no one did) and wait for it to end."""

    async def go() -> None:
        try:
            result = await run(replace(options, driver=live))
        except Exception as exc:  # ends the live run; steps and ``finish`` raise it
            live.ended(None, _single(exc))
        except BaseException as exc:
            live.ended(None, LiveRunEnded(f"interrupted ({type(exc).__name__})"))
            raise
        else:
            live.ended(result, None)

    async with trio.open_nursery() as nursery:
        live._abort_scope = nursery.cancel_scope
        nursery.start_soon(go)
        with trio.CancelScope() as waiting:

            async def stop_waiting() -> None:
                await live._ended.wait()
                waiting.cancel()

            nursery.start_soon(stop_waiting)
            await live.started.wait()
        if not live.started.is_set():  # it ended before its workload started
            await live.finish()
        try:
            yield live
        finally:
            live._finish.set()


def _single(exc: BaseException) -> BaseException:
    """The one exception a nursery wrapped, or the group as it is."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


__all__ = ["Fault", "LiveRun", "LiveRunEnded", "open_live_run"]
