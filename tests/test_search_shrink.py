"""Search's own passes on run functions written here: coverage while finding, shrinking whole
events then values, the shrink budget and resuming (no services: the runs are fakes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from chaos.scenario import load_scenario
from chaos.search import FRESH_TRIES, Outcome, search_schedules
from chaos.search_scenario import resume_schedule, search_space
from faults._draw import assemble
from faults.model import AtTime, FaultEvent, FaultSchedule, OnConnection
from faults.schedule import generate
from faults.shrink import knobs, template_for
from faults.space import FaultSpace
from ground.errors import ConfigError
from ground.rng import SEED_MAX, derive_seed
from invariants import Verdict
from replay.trace import build_header, open_trace_writer
from tests.faults.space_samples import check_inside, fits

PAYMENTS = load_scenario("payments").fault_space("golden")
LEASES = load_scenario("leases").fault_space("golden")


class Fake:
    """A run: ``exactly_once`` is violated when ``violates(schedule)``; ``fired`` (if given)
    says which events fired, as a real run's nemesis records do."""

    def __init__(
        self,
        violates: Callable[[FaultSchedule], bool],
        fired: Callable[[FaultEvent], bool] | None = None,
    ) -> None:
        self.violates, self.fired = violates, fired
        self.calls: list[FaultSchedule] = []

    def __call__(self, schedule: FaultSchedule) -> Outcome:
        self.calls.append(schedule)
        verdict = (
            Verdict.violated("exactly_once", "twice")
            if self.violates(schedule)
            else Verdict.holds("exactly_once", "once")
        )
        applied = None
        if self.fired is not None:
            applied = frozenset(e.id for e in schedule.events if self.fired(e))
        return Outcome((verdict,), applied)


def has(kind: str, schedule: FaultSchedule) -> bool:
    return any(e.kind == kind for e in schedule.events)


def full_schedule(space: FaultSpace, kinds: Sequence[str], seed: int = 0) -> FaultSchedule:
    """A schedule of ``space`` holding one event of each of ``kinds`` (drawn from seeds)."""
    picked: list[FaultEvent] = []
    for kind in kinds:
        picked.append(
            next(
                e
                for s in range(10_000)
                for e in generate(space, s).events
                if e.kind == kind and knobs(space, e)
            )
        )
    return assemble(space, seed, picked)


def test_removes_every_event_the_violation_does_not_need() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver", "partition"])
    run = Fake(lambda s: has("redeliver", s))
    result = search_schedules(PAYMENTS, run, start=start, max_shrinks=100)
    assert result.found
    assert result.shrink_complete
    assert result.schedule is not None
    assert [e.kind for e in result.schedule.events] == ["redeliver"]
    check_inside(PAYMENTS, result.schedule)
    assert result.runs_to_find == 0  # resumed: nothing was drawn


def test_keeps_two_events_when_both_are_needed() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver", "partition"])
    run = Fake(lambda s: has("latency", s) and has("partition", s))
    result = search_schedules(PAYMENTS, run, start=start, max_shrinks=100)
    assert result.schedule is not None
    assert sorted(e.kind for e in result.schedule.events) == ["latency", "partition"]


def test_whole_events_go_before_any_value_is_lowered() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver", "partition"])
    run = Fake(lambda s: has("redeliver", s))
    search_schedules(PAYMENTS, run, start=start, max_shrinks=100)
    sizes = [len(s.events) for s in run.calls]
    first_single = sizes.index(1)
    assert all(size < 3 for size in sizes[1 : first_single + 1])
    assert all(size == 1 for size in sizes[first_single:])


def test_faults_that_never_fired_are_dropped_in_one_run() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver", "partition"])
    run = Fake(lambda s: has("redeliver", s), fired=lambda e: e.kind == "redeliver")
    search_schedules(PAYMENTS, run, start=start, max_shrinks=100)
    assert run.calls[0] == start
    assert [e.kind for e in run.calls[1].events] == ["redeliver"]


def test_values_go_to_the_low_end_of_their_range_or_as_near_as_still_violates() -> None:
    def long_pause(s: FaultSchedule) -> bool:
        return any(e.kind == "pause" and (e.duration_s or 0) >= 3.0 for e in s.events)

    start = full_schedule(LEASES, ["pause"])
    event = start.events[0].model_copy(update={"duration_s": 4.5})
    start = assemble(LEASES, 0, [event])
    result = search_schedules(LEASES, Fake(long_pause), start=start, max_shrinks=100)
    assert result.schedule is not None
    (shrunk,) = result.schedule.events
    assert shrunk.duration_s is not None
    assert 3.0 <= shrunk.duration_s <= 3.3  # bisected from 4.5 toward 0.5 in 4 steps
    if isinstance(shrunk.trigger, OnConnection):
        assert shrunk.trigger.n == 10  # the low end of n = [10, 30]
    else:
        assert shrunk.trigger == AtTime(offset_s=0.0)  # the low end of offset_s = [0, 6]
    check_inside(LEASES, result.schedule)


