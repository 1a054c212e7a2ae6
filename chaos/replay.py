"""Replay (an engine): re-run a recorded trace with its own fault schedule; fidelity, divergence.

::

    trace ──► header: scenario id + hash, variant, seed, versions ──► drift warnings
          └─► schedule frame ──► FaultSchedule (never regenerated from the seed)
                 └─► run_scenario, N times ──► NAME.replay-1.trace ... beside the original
    recorded verdicts vs each replay's verdicts ──► fidelity k/N
    recorded events   vs each replay's events   ──► first divergence

>>> report = trio.run(replay_trace, Path("traces/payments-golden-seed7.trace"), 3)
>>> report.fidelity, report.replays[0].first_divergence

The runner is a parameter (``runner``, default ``chaos.run.run_scenario``), as for every
engine; the trace format, the comparison of two traces' events and the report a replay makes
are the ``replay`` package's (``replay.trace``, ``replay.divergence``, ``replay.outcome``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.run import RunOptions, RunResult, run_scenario
from chaos.sandbox.candidate import Candidate, Limits, Program
from chaos.sandbox.graded import make_candidate
from chaos.scenario import BUILTIN_ROOT, Scenario, load_scenario
from faults.model import FaultSchedule
from ground.errors import ChaosError, ConfigError, TraceError, TraceFormatError
from replay.divergence import first_divergence
from replay.outcome import ReplayOutcome, ReplayReport, mismatched, verdict_map
from replay.trace import Trace, check_trace_path, read_trace, version_drift

Progress = Callable[[str], None]
#: What runs one replay: ``chaos.run.run_scenario``, or a fake in a test.
Runner = Callable[[RunOptions], Awaitable[RunResult]]

__all__ = [
    "ReplayPlan",
    "prepare_replay",
    "replay_path",
    "replay_trace",
    "run_replays",
]


@dataclass
class ReplayPlan:
    """A trace read and checked, ready to replay."""

    path: Path
    trace: Trace
    scenario: Scenario
    variant: str
    seed: int
    schedule: FaultSchedule
    drift: list[str]
    #: A graded run's candidate (the trace header's ``candidate``): replays run it again.
    candidate: dict[str, Any] | None = None

    def new_candidate(self) -> Candidate | None:
        """A fresh candidate for one replay (its own report), or None for a plain run."""
        if self.candidate is None:
            return None
        return _candidate(self.scenario, self.candidate, (self.path.resolve().parent,))

    @property
    def partial(self) -> bool:
        return self.trace.partial


def replay_path(original: Path, number: int) -> Path:
    """Where replay ``number`` of ``original`` is written: ``NAME.replay-N.trace`` beside it."""
    stem = original.name.removesuffix(".trace")
    return original.with_name(f"{stem}.replay-{number}.trace")


def _candidate(
    scenario: Scenario, recorded: dict[str, Any], hidden: tuple[Path, ...] = ()
) -> Candidate:
    """The program a graded trace ran, checked unchanged (ConfigError, one line, if not)."""
    where, sha = recorded.get("path"), recorded.get("sha256")
    if not isinstance(where, str) or not isinstance(sha, str):
        raise ConfigError(
            "cannot replay: the trace is a graded run but does not record where its candidate "
            "program was (recorded by an older harness)"
        )
    try:
        program = Program.from_path(where)
    except ConfigError as exc:
        raise ConfigError(f"cannot replay the graded run: {exc}") from None
    if program.sha256 != sha:
        raise ConfigError(
            f"cannot replay: the candidate {where} changed since the graded run "
            f"(SHA-256 {sha[:12]} recorded, {program.sha256[:12]} now)"
        )
    kind = recorded.get("sandbox", "process")
    if kind not in ("process", "docker"):
        raise ConfigError(
            f"cannot replay: the graded run used a sandbox this harness does not know "
            f"({kind!r}; it knows process and docker)"
        )
    limits = recorded.get("limits")
    isolation = recorded.get("isolation")
    try:
        return make_candidate(
            scenario,
            program,
            limits=Limits.from_dict(limits) if isinstance(limits, dict) else None,
            isolation=isolation if isinstance(isolation, str) and kind == "process" else None,
            hidden=hidden,  # the traces (the recorded one and the replays) are not its to read
            sandbox_kind=kind,  # the same sandbox as the graded run: docker re-runs it in one
        )
    except ConfigError as exc:  # this machine cannot host that sandbox (no daemon, not root)
        raise ConfigError(f"cannot replay the graded run in the {kind} sandbox: {exc}") from None


def _field(header: dict[str, Any], name: str, kind: type) -> Any:
    value = header.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) or value == "":
        raise TraceFormatError(f"trace header has no valid {name} ({value!r}); cannot replay it")
    return value


def _scenario(path: Path, header: dict[str, Any], override: str | Path | None) -> Scenario:
    """The trace's pack: ``override`` (``--scenario PATH``) if given; else a built-in by id,
    or a folder pack from the absolute path the trace recorded (``scenario_path``)."""
    scenario_id = _field(header, "scenario_id", str)
    if override is not None:
        try:
            scenario = load_scenario(override)
        except ConfigError as exc:
            raise ConfigError(f"cannot replay {path}: --scenario {override}: {exc}") from None
        if scenario.id != scenario_id:
            raise ConfigError(
                f"cannot replay {path}: --scenario {override} is scenario {scenario.id!r}, "
                f"the trace recorded {scenario_id!r}"
            )
        return scenario
    where = header.get("scenario_path")
    builtin = header.get("scenario_builtin")
    if builtin is False and isinstance(where, str):
        folder = Path(where)
        if not (folder / "scenario.py").is_file():
            raise ConfigError(
                f"cannot replay {path}: its scenario {scenario_id!r} was loaded from {folder}, "
                f"which holds no scenario.py now (looked for {folder / 'scenario.py'}); "
                "pass --scenario PATH to say where the pack is"
            )
        source: str = where
    elif (BUILTIN_ROOT / scenario_id / "scenario.py").is_file():
        source = scenario_id
    elif isinstance(where, str):  # a built-in of another checkout, or an older trace
        source = where
    else:
        raise ConfigError(
            f"cannot replay {path}: scenario {scenario_id!r} is not a built-in and the trace "
            f"records no pack folder (looked for {BUILTIN_ROOT / scenario_id / 'scenario.py'});"
            " pass --scenario PATH"
        )
    try:
        return load_scenario(source)
    except ConfigError as exc:
        raise ConfigError(
            f"cannot replay {path}: the trace's scenario is not available: {exc}; "
            "pass --scenario PATH"
        ) from None


def _drift(header: dict[str, Any], scenario: Scenario) -> list[str]:
    drift: list[str] = []
    recorded, present = header.get("scenario_hash"), scenario.content_hash()
    if recorded != present:
        drift.append(
            f"scenario {scenario.id} changed since the trace was recorded "
            f"(content hash {str(recorded)[:12]} recorded, {present[:12]} now)"
        )
    return drift + version_drift(header)


def prepare_replay(
    path: str | Path, *, strict: bool = False, scenario: str | Path | Scenario | None = None
) -> ReplayPlan:
    """Read ``path`` and check it can be replayed here; drift is an error when ``strict``.
    The pack is ``scenario`` if given (a loaded ``Scenario``, or what ``load_scenario``
    takes: ``--scenario PATH``), else found from the trace's header (see ``_scenario``)."""
    path = Path(path)
    trace = read_trace(path)
    if trace.schedule is None:
        raise TraceFormatError(
            f"trace {path} has no schedule frame (the run was cut off before it): nothing to replay"
        )
    seed = _field(trace.header, "seed", int)
    variant = _field(trace.header, "variant", str)
    if isinstance(scenario, Scenario):
        if scenario.id != trace.header.get("scenario_id"):
            raise ConfigError(
                f"cannot replay {path} with scenario {scenario.id!r}: the trace recorded "
                f"{trace.header.get('scenario_id')!r}"
            )
    else:
        scenario = _scenario(path, trace.header, scenario)
    scenario.check_variant(variant)
    try:
        schedule = FaultSchedule.from_dict(trace.schedule)
    except ConfigError as exc:
        raise ConfigError(f"trace {path} holds an invalid fault schedule: {exc}") from None
    drift = _drift(trace.header, scenario)
    if strict and drift:
        raise ConfigError(f"trace {path} does not match this environment (--strict): {drift[0]}")
    recorded = trace.header.get("candidate")
    candidate = recorded if isinstance(recorded, dict) else None
    plan = ReplayPlan(path, trace, scenario, variant, seed, schedule, drift, candidate)
    plan.new_candidate()  # refuses a changed or missing program before anything runs
    return plan


