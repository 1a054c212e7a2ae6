"""Executors: how many runs are carried out, here (worker processes) or on a Ray cluster.

::

    RunSpec ... ──► Executor(specs, jobs, progress) ──► RunOutcome per spec (any order)
                     LocalExecutor   one ``chaos run --json`` child per run, ``jobs`` at a time
                     RayExecutor     one Ray task per run, each starting that same child on a
                                     worker (chaos.executor_ray; ``pip install -e '.[ray]'``)

A cold run is ``chaos run SCENARIO --seed N --variant V --out TRACE --json ARGS`` in a child
process (a graded run's ``CandidateSpec`` as its ``--impl`` flags), so services start exactly
as they do for one ``chaos run``; a warm run is the same run in a kept worker
(``chaos.warm_pool``), the candidate handed over as data. Both executors share the
long-tail rules of ``run_one`` and ``with_retries``:

- ``run_timeout``: a run still going after that many seconds is interrupted as Ctrl-C would
  (it stops its services and writes what it recorded, its trace ending ``interrupted``), then
  killed if it hangs in its cleanup (its ``TRACE.partial`` is kept); its outcome is
  ``timeout``, never retried.
- a worker lost mid-run (the child killed by a signal nobody here sent; on Ray, the worker
  process or its node dying) is run again, at most ``retries`` (2) more times, and reported
  (``RunOutcome.lost``). A held or violated run is never run again, nor is a harness error.
- one stuck or crashed run holds nothing else: each run is its own task.

sweep, validate (with ``--ray`` or ``--run-timeout``) and grade dispatch through an executor.

Size (about 580 lines): one module because ``RunSpec``/``RunOutcome`` (what crosses to a
worker and back), one run in a child, the retry rule and the local executor are one contract
that ``chaos.executor_ray`` reuses piece by piece; the engines' adapters close it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

from chaos import warm
from chaos.sandbox.candidate import CandidateSpec
from chaos.scenario import Scenario
from chaos.services._spawn import PIPE, Child, spawn
from chaos.stress import SWEEP_JOBS_ENV
from chaos.warm_pool import WarmPool, WorkerGone, open_warm_pool
from ground import _signals
from ground._checks import check_duration
from ground.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError

#: How long an interrupted worker may take to clean up before it is killed.
STOP_GRACE_S = 60.0
#: A timed-out run: SIGINT, then a second SIGINT (stop services at once) after this many
#: seconds, then SIGKILL after as many again.
TIMEOUT_GRACE_S = 10.0
#: How many times a run whose worker was lost is run again.
LOST_RETRIES = 2
MAX_RUN_TIMEOUT_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class RunSpec:
    """One run: ``chaos run SCENARIO --seed SEED --variant VARIANT --json ARGS``, its trace
    ``out_dir/VARIANT-seedSEED.trace`` (or ``out_dir/trace_name``). ``schedule``: a fault
    schedule (``FaultSchedule.to_dict()``, its seed ``SEED``) to run instead of the seed's
    draw (``chaos run --schedule``; written next to the trace as ``TRACE.schedule.json``)."""

    scenario: str
    seed: int
    args: tuple[str, ...]
    out_dir: Path
    variant: str = "golden"
    trace_name: str = ""
    schedule: dict[str, Any] | None = None
    #: A graded run's candidate (``chaos run --impl`` and its flags on a cold run; the spec
    #: itself, as data, on a warm worker).
    candidate: CandidateSpec | None = None

    def __post_init__(self) -> None:
        if self.schedule is not None and self.schedule.get("seed") != self.seed:
            raise ConfigError(
                f"a run spec's schedule has seed {self.schedule.get('seed')!r}, "
                f"not the run seed {self.seed}"
            )

    @property
    def trace(self) -> Path:
        return self.out_dir / (self.trace_name or f"{self.variant}-seed{self.seed}.trace")

    def schedule_path(self, trace: Path | None = None) -> Path:
        """Where ``argv`` writes the schedule: next to the trace."""
        trace = trace or self.trace
        return trace.with_name(trace.name + ".schedule.json")

    def argv(self, trace: Path | None = None) -> list[str]:
        """The worker's command line; writes the schedule file first when there is one."""
        extra: list[str] = []
        if self.schedule is not None:
            path = self.schedule_path(trace)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.schedule, sort_keys=True), encoding="utf-8")
            extra = ["--schedule", str(path)]
        if self.candidate is not None:
            extra += self.candidate.to_args()
        return [
            sys.executable, "-m", "chaos", "run", self.scenario, "--seed", str(self.seed),
            "--variant", self.variant, "--out", str(trace or self.trace), "--json", *extra,
            *self.args,
        ]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "args": list(self.args),
            "out_dir": str(self.out_dir),
            "variant": self.variant,
            "trace_name": self.trace_name,
            "schedule": self.schedule,
            "candidate": None if self.candidate is None else self.candidate.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        schedule = data.get("schedule")
        candidate = data.get("candidate")
        return cls(
            str(data["scenario"]),
            int(data["seed"]),
            tuple(str(a) for a in data["args"]),
            Path(data["out_dir"]),
            str(data["variant"]),
            str(data["trace_name"]),
            None if schedule is None else dict(schedule),
            None if candidate is None else CandidateSpec.from_dict(candidate),
        )


