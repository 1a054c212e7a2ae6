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
"""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from chaos.errors import ConfigError
from chaos.rng import check_seed
from chaos.run import RunOptions, RunResult, run_scenario
from chaos.scenario import Scenario
from faults.kinds import INSTANTANEOUS, TARGET_KIND, FaultKind, TargetKind
from faults.model import FaultEvent, FaultSchedule
from invariants import Verdict

#: Names a test may use for a fault kind, besides the kinds themselves.
ALIASES = {
    "redeliver_message": FaultKind.REDELIVER,
    "duplicate_message": FaultKind.DUPLICATE_PUBLISH,
    "kill": FaultKind.CRASH,
}


class ChaosEnv:
    """One scenario run, set up by a test: inject faults, run, then assert."""

    def __init__(
        self, scenario: Scenario, *, variant: str = "golden", seed: int = 0, out_dir: Path
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
            raise ConfigError("inject faults before run_until_settled")
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
            raise ConfigError("run_until_settled runs once per test")
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

    # -- after the run --------------------------------------------------------------------

    @property
    def result(self) -> RunResult:
        if self._result is None:
            raise ConfigError("call run_until_settled first")
        return self._result

    @property
    def settled(self) -> bool:
        return self.result.settled

    @property
    def final_state(self) -> dict[str, Any]:
        return self.result.final_state

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.result.history

    @property
    def trace(self) -> Path:
        return self.result.trace

    def verdict(self, invariant: str) -> Verdict:
        for verdict in self.result.verdicts:
            if verdict.name == invariant:
                return verdict
        checked = ", ".join(v.name for v in self.result.verdicts)
        raise ConfigError(f"no verdict {invariant!r} (checked: {checked})")

    def holds(self, invariant: str) -> bool:
        return self.verdict(invariant).valid is True

    def side_effects(self, name: str) -> Counter[str]:
        """How often side effect ``name`` happened, per key (e.g. per order id)."""
        return self.scenario.side_effects(name, self.final_state)

    def side_effect_count(self, name: str, key: str | None = None) -> int:
        """How often ``name`` happened for ``key``; without a key, the most it happened
        for any one key (so ``== 1`` means no key got it twice)."""
        counts = self.side_effects(name)
        if key is not None:
            return counts[key]
        return max(counts.values(), default=0)

    def reproduction(self) -> str | None:
        """What a failing test's report adds (the pytest plugin): the trace, the seed and the
        ``chaos replay`` command that runs the same scenario with the same faults again;
        None when the run never started."""
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

    def final_state_is_consistent(self) -> bool:
        """Every invariant the scenario counts as "the final state is consistent" held
        (``Scenario.consistency``; by default all of its invariants)."""
        return all(self.holds(name) for name in self.scenario.consistency_invariants())


def _kind(kind: str) -> FaultKind:
    if kind in ALIASES:
        return ALIASES[kind]
    try:
        return FaultKind(kind)
    except ValueError:
        known = ", ".join([*(k.value for k in FaultKind), *ALIASES])
        raise ConfigError(f"unknown fault kind {kind!r} (known: {known})") from None