async def _replay_once(
    plan: ReplayPlan, number: int, progress: Progress, runner: Runner
) -> ReplayOutcome:
    out = replay_path(plan.path, number)
    options = RunOptions(
        plan.scenario,
        plan.seed,
        variant=plan.variant,
        out=out,
        schedule=plan.schedule,
        progress=progress,
        candidate=plan.new_candidate(),
    )
    outcome = ReplayOutcome(number, out)
    started = time.monotonic()
    try:
        result = await runner(options)
    except ConfigError:
        raise
    except ChaosError as exc:
        outcome.error = str(exc)
    except BaseExceptionGroup as group:
        errors, rest = group.split(ChaosError)
        if errors is None or rest is not None or errors.subgroup(ConfigError) is not None:
            raise
        outcome.error = "; ".join(str(e) for e in errors.exceptions)
    else:
        outcome.verdicts = [v.to_dict() for v in result.verdicts]
    outcome.wall_s = time.monotonic() - started
    try:
        replayed = read_trace(out).events
    except TraceError:
        replayed = []
    recorded = verdict_map(plan.trace.verdicts)
    if outcome.error is None:
        outcome.mismatched = mismatched(recorded, verdict_map(outcome.verdicts))
        outcome.matched = bool(recorded) and not outcome.mismatched
    outcome.first_divergence = first_divergence(plan.trace.events, replayed, prefix=plan.partial)
    return outcome


