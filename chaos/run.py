"""One run: services up, workload under a fault schedule, settle, check, trace.

::

    seed -> schedule --------------------------.
    scenario.setup: services + proxied links --+--> workload ... nemesis applies/heals faults
                                               '--> settle -> final state -> invariants
    every step -> Recorder -> trace (header | schedule | events ... | verdicts | end)

Everything a run starts lives in one ``AsyncExitStack`` inside the run's nursery, so leaving
``run_scenario`` (normally, on a violation, an exception, Ctrl-C or a timeout) stops every
process, closes every proxy, heals every fault and removes the run's temp dir.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos import settle
from chaos._signals import received, stop_outcome
from chaos.context import ExternalServices, RunContext
from chaos.errors import (
    EXIT_BAD_INPUT,
    EXIT_HARNESS,
    EXIT_HELD,
    EXIT_VIOLATED,
    ChaosError,
    ConfigError,
)
from chaos.nemesis import Nemesis
from chaos.recorder import Recorder
from chaos.rng import check_seed, derive_seed
from chaos.sandbox.candidate import Candidate
from chaos.scenario import Scenario
from chaos.services import open_run_dir
from chaos.services.images import check_images
from chaos.stress import load_snapshot
from faults.model import FaultSchedule
from faults.proxy import open_proxy_server
from faults.schedule import generate
from invariants import History, Invariant, Verdict, run_checkers
from invariants.history import HARNESS
from replay.trace import TraceWriter, build_header

if TYPE_CHECKING:
    from chaos.warm import WarmServices

#: Called with a short line of what a run (or an engine) is doing now.
Progress = Callable[[str], None]


@dataclass
class RunOptions:
    """What to run. ``schedule`` replaces the seed's schedule (replay, search)."""

    scenario: Scenario
    seed: int
    variant: str = "golden"
    out: Path | None = None
    schedule: FaultSchedule | None = None
    postgres_dsn: str | None = None
    nats_url: str | None = None
    progress: Progress | None = None
    #: Seconds to wait for the system to settle (default: the scenario's own).
    settle_timeout_s: float | None = None
    #: A program run in place of the scenario's task service (``chaos grade``).
    candidate: Candidate | None = None
    #: A warm worker's PostgreSQL and nats-server (``chaos.warm``): the run gets a fresh
    #: database and stream on them instead of starting its own.
    warm: WarmServices | None = None


