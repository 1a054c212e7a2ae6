"""One graded run: a normal run with a candidate in place of the task's service.

``run_graded`` is what ``chaos run SCENARIO --impl PATH`` does (and so each worker of
``chaos grade``): ``run_scenario`` with ``RunOptions.candidate`` set, under the candidate's
wall-clock limit, and the few rules that make a run a fair grade:

- the run's result is the real stores' verdicts, as in ``chaos run``;
- anything the sandbox contained grades the seed 0 (``contained``);
- a store the harness refuses to read (``Unreadable``, in any phase), or a final state the
  checkers cannot read or decide (the candidate wrote the stores) is a failed seed, not a
  harness error: it is the candidate's data (``unreadable``);
- any other failure is a harness error (so is a failure to read the final state while a
  service or server of the harness's own had died, or its reader lost its server), which
  says whether the candidate had started (``candidate_started``): a grade runs it again,
  then counts it 0 (an error never pays more than a failure), and calls the machine
  broken only when the candidate never ran;
- the secondary measures: settle seconds, side effects, the candidate's CPU seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from chaos.run import RunOptions, RunResult, run_scenario
from chaos.sandbox.candidate import WALL_CLOCK, Candidate, Limits, Program
from chaos.sandbox.container import ContainerSandbox
from chaos.sandbox.process import ProcessSandbox
from chaos.scenario import Scenario, TaskSpec
from ground._signals import received
from ground.errors import (
    EXIT_HARNESS,
    EXIT_HELD,
    EXIT_VIOLATED,
    ChaosError,
    ConfigError,
    ServiceError,
    Unreadable,
    WriteError,
)

E = TypeVar("E", bound=BaseException)


def task_of(scenario: Scenario) -> TaskSpec:
    """The scenario's task, or ConfigError: a scenario without one cannot be graded."""
    if scenario.task is None:
        raise ConfigError(f"scenario {scenario.id} declares no task (TaskSpec): nothing to grade")
    return scenario.task


SANDBOXES = ("process", "docker")


def make_sandbox(
    kind: str | None, isolation: str | None, libraries: tuple[str, ...] = ()
) -> ProcessSandbox | ContainerSandbox:
    """The sandbox ``--sandbox`` names (default: the process sandbox), unchecked."""
    if kind in (None, "process"):
        return ProcessSandbox(isolation, libraries)
    if kind == "docker":
        if isolation is not None:
            raise ConfigError("--isolation goes with the process sandbox, not --sandbox docker")
        return ContainerSandbox(libraries)
    raise ConfigError(f"--sandbox must be one of {', '.join(SANDBOXES)}, got {kind!r}")


def make_candidate(
    scenario: Scenario,
    impl: Path | str | Program,
    *,
    limits: Limits | None = None,
    isolation: str | None = None,
    hidden: tuple[Path, ...] = (),
    sandbox_kind: str | None = None,
) -> Candidate:
    """A candidate for ``scenario``'s task (ConfigError for a bad program or isolation)."""
    task = task_of(scenario)
    program = impl if isinstance(impl, Program) else Program.from_path(impl)
    sandbox = make_sandbox(sandbox_kind, isolation, task.libraries)
    sandbox.check(program)
    return Candidate(
        program=program,
        service=task.service,
        env=task.env,
        libraries=task.libraries,
        limits=limits or task.limits,
        sandbox=sandbox,
        hidden=tuple(Path(p) for p in hidden),
    )


