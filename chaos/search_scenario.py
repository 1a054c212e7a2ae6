"""Search on a real scenario: ``search_scenario`` runs each schedule of ``chaos.search``'s
engine on a ``LocalExecutor`` session (warm workers when the scenario allows, as ``chaos
sweep``; the engine runs in a thread beside the trio loop and hands it each batch): each
schedule is a ``RunSpec`` with its own temp trace, and the minimal violating schedule's trace
is kept at ``out`` for ``chaos replay``. Also the scenario's search space, a saved schedule to
resume shrinking from, and the faults a trace shows applied.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import trio

from chaos.executor import BatchFn, LocalExecutor, RunOutcome, RunSpec, scenario_arg
from chaos.run import Progress
from chaos.scenario import Scenario
from chaos.search import (
    DEFAULT_MAX_EXAMPLES,
    DEFAULT_MAX_SHRINKS,
    MAX_WITNESS_REPLAYS,
    WITNESS_CANDIDATES,
    WITNESS_REPLAYS,
    Outcome,
    SearchResult,
    check_budget,
    check_jobs,
    check_space,
    default_jobs,
    required_witness,
    search_schedules,
    violations,
)
from chaos.services import open_run_dir
from faults.model import FaultSchedule
from faults.space import FaultSpace
from ground import _signals
from ground.errors import (
    EXIT_HARNESS,
    EXIT_HELD,
    EXIT_VIOLATED,
    ChaosError,
    ConfigError,
    TraceError,
)
from ground.rng import check_seed
from invariants import Verdict
from invariants.history import NEMESIS
from replay.trace import read_trace

_T = TypeVar("_T")


def default_search_trace(scenario: str, variant: str) -> Path:
    return Path("traces") / f"search-{scenario}-{variant}.trace"


@dataclass
class Session:
    """What the engine's thread gets from ``_on_executor``: the session's batch runner, and a
    nursery on the trio thread where runs started one at a time (lanes) go."""

    run_batch: BatchFn
    nursery: trio.Nursery


class _ScenarioRuns:
    """``run_many(schedules)`` and ``Lanes`` over a real scenario, on a ``LocalExecutor``
    session (warm workers when the scenario allows, as ``chaos sweep``): each schedule is one
    ``RunSpec`` with its temp trace; violating runs keep theirs. Called from the engine's
    thread, it hands each batch (or each run, as lanes) to the trio thread
    (``trio.from_thread``); ``progress`` is called on the trio thread."""

    def __init__(
        self,
        scenario: Scenario,
        variant: str,
        seed: int,
        trace_dir: Path,
        progress: Progress,
        session: Session,
    ) -> None:
        self.scenario, self.variant, self.seed = scenario, variant, seed
        self.trace_dir, self.progress = trace_dir, progress
        self.run_batch, self.nursery = session.run_batch, session.nursery
        self.traces: dict[bytes, Path] = {}
        self.runs = 0
        #: Lanes: (ticket, spec, schedule, outcome or the exception) of runs that ended.
        self._ended: queue.SimpleQueue[tuple[int, RunSpec, FaultSchedule, Any]] = (
            queue.SimpleQueue()
        )
        self._lane_traces: dict[int, tuple[bytes, Path]] = {}

    def _spec(self, schedule: FaultSchedule) -> RunSpec:
        self.runs += 1
        return RunSpec(
            scenario_arg(self.scenario),
            self.seed,
            (),
            self.trace_dir,
            self.variant,
            trace_name=f"run-{self.runs}.trace",
            schedule=schedule.to_dict(),
        )

    # -- lanes (the find): one run at a time, ending in any order -------------------------

    def start(self, ticket: int, schedule: FaultSchedule) -> None:
        spec = self._spec(schedule)
        trio.from_thread.run_sync(self.nursery.start_soon, self._lane, ticket, spec, schedule)

    async def _lane(self, ticket: int, spec: RunSpec, schedule: FaultSchedule) -> None:
        # Whatever ends the run, the engine's thread hears of it (it waits in ``finished``):
        # an error goes to it as the result; a cancellation (Ctrl-C) too, and on up here.
        try:
            (outcome,) = await self.run_batch([spec], None)
        except Exception as exc:
            self._ended.put((ticket, spec, schedule, exc))
        except BaseException as exc:
            self._ended.put((ticket, spec, schedule, exc))
            raise
        else:
            self._ended.put((ticket, spec, schedule, outcome))

    def finished(self) -> list[tuple[int, Outcome]]:
        ended = [self._ended.get()]
        while not self._ended.empty():
            ended.append(self._ended.get())
        results = []
        for ticket, spec, schedule, got in ended:
            if isinstance(got, BaseException):
                self._drop(spec.trace)
                raise got
            (result,) = self._keep([spec], [schedule], [got])
            if violations(result.verdicts):
                self._lane_traces[ticket] = (schedule.to_msgpack(), spec.trace)
            results.append((ticket, result))
        return results

    def forget(self, ticket: int) -> None:
        key, trace = self._lane_traces.pop(ticket, (b"", None))
        if trace is not None and self.traces.get(key) == trace:
            del self.traces[key]
            self._drop(trace)

    # -- batches (shrinking, the witness) -------------------------------------------------

    def __call__(self, schedules: Sequence[FaultSchedule]) -> list[Outcome]:
        specs = [self._spec(schedule) for schedule in schedules]
        done: list[str] = []

        def finished(outcome: RunOutcome) -> None:
            done.append(outcome.outcome)
            self.progress(f"{len(done)}/{len(specs)} of runs {self.runs - len(specs) + 1}-"
                          f"{self.runs} done ({done.count('violated')} violated)")  # fmt: skip

        outcomes = trio.from_thread.run(self.run_batch, specs, finished)
        return self._keep(specs, schedules, outcomes)

    def _keep(
        self,
        specs: Sequence[RunSpec],
        schedules: Sequence[FaultSchedule],
        outcomes: Sequence[RunOutcome],
    ) -> list[Outcome]:
        """The runs' verdicts; violating runs keep their traces, the others' are removed."""
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


def _witness(found: SearchResult, runs: _ScenarioRuns, replays: int) -> SearchResult:
    """Replay the witness ``replays`` times (each a run of its schedule and seed, as ``chaos
    replay`` does); if fewer than ``required_witness`` violate one of its invariants again,
    try the schedules the shrink kept before it, smallest first (at most
    ``WITNESS_CANDIDATES`` in all): the smallest that reproduces is the witness. None does:
    the witness stays the shrunk one, reported racy with its measured rate."""
    assert found.schedule is not None
    wanted = {v.name for v in found.violated}
    kept = dict(runs.traces)  # violating schedules, in the order found; each its first trace
    first = found.schedule.to_msgpack()
    path = [first] + [k for k in reversed(kept) if k != first]
    required = required_witness(replays)
    measured: list[tuple[int, bytes]] = []
    for key in path[:WITNESS_CANDIDATES]:
        schedule = FaultSchedule.from_msgpack(key)
        runs.progress(f"replaying the witness ({len(schedule.events)} events) x{replays}")
        outcomes = runs([schedule] * replays)
        again = sum(1 for o in outcomes if wanted & {v.name for v in violations(o.verdicts)})
        measured.append((again, key))
        runs.traces.update(kept)  # the witness's trace is the run that found it
        if again >= required:
            break
    # The first that reproduced; else the one that reproduced most (the smaller on a tie).
    again, key = max(measured, key=lambda m: (m[0] >= required, m[0], -measured.index(m)))
    racy = again < required
    if key == first:
        return replace(found, fidelity=(again, replays), racy=racy)
    chosen = FaultSchedule.from_msgpack(key)
    trace = read_trace(kept[key])
    verdicts = tuple(
        Verdict(str(v["name"]), v["valid"], str(v.get("explanation", "")),
                dict(v.get("evidence") or {}))
        for v in trace.verdicts
    )  # fmt: skip
    return replace(found, schedule=chosen, verdicts=verdicts, fidelity=(again, replays), racy=racy)


def _on_executor(
    scenario: Scenario, jobs: int, body: Callable[[Session], _T], *, warm: bool | None = None
) -> _T:
    """``body(session)`` in a thread, while a ``LocalExecutor`` session of ``jobs`` workers
    (warm when ``warm_for`` says so) runs its batches and lanes; under ``ground._signals``.
    Runs still under way when ``body`` returns or raises are waited for."""
    executor = LocalExecutor(warm=warm)
    probe = RunSpec(scenario_arg(scenario), 0, (), Path("."))

    async def main() -> _T:
        async with executor.session(jobs, warm_pool=executor.warm_for([probe])) as run_batch:
            async with trio.open_nursery() as nursery:
                return await trio.to_thread.run_sync(body, Session(run_batch, nursery))

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
    return scenario.space_for(variant, "golden" if space == "golden" else variant)


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
    jobs: int | None = None,
    replays: int = WITNESS_REPLAYS,
) -> SearchResult:
    """Search a scenario's fault space; on a find, the minimal run's trace is saved at ``out``.

    ``jobs`` runs go side by side (default ``chaos.search.default_jobs()``: 2 per CPU), on
    warm workers when the scenario allows (as ``chaos sweep``); the same ``seed`` and
    ``jobs`` give the same search.

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
    if not 0 <= replays <= MAX_WITNESS_REPLAYS:
        raise ConfigError(f"--replays must be between 0 and {MAX_WITNESS_REPLAYS}, got {replays}")
    jobs = default_jobs() if jobs is None else jobs
    check_jobs(jobs)
    out = Path(out or default_search_trace(scenario.id, variant))
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory, not a trace file path")
    report = progress or (lambda _message: None)
    # A registered run dir (reaped by a later command if this process is killed), on disk.
    prefix = f"chaos-search-{scenario.id}-"
    with open_run_dir(prefix=prefix, parent=Path(tempfile.gettempdir())) as tmp:

        def body(session: Session) -> tuple[SearchResult, _ScenarioRuns]:
            said = _from_trio(report)
            runs = _ScenarioRuns(scenario, variant, seed, tmp, report, session)
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
                lanes=runs,
            )
            if found.schedule is not None and replays:
                found = _witness(found, runs, replays)
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
    "applied_faults",
    "default_search_trace",
    "resume_schedule",
    "search_scenario",
    "search_space",
]
