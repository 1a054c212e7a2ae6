"""One run: services up, workload under a fault schedule, settle, check, trace.

::

    seed -> schedule --------------------------.
    scenario.setup: services + proxied links --+--> workload ... nemesis applies/heals faults
                                               '--> settle -> final state -> invariants
    every step -> Recorder -> trace (header | schedule | events ... | verdicts | end)

Everything a run starts lives in one ``AsyncExitStack`` inside the run's nursery, so leaving
``run_scenario`` (normally, on a violation, an exception, Ctrl-C or a timeout) stops every
process, closes every proxy, heals every fault and removes the run's temp dir.

A live run (``RunOptions.driver``: ``chaos.hypothesis.ChaosMachine``) has no schedule up front:
the driver injects faults while the workload runs, and the schedule it returns (what it
injected, and when) is the trace's schedule frame, written after the events.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from chaos import settle
from chaos.context import ExternalServices, RunContext
from chaos.nemesis import Nemesis
from chaos.recorder import Recorder
from chaos.sandbox.candidate import Candidate
from chaos.scenario import Scenario
from chaos.services import open_run_dir
from chaos.services.images import check_images
from chaos.stress import load_snapshot
from chaos.workload import PlannedWork, check_workload
from faults.model import FaultSchedule
from faults.proxy import open_proxy_server
from faults.schedule import generate
from ground._signals import received, stop_outcome
from ground.errors import (
    EXIT_BAD_INPUT,
    EXIT_HARNESS,
    EXIT_HELD,
    EXIT_VIOLATED,
    ConfigError,
    ServiceError,
    Unreadable,
)
from ground.rng import check_seed, derive_seed
from invariants import History, Invariant, Verdict, run_checkers
from invariants.history import HARNESS, SERVICE_PREFIX
from replay.trace import TraceWriter, build_header

if TYPE_CHECKING:
    from chaos.warm import WarmServices

#: Called with a short line of what a run (or an engine) is doing now.
Progress = Callable[[str], None]


class FaultDriver(Protocol):
    """Injects faults into a live run in place of a fixed schedule (``Nemesis.inject``)."""

    async def drive(self, ctx: RunContext, nemesis: Nemesis) -> FaultSchedule:
        """Runs from the workload's start, beside it; returns the schedule of the faults it
        injected. The run settles once both the driver and the workload are done."""
        ...


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
    #: Drives faults into the live run instead of ``schedule`` (which must then be empty).
    driver: FaultDriver | None = None


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
    #: Not settled because the scenario answered ``STUCK`` (``chaos.settle``), not waited out.
    stuck: bool = False

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
            **({"stuck": True} if self.stuck else {}),
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
    if options.driver is not None:
        schedule = schedule or no_fault_schedule(scenario, options.variant, options.seed)
        if schedule.events:
            raise ConfigError("a driven run takes its faults from its driver, not a schedule")
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
    recorder: Recorder | None = None
    try:
        if options.driver is None:  # a driven run's schedule is known at its end
            writer.write_schedule(schedule.to_dict())
        recorder = Recorder(writer)
        result = await _run(options, schedule, checkers, recorder, trace_path, clock)
        outcome = "held" if result.held else "violated"
        exit_code = result.exit_code
        return result
    except ConfigError:
        outcome, exit_code = "bad input", EXIT_BAD_INPUT
        raise
    except BaseException as exc:
        if is_interruption(exc) or received() is not None:  # 130/143/129: ground._signals
            outcome, exit_code = stop_outcome()
        else:
            explain_service_errors(exc, recorder.events if recorder else [], trace_path)
        raise
    finally:
        if not writer.closed:
            try:
                writer.write_end(
                    outcome, exit_code, time.monotonic() - started, {"load": load_snapshot()}
                )
            finally:
                writer.close()


#: A service's output line that reads as an error (what "the other services' errors" are).
_ERROR_LINE = re.compile(
    r"error|fatal|panic|traceback|exception|refused|denied|failed|cannot|could not|"
    r"in use|not found|no such",
    re.I,
)
#: How many of the failing service's last lines, and of the others' errors, a message shows.
_TAIL_LINES = 5
_OTHER_ERRORS = 4


def explain_service_errors(
    exc: BaseException, events: Sequence[Mapping[str, Any]], trace_path: Path
) -> None:
    """Give each ``ServiceError`` in ``exc`` (alone or in a nursery's group) its cause: the
    failing service's last log lines, the other services' errors that preceded it (their
    error-like log lines and exits, from the run's events), the trace and the ``chaos show``
    command that shows the rest. The message stays one paragraph (the CLI prints one line)."""
    for error in _service_errors(exc):
        error.explain(service_error_detail(error, events, trace_path))


def _service_errors(exc: BaseException) -> Iterator[ServiceError]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _service_errors(inner)
    elif isinstance(exc, ServiceError):
        yield exc


def service_error_detail(
    error: ServiceError, events: Sequence[Mapping[str, Any]], trace_path: Path
) -> str:
    """What ``explain_service_errors`` adds to one error's message."""
    parts = []
    lines = [line.strip() for line in error.log_tail.splitlines() if line.strip()]
    if len(lines) > 1:
        shown = " | ".join(line[:200] for line in lines[-_TAIL_LINES:])
        parts.append(f"{error.service or 'its'} last lines: {shown}")
    others = []
    for event in events:
        process = str(event.get("process", ""))
        if not process.startswith(SERVICE_PREFIX):
            continue
        name = process[len(SERVICE_PREFIX) :]
        if name == error.service:
            continue
        value = event.get("value")
        if event.get("f") == "log" and _ERROR_LINE.search(str(value)):
            others.append(f"{name}: {str(value).strip()[:200]}")
        elif event.get("f") == "exit" and isinstance(value, Mapping):
            if not value.get("expected"):
                others.append(f"{name} exited with code {value.get('code')}")
    if others:
        parts.append("before it: " + " | ".join(others[-_OTHER_ERRORS:]))
    else:
        parts.append("no other service printed an error before it")
    parts.append(f"trace {trace_path} (`chaos show {trace_path}` shows the rest)")
    return "; ".join(parts)


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
    recorder: Recorder,
    trace_path: Path,
    clock: PhaseClock,
) -> RunResult:
    scenario = options.scenario
    writer = recorder.writer
    clock.enter("setup")
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
                if options.driver is None:
                    await _workload(scenario, ctx, nemesis)
                else:
                    schedule = await _driven(options.driver, scenario, ctx, nemesis)
                    writer.write_schedule(schedule.to_dict())

                clock.enter("settle")
                timeout = options.settle_timeout_s
                ended = await _settle(
                    scenario, ctx, timeout or scenario.settle_timeout_s, lambda: nemesis.busy
                )
                settled = ended is True
                settle_record: dict[str, Any] = {"settled": settled}
                if ended is settle.STUCK:  # the scenario said it cannot settle: not waited out
                    settle_record["stuck"] = True
                recorder.record(HARNESS, "info", "settle", settle_record)
                nemesis.end()
                nursery.cancel_scope.cancel()  # heals whatever is still applied

            clock.enter("check")
            final_state = await _final_state(scenario, ctx)
            recorder.record(HARNESS, "info", "final_state", final_state)
            history = History.from_events(recorder.events)
            verdicts = run_checkers(checkers, history, final_state)
            plans = scenario.planned_work(ctx)
            if plans:
                verdicts.append(_workload_verdict(ctx, plans))
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
        stuck=ended is settle.STUCK,
    )


