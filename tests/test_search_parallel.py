"""The search engine with ``jobs`` > 1, run functions written here (no services): batches of
draws, the first violation in draw order, coverage across batches, budgets, determinism."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from chaos.scenario import load_scenario
from chaos.search import LAG_BATCHES, Outcome, search_schedules
from faults.model import FaultEvent, FaultSchedule, OnConnection
from faults.schedule import generate
from ground.errors import ConfigError, ServiceError
from ground.rng import SEED_MAX, derive_seed
from invariants import Verdict

PAYMENTS = load_scenario("payments").fault_space("golden")
LEASES = load_scenario("leases").fault_space("golden")


class Batches:
    """A ``run_many``: ``exactly_once`` is violated when ``violates(schedule)``; records each
    batch. It "finishes" the batch's runs last first (``finished``), as parallel runs may,
    and returns the results in the batch's order, as the executor does."""

    def __init__(
        self,
        violates: Callable[[FaultSchedule], bool],
        fired: Callable[[FaultEvent], bool] | None = None,
    ) -> None:
        self.violates, self.fired = violates, fired
        self.batches: list[list[FaultSchedule]] = []
        self.finished: list[FaultSchedule] = []

    @property
    def calls(self) -> list[FaultSchedule]:
        return [s for batch in self.batches for s in batch]

    def one(self, schedule: FaultSchedule) -> Outcome:
        bad = self.violates(schedule)
        verdict = (
            Verdict.violated("exactly_once", "x") if bad else Verdict.holds("exactly_once", "")
        )
        applied = None
        if self.fired is not None:
            applied = frozenset(e.id for e in schedule.events if self.fired(e))
        return Outcome((verdict,), applied)

    def __call__(self, schedules: Sequence[FaultSchedule]) -> list[Outcome]:
        self.batches.append(list(schedules))
        results = {id(s): self.one(s) for s in reversed(schedules)}  # last one done first
        self.finished.extend(reversed(schedules))
        return [results[id(s)] for s in schedules]


def draws(seed: int, count: int) -> list[tuple[FaultEvent, ...]]:
    """The first ``count`` draws of a search of PAYMENTS with seed ``seed``."""
    return [
        generate(PAYMENTS, derive_seed(seed, "search", i) % (SEED_MAX + 1)).events
        for i in range(count)
    ]


def test_the_first_violation_in_draw_order_is_the_find_not_the_first_to_finish() -> None:
    # violated by two draws of the first batch: the 3rd and the 6th (the 6th "finishes" first)
    first = draws(7, 8)
    bad = {first[2], first[5]}
    runs = Batches(lambda s: s.events in bad)
    result = search_schedules(PAYMENTS, seed=7, max_shrinks=0, jobs=8, run_many=runs)
    assert result.found
    assert result.schedule is not None
    assert [s.events for s in runs.batches[0]] == first  # the same draws as jobs=1 makes
    assert runs.finished.index(runs.batches[0][5]) < runs.finished.index(runs.batches[0][2])
    assert result.schedule.events == first[2]
    assert result.runs_to_find == 8  # the whole batch was spent finding
    assert len(runs.batches) == 1


@pytest.mark.parametrize("seed", [0, 3])
def test_the_same_seed_and_jobs_give_the_same_search(seed: int) -> None:
    def violates(s: FaultSchedule) -> bool:
        return sum(e.kind == "redeliver" for e in s.events) >= 1 and len(s.events) >= 2

    one, two = Batches(violates), Batches(violates)
    a = search_schedules(PAYMENTS, seed=seed, jobs=4, run_many=one)
    b = search_schedules(PAYMENTS, seed=seed, jobs=4, run_many=two)
    assert a == b
    assert [[s.to_msgpack() for s in batch] for batch in one.batches] == [
        [s.to_msgpack() for s in batch] for batch in two.batches
    ]
    assert a.found
    assert a.schedule is not None
    assert len(a.schedule.events) == 2


def test_max_examples_counts_runs_not_batches() -> None:
    runs = Batches(lambda _s: False)
    result = search_schedules(PAYMENTS, seed=1, max_examples=20, jobs=8, run_many=runs)
    assert not result.found
    assert [len(b) for b in runs.batches] == [8, 8, 4]
    assert result.tried == 20 == len(runs.calls)
    keys = [s.to_msgpack() for s in runs.calls]
    assert len(keys) == len(set(keys))  # no schedule twice, within or across batches


def test_jobs_1_with_run_many_tries_what_run_tries() -> None:
    plain = Batches(lambda s: len(s.events) >= 3)
    batched = Batches(lambda s: len(s.events) >= 3)
    calls: list[FaultSchedule] = []

    def run(schedule: FaultSchedule) -> Outcome:
        calls.append(schedule)
        return plain.one(schedule)

    a = search_schedules(PAYMENTS, run, seed=5, max_examples=30)
    b = search_schedules(PAYMENTS, seed=5, max_examples=30, jobs=1, run_many=batched)
    assert a == b
    assert [s.to_msgpack() for s in calls] == [s.to_msgpack() for s in batched.calls]
    assert all(len(batch) == 1 for batch in batched.batches)