@dataclass
class RunOutcome:
    """What came of one run: the worker's exit code and its ``chaos run --json`` object (or
    its error), its wall time, and the long tail (timed out, attempts, lost workers)."""

    seed: int
    exit_code: int
    result: dict[str, Any] | None = None
    error: str = ""
    wall_s: float = 0.0
    #: The run hit ``run_timeout`` and was stopped; ``trace`` holds what it had recorded.
    timed_out: bool = False
    #: Runs carried out for this spec (1 + the retries after lost workers).
    attempts: int = 1
    #: One line per lost worker (retried, or the last attempt when all were lost).
    lost: list[str] = field(default_factory=list)
    #: Set by the attempt whose worker was lost (what ``with_retries`` decides on).
    lost_worker: str = ""
    #: The trace on the caller's side: the finished trace, or ``TRACE.partial`` when the
    #: worker died before placing it (None when the run wrote none).
    trace: Path | None = None
    #: Where it ran: host and worker pid.
    worker: str = ""

    @property
    def verdict(self) -> dict[str, Any] | None:
        """The ``chaos run --json`` object (``chaos sweep``'s name for it)."""
        return self.result

    @property
    def outcome(self) -> str:
        if self.timed_out:
            return "timeout"
        return {EXIT_HELD: "held", EXIT_VIOLATED: "violated"}.get(self.exit_code, "error")

    @property
    def partial(self) -> bool:
        return self.timed_out or (self.trace is not None and self.trace.suffix == ".partial")

    def violated(self) -> list[str]:
        verdicts = (self.result or {}).get("verdicts", [])
        return [v["name"] for v in verdicts if v.get("valid") is False]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what a Ray task sends back, with the trace's bytes beside it)."""
        return {
            "seed": self.seed,
            "exit_code": self.exit_code,
            "result": self.result,
            "error": self.error,
            "wall_s": self.wall_s,
            "timed_out": self.timed_out,
            "lost_worker": self.lost_worker,
            "trace": None if self.trace is None else str(self.trace),
            "worker": self.worker,
        }


OnOutcome = Callable[[RunOutcome], None]
#: A batch runner of ``LocalExecutor.session``: outcomes in the specs' order.
BatchFn = Callable[[Sequence[RunSpec], "OnOutcome | None"], Awaitable[list[RunOutcome]]]


class Executor(Protocol):
    """Runs ``specs`` at most ``jobs`` at a time; returns one outcome per spec (any order),
    calling ``progress`` (if given) as each finishes."""

    def __call__(
        self, specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
    ) -> Awaitable[list[RunOutcome]]: ...


