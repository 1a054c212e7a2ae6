"""The nemesis: waits for each fault's trigger, applies it, heals it.

Every fault lives in a task of the nemesis nursery, and its heal runs in a ``finally``: when
the fault's duration ends, when the workload ends (lasting faults), or when the nemesis is
cancelled (end of run, error, Ctrl-C), the fault is removed. Network faults are toxics on
the run's proxies; message faults are the NATS-aware toxics; process faults are signals;
clock skew rewrites the service's libfaketime file.

Each apply and heal is an ``info`` operation of process ``nemesis`` in the history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from chaos.errors import ConfigError
from faults.kinds import INSTANTANEOUS, FaultKind
from faults.model import FaultEvent, FaultSchedule
from faults.triggers import AfterBytes, AtTime, OnConnection, OnMessage

if TYPE_CHECKING:
    from chaos.run import RunContext

_POLL_S = 0.005


async def _poll_until(predicate: Callable[[], bool]) -> None:
    while True:
        if predicate():
            return
        await trio.sleep(_POLL_S)


class Nemesis:
    """Runs one schedule against one run."""

    def __init__(self, ctx: RunContext, schedule: FaultSchedule) -> None:
        self.ctx = ctx
        self.schedule = schedule
        self.workload_done = trio.Event()
        self.applied: list[str] = []

    def check(self) -> None:
        """Every target of the schedule must exist in this run (ConfigError otherwise)."""
        for event in self.schedule.events:
            self._target_of(event)
            trigger = event.trigger
            if isinstance(trigger, OnConnection | AfterBytes):
                self.ctx.link(trigger.link)
            elif isinstance(trigger, OnMessage):
                self.ctx.subject(trigger.subject)

    async def run(self) -> None:
        """Run every fault; returns when cancelled (the run decides when faults end)."""
        async with trio.open_nursery() as nursery:
            for event in self.schedule.events:
                nursery.start_soon(self._fault, event)
            await trio.sleep_forever()

    # -- one fault --------------------------------------------------------------------

    async def _fault(self, event: FaultEvent) -> None:
        params = event.params.model_dump()
        try:
            await self._wait_trigger(event)
        except trio.Cancelled:
            self._record("not_triggered", event, params)
            raise
        heal = await self._apply(event)
        self.applied.append(event.id)
        self._record("apply", event, params)
        try:
            if event.kind is FaultKind.CRASH:
                await trio.sleep(float(params.get("restart_after_s", 0.0)))
            elif event.kind in INSTANTANEOUS:
                await trio.sleep_forever()  # message toxics stay until the run ends
            elif event.duration_s is not None:
                with trio.move_on_after(event.duration_s):
                    await self.workload_done.wait()
            else:
                await self.workload_done.wait()
        finally:
            with trio.CancelScope(shield=True):
                await heal()
                self._record("heal", event, params)

    def _record(self, phase: str, event: FaultEvent, params: dict[str, Any]) -> None:
        self.ctx.recorder.record(
            "nemesis",
            "info",
            event.kind.value,
            {
                "phase": phase,
                "fault_id": event.id,
                "target": str(event.target),
                **params,
            },
        )

    async def _wait_trigger(self, event: FaultEvent) -> None:
        trigger = event.trigger
        ctx = self.ctx
        if isinstance(trigger, AtTime):
            await trio.sleep_until(ctx.workload_t0 + trigger.offset_s)
        elif isinstance(trigger, OnConnection):
            proxy = ctx.link(trigger.link)
            reached = trio.Event()
            n = trigger.n

            def count(_: object) -> None:
                if proxy.connection_count >= n:
                    reached.set()

            unregister = proxy.on_connection(count)
            try:
                if proxy.connection_count < n:
                    await reached.wait()
            finally:
                unregister()
        elif isinstance(trigger, AfterBytes):
            # The fast path counts bytes in a worker thread: poll the total.
            proxy, n_bytes = ctx.link(trigger.link), trigger.n_bytes
            await _poll_until(lambda: proxy.bytes_total >= n_bytes)
        elif isinstance(trigger, OnMessage):
            await ctx.wait_deliveries(trigger.subject, trigger.n)

    # -- apply / heal -----------------------------------------------------------------

    def _target_of(self, event: FaultEvent) -> Any:
        name = event.target.name
        if event.kind in (FaultKind.REDELIVER, FaultKind.DUPLICATE_PUBLISH):
            return self.ctx.subject(name)
        if event.kind in (FaultKind.CRASH, FaultKind.PAUSE, FaultKind.CLOCK_SKEW):
            return self.ctx.service(name)
        return self.ctx.link(name)

    async def _apply(self, event: FaultEvent) -> Any:
        kind, params = event.kind, event.params.model_dump()
        ctx = self.ctx
        toxics: list[tuple[str, str, str, dict[str, Any]]] = []  # (link, type, stream, attrs)
        name = event.target.name
        if kind is FaultKind.PARTITION:
            streams = {"both": ("upstream", "downstream")}.get(
                params["direction"], (params["direction"],)
            )
            toxics = [(name, "timeout", s, {"timeout": 0}) for s in streams]
        elif kind is FaultKind.LATENCY:
            attrs = {"latency": params["latency_ms"], "jitter": params["jitter_ms"]}
            toxics = [(name, "latency", "downstream", attrs)]
        elif kind is FaultKind.BANDWIDTH:
            toxics = [(name, "bandwidth", "downstream", {"rate": params["rate_kbps"]})]
        elif kind is FaultKind.RESET_PEER:
            toxics = [(name, "reset_peer", "downstream", {"timeout": params["timeout_ms"]})]
        elif kind is FaultKind.SLOW_CLOSE:
            toxics = [(name, "slow_close", "downstream", {"delay": params["delay_ms"]})]
        elif kind is FaultKind.REDELIVER:
            subject = ctx.subject(name)
            attrs = {"count": params["count"], "stream": subject.stream, "same_message": 1}
            toxics = [(subject.consume_link, "nats_drop_ack", "upstream", attrs)]
        elif kind is FaultKind.DUPLICATE_PUBLISH:
            subject = ctx.subject(name)
            attrs = {"count": params["count"], "subject": subject.nats_subject}
            toxics = [(subject.publish_link, "nats_duplicate_publish", "upstream", attrs)]
        elif kind in (FaultKind.CRASH, FaultKind.PAUSE, FaultKind.CLOCK_SKEW):
            return await self._apply_process(event, params)
        else:  # pragma: no cover - every kind is handled above
            raise ConfigError(f"no way to apply fault kind {kind.value}")
        added = []
        for link, type_, stream, attrs in toxics:
            proxy = ctx.link(link)
            toxic = proxy.add_toxic(
                type_, name=f"{event.id}-{stream}", stream=stream, attributes=attrs
            )
            added.append((proxy, toxic.name))

        async def heal() -> None:
            for proxy, toxic_name in added:
                if any(t.name == toxic_name for t in proxy.toxics()):
                    proxy.remove_toxic(toxic_name)

        return heal

    async def _apply_process(self, event: FaultEvent, params: dict[str, Any]) -> Any:
        process = self.ctx.service(event.target.name)
        if event.kind is FaultKind.CRASH:
            await process.kill()

            async def restart() -> None:
                with trio.fail_after(60):
                    await process.restart()
                self.ctx.recorder.record(
                    f"service:{process.name}",
                    "info",
                    "start",
                    {"pid": process.pid, "restart": True},
                )

            return restart
        if event.kind is FaultKind.PAUSE:
            process.pause()

            async def resume() -> None:
                process.resume()

            return resume
        skew = process.faketime
        if skew is None:
            raise ConfigError(f"service {event.target.name} cannot take clock skew")
        skew.set_offset(float(params["offset_s"]))

        async def unskew() -> None:
            skew.set_offset(0.0)

        return unskew