async def run_replays(
    plan: ReplayPlan,
    times: int = 1,
    *,
    progress: Progress | None = None,
    runner: Runner = run_scenario,
) -> ReplayReport:
    """Replay ``plan`` ``times`` times, one after the other, each run by ``runner``."""
    if times < 1:
        raise ConfigError(f"times must be >= 1, got {times}")
    for number in range(1, times + 1):  # every replay's trace path, before the first starts
        check_trace_path(replay_path(plan.path, number))
    say = progress or (lambda _message: None)
    end = plan.trace.end or {}
    wall = end.get("wall_time_s")
    report = ReplayReport(
        plan.path,
        plan.scenario.id,
        plan.variant,
        plan.seed,
        list(plan.trace.verdicts),
        partial=plan.partial,
        drift=list(plan.drift),
        recorded_wall_s=float(wall) if isinstance(wall, int | float) else None,
    )
    for number in range(1, times + 1):

        def phase(name: str, number: int = number) -> None:
            say(f"replay {number}/{times}: {name}")

        report.replays.append(await _replay_once(plan, number, phase, runner))
    return report


async def replay_trace(
    path: str | Path,
    times: int = 1,
    *,
    strict: bool = False,
    progress: Progress | None = None,
    runner: Runner = run_scenario,
) -> ReplayReport:
    """Replay the trace at ``path`` ``times`` times with its own schedule; see ReplayReport."""
    plan = prepare_replay(path, strict=strict)
    return await run_replays(plan, times, progress=progress, runner=runner)