def test_shrinking_at_its_budget_says_so_and_resuming_finishes_it() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver", "partition"])

    def violates(s: FaultSchedule) -> bool:
        return has("redeliver", s)

    whole = search_schedules(PAYMENTS, Fake(violates), start=start, max_shrinks=100)
    assert whole.shrink_complete
    cut = search_schedules(PAYMENTS, Fake(violates), start=start, max_shrinks=2)
    assert not cut.shrink_complete
    assert cut.shrink_runs == 2
    assert cut.schedule is not None
    assert violates(cut.schedule)
    resumed = search_schedules(PAYMENTS, Fake(violates), start=cut.schedule, max_shrinks=100)
    assert resumed.shrink_complete
    assert resumed.schedule == whole.schedule


def test_a_saved_schedule_that_no_longer_violates_is_not_a_find() -> None:
    start = full_schedule(PAYMENTS, ["latency"])
    run = Fake(lambda _s: False)
    result = search_schedules(PAYMENTS, run, start=start)
    assert not result.found
    assert run.calls == [start]


def test_counted_triggers_seen_silent_are_left_out_of_later_draws() -> None:
    def silent(e: FaultEvent) -> bool:
        return isinstance(e.trigger, OnConnection) and e.trigger.link != "worker-1-store"

    run = Fake(lambda _s: False, fired=lambda e: not silent(e))
    search_schedules(LEASES, run, seed=4, max_examples=30)
    lowest: dict[str, int] = {}
    for schedule in run.calls:
        for event in schedule.events:
            trigger = event.trigger
            if isinstance(trigger, OnConnection) and silent(event):
                assert trigger.n < lowest.get(trigger.link, trigger.n + 1)
        for event in schedule.events:
            trigger = event.trigger
            if isinstance(trigger, OnConnection) and silent(event):
                lowest[trigger.link] = min(lowest.get(trigger.link, trigger.n), trigger.n)
    assert lowest, "the fake never drew a silent trigger: the test proves nothing"


def test_finding_draws_as_chaos_run_does_from_seeds_of_the_search_seed() -> None:
    run = Fake(lambda _s: False)
    search_schedules(PAYMENTS, run, seed=2, max_examples=5)
    seeds = [derive_seed(2, "search", i) % (SEED_MAX + 1) for i in range(5)]
    assert [s.events for s in run.calls] == [generate(PAYMENTS, s).events for s in seeds]
    for schedule in run.calls:
        check_inside(PAYMENTS, schedule)
        assert schedule.seed == 2  # the run seed: the workload stays the same


@pytest.mark.parametrize("space", [PAYMENTS, LEASES], ids=["payments", "leases"])
def test_every_knob_keeps_the_event_inside_its_space(space: FaultSpace) -> None:
    for seed in range(60):
        for event in generate(space, seed).events:
            assert template_for(space, event) is not None
            for knob in knobs(space, event):
                assert knob.value != knob.lo
                assert fits(space, knob.set(knob.lo)), (knob.name, event)
                if knob.numeric:
                    middle = (knob.value + knob.lo) / 2  # type: ignore[operator]
                    if isinstance(knob.value, int):
                        middle = int(middle)
                    assert fits(space, knob.set(middle)), (knob.name, event)


def test_an_event_from_another_space_has_no_template_and_no_knobs() -> None:
    event = generate(LEASES, 0).events[0]
    assert template_for(PAYMENTS, event) is None
    assert knobs(PAYMENTS, event) == []


def saved_trace(path: Path, variant: str, schedule: FaultSchedule) -> Path:
    header = build_header("payments", "0" * 64, variant, schedule.seed)
    with open_trace_writer(path, header) as writer:
        writer.write_schedule(schedule.to_dict())
    return path


def test_resume_reads_the_schedule_a_search_saved(tmp_path: Path) -> None:
    scenario = load_scenario("payments")
    schedule = full_schedule(PAYMENTS, ["redeliver", "latency"], seed=17)
    trace = saved_trace(tmp_path / "found.trace", "no-idempotency", schedule)
    space = search_space(scenario, "no-idempotency", "golden")
    assert resume_schedule(scenario, "no-idempotency", trace, space) == schedule