def check_run_timeout(value: float | None) -> float | None:
    """``--run-timeout``: None (no limit) or finite seconds > 0 (ConfigError otherwise)."""
    if value is None:
        return None
    check_duration(value, "--run-timeout")
    if value > MAX_RUN_TIMEOUT_S:
        raise ConfigError(f"--run-timeout must be at most {MAX_RUN_TIMEOUT_S:.0f} seconds")
    return value


def scenario_arg(scenario: Scenario) -> str:
    """How a worker names ``scenario``: a built-in by id, any other pack by its folder."""
    return scenario.source


# -- one run in a child process -------------------------------------------------------------


async def _interrupt(process: Child, grace_s: float = STOP_GRACE_S) -> None:
    """Cancel a worker as Ctrl-C would, then wait for its cleanup (kill if it hangs); a
    second Ctrl-C of the caller is passed on (the worker then stops its services at once)."""
    process.send_signal(signal.SIGINT)
    forwarded = False
    with trio.move_on_after(grace_s):
        while True:
            with trio.move_on_after(0.1):
                await process.wait()
                return
            if _signals.hurrying() and not forwarded:
                process.send_signal(signal.SIGINT)
                forwarded = True
    process.kill()
    await process.wait()


async def _stop_timed_out(process: Child) -> None:
    """A run over its time: Ctrl-C (it cleans up and places its trace), a second one if it
    still runs (services stopped at once), then SIGKILL (its ``.partial`` stays)."""
    for sig in (signal.SIGINT, signal.SIGINT):
        if process.returncode is not None:
            return
        process.send_signal(sig)
        with trio.move_on_after(TIMEOUT_GRACE_S):
            await process.wait()
            return
    process.kill()
    await process.wait()
    from chaos.services.registry import collect_quietly

    collect_quietly()  # what the killed run registered and left


async def _read_all(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    async with stream:
        while chunk := await stream.receive_some(65536):
            into += chunk


def _trace_left(path: Path, exit_code: int, started_wall: float) -> Path | None:
    """The trace a run left: the placed file, else its ``.partial`` (killed mid-run)."""
    partial = path.with_name(path.name + ".partial")
    if exit_code in (EXIT_HELD, EXIT_VIOLATED) and path.is_file():
        return path
    for candidate in (partial, path):
        try:
            if candidate.is_file() and candidate.stat().st_mtime >= started_wall - 1.0:
                return candidate
        except OSError:
            continue
    return None


#: Exit codes of a ``chaos run`` stopped cleanly by SIGHUP, SIGINT or SIGTERM.
_STOPPED = {128 + int(s): s for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}


def _killed_by(returncode: int) -> str:
    if returncode in _STOPPED:
        return f"stopped by {_STOPPED[returncode].name}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


async def run_child(argv: list[str]) -> tuple[int, bytes, bytes]:
    """Run a ``chaos`` child to its end (no limit): exit code, stdout, stderr. Cancelled, it
    is interrupted as Ctrl-C would and waited for."""
    process = spawn(argv, stdout=PIPE, stderr=PIPE, start_new_session=True,
                    pdeathsig=signal.SIGTERM)  # fmt: skip
    stdout, stderr = bytearray(), bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_read_all, process.stdout, stdout)
        nursery.start_soon(_read_all, process.stderr, stderr)
        try:
            returncode = await process.wait()
        except BaseException:
            with trio.CancelScope(shield=True):
                await _interrupt(process)
            raise
    return returncode, bytes(stdout), bytes(stderr)


