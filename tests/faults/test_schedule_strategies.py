"""schedules(space): valid schedules from the same space, shrinking toward small faults."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from faults.model import FaultSchedule, LatencyParams, OnConnection
from faults.space import FaultSpace
from faults.strategies import events, schedules
from ground.errors import ConfigError
from tests.faults.space_samples import PAYMENTS_SPACE, check_inside, fits, space_dicts

SPACE = FaultSpace.from_dict(PAYMENTS_SPACE)
QUIET = settings(database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(QUIET, max_examples=80)
@given(schedules(SPACE, seed=11))
def test_drawn_schedules_stay_inside_the_space(schedule: FaultSchedule) -> None:
    check_inside(SPACE, schedule)
    assert schedule.seed == 11
    assert FaultSchedule.from_msgpack(schedule.to_msgpack()) == schedule


@settings(QUIET, max_examples=40)
@given(st.data())
def test_any_space_gives_valid_schedules(data: st.DataObject) -> None:
    space = FaultSpace.from_dict(data.draw(space_dicts()))
    schedule = data.draw(schedules(space))
    check_inside(space, schedule)


@settings(QUIET, max_examples=30)
@given(events(PAYMENTS_SPACE))
def test_events_strategy_draws_single_fitting_events(event: Any) -> None:
    assert event.id == "f0"
    assert fits(SPACE, event)


def test_shrinks_to_the_smallest_schedule_with_a_latency_fault() -> None:
    def has_latency(schedule: FaultSchedule) -> bool:
        return any(e.kind == "latency" for e in schedule.events)

    smallest = find(schedules(SPACE), has_latency, settings=QUIET)
    assert len(smallest.events) == SPACE.min_events == 1
    (event,) = smallest.events
    assert event.params == LatencyParams(latency_ms=10, jitter_ms=0)
    assert event.target.name == "producer-nats"  # the first declared link
    assert event.duration_s == 0.5
    assert event.trigger.model_dump() == {"type": "at_time", "offset_s": 0.0}


def test_shrinks_triggers_to_their_low_end() -> None:
    def partition_on_connection(schedule: FaultSchedule) -> bool:
        return any(isinstance(e.trigger, OnConnection) for e in schedule.events)

    smallest = find(schedules(SPACE), partition_on_connection, settings=QUIET)
    (event,) = smallest.events
    assert event.trigger == OnConnection(link="consumer-postgres", n=1)
    assert event.params.model_dump() == {"direction": "both"}


def test_shrinks_toward_fewer_events() -> None:
    space = {**PAYMENTS_SPACE, "min_events": 0, "max_events": 6}
    smallest = find(schedules(space), lambda s: len(s.events) >= 3, settings=QUIET)
    assert len(smallest.events) == 3
    assert find(schedules(space), lambda s: True, settings=QUIET).events == ()


def test_bad_space_raises_config_error_at_once() -> None:
    with pytest.raises(ConfigError, match=r"^min_events \(2\) > max_events \(1\)$"):
        schedules({**PAYMENTS_SPACE, "min_events": 2, "max_events": 1})
