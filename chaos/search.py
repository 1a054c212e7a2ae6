"""Search: draw fault schedules from a space, run each, shrink a violation to a minimal one.

::

    draw(space, seed_i) ─► leave out faults known not to fire ─► run ─► verdicts (+ which fired)
          ▲ i += 1                                                         │
          └──────────────── held ◄─────────────────────────────────────────┤ violated
                                                                           ▼
    shrink: drop the faults that never fired ─► remove events one by one (to a fixed point)
            ─► lower each remaining value toward the low end of its range (``max_shrinks`` runs)

``search_schedules`` is the engine: it takes any ``run(schedule)`` callable returning verdicts
(or an ``Outcome``: verdicts and the ids of the faults that fired), so it can be exercised
without services. Every distinct schedule runs once (results are memoised by the schedule's
canonical bytes). A run that raises (a harness error) stops the search and is re-raised.

Finding draws as ``chaos run`` does (``generate``: template weights, uniform counts and
ranges), from schedule seeds derived from the search seed (``max_events`` faults in every run
was tried and measured no better: docs/search.md). Hypothesis's generator was measured against
this and lost: it draws small values first (short pauses, clock offsets near zero, the first
messages), which is what a unit test wants and a fault rarely needs. The one signal fed back
is coverage: a trigger that did not fire at its ``n``-th connection or message will not fire
later in the count either, so such faults are left out of later draws.

Shrinking spends its budget where it pays most: whole events first (each removal re-runs the
schedule without one event; repeated until no event can go, so every event left is needed),
then values. Stopping at the budget is reported (``shrink_complete`` False); ``start`` resumes
shrinking from a saved violating schedule.

``search_scenario`` runs a real scenario: each schedule gets its own temp trace, and the
minimal violating schedule's trace is kept at ``out`` for ``chaos replay``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaos import _signals
from chaos.errors import EXIT_HELD, EXIT_VIOLATED, ConfigError, TraceError
from chaos.rng import SEED_MAX, check_seed, derive_seed
from chaos.run import Progress, RunOptions, result_json, run_scenario
from chaos.scenario import Scenario
from chaos.services import open_run_dir
from faults._draw import assemble
from faults.model import FaultEvent, FaultSchedule
from faults.schedule import generate
from faults.shrink import Knob, knobs
from faults.space import FaultSpace
from faults.triggers import AtTime, OnConnection, OnMessage
from invariants import Verdict
from invariants.history import NEMESIS
from replay.trace import read_trace


@dataclass(frozen=True)
class Outcome:
    """What one run says: its verdicts and, when known, the ids of the faults that fired."""

    verdicts: tuple[Verdict, ...]
    applied: frozenset[str] | None = None


RunFn = Callable[[FaultSchedule], "Sequence[Verdict] | Outcome"]

DEFAULT_MAX_EXAMPLES = 20
DEFAULT_MAX_SHRINKS = 40
MAX_EXAMPLES_LIMIT = 1000
MAX_SHRINKS_LIMIT = 500
SPACES = ("variant", "golden")
#: Draws skipped (duplicates, every fault known not to fire) per example before giving up.
_SKIPS_PER_EXAMPLE = 50
#: Bisection steps per value when its low end does not violate.
_BISECT_STEPS = 4


@dataclass(frozen=True)
class SearchResult:
    """What a search found: the minimal violating schedule and its verdicts, or nothing."""

    found: bool
    tried: int
    shrink_runs: int
    schedule: FaultSchedule | None = None
    verdicts: tuple[Verdict, ...] = ()
    trace: Path | None = None
    #: False when shrinking stopped at its budget before no change was left to try.
    shrink_complete: bool = True
    #: Runs until the first violation (the find itself included); 0 when resumed or none.
    runs_to_find: int = 0

    @property
    def violated(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.valid is False]

    @property
    def exit_code(self) -> int:
        """1 when a violation was found (like a failing test), 0 when none was."""
        return EXIT_VIOLATED if self.found else EXIT_HELD

    def to_json(self, scenario: str, variant: str) -> dict[str, Any]:
        return {
            **result_json(scenario, variant, self.schedule, self.verdicts, self.trace),
            "found": self.found,
            "tried": self.tried,
            "shrink_runs": self.shrink_runs,
            "shrink_complete": self.shrink_complete,
        }


def violations(verdicts: Sequence[Verdict], invariant: str | None = None) -> list[Verdict]:
    """The violated verdicts (of ``invariant`` only, when given); unknown is not a violation."""
    return [v for v in verdicts if v.valid is False and invariant in (None, v.name)]


def check_budget(max_examples: int, max_shrinks: int) -> None:
    if not 1 <= max_examples <= MAX_EXAMPLES_LIMIT:
        raise ConfigError(
            f"--max-examples must be between 1 and {MAX_EXAMPLES_LIMIT}, got {max_examples}"
        )
    if not 0 <= max_shrinks <= MAX_SHRINKS_LIMIT:
        raise ConfigError(
            f"--max-shrinks must be between 0 and {MAX_SHRINKS_LIMIT}, got {max_shrinks}"
        )


def check_space(space: str) -> None:
    if space not in SPACES:
        raise ConfigError(f"--space must be one of {', '.join(SPACES)}, got {space!r}")


class _BudgetSpent(Exception):
    """Shrinking reached ``max_shrinks`` runs."""


@dataclass
class _Runner:
    """Runs schedules through ``run``: each distinct one once, shrinking within its budget."""

    run: RunFn
    invariant: str | None
    max_shrinks: int
    progress: Progress
    results: dict[bytes, Outcome] = field(default_factory=dict)
    found_at: int | None = None
    runs: int = 0

    @property
    def shrink_runs(self) -> int:
        return 0 if self.found_at is None else self.runs - self.found_at

    def outcome(self, schedule: FaultSchedule, *, fresh: bool = False) -> Outcome:
        """The schedule's outcome: remembered, or run now (``fresh``: run it again anyway)."""
        key = schedule.to_msgpack()
        known = self.results.get(key)
        if known is not None and not fresh:
            return known
        if self.found_at is not None and self.shrink_runs >= self.max_shrinks:
            raise _BudgetSpent
        self.runs += 1
        phase = "searching" if self.found_at is None else "shrinking"
        self.progress(f"run {self.runs} ({phase}, {len(schedule.events)} faults)")
        try:
            raw = self.run(schedule)
        except Exception as exc:
            exc.add_note(f"chaos search stopped at run {self.runs}")
            raise
        outcome = raw if isinstance(raw, Outcome) else Outcome(tuple(raw))
        if known is None or self.violates(outcome):  # a violation is the witness to keep
            self.results[key] = outcome
        if self.found_at is None and self.violates(outcome):
            self.found_at = self.runs
        return outcome

    def violates(self, outcome: Outcome) -> bool:
        return bool(violations(outcome.verdicts, self.invariant))


