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

``jobs`` > 1: the find keeps ``jobs`` runs under way. Given ``lanes`` (runs started one at a
time, finishing in any order: ``Lanes``), a new run starts as soon as one ends; otherwise it
draws ``jobs`` schedules per batch and waits for the whole batch. Either way it takes the first
violating schedule **in draw order**, whichever run ended first, and what it draws does not
depend on which run ended first: with lanes, coverage learned from run ``k`` shapes the draws
from ``k + 2 * jobs`` on (a draw waits for that run if it is still under way; ``jobs`` 1:
from the next draw on, the sequential search), with batches from the next batch on. Runs
still under way past the find are waited for and their results unused. Each event-removal
step tries every single-event removal as one batch (the first, last event first, that still
violates is kept); lowering values stays one run at a time. The schedules tried depend on
``jobs`` (and on lanes or batches): the same seed and ``jobs`` give the same search.

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

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chaos._shrink import (
    FRESH_TRIES,
    Outcome,
    RunFn,
    RunManyFn,
    _Runner,
    _Shrinker,
    as_outcome,
    faults,
    violations,
)
from chaos.run import Progress, result_json
from faults._draw import assemble
from faults.model import FaultEvent, FaultSchedule
from faults.schedule import generate
from faults.space import FaultSpace
from faults.triggers import AtTime, OnConnection, OnMessage
from ground._moved import moved
from ground.errors import (
    EXIT_HELD,
    EXIT_VIOLATED,
    ConfigError,
)
from ground.rng import SEED_MAX, derive_seed
from invariants import Verdict

DEFAULT_MAX_EXAMPLES = 200
#: bench/search.py's ``--jobs`` (fixed, so its measurements compare across machines and
#: rounds: the schedules tried depend on ``--jobs``). ``chaos search``'s own default is
#: ``default_jobs()``, from the machine's CPU count.
DEFAULT_JOBS = 8
MAX_JOBS = 64


def default_jobs() -> int:
    """``chaos search``'s default ``--jobs``: 2 per CPU (at most 64), 4 on a 2-core machine.
    The schedules tried depend on it, so the search prints the ``--jobs`` it used (its
    status line's title and its result): the same ``--seed`` and ``--jobs`` give the same
    search on any machine."""
    return max(1, min(MAX_JOBS, 2 * (os.cpu_count() or 1)))


DEFAULT_MAX_SHRINKS = 40
MAX_EXAMPLES_LIMIT = 1000
MAX_SHRINKS_LIMIT = 500
SPACES = ("variant", "golden")
#: Draws skipped (duplicates, every fault known not to fire) per example before giving up.
_SKIPS_PER_EXAMPLE = 50


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
    #: Wall seconds from the first run's start until the find was known (every run before
    #: it in draw order ended); None when resumed or nothing was found.
    find_s: float | None = field(default=None, compare=False)
    #: The witness replayed: (runs that violated its invariants again, replays run); None
    #: when it was not replayed (nothing found, ``replays=0``).
    fidelity: tuple[int, int] | None = None
    #: True when no schedule tried reproduced at least ``required_witness(replays)`` times:
    #: the witness is racy, ``fidelity`` its measured rate.
    racy: bool = False

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
            "fidelity": None
            if self.fidelity is None
            else {
                "reproduced": self.fidelity[0],
                "replays": self.fidelity[1],
                "required": required_witness(self.fidelity[1]),
            },
            "racy": self.racy,
        }


#: How often a search replays its witness (``--replays``), and how many schedules of the
#: shrink path it may replay so, smallest first, before it calls the witness racy.
WITNESS_REPLAYS, WITNESS_CANDIDATES, MAX_WITNESS_REPLAYS = 5, 3, 50


def required_witness(replays: int) -> int:
    """Replays that must violate again for a reproducible witness: 4 of 5 (80%, up)."""
    return max(1, math.ceil(0.8 * replays))


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


