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

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from chaos._signals import received, stop_outcome
from chaos.errors import ChaosError, ConfigError, ServiceError
from chaos.nemesis import Nemesis
from chaos.recorder import Recorder
from chaos.rng import derive_rng, derive_seed
from chaos.scenario import Scenario, Subject
from chaos.services import (
    ManagedProcess,
    NatsService,
    PostgresService,
    SkewFile,
    external_nats,
    external_postgres,
    open_nats,
    open_postgres,
    open_process_service,
    open_run_dir,
)
from faults.model import FaultSchedule
from faults.proxy import Proxy, ProxyServer, open_proxy_server
from faults.schedule import generate
from invariants import History, Verdict, get, run_checkers
from replay.trace import TraceWriter, build_header

Progress = Callable[[str], None]

EXIT_HELD, EXIT_VIOLATED, EXIT_BAD_INPUT, EXIT_HARNESS = 0, 1, 2, 3


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
        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "seed": self.seed,
            "schedule": self.schedule.to_dict()["events"],
            "verdicts": [
                {"name": v.name, "valid": v.valid, "explanation": v.explanation}
                for v in self.verdicts
            ],
            "held": self.held,
            "settled": self.settled,
            "trace": str(self.trace),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


def default_trace_path(scenario: str, variant: str, seed: int) -> Path:
    return Path("traces") / f"{scenario}-{variant}-seed{seed}.trace"


class RunContext:
    """What a scenario's hooks use: services, links, the recorder, named random streams."""

    def __init__(
        self,
        options: RunOptions,
        run_dir: Path,
        stack: AsyncExitStack,
        proxies: ProxyServer,
        recorder: Recorder,
    ) -> None:
        self.options = options
        self.scenario = options.scenario
        self.seed = options.seed
        self.variant = options.variant
        self.run_dir = run_dir
        self.stack = stack
        self.proxies = proxies
        self.recorder = recorder
        self.workload_t0 = trio.current_time()
        self.state: dict[str, Any] = {}
        self._links: dict[str, Proxy] = {}
        self._services: dict[str, ManagedProcess] = {}
        self._deliveries: dict[str, int] = {}
        self._delivery_changed = trio.Event()
        self._link_subjects: dict[str, list[tuple[str, Subject]]] = {}
        #: The scenario's subjects for this run (setup may rename them, e.g. per run).
        self.subjects: dict[str, Subject] = dict(options.scenario.subjects)

    @property
    def shared_services(self) -> bool:
        """True when the run uses external services that other runs may share: then a
        scenario must give its streams, subjects and tables names of their own."""
        return bool(self.options.postgres_dsn or self.options.nats_url)

    def rng(self, *names: object) -> Any:
        """A named random stream of this run (``random.Random``)."""
        return derive_rng(self.seed, "scenario", *names)

    # -- dependencies -------------------------------------------------------------------

    async def postgres(self) -> PostgresService:
        """The run's PostgreSQL: embedded (own cluster, free port) unless a DSN was given."""
        if self.options.postgres_dsn:
            return external_postgres(self.options.postgres_dsn)
        return await self.stack.enter_async_context(
            open_postgres(self.run_dir, log_sink=self.recorder.log_line)
        )

    async def nats(self) -> NatsService:
        """The run's NATS with JetStream: embedded unless a URL was given."""
        if self.options.nats_url:
            return external_nats(self.options.nats_url)
        return await self.stack.enter_async_context(
            open_nats(self.run_dir, log_sink=self.recorder.log_line)
        )

    # -- links --------------------------------------------------------------------------

    def add_link(self, name: str, upstream: str) -> str:
        """A proxy named ``name`` in front of ``upstream``; returns the address to dial."""
        proxy = self.proxies.create_proxy(name, "127.0.0.1:0", upstream)
        self._links[name] = proxy
        return proxy.listen

    def link(self, name: str) -> Proxy:
        try:
            return self._links[name]
        except KeyError:
            raise ConfigError(
                f"no link {name!r} in this run (links: {', '.join(self._links) or 'none'})"
            ) from None

    def subject(self, name: str) -> Subject:
        try:
            return self.subjects[name]
        except KeyError:
            known = ", ".join(self.subjects) or "none"
            raise ConfigError(f"no subject {name!r} in this scenario (subjects: {known})") from None

    def observe_subjects(self) -> None:
        """Watch every subject's links at the message level (deliveries, acks, publishes)."""
        for name, subject in self.subjects.items():
            consume = self.link(subject.consume_link)
            consume.add_toxic("nats_observe", name="observe-down", stream="downstream")
            consume.add_toxic("nats_observe", name="observe-up", stream="upstream")
            self._link_subjects.setdefault(subject.consume_link, []).append((name, subject))
            if subject.publish_link != subject.consume_link:
                self.link(subject.publish_link).add_toxic(
                    "nats_observe", name="observe-up", stream="upstream"
                )

    def on_proxy_event(self, event: Mapping[str, Any]) -> None:
        if event.get("event") != "nats_delivery":
            return
        for name, subject in self._link_subjects.get(str(event.get("proxy")), []):
            if str(event.get("subject", "")).startswith(subject.nats_subject):
                self._deliveries[name] = self._deliveries.get(name, 0) + 1
                self._delivery_changed.set()
                self._delivery_changed = trio.Event()

    async def wait_deliveries(self, subject: str, n: int) -> None:
        """Until the ``n``-th message has been delivered on ``subject``."""
        self.subject(subject)
        while self._deliveries.get(subject, 0) < n:
            await self._delivery_changed.wait()

    def deliveries(self, subject: str) -> int:
        return self._deliveries.get(subject, 0)

    # -- services under test ------------------------------------------------------------

    async def start_service(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        ready_line: str | None = None,
        wait: bool = True,
    ) -> ManagedProcess:
        """Start a service under test (its wall clock skewable) and wait until it prints
        ``ready_line`` (if given; with ``wait=False`` call ``ready`` later, to start several
        at once). It is stopped and reaped when the run ends."""
        seen = {"count": 0}
        holder: list[ManagedProcess] = []

        def sink(service: str, stream: str, line: str) -> None:
            if ready_line is not None and ready_line in line:
                seen["count"] += 1
            self.recorder.log_line(service, stream, line)

        async def ready() -> bool:
            starts = holder[0].starts if holder else 1
            return ready_line is None or seen["count"] >= starts

        skew = SkewFile(self.run_dir / f"{name}.faketime")
        process = await self.stack.enter_async_context(
            open_process_service(
                name,
                list(argv),
                env={**(env or {}), "PYTHONUNBUFFERED": "1"},
                log_sink=sink,
                ready=ready if ready_line else None,
                faketime=skew,
                on_exit=self._on_exit,
                stop_grace=2.0,
                wait_ready=wait,
            )
        )
        holder.append(process)
        self._services[name] = process
        self.recorder.record(f"service:{name}", "info", "start", {"pid": process.pid})
        return process

    async def ready(self, *processes: ManagedProcess) -> None:
        """Wait until every one of ``processes`` is ready, side by side."""
        async with trio.open_nursery() as nursery:
            for process in processes:
                nursery.start_soon(process.ready)

    def _on_exit(self, name: str, code: int, expected: bool) -> None:
        self.recorder.record(
            f"service:{name}", "info", "exit", {"code": code, "expected": expected}
        )

    def service(self, name: str) -> ManagedProcess:
        try:
            return self._services[name]
        except KeyError:
            known = ", ".join(self._services) or "none"
            raise ConfigError(f"no service {name!r} in this run (services: {known})") from None

    async def run_to_completion(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> int:
        """Run a workload process until it exits; its ``@op`` lines join the history."""
        async with open_process_service(
            name,
            list(argv),
            env={**(env or {}), "PYTHONUNBUFFERED": "1"},
            log_sink=self.recorder.log_line,
            stop_grace=2.0,
        ) as process:
            self.recorder.record(f"service:{name}", "info", "start", {"pid": process.pid})
            code = await process.wait()
            with trio.move_on_after(2):
                await process.exited.wait()
        self.recorder.record(f"service:{name}", "info", "exit", {"code": code, "expected": True})
        return code

    @staticmethod
    def python() -> str:
        return sys.executable


async def run_scenario(options: RunOptions) -> RunResult:
    """Run a scenario once; the trace is written as the run goes."""
    scenario = options.scenario
    scenario.check_variant(options.variant)
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
                {"space_hash": schedule.space_hash, "invariants": list(scenario.invariants)},
            ),
            overwrite=True,
        )
    except OSError as exc:
        raise ConfigError(f"cannot write trace {trace_path}: {exc.strerror or exc}") from None
    timings: dict[str, float] = {}
    clock = _PhaseClock(timings, progress)
    started = time.monotonic()
    outcome, exit_code = "error", EXIT_HARNESS
    try:
        writer.write_schedule(schedule.to_dict())
        result = await _run(options, schedule, writer, trace_path, clock)
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
                writer.write_end(outcome, exit_code, time.monotonic() - started)
            finally:
                writer.close()


