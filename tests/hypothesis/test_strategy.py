"""``schedules(...)``: generate's draw as a Hypothesis strategy, on stand-in oracles (no runs)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from chaos.hypothesis import schedules
from chaos.hypothesis._strategy import (
    COIN_BITS,
    BitsDraw,
    draw_schedule,
    space_schedules,
    stop_threshold,
    uniform_integers,
    uniform_seconds,
)
from chaos.scenario import load_scenario
from faults.kinds import TARGET_KIND
from faults.model import FaultSchedule
from faults.schedule import generate
from faults.shrink import knobs, template_for
from faults.space import FaultSpace
from ground.errors import ConfigError

PAYMENTS = load_scenario("payments")
GOLDEN = PAYMENTS.fault_space("golden")
QUICK = settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
#: A small space (narrow ranges: few bits) for the shrinking tests.
SMALL = FaultSpace.from_dict(
    {
        "horizon_s": 1.0,
        "min_events": 1,
        "max_events": 4,
        "links": ["db"],
        "services": ["consumer"],
        "subjects": ["orders"],
        "templates": [
            {"kind": "latency", "params": {"latency_ms": [10, 40]}, "duration_s": [0.1, 0.2],
             "triggers": [{"type": "at_time", "offset_s": [0.0, 0.1]}]},
            {"kind": "redeliver", "params": {"count": [1, 3]},
             "triggers": [{"type": "on_message", "n": [1, 4]}]},
            {"kind": "crash", "params": {"restart_after_s": [0.0, 0.05]},
             "triggers": [{"type": "on_message", "subjects": ["orders"], "n": [1, 4]}]},
            {"kind": "pause", "duration_s": [0.2, 0.3],
             "triggers": [{"type": "at_time", "offset_s": [0.0, 0.1]}]},
        ],
    }
)  # fmt: skip


def seeded_bits(seed: int) -> BitsDraw:
    rng = random.Random(seed)
    return BitsDraw(lambda: rng.random() < 0.5)


def test_fresh_bits_draw_generates_distribution() -> None:
    """From fair random bits, counts and templates come out as generate's do (both seeded:
    the comparison is the same every time)."""
    n = 3000
    bits = seeded_bits(1)
    ours = [draw_schedule(GOLDEN, 0, bits) for _ in range(n)]
    theirs = [generate(GOLDEN, seed) for seed in range(n)]

    Key = Callable[[FaultSchedule], list[str]]

    def shares(schedules: list[FaultSchedule], key: Key) -> dict[str, float]:
        counts = Counter(k for s in schedules for k in key(s))
        total = sum(counts.values())
        return {k: v / total for k, v in counts.items()}

    def sizes(s: FaultSchedule) -> list[str]:
        return [str(len(s.events))]

    def kinds(s: FaultSchedule) -> list[str]:
        return [e.kind.value for e in s.events]

    for key in (sizes, kinds):
        a, b = shares(ours, key), shares(theirs, key)
        assert set(a) == set(b)
        for name in a:
            assert abs(a[name] - b[name]) < 0.03, (key.__name__, name, a[name], b[name])
    # redeliver has weight 3 of 11 in the golden space: the draw honours template weights.
    assert shares(ours, kinds)["redeliver"] == pytest.approx(3 / 11, abs=0.03)


def test_the_stop_coins_multiply_out_to_a_uniform_count() -> None:
    space = FaultSpace.from_dict({**GOLDEN.to_dict(), "min_events": 1, "max_events": 5})
    p_reach, p_count = 1.0, {}
    for k in range(space.min_events, space.max_events + 1):
        stop = 1.0 if k == space.max_events else stop_threshold(k, space.max_events) / 2**COIN_BITS
        p_count[k] = p_reach * stop
        p_reach *= 1 - stop
    for probability in p_count.values():
        assert probability == pytest.approx(1 / 5, abs=1e-4)


def test_the_same_bits_give_the_same_schedule_byte_for_byte() -> None:
    def draws(seed: int) -> list[bytes]:
        bits = seeded_bits(seed)
        return [draw_schedule(GOLDEN, 7, bits).to_msgpack() for _ in range(20)]

    assert draws(42) == draws(42)
    assert len(set(draws(42))) > 15
    assert draws(43) != draws(42)


def test_the_strategy_is_deterministic_under_a_fixed_hypothesis_seed() -> None:
    def collect() -> list[bytes]:
        seen: list[bytes] = []

        @settings(QUICK, max_examples=30, derandomize=True, phases=[Phase.generate])
        @given(schedules(PAYMENTS, variant="golden"))
        def record(schedule: FaultSchedule) -> None:
            seen.append(schedule.to_msgpack())

        record()
        return seen

    first = collect()
    assert len(set(first)) > 10
    assert collect() == first


def test_all_zero_bits_are_the_simplest_schedule_of_the_space() -> None:
    simplest = draw_schedule(GOLDEN, 0, BitsDraw(lambda: False))
    assert len(simplest.events) == GOLDEN.min_events
    (event,) = simplest.events
    assert template_for(GOLDEN, event) is GOLDEN.templates[0]
    assert knobs(GOLDEN, event) == []  # every value at the low end of its range
    assert event.target.name == GOLDEN.targets_of(GOLDEN.templates[0])[0]


@pytest.mark.parametrize("variant", list(PAYMENTS.variants))
def test_it_draws_only_what_the_variants_space_has(variant: str) -> None:
    space = PAYMENTS.fault_space(variant)

    @settings(QUICK, max_examples=60)
    @given(schedules(PAYMENTS, variant=variant, seed=5))
    def inside(schedule: FaultSchedule) -> None:
        assert schedule.seed == 5
        assert schedule.space_hash == space.content_hash()
        assert space.min_events <= len(schedule.events) <= space.max_events
        for event in schedule.events:
            assert event.target.name in space.declared(TARGET_KIND[event.kind])
            assert template_for(space, event) is not None, event

    inside()


def test_space_golden_draws_from_the_packs_golden_table() -> None:
    @settings(QUICK, max_examples=10)
    @given(schedules("payments", variant="no-idempotency", space="golden"))
    def golden(schedule: FaultSchedule) -> None:
        assert schedule.space_hash == GOLDEN.content_hash()

    golden()


def shrunk(
    strategy: st.SearchStrategy[FaultSchedule], violates: Callable[[FaultSchedule], bool]
) -> FaultSchedule:
    settled = settings(QUICK, max_examples=500)
    return find(strategy, violates, settings=settled, random=random.Random(0))


def test_shrinking_removes_every_event_the_violation_does_not_need() -> None:
    """A stand-in oracle: a schedule 'violates' when it redelivers a message at least twice."""

    def twice(schedule: FaultSchedule) -> bool:
        return any(e.kind == "redeliver" and e.params.count >= 2 for e in schedule.events)

    minimal = shrunk(space_schedules(SMALL), twice)
    (event,) = minimal.events
    assert event.kind == "redeliver"
    assert event.params.count == 2  # lowered to the least that still violates
    assert [k.name for k in knobs(SMALL, event)] == ["count"]  # the trigger at its lowest


def test_shrinking_keeps_the_two_events_a_violation_needs() -> None:
    def both(schedule: FaultSchedule) -> bool:
        kinds = {e.kind for e in schedule.events}
        return {"crash", "pause"} <= kinds

    minimal = shrunk(space_schedules(SMALL), both)
    assert sorted(e.kind.value for e in minimal.events) == ["crash", "pause"]
    for event in minimal.events:
        assert knobs(SMALL, event) == [], event  # every value at the low end


def test_uniform_integers_span_the_range_and_shrink_to_its_low_end() -> None:
    seen: list[int] = []

    @settings(QUICK, max_examples=400, phases=[Phase.generate])
    @given(uniform_integers(-5, 1000))
    def draw(value: int) -> None:
        assert -5 <= value <= 1000
        seen.append(value)

    draw()
    assert max(seen) > 900
    assert 300 < sorted(seen)[len(seen) // 2] < 700  # not drawn small first: about the middle
    # Bit by bit, most significant first: a value whose every set bit is needed (v - lo is
    # 64 = 0b1000000, not 43), at most twice the least that passes the predicate.
    assert find(uniform_integers(-5, 1000), lambda v: v > 37, settings=QUICK) == 59
    assert find(uniform_integers(-5, 1000), lambda v: v > 58, settings=QUICK) == 59
    assert find(uniform_seconds(0.5, 2.0), lambda v: v >= 1.25, settings=QUICK) == 1.524
    assert find(uniform_integers(7, 7), lambda v: True, settings=QUICK) == 7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "nope"}, "has no variant 'nope'"),
        ({"space": "everything"}, "space must be one of variant, golden"),
    ],
)
def test_bad_input_is_one_config_error_at_once(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        schedules("payments", **kwargs)


def test_a_schedule_prints_as_code_that_builds_it_again() -> None:
    from hypothesis.vendor.pretty import pretty

    schedule = generate(GOLDEN, 3)
    printed = pretty(schedule)
    assert printed.startswith("FaultSchedule.from_dict({")
    assert eval(printed, {"FaultSchedule": FaultSchedule}) == schedule