@dataclass
class GradedRun:
    """A graded run's outcome (the ``chaos run --impl --json`` object)."""

    result: RunResult | None
    candidate: Candidate
    trace: Path
    #: The run failed on the candidate's data (the reason), if it did.
    unreadable: str | None = None
    #: The run failed for another reason (a harness error), if it did.
    error: str | None = None
    measures: dict[str, float | None] = field(default_factory=dict)

    @property
    def candidate_started(self) -> bool:
        return self.candidate.report.starts > 0

    @property
    def contained(self) -> list[dict[str, Any]]:
        return self.candidate.report.contained

    @property
    def held(self) -> bool:
        return self.result is not None and self.result.held and not self.contained

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return EXIT_HARNESS
        return EXIT_HELD if self.held else EXIT_VIOLATED

    def to_json(self) -> dict[str, Any]:
        base: dict[str, Any]
        if self.result is not None:
            base = self.result.to_json()
        else:
            base = {"verdicts": [], "trace": str(self.trace), "held": False, "settled": False}
        if self.unreadable is not None:
            base["unreadable"] = self.unreadable
        if self.error is not None:
            base["error"] = self.error
        base["candidate_started"] = self.candidate_started
        base["held"] = self.held
        base["candidate"] = {**self.candidate.report.to_json(), "measures": self.measures}
        return base


async def run_graded(options: RunOptions) -> GradedRun:
    """Run once with ``options.candidate``; containment and unreadable state are graded, any
    other failure is recorded as the run's ``error`` (never raised: the worker reports it,
    with whether the candidate had started); a ``ConfigError``, a ``WriteError`` and an
    interruption raise."""
    candidate = options.candidate
    if candidate is None:
        raise ConfigError("a graded run needs a candidate")
    scenario = options.scenario
    trace = Path(options.out) if options.out else Path("traces") / "graded.trace"
    options.out = trace
    phases: dict[str, str] = {}
    outer = options.progress

    def progress(phase: str) -> None:
        phases["now"] = phase
        if outer is not None:
            outer(phase)

    options.progress = progress
    graded = GradedRun(None, candidate, trace)
    with trio.move_on_after(candidate.limits.wall_s) as scope:
        try:
            graded.result = await run_scenario(options)
        except Exception as exc:
            # bad input, a signal, and an output the machine cannot write (a full disk: it
            # is broken, whoever ran) end the worker as they would any command
            if any(_first(exc, kind) for kind in (ConfigError, WriteError)) or (
                received() is not None
            ):
                raise
            refused = _first(exc, Unreadable)
            if refused is not None:
                graded.unreadable = f"{refused}"[:500]
            elif phases.get("now") == "check" and _first(exc, ServiceError) is None:
                # the final state or a checker failed on what the candidate wrote; a
                # ServiceError here is the harness's own (its reader lost its server, a
                # service of its own died: ``chaos.run._final_state``): an error, rerun
                graded.unreadable = _describe(exc)[:500]
            else:
                graded.error = _describe(exc)[:500]
    if scope.cancelled_caught:
        candidate.report.contain(
            WALL_CLOCK, f"the run took over {candidate.limits.wall_s:g} s", candidate.limits.wall_s
        )
    graded.measures = measures(scenario, graded)
    return graded


def _first(exc: BaseException, kind: type[E]) -> E | None:
    """``exc`` itself, or the first one in its nursery groups, when of ``kind``."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
    return None


def _describe(exc: BaseException) -> str:
    """One line for a harness error: its first ``ChaosError``'s message, else the type and
    message of the innermost exception."""
    chaos = _first(exc, ChaosError)
    if chaos is not None:
        return str(chaos)
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def measures(scenario: Scenario, graded: GradedRun) -> dict[str, float | None]:
    """The secondary measures of one graded run."""
    result, task = graded.result, task_of(scenario)
    settle = None
    side_effects: float | None = None
    if result is not None:
        if result.settled:
            settle = round(result.timings.get("settle", 0.0), 3)
        if task.side_effect is not None:
            try:
                counts = scenario.side_effects(task.side_effect, result.final_state)
                side_effects = float(sum(counts.values()))
            except Exception:
                side_effects = None
    return {
        "settle_s": settle,
        "side_effects": side_effects,
        "cpu_s": round(graded.candidate.report.cpu_s, 3),
    }