class _Draws:
    """The find's draws, in order: ``generate(space, seed_i)`` for i = 0, 1, ..., less the
    faults ``coverage`` knows will not fire; a draw left with no fault, or one already
    ``taken``, is skipped (at most ``_SKIPS_PER_EXAMPLE`` draws per example in all)."""

    def __init__(
        self, space: FaultSpace, seed: int, coverage: _Coverage, max_examples: int
    ) -> None:
        self.space, self.seed, self.coverage = space, seed, coverage
        self.i, self.limit = 0, max_examples * _SKIPS_PER_EXAMPLE

    @property
    def exhausted(self) -> bool:
        return self.i >= self.limit

    def next(self, taken: Callable[[bytes], bool]) -> tuple[bytes, FaultSchedule] | None:
        """The next schedule not ``taken`` (by its canonical bytes), with its bytes."""
        while self.i < self.limit:
            seed_i = derive_seed(self.seed, "search", self.i) % (SEED_MAX + 1)
            events = generate(self.space, seed_i).events
            self.i += 1
            live = [event for event in events if self.coverage.fires(event)]
            if len(live) < max(self.space.min_events, 1 if events else 0):
                continue  # every fault of it is known not to fire: a no-fault run
            schedule = assemble(self.space, self.seed, live)
            key = schedule.to_msgpack()
            if not taken(key):
                return key, schedule
        return None


def _find(
    space: FaultSpace, runner: _Runner, seed: int, max_examples: int, jobs: int = 1
) -> FaultSchedule | None:
    """Draw schedules, ``jobs`` at a time, until one violates or ``max_examples`` runs were
    spent; the first violating one in draw order is the find, whichever run ended first."""
    coverage = _Coverage()
    draws = _Draws(space, seed, coverage, max_examples)
    while not draws.exhausted and runner.runs < max_examples:
        batch: dict[bytes, FaultSchedule] = {}
        wanted = min(jobs, max_examples - runner.runs)
        while len(batch) < wanted:
            drawn = draws.next(lambda key: key in runner.results or key in batch)  # noqa: B023
            if drawn is None:
                break
            batch[drawn[0]] = drawn[1]
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


class Lanes(Protocol):
    """Runs started one at a time that end in any order (``search_schedules``' ``lanes``):
    the find keeps ``jobs`` of them under way and starts the next as soon as one ends."""

    def start(self, ticket: int, schedule: FaultSchedule) -> None:
        """Start running ``schedule``; its result comes back from ``finished`` with
        ``ticket``. Does not wait for the run."""

    def finished(self) -> Sequence[tuple[int, Sequence[Verdict] | Outcome]]:
        """The runs that ended since the last call (at least one: waits for it), with their
        tickets. A run that could not come to a result raises (the search stops)."""

    def forget(self, ticket: int) -> None:
        """Run ``ticket``'s result is not used (it ran past the find): drop what it kept."""


#: With lanes, coverage learned from run k shapes the draws from k + LAG_BATCHES * jobs on.
LAG_BATCHES = 2


def _find_in_lanes(
    space: FaultSpace, runner: _Runner, lanes: Lanes, seed: int, max_examples: int, jobs: int
) -> _Found | None:
    """The find, ``jobs`` runs under way in ``lanes``: the same draws, in the same order, as
    one at a time, but for coverage learned ``LAG_BATCHES * jobs`` runs late; the first
    violating schedule in draw order (and the seconds until it was known), or None."""
    coverage = _Coverage()
    lag = 0 if jobs == 1 else LAG_BATCHES * jobs
    draws = _Draws(space, seed, coverage, max_examples)
    drawn: list[FaultSchedule] = []
    keys: set[bytes] = set(runner.results)
    results: dict[int, Outcome] = {}
    under_way: set[int] = set()
    learned, found = 0, None
    started = time.monotonic()

    def draw() -> FaultSchedule | None:
        taken = draws.next(keys.__contains__)
        if taken is None:
            return None
        keys.add(taken[0])
        return taken[1]

    try:
        while True:
            while (
                found is None
                and not draws.exhausted
                and len(under_way) < jobs
                and len(drawn) < max_examples
                and all(k in results for k in range(learned, len(drawn) - lag))
            ):
                while learned < len(drawn) - lag:  # exactly the runs before n - lag, for draw n
                    coverage.learn(drawn[learned], results[learned].applied)
                    learned += 1
                schedule = draw()
                if schedule is None:
                    break
                drawn.append(schedule)
                under_way.add(len(drawn) - 1)
                runner.progress(
                    f"run {len(drawn)} (searching, {faults(len(schedule.events))}, "
                    f"{len(under_way)} under way)"
                )
                lanes.start(len(drawn) - 1, schedule)
            if not under_way:
                break
            for ticket, raw in lanes.finished():
                under_way.discard(ticket)
                outcome = as_outcome(raw)
                results[ticket] = outcome
                if runner.violates(outcome) and (found is None or ticket < found):
                    found = ticket
            if found is not None and all(ticket > found for ticket in under_way):
                break
    except Exception as exc:
        exc.add_note(f"chaos search stopped with {len(drawn)} runs started, {len(results)} ended")
        raise
    found_s = time.monotonic() - started
    while under_way:  # past the find: waited for, not used
        for ticket, _raw in lanes.finished():
            under_way.discard(ticket)
    counted = len(drawn) if found is None else found + 1
    for ticket in range(counted):  # what the search knows: the runs up to the find
        key, outcome = drawn[ticket].to_msgpack(), results[ticket]
        if key not in runner.results or runner.violates(outcome):
            runner.results[key] = outcome
    for ticket in range(counted, len(drawn)):
        lanes.forget(ticket)
    runner.runs += len(drawn)  # spent, those past the find too
    if found is None:
        return None
    runner.found_at = runner.runs
    return _Found(drawn[found], found_s, counted)


