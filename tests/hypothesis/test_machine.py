"""ChaosMachine on a fake floor (a real portal, fake runs): the rules it makes from a fault
space, async rules and invariants on the run's loop, shrinking to the one fault a violation
needs, the trace and replay noted, a racy violation remembered. The real runs are in
tests/test_pytest_plugin.py (the docs' examples, run as written)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule as hypothesis_rule
from hypothesis.stateful import run_state_machine_as_test

from chaos.context import RunContext
from chaos.hypothesis import ChaosMachine, invariant, rule
from chaos.scenario import Scenario
from faults.model import FaultSchedule
from faults.space import FaultSpace
from ground.errors import ConfigError
from invariants import Verdict
from tests.hypothesis.fakes import FakeFloor, fake_run

SPACE = FaultSpace.from_dict(
    {
        "horizon_s": 2.0,
        "links": ["db", "consumer-nats", "producer-nats"],
        "services": ["consumer"],
        "subjects": ["orders"],
        "templates": [
            {"kind": "latency", "targets": ["db"], "params": {"latency_ms": [10, 20]},
             "duration_s": [0.1, 0.5]},
            {"kind": "redeliver", "params": {"count": [1, 3]},
             "triggers": [{"type": "on_message", "n": [1, 9]}]},
            {"kind": "crash", "params": {"restart_after_s": [0.0, 0.1]}},
            {"kind": "crash", "params": {"restart_after_s": [0.0, 0.1]},
             "triggers": [{"type": "on_message", "subjects": ["orders"], "n": [1, 9]}]},
        ],
    }
)  # fmt: skip


class Fake(Scenario):
    id = "fake"
    variants: ClassVar[dict[str, str]] = {"golden": "right", "broken": "charges twice"}
    invariants = ("exactly_once",)

    def fault_space(self, variant: str) -> FaultSpace:
        self.check_variant(variant)
        return SPACE

    async def setup(self, ctx: RunContext) -> None: ...

    async def workload(self, ctx: RunContext) -> None: ...

    async def settled(self, ctx: RunContext) -> bool:
        return True

    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        return {}


def redelivered_twice(schedule: FaultSchedule) -> list[Verdict]:
    """The stand-in system: it charges twice when a message is redelivered twice."""
    twice = any(e.kind == "redeliver" and e.params.count >= 2 for e in schedule.events)
    if twice:
        return [Verdict.violated("exactly_once", "o-1 charged twice.")]
    return [Verdict.holds("exactly_once", "each order once.")]


#: Derandomized, as Hypothesis's ``ci`` profile is (CI sets ``CI``): the same examples on every
#: run, so a test of what the machine finds does not depend on the luck of one run's draws
#: (without it, one local CI rehearsal in several found no violating example in 40).
QUICK = settings(
    derandomize=True,
    max_examples=40,
    stateful_step_count=6,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def floor() -> Iterator[FakeFloor]:
    made = FakeFloor(fake_run(deliveries=5, every_s=0.01, judge=redelivered_twice))
    try:
        yield made
    finally:
        made.close()


def machine(floor: FakeFloor, tmp_path: Path, **attributes: Any) -> type[ChaosMachine]:
    return type(
        "FakeMachine",
        (ChaosMachine,),
        {"scenario": Fake(), "floor": floor, "trace_dir": tmp_path, **attributes},
    )


def test_it_has_a_rule_per_fault_template_with_the_templates_targets_and_ranges(
    tmp_path: Path,
) -> None:
    floor = FakeFloor(fake_run(deliveries=5, every_s=0.01, judge=lambda s: []))
    calls: list[tuple[str, str, dict[str, Any], float | None]] = []

    class Recording(machine(floor, tmp_path)):  # type: ignore[misc]
        def inject(self, kind: Any, target: Any = None, **kwargs: Any) -> Any:
            params = {k: v for k, v in kwargs.items() if k != "duration_s"}
            calls.append((str(kind), target, params, kwargs.get("duration_s")))
            return super().inject(kind, target, **kwargs)

    try:
        run_state_machine_as_test(Recording, settings=settings(QUICK, max_examples=30))
    finally:
        floor.close()
    cls = Recording
    kinds = {call[0] for call in calls}
    assert kinds == {"latency", "redeliver", "crash"}
    for kind, target, params, duration in calls:
        if kind == "latency":
            assert target == "db"
            assert 10 <= params["latency_ms"] <= 20
            assert duration is not None
            assert 0.1 <= duration <= 0.5
        elif kind == "redeliver":
            assert (target, duration) == ("orders", None)
            assert 1 <= params["count"] <= 3
        else:
            assert (target, duration) == ("consumer", None)
            assert 0.0 <= params["restart_after_s"] <= 0.1
    # Two crash templates that differ only in their trigger make one rule (the machine's
    # faults start now): there is no crash_2.
    assert not hasattr(cls, "crash_2")


def test_it_finds_and_shrinks_to_the_one_fault_and_notes_the_replay(
    floor: FakeFloor, tmp_path: Path
) -> None:
    cls = machine(floor, tmp_path, variant="broken")
    with pytest.raises(AssertionError) as failed:
        run_state_machine_as_test(cls, settings=QUICK)
    message = str(failed.value)
    assert message.startswith("exactly_once VIOLATED: o-1 charged twice.\nreplay: chaos replay ")
    report = "\n".join(getattr(failed.value, "__notes__", []))
    steps = [line for line in report.splitlines() if line.startswith("state.")]
    assert steps == ["state.redeliver(count=2, subject='orders')", "state.teardown()"]  # shrunk
    assert "chaos: fake broken run" in report
    trace = Path(message.rsplit("chaos replay ", 1)[1])
    assert trace.parent == tmp_path
    assert f"replay:   chaos replay {trace.resolve()}" in report


def test_a_passing_example_leaves_no_trace(tmp_path: Path) -> None:
    made = FakeFloor(fake_run(judge=lambda schedule: [Verdict.holds("exactly_once", "ok")]))
    written: list[Path] = []

    async def run(options: Any) -> Any:
        assert options.out is not None
        options.out.write_text("a trace")
        written.append(options.out)
        return await fake_run(judge=lambda s: [Verdict.holds("exactly_once", "ok")])(options)

    made.run_async = run
    kept = [tmp_path / "FakeMachine-1.trace", tmp_path / "FakeMachine-3.trace.partial"]
    for path in kept:  # an earlier pytest session's failing examples
        path.write_text("kept")
    try:
        run_state_machine_as_test(machine(made, tmp_path), settings=settings(QUICK, max_examples=5))
    finally:
        made.close()
    assert written
    assert written[0].name == "FakeMachine-4.trace"  # numbered after what the folder holds
    assert sorted(tmp_path.iterdir()) == kept
    assert {path.read_text() for path in kept} == {"kept"}


def test_async_rules_and_invariants_run_on_the_runs_loop(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    floor = FakeFloor(fake_run(deliveries=5, every_s=0.01, judge=lambda schedule: []))

    class Async(ChaosMachine):
        scenario = Fake()
        trace_dir = tmp_path

        @rule(n=st.integers(1, 2))
        async def nap(self, n: int) -> None:
            await trio.sleep(0.001 * n)
            seen.append(("rule", threading.current_thread().name))

        @invariant()
        async def looked(self) -> None:
            trio.lowlevel.current_task()  # only inside trio
            seen.append(("invariant", threading.current_thread().name))

        async def teardown(self) -> None:
            run = await self.finished()
            seen.append(("teardown", run.result.scenario))

    Async.floor = floor
    try:
        run_state_machine_as_test(Async, settings=settings(QUICK, max_examples=8))
    finally:
        floor.close()
    assert {what for what, _ in seen} == {"rule", "invariant", "teardown"}
    assert {where for what, where in seen if what != "teardown"} == {"fake-floor"}
    assert ("teardown", "fake") in seen


def test_a_user_rule_injects_through_the_machine(floor: FakeFloor, tmp_path: Path) -> None:
    class Twice(ChaosMachine):
        scenario = Fake()
        variant = "broken"
        trace_dir = tmp_path

        @rule()
        def redeliver_twice(self) -> None:
            self.wait_messages(1)  # a rule of the machine's, called as a method (positional)
            self.inject("redeliver", count=2)  # the space's one subject: no target needed

    Twice.floor = floor
    with pytest.raises(AssertionError, match="exactly_once VIOLATED"):
        run_state_machine_as_test(Twice, settings=QUICK)


def test_an_async_rule_under_hypothesis_own_decorator_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Bad\.sleep is async: decorate it with chaos"):

        class Bad(ChaosMachine):
            @hypothesis_rule()
            async def sleep(self) -> None: ...


def test_a_machine_without_a_scenario_says_so(tmp_path: Path) -> None:
    class Nothing(ChaosMachine):
        pass

    with pytest.raises(ConfigError, match="Nothing: set scenario"):
        Nothing()


def test_a_violation_seen_once_is_remembered_for_the_same_steps(tmp_path: Path) -> None:
    """A racy system: the same steps violate on their first run only. Hypothesis runs the
    failing example again to report it; the remembered violation keeps it failing."""
    runs: list[FaultSchedule] = []

    def racy(schedule: FaultSchedule) -> list[Verdict]:
        if schedule.events:
            runs.append(schedule)
        if len(runs) == 1 and schedule.events:
            return [Verdict.violated("exactly_once", "o-1 charged twice.")]
        return [Verdict.holds("exactly_once", "ok")]

    made = FakeFloor(fake_run(judge=racy))

    class Once(ChaosMachine):
        scenario = Fake()
        trace_dir = tmp_path

        @rule()
        def pause(self) -> None:
            self.inject("latency", "db", latency_ms=10)

    Once.floor = made
    try:
        with pytest.raises(AssertionError) as failed:
            run_state_machine_as_test(Once, settings=settings(QUICK, stateful_step_count=1))
    finally:
        made.close()
    assert "an earlier run of these same steps; this one held" in str(failed.value)
    assert len(runs) > 1  # the same steps ran again (Hypothesis's replay) and held


def test_a_racy_invariant_fails_at_teardown_and_every_example_draws_all_its_steps(
    tmp_path: Path,
) -> None:
    """A real run is not the same twice: here the system breaks the invariant in the third
    example only, before its first step. Raised at once, Hypothesis saw the same choices
    stop drawing earlier than before (FlakyStrategyDefinition, seen on payments under load);
    the machine keeps the failure, runs the later steps and raises it from teardown (the
    final replay's run holds: the remembered failure, with its run, is the report)."""
    examples = itertools.count(1)

    class Racy(ChaosMachine):
        scenario = Fake()
        trace_dir = tmp_path

        def __init__(self) -> None:
            super().__init__()
            self.number = next(examples)

        @invariant()
        def the_system_holds(self) -> None:
            assert self.number != 3, "o-1 charged twice"

    holds = fake_run(
        deliveries=3, every_s=0.01, judge=lambda s: [Verdict.holds("exactly_once", "ok")]
    )
    made = FakeFloor(holds)
    Racy.floor = made
    try:
        with pytest.raises(AssertionError, match="o-1 charged twice") as failed:
            run_state_machine_as_test(Racy, settings=settings(QUICK, stateful_step_count=3))
    finally:
        made.close()
    report = "\n".join(getattr(failed.value, "__notes__", []))
    assert "chaos: the_system_holds failed after 0 step(s) on the run (AssertionError" in report
    assert "an earlier run of these same steps; this one held" in report
    assert "replay:   chaos replay " in report