def is_interruption(exc: BaseException) -> bool:
    """Cancellation or Ctrl-C, alone or grouped by nurseries."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_interruption(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt | trio.Cancelled)


class _PhaseClock:
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
    writer: TraceWriter,
    trace_path: Path,
    clock: _PhaseClock,
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
            ctx = RunContext(options, run_dir, stack, proxies, recorder)
            proxies.add_observer(recorder.proxy_event)
            proxies.add_observer(ctx.on_proxy_event)
            await scenario.setup(ctx)
            ctx.observe_subjects()
            nemesis = Nemesis(ctx, schedule)
            nemesis.check()

            clock.enter("workload")
            ctx.workload_t0 = trio.current_time()
            recorder.record("harness", "info", "workload", {"phase": "start"})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(nemesis.run)
                await scenario.workload(ctx)
                recorder.record("harness", "info", "workload", {"phase": "end"})
                nemesis.workload_done.set()

                clock.enter("settle")
                timeout = options.settle_timeout_s
                settled = await _settle(scenario, ctx, timeout or scenario.settle_timeout_s)
                recorder.record("harness", "info", "settle", {"settled": settled})
                nursery.cancel_scope.cancel()  # heals whatever is still applied

            clock.enter("check")
            final_state = await scenario.final_state(ctx)
            recorder.record("harness", "info", "final_state", final_state)
            history = History.from_events(recorder.events)
            checkers = [get(name) for name in scenario.invariants]
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
    """Poll ``scenario.settled`` until it holds twice in a row, or ``limit_s`` passes."""
    streak = 0
    with trio.move_on_after(limit_s):
        while streak < 2:
            try:
                streak = streak + 1 if await scenario.settled(ctx) else 0
            except (OSError, ServiceError):
                streak = 0
            await trio.sleep(0.2)
        return True
    return False


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_HARNESS",
    "EXIT_HELD",
    "EXIT_VIOLATED",
    "ChaosError",
    "RunContext",
    "RunOptions",
    "RunResult",
    "is_interruption",
    "run_scenario",
]