async def _final_state(scenario: Scenario, ctx: RunContext) -> dict[str, Any]:
    """``scenario.final_state``; a harness error (``ServiceError``) when reading it failed
    while something of the harness's own had died (its store, its server): a graded run
    then reruns the seed instead of failing it as ``unreadable`` (the candidate's data)."""
    try:
        return await scenario.final_state(ctx)
    except (Unreadable, ConfigError, ServiceError):
        raise
    except Exception as exc:
        failures = ctx.harness_failures()
        if not failures:
            raise
        raise ServiceError(
            f"reading the final state failed ({type(exc).__name__}: {str(exc)[:200]}) while "
            f"{'; '.join(failures)}: a failure of the harness's own"
        ) from exc


def _workload_verdict(ctx: RunContext, plans: Sequence[PlannedWork]) -> Verdict:
    """The run's ``workload`` verdict; a harness error (``ServiceError``) when the work fell
    short while something of the harness's own died: then the cause may be the harness's."""
    verdict = check_workload(plans, ctx.recorder.events)
    if verdict.valid is False:
        failures = ctx.harness_failures()
        if failures:
            raise ServiceError(
                f"the workload fell short ({verdict.explanation.rstrip('.')}) while "
                f"{'; '.join(failures)}: a failure of the harness's own"
            )
    return verdict


async def _workload(scenario: Scenario, ctx: RunContext, nemesis: Nemesis) -> None:
    await scenario.workload(ctx)
    ctx.recorder.record(HARNESS, "info", "workload", {"phase": "end"})
    nemesis.workload_done.set()


async def _driven(
    driver: FaultDriver, scenario: Scenario, ctx: RunContext, nemesis: Nemesis
) -> FaultSchedule:
    """The workload and the driver side by side; the driver's schedule once both are done."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_workload, scenario, ctx, nemesis)
        return await driver.drive(ctx, nemesis)


async def _settle(
    scenario: Scenario, ctx: RunContext, limit_s: float, busy: Callable[[], bool]
) -> bool | settle.Stuck:
    """Until ``scenario.settled`` holds twice with nothing recorded in between (driven by the
    run's events, see ``chaos.settle``), it answers ``STUCK`` long enough with nothing
    ``busy`` (the nemesis), or ``limit_s`` passes."""
    if settle.polling():
        return await settle.poll_settled(lambda: scenario.settled(ctx), limit_s)
    return await settle.wait_settled(
        lambda: scenario.settled(ctx), ctx.recorder, limit_s,
        stuck_s=scenario.settle_stuck_s, busy=busy,
    )  # fmt: skip


__all__ = [
    "FaultDriver",
    "PhaseClock",
    "Progress",
    "RunOptions",
    "RunResult",
    "is_interruption",
    "no_fault_schedule",
    "result_json",
    "run_scenario",
]
