"""The search's shrinker: a violating schedule made minimal, whole events first, then values
(``chaos.search`` drives it; see its docstring for the order and the budget), and the runner
that memoises every distinct schedule's verdicts and counts the budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from chaos.run import Progress
from faults._draw import assemble
from faults.model import FaultEvent, FaultSchedule
from faults.shrink import Knob, knobs
from faults.space import FaultSpace
from invariants import Verdict


@dataclass(frozen=True)
class Outcome:
    """What one run says: its verdicts and, when known, the ids of the faults that fired."""

    verdicts: tuple[Verdict, ...]
    applied: frozenset[str] | None = None


RunFn = Callable[[FaultSchedule], "Sequence[Verdict] | Outcome"]
#: Runs a batch of schedules (at once, when it can); their results in the batch's order.
RunManyFn = Callable[[Sequence[FaultSchedule]], "Sequence[Sequence[Verdict] | Outcome]"]

#: Fresh runs each event still left after the removal passes gets without it before it is
#: kept (a racy violation, such as a crash that must land between an ack and a commit, holds
#: now and then without an event it does not need: one run that held proves little).
FRESH_TRIES = 3
#: Bisection steps per value when its low end does not violate.
_BISECT_STEPS = 4


def violations(verdicts: Sequence[Verdict], invariant: str | None = None) -> list[Verdict]:
    """The violated verdicts (of ``invariant`` only, when given); unknown is not a violation."""
    return [v for v in verdicts if v.valid is False and invariant in (None, v.name)]


def as_outcome(raw: Sequence[Verdict] | Outcome) -> Outcome:
    """A run function's result as an ``Outcome`` (verdicts alone: which faults fired unknown)."""
    return raw if isinstance(raw, Outcome) else Outcome(tuple(raw))


def faults(count: int) -> str:
    return f"{count} fault" if count == 1 else f"{count} faults"


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
                self.progress(f"run {self.runs} ({phase}, {faults(len(only.events))})")
            else:
                self.progress(f"runs {first}-{self.runs} ({phase}, {len(todo)} at once)")
            try:
                raws = self.run_many(list(todo.values()))
            except Exception as exc:
                where = f"run {self.runs}" if len(todo) == 1 else f"runs {first}-{self.runs}"
                exc.add_note(f"chaos search stopped at {where}")
                raise
            for key, raw in zip(todo, raws, strict=True):
                outcome = as_outcome(raw)
                ran[key] = outcome
                if key not in self.results or self.violates(outcome):  # a violation: keep
                    self.results[key] = outcome
            if self.found_at is None and any(self.violates(o) for o in ran.values()):
                self.found_at = self.runs
        return [ran.get(key) or self.results.get(key) for key in keys]

    def violates(self, outcome: Outcome) -> bool:
        return bool(violations(outcome.verdicts, self.invariant))


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
