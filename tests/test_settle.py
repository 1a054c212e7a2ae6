"""Settle detection (chaos.settle) on fakes, with trio's MockClock: no real time passes."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from chaos.settle import STUCK, Stuck, wait_settled
from ground.errors import ServiceError


class FakeActivity:
    """A recorder as the detector sees it: a count and a wake-up per new event."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = trio.Event()

    def record(self) -> None:
        self.count += 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()


class FakeSystem:
    def __init__(self, settled: bool = False) -> None:
        self.settled = settled
        self.checks: list[float] = []
        self.raises: BaseException | None = None

    async def check(self) -> bool:
        self.checks.append(trio.current_time())
        if self.raises is not None:
            raise self.raises
        return self.settled


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_two_passing_checks_with_nothing_in_between_settle(mock_clock: object) -> None:
    system, activity = FakeSystem(settled=True), FakeActivity()
    assert await wait_settled(system.check, activity, 30, quiet_s=0.05, poll_s=0.2)
    assert len(system.checks) == 2
    assert system.checks[1] - system.checks[0] == pytest.approx(0.05)


async def test_an_event_between_the_two_checks_asks_for_another(mock_clock: object) -> None:
    system, activity = FakeSystem(settled=True), FakeActivity()
    first_done = trio.Event()

    async def check() -> bool:
        ok = await system.check()
        first_done.set()
        return ok

    async def moves_between_checks() -> None:
        await first_done.wait()
        await trio.sleep(0.01)
        activity.record()  # e.g. a late ack, between the first check and its confirmation

    async with trio.open_nursery() as nursery:
        nursery.start_soon(moves_between_checks)
        assert await wait_settled(check, activity, 30, quiet_s=0.05, poll_s=0.2)
    assert len(system.checks) == 3


async def test_what_the_checks_record_themselves_does_not_count(mock_clock: object) -> None:
    system, activity = FakeSystem(settled=True), FakeActivity()

    async def probing_check() -> bool:
        activity.record()  # a probe's request and answer are recorded
        activity.record()
        return await system.check()

    assert await wait_settled(probing_check, activity, 30, quiet_s=0.05, poll_s=0.2)
    assert len(system.checks) == 2


async def test_an_event_wakes_the_detector_before_the_next_poll(mock_clock: object) -> None:
    system, activity = FakeSystem(), FakeActivity()

    async def becomes_settled() -> None:
        await trio.sleep(1.0)
        system.settled = True
        activity.record()  # the last commit/ack is an event

    async with trio.open_nursery() as nursery:
        nursery.start_soon(becomes_settled)
        assert await wait_settled(system.check, activity, 30, quiet_s=0.05, poll_s=10.0)
    assert trio.current_time() == pytest.approx(1.1)  # 1.0 + quiet + quiet, not the 10 s poll


async def test_a_burst_of_events_is_waited_out_before_checking(mock_clock: object) -> None:
    system, activity = FakeSystem(settled=True), FakeActivity()

    async def burst() -> None:
        for _ in range(10):
            activity.record()
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(burst)
        assert await wait_settled(system.check, activity, 30, quiet_s=0.05, poll_s=0.2)
    assert system.checks[0] >= 0.1  # not before the burst ended


async def test_without_events_a_state_change_is_seen_at_the_next_poll(mock_clock: object) -> None:
    system, activity = FakeSystem(), FakeActivity()

    async def flips_silently() -> None:
        await trio.sleep(0.5)
        system.settled = True  # e.g. the broker's redelivery timer: no recorded event

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flips_silently)
        assert await wait_settled(system.check, activity, 30, quiet_s=0.05, poll_s=0.2)
    assert 0.5 <= trio.current_time() <= 0.5 + 0.25 + 0.05 + 0.05


async def test_never_settling_gives_up_at_the_limit(mock_clock: object) -> None:
    system, activity = FakeSystem(), FakeActivity()
    assert not await wait_settled(system.check, activity, 3.0, quiet_s=0.05, poll_s=0.2)
    assert trio.current_time() == pytest.approx(3.0)
    assert 10 <= len(system.checks) <= 13  # a check per poll_s + quiet_s, not a busy loop


