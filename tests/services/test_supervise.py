"""The supervisor's decisions (restart, backoff, hands off), on a fake process under MockClock."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from chaos.services.supervise import RestartPolicy, supervise
from ground.errors import ConfigError, ServiceError


class FakeProcess:
    """Starts take ``start_s`` of virtual time; ``doomed`` starts die before they are ready."""

    def __init__(self, start_s: float = 0.05) -> None:
        self.name = "svc"
        self.pid: int | None = 1
        self.starts = 1
        self.start_s = start_s
        self.doomed = 0
        self.returncode: int | None = None
        self._exited = trio.Event()
        self._expected = False
        self._started = trio.Event()
        self.start_times: list[float] = []

    @property
    def exited(self) -> trio.Event:
        return self._exited

    @property
    def died(self) -> bool:
        return self._exited.is_set() and not self._expected

    def die(self, code: int = 1) -> None:
        self.returncode, self._expected = code, False
        self._exited.set()

    def harness_kill(self) -> None:
        self.returncode, self._expected = -9, True
        self._exited.set()

    async def start(self, *, wait_ready: bool = True) -> bool:
        assert self._exited.is_set(), "started while running"
        self.starts += 1
        self.pid = 100 + self.starts
        self.returncode, self._expected, self._exited = None, False, trio.Event()
        self.start_times.append(trio.current_time())
        self._started.set()
        self._started = trio.Event()
        await trio.sleep(self.start_s)
        if self.doomed:
            self.doomed -= 1
            self.die(2)
            raise ServiceError("svc exited with code 2 before it was ready")
        return True

    async def wait_started(self, after: int) -> None:
        while self.starts <= after:
            await self._started.wait()


Events = list[tuple[float, str, dict[str, Any]]]


async def _supervised(nursery: trio.Nursery, process: FakeProcess, policy: RestartPolicy) -> Events:
    events: Events = []
    nursery.start_soon(
        supervise, process, policy, lambda f, v: events.append((trio.current_time(), f, v))
    )
    await trio.testing.wait_all_tasks_blocked()
    return events


def _restarts(events: Events) -> list[tuple[float, int, float]]:
    return [(round(t, 3), v["attempt"], v["backoff_s"]) for t, f, v in events if f == "restart"]


POLICY = RestartPolicy(initial_backoff_s=0.1, multiplier=2, max_backoff_s=0.5, reset_after_s=5)


async def test_quick_exits_back_off_exponentially_up_to_the_cap(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess(start_s=0.0)
    events = await _supervised(nursery, process, POLICY)
    for _ in range(5):
        process.die()
        await trio.sleep(1.0)  # the next start happens within the max backoff
    starts = [round(t, 3) for t in process.start_times]
    assert starts == [0.1, 1.2, 2.4, 3.5, 4.5]  # backoffs 0.1, 0.2, 0.4, 0.5, 0.5
    assert [a for _, a, _ in _restarts(events)] == [1, 2, 3, 4, 5]
    assert [b for _, _, b in _restarts(events)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert [f for _, f, _ in events].count("start") == 5


async def test_a_start_that_stayed_up_resets_the_backoff(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess(start_s=0.0)
    events = await _supervised(nursery, process, POLICY)
    process.die()
    await trio.sleep(1.0)
    process.die()
    await trio.sleep(6.0)  # up longer than reset_after_s
    process.die()
    await trio.sleep(1.0)
    assert [(a, b) for _, a, b in _restarts(events)] == [(1, 0.1), (2, 0.2), (1, 0.1)]


async def test_an_exit_the_harness_caused_is_left_to_the_harness(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess(start_s=0.0)
    events = await _supervised(nursery, process, POLICY)
    process.harness_kill()  # a crash fault: its heal restarts the service, not the supervisor
    await trio.sleep(10.0)
    assert process.start_times == []
    assert events == []
    await process.start()  # the crash fault's heal
    process.die()  # then it dies on its own: supervised again
    await trio.sleep(1.0)
    assert len(process.start_times) == 2
    assert [f for _, f, _ in events] == ["restart", "start"]


async def test_a_restart_that_dies_before_it_is_ready_is_retried_with_more_backoff(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess(start_s=0.05)
    process.doomed = 2
    events = await _supervised(nursery, process, POLICY)
    process.die()
    await trio.sleep(3.0)
    assert [(a, b) for _, a, b in _restarts(events)] == [(1, 0.1), (2, 0.2), (3, 0.4)]
    assert [f for _, f, _ in events].count("start") == 1  # only the start that got ready
    assert not process.exited.is_set()


async def test_no_restart_when_someone_else_started_it_during_the_backoff(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess(start_s=0.0)
    policy = RestartPolicy(initial_backoff_s=1.0, max_backoff_s=1.0)
    events = await _supervised(nursery, process, policy)
    process.die()
    await trio.sleep(0.5)
    await process.start()  # e.g. a crash fault's heal
    await trio.sleep(2.0)
    assert len(process.start_times) == 1
    assert [f for _, f, _ in events] == ["restart"]


async def test_a_clean_exit_is_restarted_only_when_the_policy_says_so(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess(start_s=0.0)
    events = await _supervised(nursery, process, POLICY)
    process.die(0)
    await trio.sleep(10)
    assert process.start_times == []
    assert events == []
    always = FakeProcess(start_s=0.0)
    await _supervised(nursery, always, RestartPolicy(clean_exit=True, initial_backoff_s=0.1))
    always.die(0)
    await trio.sleep(1)
    assert [round(t, 3) for t in always.start_times] == [10.1]


async def test_never_leaves_a_dead_service_dead(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess()
    events = await _supervised(nursery, process, RestartPolicy.never())
    process.die()
    await trio.sleep(60)
    assert process.start_times == []
    assert events == []


async def test_max_restarts_gives_up_and_says_so(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    process = FakeProcess(start_s=0.0)
    events = await _supervised(nursery, process, RestartPolicy(max_restarts=2))
    for _ in range(3):
        process.die(7)
        await trio.sleep(5.0)
    assert len(process.start_times) == 2
    assert events[-1][1:] == ("gave_up", {"code": 7, "restarts": 2})


def test_backoff_is_capped_and_grows_by_the_multiplier() -> None:
    policy = RestartPolicy(initial_backoff_s=0.05, multiplier=3, max_backoff_s=1.0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == pytest.approx([0.05, 0.15, 0.45, 1.0])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_backoff_s": -1},
        {"initial_backoff_s": 3, "max_backoff_s": 2},
        {"multiplier": 0.5},
        {"reset_after_s": 0},
        {"max_restarts": -1},
    ],
)
def test_bad_policies_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="restart policy"):
        RestartPolicy(**kwargs)