async def run_one(
    spec: RunSpec, run_timeout: float | None = None, concurrency: int | None = None
) -> RunOutcome:
    """One ``chaos run`` in a child process, its trace at ``spec.trace``; ``concurrency``:
    how many runs the batch keeps going at once (the run's trace records it with its load)."""
    started, started_wall = time.monotonic(), time.time()
    # Its own session: a terminal's Ctrl-C reaches the caller only, which then interrupts each
    # worker exactly once. SIGTERM if the caller dies: the worker cleans up and exits.
    env = {**os.environ, SWEEP_JOBS_ENV: str(concurrency)} if concurrency else None
    process = spawn(spec.argv(), stdout=PIPE, stderr=PIPE, start_new_session=True,
                    pdeathsig=signal.SIGTERM, env=env)  # fmt: skip
    stdout, stderr = bytearray(), bytearray()
    # The pipes are read to the end even while the caller is cancelled (shielded), so an
    # interrupted worker can still print; at most a second after it exits.
    readers = [trio.CancelScope(shield=True), trio.CancelScope(shield=True)]
    timed_out = False

    async def read(
        scope: trio.CancelScope, stream: trio.abc.ReceiveStream | None, into: bytearray
    ) -> None:
        with scope:
            await _read_all(stream, into)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read, readers[0], process.stdout, stdout)
        nursery.start_soon(read, readers[1], process.stderr, stderr)
        try:
            with trio.move_on_after(run_timeout if run_timeout is not None else float("inf")):
                await process.wait()
            if process.returncode is None:
                timed_out = True
                with trio.CancelScope(shield=True):
                    await _stop_timed_out(process)
            returncode = await process.wait()
        except BaseException:
            with trio.CancelScope(shield=True):
                await _interrupt(process)
            raise
        finally:
            for scope in readers:
                scope.deadline = trio.current_time() + 1.0
    outcome = RunOutcome(spec.seed, returncode, wall_s=time.monotonic() - started)
    outcome.worker = f"{socket.gethostname()} pid {process.pid}"
    outcome.trace = _trace_left(spec.trace, returncode, started_wall)
    if timed_out:
        outcome.timed_out = True
        outcome.exit_code = EXIT_HARNESS
        outcome.error = f"timed out after {run_timeout:g} s"
    elif returncode in (EXIT_HELD, EXIT_VIOLATED):
        try:
            outcome.result = json.loads(bytes(stdout))
        except ValueError:
            outcome.exit_code, outcome.error = EXIT_HARNESS, "the run printed no JSON verdict"
    elif returncode < 0 or returncode in _STOPPED:  # a signal nobody here sent: lost
        outcome.error = outcome.lost_worker = f"the worker was {_killed_by(returncode)}"
    else:
        lines = stderr.decode(errors="replace").strip().splitlines()
        outcome.error = lines[-1] if lines else f"exit code {returncode}"
        if returncode == EXIT_HARNESS:  # a graded run reports its error, and whether the
            report = _json_object(bytes(stdout))  # candidate had started, as JSON
            if report is not None:
                outcome.result = report
                outcome.error = str(report.get("error") or outcome.error)
    return outcome


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        found = json.loads(data)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


async def with_retries(
    attempt: Callable[[], Awaitable[RunOutcome]], retries: int = LOST_RETRIES
) -> RunOutcome:
    """``attempt()`` again while its worker is lost, at most ``retries`` more times; the
    outcome counts the attempts and lists each lost worker. Nothing else is retried."""
    lost: list[str] = []
    outcome = await attempt()
    while outcome.lost_worker:
        lost.append(outcome.lost_worker)
        if len(lost) > retries:
            outcome.exit_code = EXIT_HARNESS
            outcome.error = f"worker lost on all {len(lost)} attempts ({outcome.lost_worker})"
            break
        outcome = await attempt()
    outcome.attempts, outcome.lost = 1 + min(len(lost), retries), lost
    return outcome


def warm_request(spec: RunSpec) -> dict[str, Any]:
    """``spec`` as a warm worker's request line (``chaos.warm_worker``)."""
    request: dict[str, Any] = {"scenario": spec.scenario, "variant": spec.variant,
                               "seed": spec.seed, "out": str(spec.trace)}  # fmt: skip
    if spec.schedule is not None:
        request["schedule"] = spec.schedule
    if spec.candidate is not None:
        request["candidate"] = spec.candidate.to_dict()
    return request