def _trigger_key(event: FaultEvent) -> tuple[str, str, int] | None:
    """(trigger type, link or subject, its count) for a counted trigger; None for at_time."""
    trigger = event.trigger
    if isinstance(trigger, AtTime):
        return None
    if isinstance(trigger, OnMessage):
        return trigger.type, trigger.subject, trigger.n
    if isinstance(trigger, OnConnection):
        return trigger.type, trigger.link, trigger.n
    return trigger.type, trigger.link, trigger.n_bytes


class _Coverage:
    """Which counted triggers were seen not to fire, at which count (the lowest)."""

    def __init__(self) -> None:
        self.silent: dict[tuple[str, str], int] = {}

    def learn(self, schedule: FaultSchedule, applied: frozenset[str] | None) -> None:
        if applied is None:
            return
        for event in schedule.events:
            key = _trigger_key(event)
            if key is not None and event.id not in applied:
                where = key[:2]
                self.silent[where] = min(self.silent.get(where, key[2]), key[2])

    def fires(self, event: FaultEvent) -> bool:
        key = _trigger_key(event)
        return key is None or key[2] < self.silent.get(key[:2], key[2] + 1)


def _find(space: FaultSpace, runner: _Runner, seed: int, max_examples: int) -> FaultSchedule | None:
    """Draw schedules until one violates or ``max_examples`` runs were spent."""
    coverage = _Coverage()
    for i in range(max_examples * _SKIPS_PER_EXAMPLE):
        if runner.runs >= max_examples:
            return None
        drawn = generate(space, derive_seed(seed, "search", i) % (SEED_MAX + 1)).events
        live = [event for event in drawn if coverage.fires(event)]
        if len(live) < max(space.min_events, 1 if drawn else 0):
            continue  # every fault of it is known not to fire: it would run as a no-fault run
        schedule = assemble(space, seed, live)
        if schedule.to_msgpack() in runner.results:
            continue
        outcome = runner.outcome(schedule)
        if runner.violates(outcome):
            return schedule
        coverage.learn(schedule, outcome.applied)
    return None


