"""Search: Hypothesis draws fault schedules, runs each, and shrinks a violation to a minimal one.

::

    faults.strategies.schedules(space) ──► schedule ──► run(schedule) ──► verdicts
          ▲                                                                  │
          └──── Hypothesis: generate (max_examples) ─► shrink (max_shrinks) ◄┘ violated?

``search_schedules`` is the engine: it takes any ``run(schedule) -> verdicts`` callable, so it
can be exercised without services. Every distinct schedule runs once (results are memoised by
the schedule's canonical bytes), so Hypothesis never sees a flaky answer. Shrinking stops after
``max_shrinks`` further runs: after that only schedules already run can count as violations.
A run that raises (a harness error) stops the search; the error is re-raised afterwards.

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

from hypothesis import Phase, Verbosity, find, settings
from hypothesis.errors import NoSuchExample

from chaos import _signals
from chaos.errors import EXIT_HELD, EXIT_VIOLATED, ConfigError
from chaos.rng import check_seed, derive_rng
from chaos.run import Progress, RunOptions, result_json, run_scenario
from chaos.scenario import Scenario
from chaos.services import open_run_dir
from faults.model import FaultSchedule
from faults.space import FaultSpace
from faults.strategies import schedules
from invariants import Verdict

RunFn = Callable[[FaultSchedule], Sequence[Verdict]]

DEFAULT_MAX_EXAMPLES = 20
DEFAULT_MAX_SHRINKS = 25
MAX_EXAMPLES_LIMIT = 1000
MAX_SHRINKS_LIMIT = 500


@dataclass(frozen=True)
class SearchResult:
    """What a search found: the minimal violating schedule and its verdicts, or nothing."""

    found: bool
    tried: int
    shrink_runs: int
    schedule: FaultSchedule | None = None
    verdicts: tuple[Verdict, ...] = ()
    trace: Path | None = None

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


@dataclass
class _Memo:
    """The condition Hypothesis calls: each distinct schedule runs once, within budget."""

    run: RunFn
    invariant: str | None
    max_shrinks: int
    progress: Progress
    results: dict[bytes, tuple[Verdict, ...]] = field(default_factory=dict)
    found_at: int | None = None
    error: Exception | None = None

    @property
    def shrink_runs(self) -> int:
        return 0 if self.found_at is None else len(self.results) - self.found_at

    def __call__(self, schedule: FaultSchedule) -> bool:
        key = schedule.to_msgpack()
        verdicts = self.results.get(key)
        if verdicts is None:
            spent = self.found_at is not None and self.shrink_runs >= self.max_shrinks
            if self.error is not None or spent:
                return False  # stopped: an error, or the shrink budget is spent
            phase = "searching" if self.found_at is None else "shrinking"
            self.progress(f"run {len(self.results) + 1} ({phase}, {len(schedule.events)} faults)")
            try:
                verdicts = tuple(self.run(schedule))
            except Exception as exc:
                exc.add_note(f"chaos search stopped at run {len(self.results) + 1}")
                self.error = exc
                return False
            self.results[key] = verdicts
            if self.found_at is None and violations(verdicts, self.invariant):
                self.found_at = len(self.results)
        return bool(violations(verdicts, self.invariant))


def search_schedules(
    space: FaultSpace,
    run: RunFn,
    *,
    seed: int = 0,
    invariant: str | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    max_shrinks: int = DEFAULT_MAX_SHRINKS,
    progress: Progress | None = None,
) -> SearchResult:
    """Search ``space`` for a schedule whose ``run`` violates ``invariant`` (any, if None)."""
    check_budget(max_examples, max_shrinks)
    memo = _Memo(run, invariant, max_shrinks, progress or (lambda _message: None))
    budget = settings(
        max_examples=max_examples,
        phases=[Phase.generate, Phase.shrink],
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    try:
        minimal: FaultSchedule | None = find(
            schedules(space, seed=seed), memo, settings=budget, random=derive_rng(seed, "search")
        )
    except NoSuchExample:
        minimal = None
    if memo.error is not None:
        raise memo.error
    tried = len(memo.results)
    if minimal is None:
        return SearchResult(False, tried, 0)
    return SearchResult(True, tried, memo.shrink_runs, minimal, memo.results[minimal.to_msgpack()])


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

    def __call__(self, schedule: FaultSchedule) -> Sequence[Verdict]:
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
        return result.verdicts


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
) -> SearchResult:
    """Search a scenario's fault space; on a find, the minimal run's trace is saved at ``out``."""
    check_seed(seed)
    scenario.check_variant(variant)
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
            scenario.fault_space(variant),
            runs,
            seed=seed,
            invariant=invariant,
            max_examples=max_examples,
            max_shrinks=max_shrinks,
            progress=report,
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
    "RunFn",
    "SearchResult",
    "default_search_trace",
    "search_scenario",
    "search_schedules",
    "violations",
]
