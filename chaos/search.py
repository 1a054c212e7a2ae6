"""Search: draw fault schedules from a space, run each, shrink a violation to a minimal one.

::

    draw(space, seed_i) ─► leave out faults known not to fire ─► run ─► verdicts (+ which fired)
          ▲ i += 1                                                         │
          └──────────────── held ◄─────────────────────────────────────────┤ violated
                                                                           ▼
    shrink: drop the faults that never fired ─► remove events one by one (to a fixed point)
            ─► lower each remaining value toward the low end of its range (``max_shrinks`` runs)

``search_schedules`` is the engine: it takes any ``run(schedule)`` callable returning verdicts
(or an ``Outcome``: verdicts and the ids of the faults that fired), or a ``run_many(batch)``
returning them in the batch's order, so it can be exercised without services. Every distinct
schedule runs once (results are memoised by the schedule's canonical bytes). A run that
raises (a harness error) stops the search and is re-raised.

``jobs`` > 1: the find draws ``jobs`` schedules per batch (the same draws, in the same order,
as one at a time) and takes the first violating one **in draw order**, whichever run ended
first; coverage is learned from the whole batch before the next is drawn; each event-removal
step tries every single-event removal as one batch (the first, last event first, that still
violates is kept); lowering values stays one run at a time. The schedules tried depend on
``jobs``: the same seed and ``jobs`` give the same search.

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

``search_scenario`` runs a real scenario on a ``LocalExecutor`` session (warm workers when the
scenario allows, as ``chaos sweep``; the engine runs in a thread beside the trio loop and hands
it each batch): each schedule is a ``RunSpec`` with its own temp trace, and the minimal
violating schedule's trace is kept at ``out`` for ``chaos replay``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import trio

from chaos import _signals
from chaos.errors import (
    EXIT_HARNESS,
    EXIT_HELD,
    EXIT_VIOLATED,
    ChaosError,
    ConfigError,
    TraceError,
)
from chaos.executor import BatchFn, LocalExecutor, RunOutcome, RunSpec, scenario_arg
from chaos.rng import SEED_MAX, check_seed, derive_seed
from chaos.run import Progress, result_json
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
_T = TypeVar("_T")
#: Runs a batch of schedules (at once, when it can); their results in the batch's order.
RunManyFn = Callable[[Sequence[FaultSchedule]], "Sequence[Sequence[Verdict] | Outcome]"]

DEFAULT_MAX_EXAMPLES = 200
#: Runs side by side (``--jobs``). Fixed, not the machine's CPU count: the schedules tried
#: depend on it, and the same ``--seed`` and ``--jobs`` must give the same search anywhere.
DEFAULT_JOBS = 8
MAX_JOBS = 64
DEFAULT_MAX_SHRINKS = 40
#: Fresh runs each event still left after the removal passes gets without it before it is
#: kept (a racy violation, such as a crash that must land between an ack and a commit, holds
#: now and then without an event it does not need: one run that held proves little).
FRESH_TRIES = 3
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


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= MAX_JOBS:
        raise ConfigError(f"--jobs must be between 1 and {MAX_JOBS}, got {jobs}")


def check_space(space: str) -> None:
    if space not in SPACES:
        raise ConfigError(f"--space must be one of {', '.join(SPACES)}, got {space!r}")


class _BudgetSpent(Exception):
    """Shrinking reached ``max_shrinks`` runs."""


@dataclass
class _Runner:
    """Runs schedules through ``run_many``: each distinct one once, shrinking within its
    budget. A batch of one is a single run (``run``'s path); a batch of more runs at once."""

    run_many: RunManyFn
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
        outcome = self.outcomes([schedule], fresh=fresh)[0]
        assert outcome is not None  # a batch of one is run or raises _BudgetSpent
        return outcome

    def outcomes(
        self, schedules: Sequence[FaultSchedule], *, fresh: bool = False
    ) -> list[Outcome | None]:
        """The outcomes of ``schedules``, in their order: remembered, or run now as one batch
        (``fresh``: all run again anyway). While shrinking, the batch is cut at the budget:
        those cut off are None, and ``_BudgetSpent`` is raised if none could run."""
        keys = [schedule.to_msgpack() for schedule in schedules]
        todo: dict[bytes, FaultSchedule] = {}
        for key, schedule in zip(keys, schedules, strict=True):
            if (fresh or key not in self.results) and key not in todo:
                todo[key] = schedule
        if todo and self.found_at is not None:
            room = self.max_shrinks - self.shrink_runs
            if room <= 0:
                raise _BudgetSpent
            todo = dict(list(todo.items())[:room])
        ran: dict[bytes, Outcome] = {}
        if todo:
            first = self.runs + 1
            self.runs += len(todo)
            phase = "searching" if self.found_at is None else "shrinking"
            if len(todo) == 1:
                (only,) = todo.values()
                self.progress(f"run {self.runs} ({phase}, {len(only.events)} faults)")
            else:
                self.progress(f"runs {first}-{self.runs} ({phase}, {len(todo)} at once)")
            try:
                raws = self.run_many(list(todo.values()))
            except Exception as exc:
                where = f"run {self.runs}" if len(todo) == 1 else f"runs {first}-{self.runs}"
                exc.add_note(f"chaos search stopped at {where}")
                raise
            for key, raw in zip(todo, raws, strict=True):
                outcome = raw if isinstance(raw, Outcome) else Outcome(tuple(raw))
                ran[key] = outcome
                if key not in self.results or self.violates(outcome):  # a violation: keep
                    self.results[key] = outcome
            if self.found_at is None and any(self.violates(o) for o in ran.values()):
                self.found_at = self.runs
        return [ran.get(key) or self.results.get(key) for key in keys]

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


def _find(
    space: FaultSpace, runner: _Runner, seed: int, max_examples: int, jobs: int = 1
) -> FaultSchedule | None:
    """Draw schedules, ``jobs`` at a time, until one violates or ``max_examples`` runs were
    spent; the first violating one in draw order is the find, whichever run ended first."""
    coverage = _Coverage()
    limit, i = max_examples * _SKIPS_PER_EXAMPLE, 0
    while i < limit and runner.runs < max_examples:
        batch: dict[bytes, FaultSchedule] = {}
        wanted = min(jobs, max_examples - runner.runs)
        while len(batch) < wanted and i < limit:
            drawn = generate(space, derive_seed(seed, "search", i) % (SEED_MAX + 1)).events
            i += 1
            live = [event for event in drawn if coverage.fires(event)]
            if len(live) < max(space.min_events, 1 if drawn else 0):
                continue  # every fault of it is known not to fire: a no-fault run
            schedule = assemble(space, seed, live)
            key = schedule.to_msgpack()
            if key in runner.results or key in batch:
                continue
            batch[key] = schedule
        if not batch:
            return None
        schedules = list(batch.values())
        outcomes = runner.outcomes(schedules)
        for schedule, outcome in zip(schedules, outcomes, strict=True):
            if outcome is not None and runner.violates(outcome):
                return schedule
        for schedule, outcome in zip(schedules, outcomes, strict=True):
            coverage.learn(schedule, None if outcome is None else outcome.applied)
    return None


def _simpler(good: int | float, bad: int | float) -> int | float:
    """A value between ``bad`` (too simple) and ``good`` (violates), on the values' grid."""
    if isinstance(good, int) and isinstance(bad, int):
        return (good + bad) // 2
    return round((good + bad) / 2, 3)


class _Shrinker:
    """Shrinks a violating schedule: whole events first, then values, within the budget."""

    def __init__(
        self, space: FaultSpace, runner: _Runner, schedule: FaultSchedule, jobs: int = 1
    ) -> None:
        self.space, self.runner, self.current = space, runner, schedule
        self.jobs = jobs

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
        is not always the same twice, give each event still left (of two or more) up to
        ``FRESH_TRIES`` more tries without it, and go on removing when one goes."""
        self._removal_passes(fresh=False)
        for _ in range(FRESH_TRIES):
            if len(self.current.events) <= max(1, self.space.min_events):
                return
            if self._removal_pass(fresh=True):
                self._removal_passes(fresh=False)

    def _removal_passes(self, *, fresh: bool) -> None:
        while self._removal_pass(fresh=fresh):
            fresh = False

    def _removal_pass(self, *, fresh: bool) -> bool:
        if self.jobs > 1:
            return self._removal_batch(fresh=fresh)
        changed = False
        for index in reversed(range(len(self.current.events))):
            events = list(self.current.events)
            if index >= len(events) or len(events) <= self.space.min_events:
                continue
            if self._try(events[:index] + events[index + 1 :], fresh=fresh):
                changed = True
        return changed

    def _removal_batch(self, *, fresh: bool) -> bool:
        """Every single-event removal of the current schedule as one batch (last event
        first); the first in that order that violates becomes the current schedule."""
        events = list(self.current.events)
        if len(events) <= self.space.min_events:
            return False
        candidates = []
        for index in reversed(range(len(events))):
            rest = events[:index] + events[index + 1 :]
            candidate = assemble(self.space, self.current.seed, rest)
            if candidate.to_msgpack() != self.current.to_msgpack():
                candidates.append(candidate)
        outcomes = self.runner.outcomes(candidates, fresh=fresh)
        for candidate, outcome in zip(candidates, outcomes, strict=True):
            if outcome is not None and self.runner.violates(outcome):
                self.current = candidate
                return True
        if any(outcome is None for outcome in outcomes):
            raise _BudgetSpent
        return False

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
    run: RunFn | None = None,
    *,
    seed: int = 0,
    invariant: str | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    max_shrinks: int = DEFAULT_MAX_SHRINKS,
    progress: Progress | None = None,
    start: FaultSchedule | None = None,
    jobs: int = 1,
    run_many: RunManyFn | None = None,
) -> SearchResult:
    """Search ``space`` for a schedule whose ``run`` violates ``invariant`` (any, if None).

    ``start``: resume, from a schedule found before (a saved search's): run it, and if it
    still violates, shrink it (no drawing; ``max_examples`` does not apply).

    ``jobs``: schedules drawn (and single-event removals tried) per batch; ``run_many`` runs
    a batch (default: ``run`` on each in turn). Give ``run`` or ``run_many``. The schedules
    tried depend on ``jobs``: the same ``seed`` and ``jobs`` give the same search.
    """
    check_budget(max_examples, max_shrinks)
    check_jobs(jobs)
    if run_many is None:
        if run is None:
            raise TypeError("search_schedules needs run or run_many")
        one = run
        run_many = lambda batch: [one(schedule) for schedule in batch]  # noqa: E731
    runner = _Runner(run_many, invariant, max_shrinks, progress or (lambda _message: None))
    if start is None:
        found = _find(space, runner, seed, max_examples, jobs)
    else:
        found = start if runner.violates(runner.outcome(start)) else None
    if found is None:
        return SearchResult(False, runner.runs, 0)
    runs_to_find = 0 if start is not None else runner.runs
    shrinker = _Shrinker(space, runner, found, jobs)
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
    """``run_many(schedules)`` over a real scenario, on a ``LocalExecutor`` session's batch
    runner (warm workers when the scenario allows, as ``chaos sweep``): each schedule is one
    ``RunSpec`` with its temp trace; violating runs keep theirs. Called from the engine's
    thread, it hands each batch to the trio thread (``trio.from_thread``); ``progress`` is
    called on the trio thread."""

    def __init__(
        self,
        scenario: Scenario,
        variant: str,
        seed: int,
        trace_dir: Path,
        progress: Progress,
        run_batch: BatchFn,
    ) -> None:
        self.scenario, self.variant, self.seed = scenario, variant, seed
        self.trace_dir, self.progress, self.run_batch = trace_dir, progress, run_batch
        self.traces: dict[bytes, Path] = {}
        self.runs = 0
        #: Wall seconds of each batch, in order (bench/search.py reads them).
        self.batch_seconds: list[float] = []
        self.batch_sizes: list[int] = []

    def __call__(self, schedules: Sequence[FaultSchedule]) -> list[Outcome]:
        specs = []
        for schedule in schedules:
            self.runs += 1
            specs.append(
                RunSpec(
                    scenario_arg(self.scenario),
                    self.seed,
                    (),
                    self.trace_dir,
                    self.variant,
                    trace_name=f"run-{self.runs}.trace",
                    schedule=schedule.to_dict(),
                )
            )
        done: list[str] = []

        def finished(outcome: RunOutcome) -> None:
            done.append(outcome.outcome)
            self.progress(f"{len(done)}/{len(specs)} of runs {self.runs - len(specs) + 1}-"
                          f"{self.runs} done ({done.count('violated')} violated)")  # fmt: skip

        started = time.monotonic()
        outcomes = trio.from_thread.run(self.run_batch, specs, finished)
        self.batch_seconds.append(time.monotonic() - started)
        self.batch_sizes.append(len(specs))
        try:
            results = [self._outcome(s, o) for s, o in zip(specs, outcomes, strict=True)]
        except BaseException:
            for spec in specs:
                self._drop(spec.trace)
            raise
        for spec, schedule, result in zip(specs, schedules, results, strict=True):
            spec.schedule_path().unlink(missing_ok=True)
            if violations(result.verdicts):
                self.traces[schedule.to_msgpack()] = spec.trace
            else:
                self._drop(spec.trace)
        return results

    @staticmethod
    def _drop(trace: Path) -> None:
        for path in (trace, trace.with_name(trace.name + ".partial"),
                     trace.with_name(trace.name + ".schedule.json")):  # fmt: skip
            path.unlink(missing_ok=True)

    def _outcome(self, spec: RunSpec, outcome: RunOutcome) -> Outcome:
        """Verdicts and the faults that fired, from the run's trace; a run that did not come
        to verdicts (a harness error) raises ``ChaosError`` (the search stops, exit 3)."""
        trace = None
        if outcome.trace is not None and outcome.trace == spec.trace:
            try:
                trace = read_trace(spec.trace)
            except (OSError, TraceError):
                trace = None
        completed = outcome.exit_code in (EXIT_HELD, EXIT_VIOLATED, EXIT_HARNESS)
        if not completed or trace is None or trace.partial or not trace.verdicts:
            reason = outcome.error or f"exit code {outcome.exit_code}"
            raise ChaosError(f"{self.scenario.id} {spec.trace.stem}: {reason}")
        verdicts = tuple(
            Verdict(
                str(v["name"]),
                v["valid"],
                str(v.get("explanation", "")),
                dict(v.get("evidence") or {}),
            )
            for v in trace.verdicts
        )
        return Outcome(verdicts, applied_faults(trace.events))


def _on_executor(
    scenario: Scenario, jobs: int, body: Callable[[BatchFn], _T], *, warm: bool | None = None
) -> _T:
    """``body(run_batch)`` in a thread, while a ``LocalExecutor`` session of ``jobs`` workers
    (warm when ``warm_for`` says so) runs its batches; under ``chaos._signals``."""
    executor = LocalExecutor(warm=warm)
    probe = RunSpec(scenario_arg(scenario), 0, (), Path("."))

    async def main() -> _T:
        async with executor.session(jobs, warm_pool=executor.warm_for([probe])) as run_batch:
            return await trio.to_thread.run_sync(body, run_batch)

    return _signals.run(main)


def _from_trio(progress: Progress) -> Progress:
    """``progress`` called on the trio thread (the engine calls it from its own)."""
    return lambda message: trio.from_thread.run_sync(progress, message)


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
    jobs: int = DEFAULT_JOBS,
) -> SearchResult:
    """Search a scenario's fault space; on a find, the minimal run's trace is saved at ``out``.

    ``jobs`` runs go side by side, on warm workers when the scenario allows (as ``chaos
    sweep``); the same ``seed`` and ``jobs`` give the same search.

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
    check_jobs(jobs)
    out = Path(out or default_search_trace(scenario.id, variant))
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory, not a trace file path")
    report = progress or (lambda _message: None)
    # A registered run dir (reaped by a later command if this process is killed), on disk.
    prefix = f"chaos-search-{scenario.id}-"
    with open_run_dir(prefix=prefix, parent=Path(tempfile.gettempdir())) as tmp:

        def body(run_batch: BatchFn) -> tuple[SearchResult, _ScenarioRuns]:
            said = _from_trio(report)
            runs = _ScenarioRuns(scenario, variant, seed, tmp, report, run_batch)
            found = search_schedules(
                searched,
                seed=seed,
                invariant=invariant,
                max_examples=max_examples,
                max_shrinks=max_shrinks,
                progress=said,
                start=start,
                jobs=jobs,
                run_many=runs,
            )
            return found, runs

        result, runs = _on_executor(scenario, jobs, body)
        if result.schedule is None:
            return result
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(runs.traces[result.schedule.to_msgpack()], out)
        except OSError as exc:
            raise ConfigError(f"cannot write trace {out}: {exc.strerror or exc}") from None
    return replace(result, trace=out)


__all__ = [
    "DEFAULT_JOBS",
    "DEFAULT_MAX_EXAMPLES",
    "DEFAULT_MAX_SHRINKS",
    "SPACES",
    "Outcome",
    "RunFn",
    "RunManyFn",
    "SearchResult",
    "applied_faults",
    "check_jobs",
    "check_space",
    "default_search_trace",
    "resume_schedule",
    "search_scenario",
    "search_schedules",
    "search_space",
    "violations",
]