def warm_outcome(
    spec: RunSpec, answer: Mapping[str, Any] | None, gone: str, started: float, started_wall: float
) -> RunOutcome:
    """A warm worker's ``answer`` to ``spec`` as an outcome, as ``run_one``'s would be; None:
    the worker ended before it answered (``gone`` says how), a lost worker."""
    wall = time.monotonic() - started
    if answer is None:
        outcome = RunOutcome(spec.seed, EXIT_HARNESS, wall_s=wall)
        outcome.error = outcome.lost_worker = gone
        outcome.trace = _trace_left(spec.trace, EXIT_HARNESS, started_wall)
        return outcome
    code = int(answer["exit_code"])
    outcome = RunOutcome(spec.seed, code, wall_s=wall)
    outcome.worker = f"{socket.gethostname()} warm worker pid {answer.get('pid', '?')}"
    outcome.trace = _trace_left(spec.trace, code, started_wall)
    if code in (EXIT_HELD, EXIT_VIOLATED):
        outcome.result = answer["verdict"]
    else:
        outcome.error = str(answer.get("error") or f"exit code {code}")
        if code == EXIT_HARNESS and isinstance(answer.get("verdict"), dict):
            outcome.result = answer["verdict"]  # a graded run's report: candidate_started
    return outcome


async def run_warm(pool: WarmPool, spec: RunSpec) -> RunOutcome:
    """One run on a warm worker of ``pool`` (``chaos.warm_pool``): the same outcome as
    ``run_one``; a worker that ended before it answered is a lost worker."""
    started, started_wall = time.monotonic(), time.time()
    try:
        answer: dict[str, Any] | None = await pool.run(warm_request(spec))
    except WorkerGone as exc:
        return warm_outcome(spec, None, str(exc), started, started_wall)
    return warm_outcome(spec, answer, "", started, started_wall)


def can_run_warm(specs: Sequence[RunSpec], wanted: bool | None, run_timeout: float | None) -> bool:
    """Whether ``specs`` run on warm workers: ``wanted`` (None: ``CHAOS_WARM``, default yes),
    no ``run_timeout`` (a cold run's child is what a timeout kills) and no run arguments."""
    wanted = warm.enabled() if wanted is None else wanted
    return wanted and run_timeout is None and not any(s.args for s in specs)


@dataclass
class LocalExecutor:
    """Runs on this machine, ``jobs`` at a time: on warm workers (``chaos.warm``: kept
    PostgreSQL and nats-server, a fresh database and stream per run; a graded run's candidate,
    ``RunSpec.candidate``, started fresh in its sandbox each run) unless ``warm`` is False,
    ``CHAOS_WARM=0``, a ``run_timeout`` is set or a spec carries run arguments (``args``);
    otherwise one cold ``chaos run`` child per run."""

    run_timeout: float | None = None
    retries: int = LOST_RETRIES
    warm: bool | None = None
    kind: str = field(default="local", init=False)
    #: Whether the last batch ran on warm workers.
    used_warm: bool | None = field(default=None, init=False)
    #: The open session's warm pool (None: none open, or cold runs).
    pool: WarmPool | None = field(default=None, init=False)

    def warm_for(self, specs: Sequence[RunSpec]) -> bool:
        return can_run_warm(specs, self.warm, self.run_timeout)

    async def __call__(
        self, specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
    ) -> list[RunOutcome]:
        async with self.session(jobs, warm_pool=self.warm_for(specs)) as run_batch:
            return await run_batch(specs, progress)

    @asynccontextmanager
    async def session(
        self, jobs: int, *, warm_pool: bool, pool_size: int | None = None
    ) -> AsyncIterator[BatchFn]:
        """Batches one after another on the same workers: ``await run_batch(specs, progress)``
        runs ``specs`` ``jobs`` at a time and returns their outcomes in the specs' order. With
        ``warm_pool``, the warm workers (and their servers) are kept between batches; a batch
        whose specs cannot run warm (``warm_for``) then runs cold, as ``__call__`` would.
        ``pool_size``: at most that many warm workers (default ``jobs``), shared by batches
        that run at once, each ``jobs`` (or its own ``jobs=``) at a time."""
        if jobs < 1:
            raise ConfigError(f"jobs must be >= 1, got {jobs}")
        pools = None
        if warm_pool:  # a shared pool's runs record no one batch's concurrency
            pools = open_warm_pool(pool_size or jobs, concurrency=None if pool_size else jobs)

        async with pools if pools is not None else nullcontext() as pool:
            self.pool = pool

            async def run_batch(
                specs: Sequence[RunSpec], progress: OnOutcome | None = None, *,
                jobs: int = jobs,
            ) -> list[RunOutcome]:  # fmt: skip
                limiter = trio.CapacityLimiter(jobs)
                outcomes: list[RunOutcome | None] = [None] * len(specs)
                on_warm = pool if pool is not None and self.warm_for(specs) else None
                self.used_warm = on_warm is not None

                async def one(index: int, spec: RunSpec) -> None:
                    async def attempt() -> RunOutcome:
                        if on_warm is not None:
                            return await run_warm(on_warm, spec)
                        return await run_one(spec, self.run_timeout, jobs)

                    async with limiter:
                        outcome = await with_retries(attempt, self.retries)
                    outcomes[index] = outcome
                    if progress is not None:
                        progress(outcome)

                async with trio.open_nursery() as nursery:
                    for index, spec in enumerate(specs):
                        nursery.start_soon(one, index, spec)
                return [o for o in outcomes if o is not None]

            yield run_batch

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_timeout_s": self.run_timeout, "warm": self.used_warm}