def _simpler(good: int | float, bad: int | float) -> int | float:
    """A value between ``bad`` (too simple) and ``good`` (violates), on the values' grid."""
    if isinstance(good, int) and isinstance(bad, int):
        return (good + bad) // 2
    return round((good + bad) / 2, 3)


class _Shrinker:
    """Shrinks a violating schedule: whole events first, then values, within the budget."""

    def __init__(self, space: FaultSpace, runner: _Runner, schedule: FaultSchedule) -> None:
        self.space, self.runner, self.current = space, runner, schedule

    def _try(self, events: Sequence[FaultEvent], *, fresh: bool = False) -> bool:
        """Whether the schedule of ``events`` violates; keep it as the current one if so."""
        candidate = assemble(self.space, self.current.seed, events)
        if candidate.to_msgpack() == self.current.to_msgpack():
            return True
        if self.runner.violates(self.runner.outcome(candidate, fresh=fresh)):
            self.current = candidate
            return True
        return False

    def run(self) -> bool:
        """Shrink; True if it ended at a fixed point, False if the budget stopped it."""
        try:
            self._drop_silent()
            self._remove_events()
            self._lower_values()
        except _BudgetSpent:
            return False
        return True

    def _drop_silent(self) -> None:
        """One run without every fault that did not fire (when the run said which fired)."""
        applied = self.runner.results[self.current.to_msgpack()].applied
        if applied is None:
            return
        fired = [e for e in self.current.events if e.id in applied]
        if self.space.min_events <= len(fired) < len(self.current.events):
            self._try(fired)

    def _remove_events(self) -> None:
        """Remove one event at a time, last first, until no event can go; then, as a real run
        is not always the same twice, give each event still left (of two or more) one more
        try without it, and go on removing if one goes."""
        self._removal_passes(fresh=False)
        if len(self.current.events) > 1 and self._removal_pass(fresh=True):
            self._removal_passes(fresh=False)

    def _removal_passes(self, *, fresh: bool) -> None:
        while self._removal_pass(fresh=fresh):
            fresh = False

    def _removal_pass(self, *, fresh: bool) -> bool:
        changed = False
        for index in reversed(range(len(self.current.events))):
            events = list(self.current.events)
            if index >= len(events) or len(events) <= self.space.min_events:
                continue
            if self._try(events[:index] + events[index + 1 :], fresh=fresh):
                changed = True
        return changed

    def _lower_values(self) -> None:
        """Each value of each event toward the low end of its range: the low end, else bisect."""
        for event in list(self.current.events):
            for name in [knob.name for knob in knobs(self.space, event)]:
                event = self._lower(event, name)

    def _index_of(self, event: FaultEvent) -> int | None:
        """Where ``event`` is in the current schedule (a change can reorder and renumber it)."""
        same = event.model_copy(update={"id": "f0"})
        for index, other in enumerate(self.current.events):
            if other.model_copy(update={"id": "f0"}) == same:
                return index
        return None

    def _lower(self, event: FaultEvent, name: str) -> FaultEvent:
        """Lower one value of ``event``; returns the event as the current schedule has it."""

        def knob_of(now: FaultEvent) -> Knob | None:
            return next((k for k in knobs(self.space, now) if k.name == name), None)

        def attempt(now: FaultEvent, value: int | float | str) -> FaultEvent | None:
            index, knob = self._index_of(now), knob_of(now)
            if index is None or knob is None:
                return None
            events = list(self.current.events)
            events[index] = knob.set(value)
            return events[index] if self._try(events) else None

        knob = knob_of(event)
        if knob is None:
            return event
        lowest = attempt(event, knob.lo)
        if lowest is not None or not knob.numeric:
            return lowest or event
        good, bad = knob.value, knob.lo
        if isinstance(good, str) or isinstance(bad, str):
            return event
        for _ in range(_BISECT_STEPS):
            middle = _simpler(good, bad)
            if middle in (good, bad):
                break
            lowered = attempt(event, middle)
            if lowered is None:
                bad = middle
            else:
                event, good = lowered, middle
        return event


