"""Fakes for the live run and the machine: a fake run a ``LiveRun`` drives, a fake floor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from chaos.nemesis import Nemesis
from chaos.run import RunOptions, RunResult
from faults.model import FaultSchedule
from faults.space import FaultSpace
from ground._portal import Portal
from invariants import Verdict
from tests.nemesis.fakes import FakeRun

SPACE = FaultSpace.from_dict(
    {
        "horizon_s": 2.0,
        "links": ["db", "consumer-nats", "producer-nats"],
        "services": ["consumer"],
        "subjects": ["orders"],
        "templates": [{"kind": "latency", "params": {"latency_ms": [10, 20]}}],
    }
)


class FakeLiveRun(FakeRun):
    """A fake run that counts deliveries and says when it records, as ``RunContext`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = trio.Event()
        record = self.recorder.record

        def record_and_tell(*args: Any, **kwargs: Any) -> dict[str, Any]:
            event = record(*args, **kwargs)
            self.changed.set()
            self.changed = trio.Event()
            return event

        self.recorder.record = record_and_tell  # type: ignore[method-assign]
        self.recorder.wait_changed = lambda: self.changed.wait()  # type: ignore[attr-defined]

    def deliveries(self, subject: str) -> int:
        return self.delivered.get(subject, 0)


Judge = Callable[[FaultSchedule], list[Verdict]]


def fake_run(
    deliveries: int = 10,
    every_s: float = 0.1,
    fail_at: float | None = None,
    judge: Judge | None = None,
) -> Any:
    """``run(options)`` as the floor's: a fake run driven by ``options.driver``; its workload
    delivers a message every ``every_s`` seconds, ``deliveries`` times, then ends; ``judge``
    gives the verdicts of the schedule the driver returns."""
    contexts: list[FakeLiveRun] = []

    async def run(options: RunOptions) -> RunResult:
        ctx = FakeLiveRun()
        contexts.append(ctx)
        nemesis = Nemesis(ctx, FaultSchedule(seed=0, space_hash="h"))

        async def workload() -> None:
            for _ in range(deliveries):
                await trio.sleep(every_s)
                ctx.deliver("orders")
            nemesis.workload_done.set()

        async def failing() -> None:
            assert fail_at is not None
            await trio.sleep(fail_at)
            raise OSError("the consumer's database went away")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(nemesis.run)
            nursery.start_soon(workload)
            if fail_at is not None:
                nursery.start_soon(failing)
            assert options.driver is not None
            schedule = await options.driver.drive(ctx, nemesis)  # type: ignore[arg-type]
            await nemesis.workload_done.wait()
            nursery.cancel_scope.cancel()
        verdicts = judge(schedule) if judge is not None else []
        trace = options.out or Path("t")
        return RunResult("fake", options.variant, options.seed, schedule, verdicts, trace, True,
                         history=ctx.recorder.events)  # fmt: skip

    run.contexts = contexts  # type: ignore[attr-defined]
    return run


class FakeFloor:
    """What ``ChaosMachine`` uses of a floor: a real portal, and fake runs on it."""

    def __init__(self, run: Any) -> None:
        self.portal = Portal("fake-floor").start()
        self.run_async = run

    def close(self) -> None:
        self.portal.close()