def executor_run(execute: Executor, scenario: str) -> Any:
    """A ``chaos.validate.RunVariantFn`` that dispatches each run through ``execute`` (one spec at
    a time, as validate asks): what ``chaos validate --ray`` / ``--run-timeout`` runs on.
    ``faults=False`` is ``chaos run --no-faults``; the run's events are read back from its
    trace when ``Observed`` keeps them (validate's signal checks)."""
    from dataclasses import fields

    from chaos.validate import Observed
    from replay.trace import read_trace

    keeps_events = "events" in {f.name for f in fields(Observed)}

    async def run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        args = () if faults else ("--no-faults",)
        spec = RunSpec(scenario, seed, args, out.parent, variant, trace_name=out.name)
        [outcome] = await execute([spec], 1)
        trace = outcome.trace or out
        if outcome.exit_code not in (EXIT_HELD, EXIT_VIOLATED) or outcome.result is None:
            return Observed(trace, error=outcome.error or f"exit code {outcome.exit_code}")
        verdicts = {v["name"]: v.get("valid") for v in outcome.result.get("verdicts", [])}
        settled = bool(outcome.result.get("settled", True))
        if not keeps_events:
            return Observed(trace, verdicts, settled)
        events = await trio.to_thread.run_sync(lambda: read_trace(trace).events)
        return Observed(trace, verdicts, settled, events=events)  # type: ignore[call-arg,unused-ignore]

    return run


def executor_replay(execute: Executor, scenario: str | None = None) -> Any:
    """A ``chaos.validate.ReplayFn`` that replays on the executor when it can (Ray: the
    trace's bytes go to a worker, the replays' traces come back beside the original); None
    when it cannot (validate then replays in its own process). ``scenario``: the pack to
    replay with (``chaos replay --scenario``; default: the one the trace names)."""
    replay = getattr(execute, "replay", None)
    if replay is None:
        return None
    from chaos.validate import Observed

    async def run(trace: Path, times: int) -> list[Observed]:
        return [
            Observed(Path(r["trace"]), r["verdicts"], True, r["error"])
            for r in await replay(trace, times, scenario=scenario)
        ]

    return run


__all__ = [
    "LOST_RETRIES",
    "Executor",
    "LocalExecutor",
    "OnOutcome",
    "RunOutcome",
    "RunSpec",
    "check_run_timeout",
    "executor_replay",
    "executor_run",
    "run_one",
    "scenario_arg",
    "with_retries",
]