def search_schedules(
    space: FaultSpace,
    run: RunFn,
    *,
    seed: int = 0,
    invariant: str | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    max_shrinks: int = DEFAULT_MAX_SHRINKS,
    progress: Progress | None = None,
    start: FaultSchedule | None = None,
) -> SearchResult:
    """Search ``space`` for a schedule whose ``run`` violates ``invariant`` (any, if None).

    ``start``: resume, from a schedule found before (a saved search's): run it, and if it
    still violates, shrink it (no drawing; ``max_examples`` does not apply).
    """
    check_budget(max_examples, max_shrinks)
    runner = _Runner(run, invariant, max_shrinks, progress or (lambda _message: None))
    if start is None:
        found = _find(space, runner, seed, max_examples)
    else:
        found = start if runner.violates(runner.outcome(start)) else None
    if found is None:
        return SearchResult(False, runner.runs, 0)
    runs_to_find = 0 if start is not None else runner.runs
    shrinker = _Shrinker(space, runner, found)
    complete = shrinker.run()
    minimal = shrinker.current
    return SearchResult(
        True,
        runner.runs,
        runner.shrink_runs,
        minimal,
        runner.results[minimal.to_msgpack()].verdicts,
        shrink_complete=complete,
        runs_to_find=runs_to_find,
    )


def default_search_trace(scenario: str, variant: str) -> Path:
    return Path("traces") / f"search-{scenario}-{variant}.trace"


class _ScenarioRuns:
    """``run(schedule)`` over a real scenario; violating runs keep their temp trace."""

    def __init__(
        self, scenario: Scenario, variant: str, seed: int, trace_dir: Path, progress: Progress
    ) -> None:
        self.scenario, self.variant, self.seed = scenario, variant, seed
        self.trace_dir, self.progress = trace_dir, progress
        self.traces: dict[bytes, Path] = {}
        self.runs = 0

    def __call__(self, schedule: FaultSchedule) -> Outcome:
        self.runs += 1
        path = self.trace_dir / f"run-{self.runs}.trace"
        label = f"run {self.runs}"
        options = RunOptions(
            self.scenario,
            self.seed,
            variant=self.variant,
            out=path,
            schedule=schedule,
            progress=lambda phase: self.progress(f"{label}: {phase}"),
        )
        result = _signals.run(run_scenario, options)
        if violations(result.verdicts):
            self.traces[schedule.to_msgpack()] = path
        else:
            path.unlink(missing_ok=True)
        return Outcome(tuple(result.verdicts), applied_faults(result.history))


