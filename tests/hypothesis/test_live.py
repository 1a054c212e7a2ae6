"""The live run's driver on a fake run under trio's MockClock: what each step applies and how
the steps are recorded as the run's schedule (exact times; no services)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from chaos.hypothesis import LiveRun, LiveRunEnded
from chaos.hypothesis._live import open_live_run
from chaos.run import RunOptions
from tests.hypothesis.fakes import SPACE, fake_run


def options() -> RunOptions:
    return RunOptions(scenario=None, seed=3)  # type: ignore[arg-type]  # the fake reads none


async def test_a_fault_injected_now_is_recorded_at_its_time_and_heals_when_healed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    live = LiveRun(SPACE, 3)
    run = fake_run()
    async with open_live_run(run, options(), live):
        ctx = run.contexts[0]
        await trio.sleep(0.25)
        fault = await live.inject("latency", "db", duration_s=1.5, params={"latency_ms": 12})
        assert [t.name for t in ctx.links["db"].toxics()] == ["f0-downstream"]
        await trio.sleep(0.3)
        await live.heal(fault)
        assert ctx.links["db"].toxics() == []  # healed when heal returns
        result = await live.finish()
    (event,) = result.schedule.events
    assert event.trigger.model_dump() == {"type": "at_time", "offset_s": 0.25}
    assert event.duration_s == 0.3  # healed early: it lasted 0.3 s, not its drawn 1.5
    assert event.params.model_dump() == {"latency_ms": 12, "jitter_ms": 0}
    assert result.schedule.seed == 3
    assert result.schedule.space_hash == SPACE.content_hash()
    assert ctx.recorder.phases("f0") == [(0.25, "apply"), (0.55, "heal")]


async def test_after_a_message_wait_faults_are_recorded_on_that_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    live = LiveRun(SPACE, 0)
    async with open_live_run(fake_run(), options(), live):
        assert await live.wait_messages(3) == 3
        await live.inject("redeliver", "orders", params={"count": 2})
        await live.wait_seconds(0.15)
        await live.inject("crash", "consumer", params={"restart_after_s": 0.0})
        result = await live.finish()
    redeliver, crash = result.schedule.events
    assert redeliver.trigger.model_dump() == {"type": "on_message", "subject": "orders", "n": 3}
    assert redeliver.duration_s is None
    assert crash.trigger.model_dump() == {"type": "at_time", "offset_s": 0.45}
    assert [e.id for e in result.schedule.events] == ["f0", "f1"]
    assert live.steps[0] == ("wait_messages", "orders", 3)


async def test_a_wait_for_messages_ends_with_the_workload(
    autojump_clock: trio.testing.MockClock,
) -> None:
    live = LiveRun(SPACE, 0)
    async with open_live_run(fake_run(deliveries=4), options(), live):
        assert await live.wait_messages(10) == 4
        assert trio.current_time() == pytest.approx(0.4)
        await live.finish()


async def test_a_fault_that_healed_on_its_own_keeps_its_drawn_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    live = LiveRun(SPACE, 0)
    async with open_live_run(fake_run(), options(), live):
        short = await live.inject("pause", "consumer", duration_s=0.2)
        until_end = await live.inject("partition", "db", params={"direction": "both"})
        await trio.sleep(0.5)
        await live.heal(short)  # already healed at 0.2: nothing to do
        await live.wait_messages(20)  # the workload ends at 1.0: the partition heals
        await live.heal(until_end)
        result = await live.finish()
    pause, partition = result.schedule.events
    assert pause.duration_s == 0.2
    assert partition.duration_s is None  # until the workload ended, as the run had it


async def test_steps_after_the_end_are_refused(autojump_clock: trio.testing.MockClock) -> None:
    live = LiveRun(SPACE, 0)
    async with open_live_run(fake_run(), options(), live):
        await live.finish()
        with pytest.raises(LiveRunEnded, match=r"wait 0\.1 s: the run already ended"):
            await live.wait_seconds(0.1)


async def test_a_run_that_fails_ends_the_step_in_progress_and_finish_raises_why(
    autojump_clock: trio.testing.MockClock,
) -> None:
    live = LiveRun(SPACE, 0)
    async with open_live_run(fake_run(fail_at=0.35), options(), live):
        with pytest.raises(LiveRunEnded, match="OSError: the consumer's database went away"):
            await live.wait_seconds(5.0)
        assert trio.current_time() == pytest.approx(0.35)
        with pytest.raises(OSError, match="database went away"):
            await live.finish()


async def test_abort_stops_the_run_without_waiting_for_the_workload(
    autojump_clock: trio.testing.MockClock,
) -> None:
    live = LiveRun(SPACE, 0)
    async with open_live_run(fake_run(deliveries=100), options(), live):
        await live.inject("crash", "consumer", params={"restart_after_s": 0.3})
        await live.abort()
        # A crashed service is let restart first (a restart under teardown could not).
        assert trio.current_time() == pytest.approx(0.4)
    with pytest.raises(LiveRunEnded, match="interrupted"):
        await live.finish()
