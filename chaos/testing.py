"""``ChaosEnv``: a scenario run that a test sets up, runs and asserts on.

The pytest plugin (``chaos.pytest_plugin``) hands one to a test as the ``env`` fixture::

    @pytest.mark.chaos(scenario="payments", seed=7)
    def test_no_duplicate_side_effects(env):
        env.inject_fault("redeliver_message", count=3)
        env.run_until_settled(timeout=30)
        assert env.side_effect_count("charge_customer") == 1
        assert env.final_state_is_consistent()

It builds a fault schedule from ``inject_fault`` calls and runs the scenario once with it
(real services, real proxies, the trace in the given folder); afterwards the verdicts, the
final state and the history are there to assert on.

It is also a factory of runs, for a test that makes many (one per Hypothesis example)::

    @given(schedule=schedules("payments", variant="no-idempotency"))
    def test_each_order_charged_once(env, schedule):
        run = env.run(schedule)           # a ChaosRun: the same questions, of this run
        assert run.side_effect_count("charge_customer") <= 1

``env.run`` runs on the process's ``chaos.floor`` (servers kept between runs), each run with
its own trace; a schedule this env already ran is not run again (Hypothesis reaches one
schedule by many draws while it shrinks; ``fresh=True`` runs it again).
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos.run import RunOptions, RunResult, run_scenario
from chaos.scenario import Scenario
from chaos.schedule_file import check_schedule_targets
from faults.kinds import INSTANTANEOUS, TARGET_KIND, FaultKind, TargetKind
from faults.model import FaultEvent, FaultSchedule
from ground.errors import ConfigError
from ground.rng import check_seed
from invariants import Verdict

if TYPE_CHECKING:
    from chaos.floor import RunFloor

#: Names a test may use for a fault kind, besides the kinds themselves.
ALIASES = {
    "redeliver_message": FaultKind.REDELIVER,
    "duplicate_message": FaultKind.DUPLICATE_PUBLISH,
    "kill": FaultKind.CRASH,
}


def describe_schedule(schedule: FaultSchedule) -> str:
    """One line per fault: ``f0 crash service:consumer on_message(orders, 2) restart_after_s=0``."""
    lines = []
    for event in schedule.events:
        trigger = event.trigger.model_dump()
        kind = trigger.pop("type")
        where = ", ".join(str(value) for value in trigger.values())
        lasting = "" if event.duration_s is None else f" for {event.duration_s}s"
        params = "".join(f" {k}={v}" for k, v in event.params.model_dump().items())
        what = f"{event.id} {event.kind.value} {event.target}"
        lines.append(f"{what} {kind}({where}){lasting}{params}")
    return "\n".join(lines) or "none"


class _Answers(ABC):
    """What a test asks of a finished run, shared by ``ChaosRun`` (a run ``env.run`` made)
    and ``ChaosEnv`` (the run ``run_until_settled`` made): settled, final state, history,
    trace, verdicts and side effects, all read from ``_answered()``."""

    scenario: Scenario

    @abstractmethod
    def _answered(self) -> RunResult:
        """The finished run the answers are read from."""

    @property
    def settled(self) -> bool:
        return self._answered().settled

    @property
    def stuck(self) -> bool:
        """Not settled because the scenario said it could not (``chaos.settle.STUCK``)."""
        return self._answered().stuck

    @property
    def final_state(self) -> dict[str, Any]:
        return self._answered().final_state

    @property
    def history(self) -> list[dict[str, Any]]:
        return self._answered().history

    @property
    def trace(self) -> Path:
        return self._answered().trace

    def verdict(self, invariant: str) -> Verdict:
        verdicts = self._answered().verdicts
        for verdict in verdicts:
            if verdict.name == invariant:
                return verdict
        checked = ", ".join(v.name for v in verdicts)
        raise ConfigError(f"no verdict {invariant!r} (checked: {checked})")

    def holds(self, invariant: str) -> bool:
        return self.verdict(invariant).valid is True

    def side_effects(self, name: str) -> Counter[str]:
        """How often side effect ``name`` happened, per key (e.g. per order id)."""
        return self.scenario.side_effects(name, self.final_state)

    def side_effect_count(self, name: str, key: str | None = None) -> int:
        """How often ``name`` happened for ``key``; without a key, the most it happened
        for any one key (so ``<= 1`` means no key got it twice)."""
        counts = self.side_effects(name)
        if key is not None:
            return counts[key]
        return max(counts.values(), default=0)

    def final_state_is_consistent(self) -> bool:
        """Every invariant the scenario counts as "the final state is consistent" held
        (``Scenario.consistency``; by default all of its invariants)."""
        return all(self.holds(name) for name in self.scenario.consistency_invariants())


class ChaosRun(_Answers):
    """One finished run of a scenario, to assert on: verdicts, final state, side effects."""

    def __init__(self, scenario: Scenario, result: RunResult) -> None:
        self.scenario = scenario
        self.result = result

    def _answered(self) -> RunResult:
        return self.result

    def __repr__(self) -> str:
        outcome = "held" if self.result.held else "violated"
        return f"<ChaosRun {self.scenario.id} {self.result.variant} {outcome}: {self.trace}>"

    @property
    def schedule(self) -> FaultSchedule:
        return self.result.schedule

    @property
    def verdicts(self) -> list[Verdict]:
        return self.result.verdicts

    @property
    def violated(self) -> list[Verdict]:
        """The invariants that did not hold (``valid`` False; unknown is no violation)."""
        return [v for v in self.result.verdicts if v.valid is False]

    def reproduction(self) -> str:
        """The trace, the faults and the ``chaos replay`` command that runs them again."""
        trace = self.trace.resolve()
        faults = describe_schedule(self.schedule).replace("\n", "\n" + " " * 10)
        return "\n".join(
            [
                f"trace:    {trace}",
                f"scenario: {self.scenario.source}  variant: {self.result.variant}  "
                f"seed: {self.result.seed}",
                f"faults:   {faults}",
                f"replay:   chaos replay {shlex.quote(str(trace))}",
            ]
        )


class ChaosEnv(_Answers):
    """One scenario run, set up by a test: inject faults, run, then assert."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        variant: str = "golden",
        seed: int = 0,
        out_dir: Path,
        floor: RunFloor | None = None,
    ) -> None:
        scenario.check_variant(variant)
        check_seed(seed)
        self.scenario = scenario
        self.variant = variant
        self.seed = seed
        self.out_dir = out_dir
        self.events: list[FaultEvent] = []
        self._result: RunResult | None = None
        #: Where the run's trace goes (set when the run starts).
        self.trace_path: Path | None = None
        #: What ``run`` returned, in order (a failure report shows the last).
        self.runs: list[ChaosRun] = []
        self._floor = floor
        self._ran: dict[tuple[bytes, float | None], ChaosRun] = {}

    def __repr__(self) -> str:
        return f"<ChaosEnv {self.scenario.id} {self.variant} seed {self.seed}>"

    # -- before the run -------------------------------------------------------------------

    def inject_fault(
        self,
        kind: str,
        target: str | None = None,
        *,
        trigger: dict[str, Any] | None = None,
        duration_s: float | None = None,
        **params: Any,
    ) -> FaultEvent:
        """Add a fault: ``kind`` (or an alias such as ``redeliver_message``), its target
        (a link, service or subject name; may be left out when the scenario has only one of
        that type), its parameters, a trigger (default: the first message for instantaneous
        faults when the scenario has one subject, the workload's start otherwise) and a
        duration."""
        if self._result is not None:
            raise ConfigError(
                "inject faults before run_until_settled (a run per Hypothesis example: "
                "env.run(schedule))"
            )
        fault_kind = _kind(kind)
        event = FaultEvent.from_dict(
            {
                "id": f"f{len(self.events)}",
                "kind": fault_kind.value,
                "target": self._target(fault_kind, target),
                "params": params,
                "trigger": trigger or self._default_trigger(fault_kind),
                "duration_s": duration_s,
            }
        )
        self.events.append(event)
        return event

    def _target(self, kind: FaultKind, name: str | None) -> str:
        target_kind = TARGET_KIND[kind]
        if name is not None:
            return f"{target_kind.value}:{name}"
        declared = self.scenario.fault_space(self.variant).declared(target_kind)
        if len(declared) != 1:
            raise ConfigError(
                f"{kind.value} needs a target: scenario {self.scenario.id} has "
                f"{len(declared)} {target_kind.value}s ({', '.join(declared) or 'none'})"
            )
        return f"{target_kind.value}:{declared[0]}"

    def _default_trigger(self, kind: FaultKind) -> dict[str, Any]:
        subjects = self.scenario.fault_space(self.variant).declared(TargetKind.SUBJECT)
        if kind in INSTANTANEOUS and len(subjects) == 1:
            return {"type": "on_message", "subject": subjects[0], "n": 1}
        return {"type": "at_time", "offset_s": 0.0}

    # -- the run --------------------------------------------------------------------------

    def run_until_settled(self, timeout: float | None = None) -> RunResult:
        """Run the scenario once with the injected faults; wait up to ``timeout`` seconds
        (default: the scenario's) for the system to settle. Returns the run's result."""
        if self._result is not None:
            raise ConfigError(
                "run_until_settled runs once per test (a run per Hypothesis example: "
                "env.run(schedule))"
            )
        space = self.scenario.fault_space(self.variant)
        schedule = FaultSchedule(
            seed=self.seed, space_hash=space.content_hash(), events=tuple(self.events)
        )
        self.trace_path = self.out_dir / f"{self.scenario.id}-{self.variant}-seed{self.seed}.trace"
        options = RunOptions(
            self.scenario,
            self.seed,
            variant=self.variant,
            out=self.trace_path,
            schedule=schedule,
            settle_timeout_s=timeout,
        )
        self._result = trio.run(run_scenario, options)
        return self._result

    def run(
        self, schedule: FaultSchedule, *, timeout: float | None = None, fresh: bool = False
    ) -> ChaosRun:
        """Run the scenario once with ``schedule`` (recorded under the env's seed), its own
        trace in the test's folder; wait up to ``timeout`` seconds (default: the scenario's)
        to settle. A schedule this env already ran returns that run, unless ``fresh``. In a
        Hypothesis test the run is ``note()``d: a failing example's report shows it."""
        from chaos.floor import shared_floor

        if not isinstance(schedule, FaultSchedule):
            raise ConfigError(f"env.run takes a FaultSchedule, got {type(schedule).__name__}")
        if schedule.seed != self.seed:
            schedule = schedule.model_copy(update={"seed": self.seed})
        check_schedule_targets(self.scenario, self.variant, schedule)
        key = (schedule.to_msgpack(), timeout)
        done = None if fresh else self._ran.get(key)
        if done is None:
            name = f"{self.scenario.id}-{self.variant}-{len(self._ran) + 1}.trace"
            trace = self.out_dir / "runs" / name
            options = RunOptions(
                self.scenario,
                self.seed,
                variant=self.variant,
                out=trace,
                schedule=schedule,
                settle_timeout_s=timeout,
            )
            done = ChaosRun(self.scenario, (self._floor or shared_floor()).run(options))
            self._ran[key] = done
        self.runs.append(done)
        _note(done)
        return done

    # -- after the run --------------------------------------------------------------------

    @property
    def result(self) -> RunResult:
        if self._result is None:
            raise ConfigError("call run_until_settled first")
        return self._result

    def _answered(self) -> RunResult:
        return self.result

    def reproduction(self) -> str | None:
        """What a failing test's report adds (the pytest plugin): the trace, the seed and the
        ``chaos replay`` command that runs the same scenario with the same faults again;
        None when the run never started."""
        if self.runs:  # env.run's: the last run (Hypothesis runs the failing example last)
            return self.runs[-1].reproduction()
        trace = self.trace_path
        if trace is None:
            return None
        if not trace.is_file():
            partial = trace.with_name(trace.name + ".partial")
            if not partial.is_file():
                return None
            trace = partial
        trace = trace.resolve()
        lines = [
            f"trace:    {trace}",
            f"scenario: {self.scenario.source}  variant: {self.variant}  seed: {self.seed}",
            f"faults:   {len(self.events)} injected by the test (the trace holds them)",
            f"replay:   chaos replay {shlex.quote(str(trace))}",
        ]
        return "\n".join(lines)


def _note(run: ChaosRun) -> None:
    """In a Hypothesis test, ``note()`` the run: a failing example's report shows it."""
    from hypothesis import currently_in_test_context, note

    if currently_in_test_context():
        note(f"chaos: {run.scenario.id} {run.result.variant} run\n{run.reproduction()}")


def _kind(kind: str) -> FaultKind:
    if kind in ALIASES:
        return ALIASES[kind]
    try:
        return FaultKind(kind)
    except ValueError:
        known = ", ".join([*(k.value for k in FaultKind), *ALIASES])
        raise ConfigError(f"unknown fault kind {kind!r} (known: {known})") from None