@dataclass
class RunResult:
    scenario: str
    variant: str
    seed: int
    schedule: FaultSchedule
    verdicts: list[Verdict]
    trace: Path
    settled: bool
    timings: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    final_state: dict[str, Any] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return all(v.valid is True for v in self.verdicts)

    @property
    def exit_code(self) -> int:
        if any(v.valid is False for v in self.verdicts):
            return EXIT_VIOLATED
        return EXIT_HELD if self.held else EXIT_HARNESS

    def to_json(self) -> dict[str, Any]:
        """The ``chaos run --json`` object (what ``chaos sweep`` reads from each worker)."""
        return {
            **result_json(self.scenario, self.variant, self.schedule, self.verdicts, self.trace),
            "seed": self.seed,
            "held": self.held,
            "settled": self.settled,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


def result_json(
    scenario: str,
    variant: str,
    schedule: FaultSchedule | None,
    verdicts: Sequence[Verdict],
    trace: Path | None,
) -> dict[str, Any]:
    """The fields every JSON result shares (run, search): what ran, its fault schedule
    (``{seed, space_hash, events}``, the form docs/faults.md gives and the trace's schedule
    frame holds), its verdicts (without evidence: that is in the trace; each with its word,
    ``verdict``: held, VIOLATED or unknown) and the trace path."""
    return {
        "scenario": scenario,
        "variant": variant,
        "schedule": None if schedule is None else schedule.to_dict(),
        "verdicts": [v.to_dict(evidence=False) for v in verdicts],
        "trace": None if trace is None else str(trace),
    }


def no_fault_schedule(scenario: Scenario, variant: str, seed: int) -> FaultSchedule:
    """The empty schedule of ``variant`` (``chaos run --no-faults``, ``chaos validate``'s
    smoke check): the run, its trace and its replay are as usual, with no fault injected."""
    space = scenario.fault_space(variant)
    return FaultSchedule(seed=seed, space_hash=space.content_hash(), events=())


def default_trace_path(scenario: str, variant: str, seed: int) -> Path:
    return Path("traces") / f"{scenario}-{variant}-seed{seed}.trace"


async def run_scenario(options: RunOptions) -> RunResult:
    """Run a scenario once; the trace is written as the run goes."""
    scenario = options.scenario
    check_seed(options.seed)
    scenario.check_variant(options.variant)
    scenario.check_externals(options.postgres_dsn)
    checkers = scenario.checkers()
    if scenario.images:  # no daemon, or an image it lacks: one line, exit 2, nothing started
        await trio.to_thread.run_sync(check_images, scenario.images)
    progress = options.progress or (lambda _phase: None)
    schedule = options.schedule
    if schedule is None:
        schedule = generate(scenario.fault_space(options.variant), options.seed)
    trace_path = Path(options.out or default_trace_path(scenario.id, options.variant, options.seed))
    try:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        writer = TraceWriter(
            trace_path,
            build_header(
                scenario.id,
                scenario.content_hash(),
                options.variant,
                options.seed,
                {
                    "space_hash": schedule.space_hash,
                    # Where the pack was loaded from: replay finds a folder pack there again.
                    "scenario_path": str(scenario.path),
                    "scenario_builtin": scenario.builtin,
                    "invariants": list(scenario.invariants),
                    "load": load_snapshot(),
                    **_candidate_header(options.candidate),
                },
            ),
            overwrite=True,
        )
    except OSError as exc:
        raise ConfigError(f"cannot write trace {trace_path}: {exc.strerror or exc}") from None
    timings: dict[str, float] = {}
    clock = PhaseClock(timings, progress)
    started = time.monotonic()
    outcome, exit_code = "error", EXIT_HARNESS
    try:
        writer.write_schedule(schedule.to_dict())
        result = await _run(options, schedule, checkers, writer, trace_path, clock)
        outcome = "held" if result.held else "violated"
        exit_code = result.exit_code
        return result
    except ConfigError:
        outcome, exit_code = "bad input", EXIT_BAD_INPUT
        raise
    except BaseException as exc:
        if is_interruption(exc) or received() is not None:  # 130/143/129: chaos._signals
            outcome, exit_code = stop_outcome()
        raise
    finally:
        if not writer.closed:
            try:
                writer.write_end(
                    outcome, exit_code, time.monotonic() - started, {"load": load_snapshot()}
                )
            finally:
                writer.close()


def _candidate_header(candidate: Candidate | None) -> dict[str, Any]:
    """A graded run's trace says whose program ran in place of which service."""
    if candidate is None:
        return {}
    program = candidate.program
    return {
        "candidate": {
            "service": candidate.service,
            "sha256": program.sha256,
            # what `chaos replay` needs to run the same program again (and to refuse a
            # changed one): where it was, its limits, the isolation asked for
            "path": str(program.path),
            "limits": candidate.limits.to_dict(),
            "isolation": getattr(candidate.sandbox, "requested", None),
            "sandbox": candidate.sandbox.name,
        }
    }


def is_interruption(exc: BaseException) -> bool:
    """Cancellation or Ctrl-C, alone or grouped by nurseries."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_interruption(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt | trio.Cancelled)


class PhaseClock:
    """Times the phases of a run (wall clock) and reports each new phase to ``progress``."""

    def __init__(self, timings: dict[str, float], progress: Progress) -> None:
        self.timings = timings
        self.progress = progress
        self._phase: str | None = None
        self._since = time.monotonic()

    def enter(self, phase: str) -> None:
        now = time.monotonic()
        if self._phase is not None:
            self.timings[self._phase] = now - self._since
        self._phase, self._since = phase, now
        if phase != "done":
            self.progress(phase)


async def _run(
    options: RunOptions,
    schedule: FaultSchedule,
    checkers: Sequence[Invariant],
    writer: TraceWriter,
    trace_path: Path,
    clock: PhaseClock,
) -> RunResult:
    scenario = options.scenario
    clock.enter("setup")
    recorder = Recorder(writer)
    verdicts: list[Verdict] = []
    settled = False
    final_state: dict[str, Any] = {}
    with open_run_dir(prefix=f"chaos-{scenario.id}-") as run_dir:
        async with (
            open_proxy_server(seed=derive_seed(options.seed, "proxy"), dial_timeout=2.0) as proxies,
            AsyncExitStack() as stack,
        ):
            if options.warm is not None:
                await stack.enter_async_context(options.warm.lease(recorder))
            ctx = RunContext(
                scenario=scenario,
                seed=options.seed,
                variant=options.variant,
                run_dir=run_dir,
                stack=stack,
                proxies=proxies,
                recorder=recorder,
                externals=ExternalServices(options.postgres_dsn, options.nats_url),
                candidate=options.candidate,
                warm=options.warm,
            )
            proxies.add_observer(recorder.proxy_event)
            proxies.add_observer(ctx.on_proxy_event)
            await scenario.setup(ctx)
            if options.candidate is not None and not ctx.candidate_services:
                # Never let a graded run grade the pack's own implementation instead.
                raise ConfigError(
                    f"scenario {scenario.id} started no service named {options.candidate.service!r}"
                    f" (its task) in setup, so the candidate never ran; a pack names its task's "
                    f"service, or each instance of it {options.candidate.service}-N"
                )
            ctx.observe_subjects()
            nemesis = Nemesis(ctx, schedule)
            nemesis.check()

            clock.enter("workload")
            ctx.workload_t0 = trio.current_time()
            recorder.record(HARNESS, "info", "workload", {"phase": "start"})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(nemesis.run)
                await scenario.workload(ctx)
                recorder.record(HARNESS, "info", "workload", {"phase": "end"})
                nemesis.workload_done.set()

                clock.enter("settle")
                timeout = options.settle_timeout_s
                settled = await _settle(scenario, ctx, timeout or scenario.settle_timeout_s)
                recorder.record(HARNESS, "info", "settle", {"settled": settled})
                nursery.cancel_scope.cancel()  # heals whatever is still applied

            clock.enter("check")
            final_state = await scenario.final_state(ctx)
            recorder.record(HARNESS, "info", "final_state", final_state)
            history = History.from_events(recorder.events)
            verdicts = run_checkers(checkers, history, final_state)
            for verdict in verdicts:
                writer.write_verdict(verdict.to_dict())
            clock.enter("teardown")
    clock.enter("done")
    return RunResult(
        scenario.id,
        options.variant,
        options.seed,
        schedule,
        verdicts,
        trace_path,
        settled,
        clock.timings,
        recorder.events,
        final_state,
    )


async def _settle(scenario: Scenario, ctx: RunContext, limit_s: float) -> bool:
    """Until ``scenario.settled`` holds twice with nothing recorded in between (driven by the
    run's events, see ``chaos.settle``), or ``limit_s`` passes."""
    if settle.polling():
        return await settle.poll_settled(lambda: scenario.settled(ctx), limit_s)
    return await settle.wait_settled(lambda: scenario.settled(ctx), ctx.recorder, limit_s)


__all__ = [
    "ChaosError",
    "ExternalServices",
    "PhaseClock",
    "Progress",
    "RunContext",
    "RunOptions",
    "RunResult",
    "is_interruption",
    "no_fault_schedule",
    "result_json",
    "run_scenario",
]