def applied_faults(events: Sequence[dict[str, Any]]) -> frozenset[str]:
    """The ids of the faults a run's nemesis applied (its ``apply`` records)."""
    return frozenset(
        str(e["value"]["fault_id"])
        for e in events
        if e.get("process") == NEMESIS
        and isinstance(e.get("value"), dict)
        and e["value"].get("phase") == "apply"
    )


def search_space(scenario: Scenario, variant: str, space: str) -> FaultSpace:
    """The space to search: the variant's own (``variant``) or its pack's golden one."""
    check_space(space)
    return scenario.fault_space("golden" if space == "golden" else variant)


def resume_schedule(
    scenario: Scenario, variant: str, trace: Path, space: FaultSpace
) -> FaultSchedule:
    """The violating schedule a saved search trace holds, checked against this search."""
    try:
        recorded = read_trace(trace)
    except (OSError, TraceError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"--resume {trace}: cannot read the trace: {reason}") from None
    header = recorded.header
    if (header.get("scenario_id"), header.get("variant")) != (scenario.id, variant):
        raise ConfigError(
            f"--resume {trace}: a trace of {header.get('scenario_id')} variant "
            f"{header.get('variant')}, not of {scenario.id} variant {variant}"
        )
    if recorded.schedule is None:
        raise ConfigError(f"--resume {trace}: the trace holds no schedule")
    schedule = FaultSchedule.from_dict(recorded.schedule)
    if schedule.space_hash != space.content_hash():
        raise ConfigError(
            f"--resume {trace}: its schedule was drawn from another fault space "
            "(pass the --space the search used)"
        )
    return schedule


def search_scenario(
    scenario: Scenario,
    variant: str = "golden",
    *,
    seed: int = 0,
    invariant: str | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    max_shrinks: int = DEFAULT_MAX_SHRINKS,
    out: Path | None = None,
    progress: Progress | None = None,
    space: str = "variant",
    resume: Path | None = None,
) -> SearchResult:
    """Search a scenario's fault space; on a find, the minimal run's trace is saved at ``out``.

    ``space`` is ``variant`` (the variant's own table of faults.toml) or ``golden`` (the pack's
    neutral one). ``resume`` is a trace saved by an earlier search: its schedule is shrunk
    further (under the trace's run seed) instead of drawing new ones.
    """
    check_seed(seed)
    scenario.check_variant(variant)
    searched = search_space(scenario, variant, space)
    start = None if resume is None else resume_schedule(scenario, variant, Path(resume), searched)
    if start is not None:
        seed = start.seed
    if invariant is not None and invariant not in scenario.invariants:
        known = ", ".join(scenario.invariants) or "none"
        raise ConfigError(f"unknown invariant {invariant!r} (this scenario checks: {known})")
    check_budget(max_examples, max_shrinks)
    out = Path(out or default_search_trace(scenario.id, variant))
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory, not a trace file path")
    report = progress or (lambda _message: None)
    # A registered run dir (reaped by a later command if this process is killed), on disk.
    prefix = f"chaos-search-{scenario.id}-"
    with open_run_dir(prefix=prefix, parent=Path(tempfile.gettempdir())) as tmp:
        runs = _ScenarioRuns(scenario, variant, seed, tmp, report)
        result = search_schedules(
            searched,
            runs,
            seed=seed,
            invariant=invariant,
            max_examples=max_examples,
            max_shrinks=max_shrinks,
            progress=report,
            start=start,
        )
        if result.schedule is None:
            return result
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(runs.traces[result.schedule.to_msgpack()], out)
        except OSError as exc:
            raise ConfigError(f"cannot write trace {out}: {exc.strerror or exc}") from None
    return replace(result, trace=out)


__all__ = [
    "DEFAULT_MAX_EXAMPLES",
    "DEFAULT_MAX_SHRINKS",
    "SPACES",
    "Outcome",
    "RunFn",
    "SearchResult",
    "applied_faults",
    "check_space",
    "default_search_trace",
    "resume_schedule",
    "search_scenario",
    "search_schedules",
    "search_space",
    "violations",
]