def test_coverage_is_learned_from_a_whole_batch_before_the_next_is_drawn() -> None:
    def silent(e: FaultEvent) -> bool:
        return isinstance(e.trigger, OnConnection) and e.trigger.link != "worker-1-store"

    runs = Batches(lambda _s: False, fired=lambda e: not silent(e))
    search_schedules(LEASES, seed=4, max_examples=40, jobs=8, run_many=runs)
    lowest: dict[str, int] = {}
    for batch in runs.batches:
        for schedule in batch:  # nothing at or past a count a previous batch saw silent
            for event in schedule.events:
                trigger = event.trigger
                if isinstance(trigger, OnConnection) and silent(event):
                    assert trigger.n < lowest.get(trigger.link, trigger.n + 1)
        for schedule in batch:
            for event in schedule.events:
                trigger = event.trigger
                if isinstance(trigger, OnConnection) and silent(event):
                    lowest[trigger.link] = min(lowest.get(trigger.link, trigger.n), trigger.n)
    assert lowest, "the fake never drew a silent trigger: the test proves nothing"
    assert len(runs.batches) >= 2


def test_event_removal_runs_as_batches_and_keeps_every_needed_event() -> None:
    def violates(s: FaultSchedule) -> bool:
        kinds = {e.kind for e in s.events}
        return "redeliver" in kinds and "latency" in kinds

    runs = Batches(violates)
    result = search_schedules(PAYMENTS, seed=2, max_shrinks=60, jobs=8, run_many=runs)
    assert result.found
    assert result.schedule is not None
    assert sorted(e.kind for e in result.schedule.events) == ["latency", "redeliver"]
    assert result.shrink_runs <= 60
    # at least one removal batch tried several removals at once
    shrinking = runs.batches[-(len(runs.batches) - 1) :]
    assert any(len(batch) > 1 for batch in shrinking)


def test_the_shrink_budget_cuts_a_removal_batch() -> None:
    runs = Batches(lambda s: len(s.events) >= 1)
    result = search_schedules(PAYMENTS, seed=0, max_shrinks=1, jobs=8, run_many=runs)
    assert result.found
    assert result.shrink_runs <= 1
    assert result.tried == len(runs.calls)


def test_a_harness_error_in_a_batch_stops_the_search() -> None:
    def broken(schedules: Sequence[FaultSchedule]) -> list[Outcome]:
        raise ServiceError("postgres exited with code 1 during setup")

    with pytest.raises(ServiceError) as info:
        search_schedules(PAYMENTS, seed=0, jobs=4, run_many=broken)
    assert "chaos search stopped at runs 1-4" in (info.value.__notes__ or [])


@pytest.mark.parametrize("jobs", [0, -1, 65])
def test_bad_jobs_are_refused(jobs: int) -> None:
    with pytest.raises(ConfigError, match="--jobs must be between 1 and 64"):
        search_schedules(PAYMENTS, lambda _s: [], jobs=jobs)


# -- lanes: runs started one at a time, ending in any order ----------------------------------


class Lanes:
    """A ``Lanes`` whose runs end in an order drawn from ``order_seed`` (any of those under
    way may end next, as parallel runs do). Records what was started, the most under way at
    once, and what was forgotten."""

    def __init__(
        self,
        violates: Callable[[FaultSchedule], bool],
        order_seed: int,
        fired: Callable[[FaultEvent], bool] | None = None,
        fail_at: int | None = None,
    ) -> None:
        self.outcomes = Batches(violates, fired)
        self.random = random.Random(order_seed)
        self.under_way: dict[int, FaultSchedule] = {}
        self.started: list[tuple[int, FaultSchedule]] = []
        self.ended: list[int] = []
        self.forgotten: list[int] = []
        self.most = 0
        self.fail_at = fail_at

    def start(self, ticket: int, schedule: FaultSchedule) -> None:
        assert ticket not in self.under_way
        self.under_way[ticket] = schedule
        self.started.append((ticket, schedule))
        self.most = max(self.most, len(self.under_way))

    def finished(self) -> list[tuple[int, Outcome]]:
        assert self.under_way, "the engine waits for a run when none is under way: a hang"
        ticket = self.random.choice(sorted(self.under_way))
        schedule = self.under_way.pop(ticket)
        self.ended.append(ticket)
        if ticket == self.fail_at:
            raise ServiceError("postgres exited with code 1 during setup")
        return [(ticket, self.outcomes.one(schedule))]

    def forget(self, ticket: int) -> None:
        self.forgotten.append(ticket)