@dataclass(frozen=True)
class _Found:
    schedule: FaultSchedule
    seconds: float
    #: Runs in draw order up to the find, the find included (fewer than were started when
    #: runs past it were under way).
    runs: int


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
    lanes: Lanes | None = None,
) -> SearchResult:
    """Search ``space`` for a schedule whose ``run`` violates ``invariant`` (any, if None).

    ``start``: resume, from a schedule found before (a saved search's): run it, and if it
    still violates, shrink it (no drawing; ``max_examples`` does not apply).

    ``jobs``: runs under way at once while finding (single-event removals tried per batch
    while shrinking); ``run_many`` runs a batch (default: ``run`` on each in turn). Give
    ``run`` or ``run_many`` (the shrink's batches). ``lanes``: the find starts each run as
    another ends (see ``Lanes``) instead of running batches. The schedules tried depend on
    ``jobs``: the same ``seed`` and ``jobs`` give the same search.
    """
    check_budget(max_examples, max_shrinks)
    check_jobs(jobs)
    if run_many is None:
        if run is None:
            raise TypeError("search_schedules needs run or run_many")
        one = run
        run_many = lambda batch: [one(schedule) for schedule in batch]  # noqa: E731
    runner = _Runner(run_many, invariant, max_shrinks, progress or (lambda _message: None))
    find_s: float | None = None
    runs_to_find = 0
    if start is not None:
        found = start if runner.violates(runner.outcome(start)) else None
    elif lanes is not None:
        in_lanes = _find_in_lanes(space, runner, lanes, seed, max_examples, jobs)
        found = None if in_lanes is None else in_lanes.schedule
        if in_lanes is not None:
            find_s, runs_to_find = in_lanes.seconds, in_lanes.runs
    else:
        began = time.monotonic()
        found = _find(space, runner, seed, max_examples, jobs)
        find_s, runs_to_find = time.monotonic() - began, runner.runs
    if found is None:
        return SearchResult(False, runner.runs, 0)
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
        find_s=find_s,
    )


__all__ = [
    "DEFAULT_JOBS",
    "DEFAULT_MAX_EXAMPLES",
    "DEFAULT_MAX_SHRINKS",
    "FRESH_TRIES",
    "LAG_BATCHES",
    "SPACES",
    "WITNESS_REPLAYS",
    "Lanes",
    "Outcome",
    "RunFn",
    "RunManyFn",
    "SearchResult",
    "check_jobs",
    "check_space",
    "default_jobs",
    "required_witness",
    "search_schedules",
    "violations",
]

#: Old paths of names that moved (a DeprecationWarning naming the new one, for one release).
__getattr__ = moved(
    "chaos.search",
    dict.fromkeys(
        ["applied_faults", "default_search_trace", "resume_schedule", "search_scenario",
         "search_space"],
        "chaos.search_scenario",
    ),
)  # fmt: skip
