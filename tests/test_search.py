"""The search engine with run functions written here: finds, shrinks, budgets, determinism."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from chaos.scenario import load_scenario
from chaos.search import SearchResult, search_schedules, violations
from chaos.search_scenario import search_scenario
from faults.model import FaultSchedule, OnMessage, RedeliverParams
from ground.errors import ConfigError, ServiceError
from invariants import Verdict

SPACE = load_scenario("payments").fault_space("no-idempotency")
NAMES = ("exactly_once", "no_lost_messages", "consistent_final_state")


def redelivered_twice(schedule: FaultSchedule) -> bool:
    return any(
        e.kind == "redeliver" and isinstance(e.params, RedeliverParams) and e.params.count >= 2
        for e in schedule.events
    )


class Runs:
    """A run function: ``exactly_once`` is violated when ``violates(schedule)``."""

    def __init__(self, violates: Callable[[FaultSchedule], bool], broken: str = NAMES[0]) -> None:
        self.violates = violates
        self.broken = broken
        self.calls: list[FaultSchedule] = []

    def __call__(self, schedule: FaultSchedule) -> Sequence[Verdict]:
        self.calls.append(schedule)
        bad = self.violates(schedule)
        return [
            Verdict.violated(n, "broken") if bad and n == self.broken else Verdict.holds(n, "ok")
            for n in NAMES
        ]


def test_finds_and_shrinks_to_one_minimal_redelivery() -> None:
    runs = Runs(redelivered_twice)
    result = search_schedules(SPACE, runs, seed=3)
    assert result.found
    assert result.schedule is not None
    (event,) = result.schedule.events
    assert event.kind == "redeliver"
    assert event.params == RedeliverParams(count=2)
    assert event.trigger == OnMessage(subject="orders", n=1)
    assert result.schedule.seed == 3
    assert [v.name for v in result.violated] == ["exactly_once"]
    assert result.tried == len(runs.calls)
    assert result.exit_code == 1


def test_every_distinct_schedule_runs_once() -> None:
    runs = Runs(redelivered_twice)
    search_schedules(SPACE, runs, seed=5)
    keys = [s.to_msgpack() for s in runs.calls]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("seed", [0, 1, 9])
def test_the_same_seed_gives_the_same_search(seed: int) -> None:
    first, second = Runs(redelivered_twice), Runs(redelivered_twice)
    one = search_schedules(SPACE, first, seed=seed)
    two = search_schedules(SPACE, second, seed=seed)
    assert [s.to_msgpack() for s in first.calls] == [s.to_msgpack() for s in second.calls]
    assert one == two


def test_no_find_within_the_budget() -> None:
    runs = Runs(lambda _schedule: False)
    result = search_schedules(SPACE, runs, seed=2, max_examples=7)
    assert result == SearchResult(found=False, tried=len(runs.calls), shrink_runs=0)
    assert 1 <= result.tried <= 7
    assert result.exit_code == 0


def test_only_the_named_invariant_counts() -> None:
    other = Runs(lambda _schedule: True, broken="no_lost_messages")
    assert not search_schedules(SPACE, other, invariant="exactly_once", max_examples=5).found
    named = Runs(lambda _schedule: True, broken="no_lost_messages")
    found = search_schedules(SPACE, named, invariant="no_lost_messages", max_examples=5)
    assert found.found
    assert [v.name for v in found.violated] == ["no_lost_messages"]


def test_unknown_verdicts_are_not_violations() -> None:
    verdicts = [Verdict.unknown("exactly_once", "checker failed"), Verdict.holds("x", "ok")]
    assert violations(verdicts) == []
    assert not search_schedules(SPACE, lambda _s: verdicts, max_examples=3).found


def test_the_shrink_budget_bounds_the_runs_after_a_find() -> None:
    unbounded = search_schedules(SPACE, Runs(redelivered_twice), seed=1)
    assert unbounded.shrink_runs > 2  # otherwise the bound below proves nothing
    bounded_runs = Runs(redelivered_twice)
    bounded = search_schedules(SPACE, bounded_runs, seed=1, max_shrinks=2)
    assert bounded.found
    assert bounded.shrink_runs == 2
    assert bounded.tried == unbounded.tried - unbounded.shrink_runs + 2
    assert bounded.schedule is not None
    assert redelivered_twice(bounded.schedule)
    none = search_schedules(SPACE, Runs(redelivered_twice), seed=1, max_shrinks=0)
    assert none.shrink_runs == 0
    assert none.tried == unbounded.tried - unbounded.shrink_runs


def test_a_harness_error_stops_the_search_and_is_raised() -> None:
    calls: list[FaultSchedule] = []

    def run(schedule: FaultSchedule) -> Sequence[Verdict]:
        calls.append(schedule)
        if len(calls) == 2:
            raise ServiceError("consumer exited with code 1", "boom")
        return [Verdict.holds("exactly_once", "ok")]

    with pytest.raises(ServiceError, match="consumer exited") as info:
        search_schedules(SPACE, run, max_examples=10)
    assert len(calls) == 2
    assert "chaos search stopped at run 2" in info.value.__notes__


def test_a_harness_error_while_shrinking_is_raised_too() -> None:
    runs = Runs(redelivered_twice)

    def run(schedule: FaultSchedule) -> Sequence[Verdict]:
        if redelivered_twice(schedule) and any(redelivered_twice(s) for s in runs.calls):
            raise ServiceError("postgres died", "")
        return runs(schedule)

    with pytest.raises(ServiceError, match="postgres died"):
        search_schedules(SPACE, run, seed=1)


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ((0, 25), r"^--max-examples must be between 1 and 1000, got 0$"),
        ((20, -1), r"^--max-shrinks must be between 0 and 500, got -1$"),
    ],
)
def test_bad_budgets_raise_config_error(budget: tuple[int, int], message: str) -> None:
    runs = Runs(redelivered_twice)
    with pytest.raises(ConfigError, match=message):
        search_schedules(SPACE, runs, max_examples=budget[0], max_shrinks=budget[1])
    assert runs.calls == []


@pytest.mark.parametrize(
    ("variant", "invariant", "message"),
    [
        ("golden", "nope", r"^unknown invariant 'nope' \(this scenario checks: exactly_once, "),
        ("bogus", None, r"^scenario payments has no variant 'bogus'"),
    ],
)
def test_search_scenario_refuses_bad_input_before_running(
    variant: str, invariant: str | None, message: str, tmp_path: Path
) -> None:
    scenario = load_scenario("payments")
    with pytest.raises(ConfigError, match=message):
        search_scenario(scenario, variant, invariant=invariant, out=tmp_path / "t.trace")
    with pytest.raises(ConfigError, match=r"is a directory"):
        search_scenario(scenario, out=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_json_form() -> None:
    result = search_schedules(SPACE, Runs(redelivered_twice), seed=3)
    data = result.to_json("payments", "no-idempotency")
    assert set(data) == {
        "scenario", "variant", "found", "tried", "shrink_runs", "schedule", "verdicts", "trace",
        "shrink_complete", "fidelity", "racy",
    }  # fmt: skip
    assert data["fidelity"] is None  # the engine alone does not replay; search_scenario does
    assert data["racy"] is False
    assert data["found"] is True
    assert result.schedule is not None
    assert data["schedule"] == result.schedule.to_dict()
    assert set(data["schedule"]) == {"seed", "space_hash", "events"}
    assert data["verdicts"][0] == {
        "name": "exactly_once", "valid": False, "verdict": "VIOLATED", "explanation": "broken",
    }  # fmt: skip
    assert data["trace"] is None