def test_lanes_find_the_same_schedule_whichever_run_ends_first() -> None:
    # violated by the 11th and 19th draws: the 11th is the find however the runs end
    first = draws(7, 40)
    bad = {first[10], first[18]}
    seen = set()
    for order_seed in range(12):
        lanes = Lanes(lambda s: s.events in bad, order_seed)
        result = search_schedules(
            PAYMENTS, seed=7, max_shrinks=0, jobs=8, run_many=lanes.outcomes, lanes=lanes
        )
        assert result.found
        assert result.schedule is not None
        assert result.schedule.events == first[10]
        assert result.runs_to_find == 11  # counted to the find, not to the end of a batch
        assert lanes.most == 8  # never more than jobs under way, and kept full
        assert not lanes.under_way  # runs past the find were waited for
        assert sorted(lanes.forgotten) == [t for t, _ in lanes.started if t > 10]
        seen.add(tuple(t for t, _ in lanes.started[:11]))
    assert seen == {tuple(range(11))}  # the same draws, in the same order, as jobs=1 makes


@pytest.mark.parametrize("seed", [0, 3])
def test_lanes_draw_the_same_schedules_for_any_order_of_ends(seed: int) -> None:
    def silent(e: FaultEvent) -> bool:
        return isinstance(e.trigger, OnConnection) and e.trigger.link != "worker-1-store"

    tried = set()
    for order_seed in range(8):
        lanes = Lanes(lambda _s: False, order_seed, fired=lambda e: not silent(e))
        result = search_schedules(
            LEASES, seed=seed, max_examples=60, jobs=4, run_many=lanes.outcomes, lanes=lanes
        )
        assert not result.found
        assert result.tried == 60
        tried.add(tuple(s.to_msgpack() for _, s in lanes.started))
    assert len(tried) == 1


def test_lanes_learn_coverage_two_windows_late() -> None:
    def silent(e: FaultEvent) -> bool:
        return isinstance(e.trigger, OnConnection) and e.trigger.link != "worker-1-store"

    jobs = 4
    lanes = Lanes(lambda _s: False, 5, fired=lambda e: not silent(e))
    search_schedules(
        LEASES, seed=4, max_examples=80, jobs=jobs, run_many=lanes.outcomes, lanes=lanes
    )
    lowest: dict[str, int] = {}
    skipped = 0
    for ticket, schedule in lanes.started:
        known = ticket - LAG_BATCHES * jobs  # runs before this one are learned
        for event in schedule.events:
            trigger = event.trigger
            if isinstance(trigger, OnConnection) and silent(event):
                assert trigger.n < lowest.get(trigger.link, trigger.n + 1) or known < 0
        if known >= 0:
            for event in lanes.started[known][1].events:
                trigger = event.trigger
                if isinstance(trigger, OnConnection) and silent(event):
                    lowest[trigger.link] = min(lowest.get(trigger.link, trigger.n), trigger.n)
                    skipped += 1
    assert skipped, "the fake never drew a silent trigger: the test proves nothing"


def test_a_harness_error_in_a_lane_stops_the_search() -> None:
    lanes = Lanes(lambda _s: False, 1, fail_at=5)
    with pytest.raises(ServiceError) as info:
        search_schedules(PAYMENTS, seed=0, jobs=4, run_many=lanes.outcomes, lanes=lanes)
    notes = [n for n in info.value.__notes__ if n.startswith("chaos search stopped with ")]
    assert len(notes) == 1
    assert notes[0].endswith(" ended")


def test_lanes_shrink_in_batches_after_the_find() -> None:
    def violates(s: FaultSchedule) -> bool:
        kinds = {e.kind for e in s.events}
        return "redeliver" in kinds and "latency" in kinds

    lanes = Lanes(violates, 2)
    result = search_schedules(
        PAYMENTS, seed=2, max_shrinks=60, jobs=8, run_many=lanes.outcomes, lanes=lanes
    )
    assert result.found
    assert result.schedule is not None
    assert sorted(e.kind for e in result.schedule.events) == ["latency", "redeliver"]
    assert result.tried == len(lanes.started) + len(lanes.outcomes.calls)  # every run spent
    assert result.runs_to_find <= len(lanes.started)
    assert lanes.outcomes.batches  # the shrink went through run_many


def test_one_lane_is_the_sequential_search() -> None:
    def silent(e: FaultEvent) -> bool:
        return isinstance(e.trigger, OnConnection) and e.trigger.link != "worker-1-store"

    plain = Batches(lambda _s: False, fired=lambda e: not silent(e))
    calls: list[FaultSchedule] = []

    def run(schedule: FaultSchedule) -> Outcome:
        calls.append(schedule)
        return plain.one(schedule)

    lanes = Lanes(lambda _s: False, 0, fired=lambda e: not silent(e))
    a = search_schedules(LEASES, run, seed=5, max_examples=60, max_shrinks=0)
    b = search_schedules(
        LEASES,
        seed=5,
        max_examples=60,
        max_shrinks=0,
        jobs=1,
        run_many=lanes.outcomes,
        lanes=lanes,
    )
    assert a == b
    assert len(calls) == 60
    assert [s.to_msgpack() for s in calls] == [s.to_msgpack() for _, s in lanes.started]