@pytest.mark.parametrize(
    ("variant", "space", "message"),
    [
        (
            "golden",
            "golden",
            r"a trace of payments variant no-idempotency, not of payments variant golden$",
        ),
        ("no-idempotency", "variant", r"drawn from another fault space \(pass the --space"),
    ],
)
def test_resume_refuses_a_trace_of_another_search(
    tmp_path: Path, variant: str, space: str, message: str
) -> None:
    scenario = load_scenario("payments")
    schedule = full_schedule(PAYMENTS, ["redeliver"])
    trace = saved_trace(tmp_path / "found.trace", "no-idempotency", schedule)
    with pytest.raises(ConfigError, match=message):
        resume_schedule(scenario, variant, trace, search_space(scenario, variant, space))
    (tmp_path / "bad.trace").write_bytes(b"not a trace")
    with pytest.raises(ConfigError, match=r"^--resume .*bad.trace: cannot read the trace"):
        resume_schedule(scenario, variant, tmp_path / "bad.trace", PAYMENTS)


def test_an_unknown_space_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--space must be one of variant, golden, got 'x'$"):
        search_space(load_scenario("payments"), "golden", "x")


def test_an_event_that_seemed_needed_once_gets_one_more_try_without_it() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver"])
    seen: set[bytes] = set()

    def flaky(s: FaultSchedule) -> bool:
        """Needs a redelivery; without the latency, holds the first time it runs."""
        first = s.to_msgpack() not in seen
        seen.add(s.to_msgpack())
        return has("redeliver", s) and not (first and not has("latency", s))

    run = Fake(flaky)
    result = search_schedules(PAYMENTS, run, start=start, max_shrinks=100)
    assert result.schedule is not None
    assert [e.kind for e in result.schedule.events] == ["redeliver"]
    without_latency = assemble(PAYMENTS, 0, [e for e in start.events if e.kind == "redeliver"])
    assert run.calls.count(without_latency) == 2  # held once, violated on its second try
    assert result.tried == len(run.calls)


def test_an_event_is_kept_only_after_held_runs_without_it_on_every_fresh_try() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver"])
    without_latency = assemble(PAYMENTS, 0, [e for e in start.events if e.kind == "redeliver"])
    tries: list[bytes] = []

    def racy(s: FaultSchedule) -> bool:
        """Needs a redelivery; without the latency, holds on its first three runs."""
        if s.to_msgpack() == without_latency.to_msgpack():
            tries.append(s.to_msgpack())
            return len(tries) == 4
        return has("redeliver", s)

    result = search_schedules(PAYMENTS, Fake(racy), start=start, max_shrinks=100)
    assert result.schedule is not None
    assert [e.kind for e in result.schedule.events] == ["redeliver"]
    assert len(tries) == 4 == 1 + FRESH_TRIES

    never = Fake(lambda s: has("redeliver", s) and has("latency", s))
    kept = search_schedules(PAYMENTS, never, start=start, max_shrinks=100)
    assert kept.schedule is not None
    assert sorted(e.kind for e in kept.schedule.events) == ["latency", "redeliver"]
    assert never.calls.count(without_latency) == 1 + FRESH_TRIES  # then it is kept


def test_a_schedule_of_one_needed_event_gets_no_second_try() -> None:
    start = full_schedule(PAYMENTS, ["latency", "redeliver"])
    run = Fake(lambda s: has("redeliver", s))
    search_schedules(PAYMENTS, run, start=start, max_shrinks=100)
    keys = [s.to_msgpack() for s in run.calls]
    assert len(keys) == len(set(keys))


def test_lowering_a_value_that_reorders_the_events_lowers_the_right_event() -> None:
    pause = next(
        e for s in range(10_000) for e in generate(LEASES, s).events
        if e.kind == "pause" and isinstance(e.trigger, AtTime)
    )  # fmt: skip
    latency = next(
        e for s in range(10_000) for e in generate(LEASES, s).events if e.kind == "latency"
    )
    pause = pause.model_copy(update={"duration_s": 4.5, "trigger": AtTime(offset_s=5.0)})
    latency = latency.model_copy(update={"trigger": AtTime(offset_s=1.0), "duration_s": 4.0})
    start = assemble(LEASES, 0, [pause, latency])
    assert [e.kind for e in start.events] == ["latency", "pause"]

    def violates(s: FaultSchedule) -> bool:
        long_pause = any(e.kind == "pause" and (e.duration_s or 0) >= 3.0 for e in s.events)
        return long_pause and any(
            e.kind == "latency" and (e.duration_s or 0) >= 3.8 for e in s.events
        )  # the pause ends up shorter than the latency: lowering it reorders the events

    run = Fake(violates)
    result = search_schedules(LEASES, run, start=start, max_shrinks=200)
    for schedule in run.calls:
        check_inside(LEASES, schedule)
    assert result.schedule is not None
    by_kind = {e.kind.value: e for e in result.schedule.events}
    assert by_kind["pause"].trigger == AtTime(offset_s=0.0)
    assert 3.0 <= (by_kind["pause"].duration_s or 0) <= 3.3
    assert by_kind["latency"].trigger == AtTime(offset_s=0.0)
    assert 3.8 <= (by_kind["latency"].duration_s or 0) <= 4.0