@pytest.mark.parametrize("error", [OSError("refused"), ServiceError("down")])
async def test_a_check_that_fails_counts_as_not_settled(
    mock_clock: object, error: BaseException
) -> None:
    system, activity = FakeSystem(settled=True), FakeActivity()
    system.raises = error
    assert not await wait_settled(system.check, activity, 1.0, quiet_s=0.05, poll_s=0.2)
    system.raises = None
    assert await wait_settled(system.check, activity, 1.0, quiet_s=0.05, poll_s=0.2)


class StuckSystem(FakeSystem):
    """A check that answers STUCK while ``stuck`` (an order lost for good), else False."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck = True

    async def check(self) -> bool | Stuck:  # type: ignore[override]
        await super().check()
        return STUCK if self.stuck else self.settled


def test_stuck_reads_as_not_settled() -> None:
    assert not STUCK
    assert Stuck() is STUCK
    assert repr(STUCK) == "STUCK"


async def test_stuck_for_stuck_s_ends_the_wait_without_the_timeout(mock_clock: object) -> None:
    system, activity = StuckSystem(), FakeActivity()
    ended = await wait_settled(system.check, activity, 30, quiet_s=0.05, poll_s=0.2, stuck_s=2.0)
    assert ended is STUCK
    assert 2.0 <= trio.current_time() <= 2.0 + 0.25 + 0.05  # not the 30 s limit


async def test_events_do_not_hold_off_stuck_but_another_answer_does(mock_clock: object) -> None:
    """An idle consumer's polls are events: they do not restart the stuck wait. An answer
    that is not STUCK does, and a later STUCK waits its full stuck_s again."""
    system, activity = StuckSystem(), FakeActivity()

    async def polls_and_wavers() -> None:
        for tick in range(30):
            await trio.sleep(0.1)
            activity.record()
            if tick == 12:  # 1.3 s in: something pending again for a moment
                system.stuck = False
            if tick == 14:
                system.stuck = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(polls_and_wavers)
        ended = await wait_settled(
            system.check, activity, 30, quiet_s=0.05, poll_s=0.2, stuck_s=2.0
        )
        nursery.cancel_scope.cancel()
    assert ended is STUCK
    assert trio.current_time() >= 1.3 + 2.0  # restarted after the False at 1.3 s


async def test_stuck_waits_while_the_nemesis_has_something_due(mock_clock: object) -> None:
    """A fault still to heal or a crashed service still to come back may change the state:
    while ``busy`` says so, STUCK does not end the wait, and the limit still applies."""
    system, activity = StuckSystem(), FakeActivity()
    due = {"busy": True}

    async def heals_later() -> None:
        await trio.sleep(5.0)
        due["busy"] = False

    async with trio.open_nursery() as nursery:
        nursery.start_soon(heals_later)
        ended = await wait_settled(
            system.check, activity, 30, quiet_s=0.05, poll_s=0.2, stuck_s=2.0,
            busy=lambda: due["busy"],
        )  # fmt: skip
    assert ended is STUCK
    assert trio.current_time() >= 5.0 + 2.0
    system.stuck, due["busy"] = True, True
    assert await wait_settled(
        system.check, activity, 3.0, quiet_s=0.05, poll_s=0.2, stuck_s=2.0,
        busy=lambda: due["busy"],
    ) is False  # fmt: skip


async def test_a_state_that_settles_after_stuck_answers_still_settles(mock_clock: object) -> None:
    system, activity = StuckSystem(), FakeActivity()

    async def delivered_again() -> None:
        await trio.sleep(1.0)
        system.stuck, system.settled = False, True
        activity.record()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(delivered_again)
        assert await wait_settled(
            system.check, activity, 30, quiet_s=0.05, poll_s=0.2, stuck_s=2.0
        ) is True  # fmt: skip
