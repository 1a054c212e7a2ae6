"""Benchmark: three engines side by side from each pack's golden fault space.

For every defective variant of every built-in pack (read from the registry, so a variant or
pack added later is measured too), in one run, counting only the invariant the pack says
catches the variant (``Scenario.catches``; any invariant when it declares none):

- search: ``search_schedules`` over the pack's **golden** space (not the variant's own),
  ``--jobs`` runs at a time on warm workers as ``chaos search`` runs them: runs and wall
  seconds until the first violation (every batch up to and including the one that found
  it, the workers' start included), then the shrunk schedule's size and whether shrinking
  ended at a fixed point or at its budget; necessity: each event left is run once more
  without it (one batch): needed when that run holds;
- given: Hypothesis's ``@given`` over ``chaos.hypothesis.schedules`` of the golden space (the
  strategy a pytest user writes), one run per example on an in-process warm floor
  (``chaos.floor``, as the pytest plugin's ``env.run``), each distinct schedule run once:
  runs and seconds to the first violation, the shrunk schedule's size, runs spent
  shrinking;
- machine: a ``chaos.hypothesis.ChaosMachine`` of the variant with the golden space's rules,
  one live run per example on the same floor: the same four numbers, the shrunk size being
  the faults of the final (shrunk) failing example;
- sweep (``--sweep-seeds 0`` skips it): ``chaos run``'s own draw, ``generate(golden, seed)``
  for seeds 0, 1, 2, ... with the run seed equal to the schedule seed, one at a time in this
  process, until the first violation of the same invariant.

Budgets: search ``--max-examples`` / ``--max-shrinks`` (runs); given ``--given-examples``,
machine ``--machine-examples`` examples of at most ``--machine-steps`` steps; both
Hypothesis engines shrink until Hypothesis stops or ``--shrink-seconds`` pass (its own
shrinking time limit, 300 s, shortened here: an internal constant of Hypothesis's engine,
set by this script only). ``--example-cost N`` also measures what one ``env.run`` example
costs: N payments runs on a warm floor against N on a cold one.

Several search seeds (``--search-seeds A-B``): the search engine searches each variant once per
seed (each as its own ``chaos search``: its workers' start counted in its seconds); a table
then gives, per variant, each seed's runs/seconds to the first violation, the median and max
over the seeds (a miss counts as longer than any find), and whether every seed found it
within ``--max-examples``; the three-engine table shows the first seed. ``--max-shrinks 0``
measures the find only: no shrinking, no necessity runs.

Under load (``--stress``): one busy loop per CPU (``chaos.stress.open_stress``) beside the
bench for its whole life; the bench prints the load before them, after each search (the
line printed as it ends) and the 1-minute load average sampled every 15 s (min, median, max).

Targets (docs/search.md): median seconds to the first violation < 60, shrunk schedules of at
most 2 events, every event left needed; under ``--stress``, every variant found within 200
runs by every search seed, median over the seeds < 60 s. Numbers depend on the machine's
load: say so when quoting them. Usage:

    python bench/search.py [--jobs 8] [--max-examples 200] [--max-shrinks 40]
                           [--search-seeds 0-4] [--stress]
                           [--engines search,given,machine] [--given-examples 40]
                           [--machine-examples 25] [--machine-steps 6] [--shrink-seconds 120]
                           [--example-cost 0] [--sweep-seeds 0] [--packs payments,leases]
                           [--variants no-fencing] [--seed 0] [--sweep-from 0]
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NoReturn

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import trio
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.internal.conjecture import engine as hypothesis_engine
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from chaos.floor import RunFloor
from chaos.hypothesis import ChaosMachine
from chaos.hypothesis._strategy import space_schedules
from chaos.run import RunOptions, run_scenario
from chaos.scenario import Scenario, builtin_scenarios, load_scenario
from chaos.search import (
    DEFAULT_JOBS,
    DEFAULT_MAX_EXAMPLES,
    DEFAULT_MAX_SHRINKS,
    Outcome,
    search_schedules,
    violations,
)
from chaos.search_scenario import (
    Session,
    _from_trio,
    _on_executor,
    _ScenarioRuns,
    applied_faults,
)
from chaos.services import open_run_dir
from chaos.services.images import daemon_available
from chaos.stress import cpu_count, open_stress
from faults._draw import assemble
from faults.model import FaultSchedule
from faults.schedule import generate
from faults.space import FaultSpace
from ground import _signals
from ground.errors import ChaosError

#: The target (docs/search.md): each variant found within this many seconds (median).
TARGET_S = 60.0


@dataclass
class Engine:
    """What one engine did on one variant: the find, then the shrink."""

    runs: int | None = None  # runs up to and including the first violating one
    seconds: float | None = None  # wall seconds to the first violation
    shrunk: int | None = None  # events (faults) of the minimal violating schedule
    shrink_runs: int = 0
    complete: bool = True  # shrinking ended on its own, not at its budget
    schedule: str = ""
    ran: bool = False
    error: str = ""  # a harness error stopped it (the bench goes on with the next engine)


@dataclass
class SearchTry:
    """One search seed's search of one variant."""

    seed: int
    runs: int | None = None  # runs up to and including the first violating one
    seconds: float | None = None  # wall seconds to the first violation (workers' start too)
    tried: int = 0  # runs spent drawing (the budget when nothing was found)
    spent: float = 0.0  # wall seconds of the whole search of this seed
    shrunk: int | None = None  # events of the shrunk schedule (None: not shrunk)
    shrink_runs: int = 0
    complete: bool = True
    needed: str = "-"
    schedule: str = ""
    error: str = ""


@dataclass
class Row:
    pack: str
    variant: str
    invariant: str
    searches: list[SearchTry] = field(default_factory=list)
    sweep_runs: int | None = None
    sweep_s: float | None = None
    given: Engine = field(default_factory=Engine)
    machine: Engine = field(default_factory=Engine)

    @property
    def search(self) -> SearchTry:
        """The first search seed's try (the three-engine table shows it)."""
        return self.searches[0] if self.searches else SearchTry(-1)


def one_run(
    scenario: Scenario, variant: str, schedule: FaultSchedule, out: Path
) -> tuple[Outcome, float]:
    start = time.monotonic()
    options = RunOptions(scenario, schedule.seed, variant=variant, out=out, schedule=schedule)
    result = _signals.run(run_scenario, options)
    out.unlink(missing_ok=True)
    outcome = Outcome(tuple(result.verdicts), applied_faults(result.history))
    return outcome, time.monotonic() - start


def describe(schedule: FaultSchedule) -> str:
    parts = []
    for e in schedule.events:
        trigger = e.trigger.model_dump()
        kind = trigger.pop("type")
        where = ",".join(f"{v}" for v in trigger.values())
        lasting = "" if e.duration_s is None else f" {e.duration_s}s"
        parts.append(f"{e.kind.value} {e.target.name} @{kind}({where}){lasting}")
    return "; ".join(parts)


def measure(
    scenario: Scenario,
    variant: str,
    space: FaultSpace,
    args: argparse.Namespace,
    tmp: Path,
    floor: RunFloor,
) -> Row:
    tmp = tmp / f"{scenario.id}-{variant}"
    tmp.mkdir()
    invariant = scenario.catches.get(variant)
    row = Row(scenario.id, variant, invariant or "any")
    where = f"{scenario.id} {variant}"
    if "search" in args.engines:
        for search_seed in args.search_seeds:
            attempt = SearchTry(search_seed)
            row.searches.append(attempt)
            attempt.error = harness_error(
                partial(measure_search, scenario, variant, space, invariant, args, tmp, attempt)
            )
            said(f"{where} search seed {search_seed}", found_at(attempt, args), attempt.error)
    if "given" in args.engines:
        row.given.error = harness_error(
            lambda: setattr(
                row, "given", measure_given(scenario, variant, space, invariant, floor, args, tmp)
            )
        )
        said(f"{where} given", row.given.schedule, row.given.error)
    if "machine" in args.engines:
        row.machine.error = harness_error(
            lambda: setattr(
                row, "machine", measure_machine(scenario, variant, invariant, floor, args, tmp)
            )
        )
        said(f"{where} machine", row.machine.schedule, row.machine.error)
    measure_sweep(scenario, variant, space, invariant, args, tmp, row)
    return row


def harness_error(measure: Callable[[], object]) -> str:
    """Run one engine's measurement; the one line of a harness error that stopped it."""
    try:
        measure()
    except ChaosError as exc:
        return str(exc).splitlines()[0]
    except BaseExceptionGroup as group:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        if not isinstance(first, ChaosError):
            raise
        return str(first).splitlines()[0]
    return ""


def said(what: str, schedule: str, error: str) -> None:
    """One engine's outcome, as soon as it is known (a later failure loses nothing)."""
    print(f"  {what}: " + (f"harness error: {error}" if error else f"[{schedule or 'none'}]"),
          flush=True)  # fmt: skip


def found_at(attempt: SearchTry, args: argparse.Namespace) -> str:
    """A search try's find, its time and the load then, for the line printed as it ends."""
    load = f"load {os.getloadavg()[0]:.1f}"
    if attempt.runs is None or attempt.seconds is None:
        return f"none in {attempt.tried} runs, {attempt.spent:.1f} s; {load}"
    shrunk = "not shrunk" if args.max_shrinks == 0 else "shrunk"
    return f"found at run {attempt.runs}, {attempt.seconds:.1f} s; {load}; {shrunk}: " + (
        attempt.schedule
    )


def measure_search(
    scenario: Scenario,
    variant: str,
    space: FaultSpace,
    invariant: str | None,
    args: argparse.Namespace,
    tmp: Path,
    attempt: SearchTry,
) -> None:
    """Search with ``attempt.seed``; ``--max-shrinks 0``: the find only (no shrink, no
    necessity runs)."""
    progress = print if args.verbose else (lambda _message: None)
    called = time.monotonic()

    def body(session: Session) -> None:
        workers_s = time.monotonic() - called  # the warm workers' start, before any batch
        said = _from_trio(progress)
        runs = _ScenarioRuns(scenario, variant, attempt.seed, tmp, progress, session)
        result = search_schedules(
            space,
            seed=attempt.seed,
            invariant=invariant,
            max_examples=args.max_examples,
            max_shrinks=args.max_shrinks,
            progress=said,
            jobs=args.jobs,
            run_many=runs,
            lanes=None if args.batches else runs,  # as chaos search does, unless --batches
        )
        attempt.spent = time.monotonic() - called
        if not result.found or result.schedule is None:
            attempt.tried = result.tried
            return
        attempt.runs = attempt.tried = result.runs_to_find
        assert result.find_s is not None
        attempt.seconds = workers_s + result.find_s
        attempt.schedule = describe(result.schedule)
        if args.max_shrinks == 0:
            return
        attempt.shrunk = len(result.schedule.events)
        attempt.shrink_runs = result.shrink_runs
        attempt.complete = result.shrink_complete
        events = list(result.schedule.events)
        without = [
            assemble(space, result.schedule.seed, events[:index] + events[index + 1 :])
            for index in range(len(events))
        ]
        outcomes = runs(without)
        needed = sum(not violations(o.verdicts, invariant) for o in outcomes)
        attempt.needed = f"{needed}/{len(events)}"

    _on_executor(scenario, args.jobs, body)


def measure_sweep(
    scenario: Scenario,
    variant: str,
    space: FaultSpace,
    invariant: str | None,
    args: argparse.Namespace,
    tmp: Path,
    row: Row,
) -> None:
    spent = 0.0
    first = args.sweep_from
    for count, sweep_seed in enumerate(range(first, first + args.sweep_seeds), 1):
        schedule = generate(space, sweep_seed)
        trace = tmp / f"sweep-{sweep_seed}.trace"
        outcome, seconds = one_run(scenario, variant, schedule, trace)
        spent += seconds
        if violations(outcome.verdicts, invariant):
            row.sweep_runs, row.sweep_s = count, spent
            break


QUIET = list(HealthCheck)


def measure_given(
    scenario: Scenario,
    variant: str,
    space: FaultSpace,
    invariant: str | None,
    floor: RunFloor,
    args: argparse.Namespace,
    tmp: Path,
) -> Engine:
    """``@given(schedules(golden))`` with a run per distinct schedule, as ``env.run``."""
    result = Engine(ran=True)
    seen: dict[bytes, bool] = {}
    failing: list[FaultSchedule] = []
    harness: list[BaseException] = []
    started = time.monotonic()

    def violates(schedule: FaultSchedule) -> bool:
        key = schedule.to_msgpack()
        if key not in seen:
            trace = tmp / f"given-{len(seen) + 1}.trace"
            options = RunOptions(
                scenario, schedule.seed, variant=variant, out=trace, schedule=schedule
            )
            try:
                done = floor.run(options)
            except ChaosError as exc:
                harness.append(exc)
                raise
            trace.unlink(missing_ok=True)
            seen[key] = bool(violations(done.verdicts, invariant))
            if seen[key] and result.runs is None:
                result.runs, result.seconds = len(seen), time.monotonic() - started
        return seen[key]

    @seed(args.seed)
    @settings(
        max_examples=args.given_examples,
        deadline=None,
        database=None,
        suppress_health_check=QUIET,
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,  # stop drawing at the first violation, as search does
    )
    @given(space_schedules(space, args.seed))
    def each_example(schedule: FaultSchedule) -> None:
        if violates(schedule):
            failing.append(schedule)
            raise AssertionError("violated")

    result.complete = run_quietly(each_example)
    if harness:
        raise harness[0]
    if failing and result.runs is not None:
        minimal = failing[-1]  # Hypothesis runs the minimal example last, to report it
        result.shrunk, result.schedule = len(minimal.events), describe(minimal)
        result.shrink_runs = len(seen) - result.runs
    return result


def run_quietly(test: Callable[[], None]) -> bool:
    """Run a Hypothesis test to its end (a failure is what it is for); False when its
    shrinking stopped at the time limit (Hypothesis says so in its report)."""
    said: list[str] = []
    with with_reporter(lambda message: said.append(str(message))):
        try:
            test()
        except AssertionError:
            pass
    return not any("shrink" in line and "stopped" in line for line in said)


def measure_machine(
    scenario: Scenario,
    variant: str,
    invariant: str | None,
    floor: RunFloor,
    args: argparse.Namespace,
    tmp: Path,
) -> Engine:
    """A ``ChaosMachine`` of ``variant`` with the golden space's rules: a live run each."""
    result = Engine(ran=True)
    examples: list[tuple[bool, int]] = []  # (failed, faults) of each example that ran
    started = time.monotonic()

    def teardown(self: ChaosMachine) -> None:
        ran = self._held is not None
        try:
            ChaosMachine.teardown(self)
        except AssertionError:
            examples.append((True, len(self.live.faults)))
            if result.runs is None:
                result.runs, result.seconds = len(examples), time.monotonic() - started
            result.schedule = describe(self.live.schedule())
            raise
        if ran:
            examples.append((False, len(self.live.faults)))

    machine = type(
        f"Bench_{scenario.id}_{variant}".replace("-", "_"),
        (ChaosMachine,),
        {
            "scenario": scenario,
            "variant": variant,
            "space": "golden",
            "final_invariants": None if invariant is None else (invariant,),
            "trace_dir": tmp / "machine",
            "floor": floor,
            "teardown": teardown,
        },
    )
    configured = settings(
        max_examples=args.machine_examples,
        stateful_step_count=args.machine_steps,
        deadline=None,
        database=None,
        suppress_health_check=QUIET,
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    result.complete = run_quietly(
        lambda: run_state_machine_as_test(seed(args.seed)(machine), settings=configured)
    )
    if result.runs is not None:
        result.shrunk = examples[-1][1]  # the final example is the shrunk one, replayed
        result.shrink_runs = len(examples) - result.runs
    return result


def example_cost(count: int, tmp: Path) -> str:
    """Seconds per ``env.run`` example, payments, on a warm floor and on a cold one."""
    scenario = load_scenario("payments")
    space = scenario.fault_space("golden")
    lines = []
    means = {}
    for warm in (True, False):
        with RunFloor(warm=warm) as floor:
            floor.run(RunOptions(scenario, 0, out=tmp / "first.trace"))  # starts the floor
            spent = []
            for i in range(count):
                schedule = generate(space, i)
                started = time.monotonic()
                floor.run(RunOptions(scenario, i, out=tmp / f"cost-{i}.trace", schedule=schedule))
                spent.append(time.monotonic() - started)
                (tmp / f"cost-{i}.trace").unlink(missing_ok=True)
            name = "warm" if warm else "cold"
            means[name] = statistics.mean(spent)
            lines.append(
                f"{name}: mean {means[name]:.2f} s, median {statistics.median(spent):.2f} s, "
                f"min {min(spent):.2f} s over {count} runs (generate(golden, 0..{count - 1}))"
            )
    lines.append(f"warm / cold: {means['warm'] / means['cold']:.2f}")
    return "\n".join(lines)


def fmt(value: float | int | None, width: int, miss: str) -> str:
    if value is None:
        return f"{miss:>{width}}"
    if isinstance(value, float):
        return f"{value:>{width}.1f}"
    return f"{value:>{width}}"


def engine_cells(engine: Engine, budget: str) -> str:
    if engine.error:
        return f"{'error':>5} {'-':>6} {'-':>6} {'-':>6}"
    if not engine.ran:
        return f"{'-':>5} {'-':>6} {'-':>6} {'-':>6}"
    shrunk = "-" if engine.shrunk is None else f"{engine.shrunk}{'' if engine.complete else '*'}"
    return (
        f"{fmt(engine.runs, 5, budget)} {fmt(engine.seconds, 6, '-')} {shrunk:>6} "
        f"{engine.shrink_runs:>6}"
    )


def table(rows: Sequence[Row], args: argparse.Namespace) -> str:
    miss_search = f">{args.max_examples}" if "search" in args.engines else "-"
    miss_sweep = f">{args.sweep_seeds}" if args.sweep_seeds else "-"
    engine_head = f"{'runs':>5} {'s':>6} {'shrunk':>6} {'shrink':>6}"
    head = (
        f"{'pack':<9} {'variant':<26} {'invariant':<17} | search {engine_head} {'needed':>6} "
        f"| given {engine_head} | machine {engine_head} | {'sweep':>5} {'s':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        first = r.search
        search = Engine(first.runs, first.seconds, first.shrunk, first.shrink_runs,
                        first.complete, ran="search" in args.engines,
                        error=first.error)  # fmt: skip
        lines.append(
            f"{r.pack:<9} {r.variant:<26} {r.invariant:<17} | "
            f"       {engine_cells(search, miss_search)} {first.needed:>6} | "
            f"      {engine_cells(r.given, f'>{args.given_examples}')} | "
            f"        {engine_cells(r.machine, f'>{args.machine_examples}')} | "
            f"{fmt(r.sweep_runs, 5, miss_sweep)} {fmt(r.sweep_s, 6, '-')}"
        )
    return "\n".join(lines)


def seed_cell(attempt: SearchTry, budget: int) -> str:
    """``runs/seconds`` to the first violation; ``>budget/seconds spent`` when none."""
    if attempt.error:
        return "error"
    if attempt.runs is None:
        return f">{budget}/{attempt.spent:.0f}"
    return f"{attempt.runs}/{attempt.seconds or 0.0:.1f}"


def spread_table(rows: Sequence[Row], args: argparse.Namespace) -> str:
    """Per variant, each search seed's runs/seconds to the first violation, then the median
    and max over the seeds (a miss counts as longer than any find) and whether every seed
    found it within ``--max-examples``."""
    seeds = args.search_seeds
    head = (
        f"{'pack':<15} {'variant':<26} "
        + " ".join(f"{'seed ' + str(s):>11}" for s in seeds)
        + f" | {'med runs':>8} {'med s':>6} {'max s':>6} | all found"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        tries = r.searches
        runs = [float("inf") if t.runs is None else float(t.runs) for t in tries]
        secs = [float("inf") if t.seconds is None else t.seconds for t in tries]
        all_found = all(t.runs is not None for t in tries)
        med_runs, med_s = statistics.median(runs), statistics.median(secs)
        lines.append(
            f"{r.pack:<15} {r.variant:<26} "
            + " ".join(f"{seed_cell(t, args.max_examples):>11}" for t in tries)
            + f" | {'miss' if med_runs == float('inf') else f'{med_runs:g}':>8} "
            f"{'miss' if med_s == float('inf') else f'{med_s:.1f}':>6} "
            f"{'miss' if not all_found else f'{max(secs):.1f}':>6} | "
            + ("yes" if all_found else f"no ({sum(t.runs is None for t in tries)} missed)")
        )
    return "\n".join(lines)


def spread_verdict(rows: Sequence[Row], args: argparse.Namespace) -> list[str]:
    """The target, read from the tries: every seed finds every variant within the budget,
    each variant's median over its seeds under ``TARGET_S``."""
    missed = [f"{r.pack} {r.variant}" for r in rows if any(t.runs is None for t in r.searches)]
    slow = []
    for r in rows:
        secs = [float("inf") if t.seconds is None else t.seconds for t in r.searches]
        if secs and statistics.median(secs) >= TARGET_S:
            slow.append(f"{r.pack} {r.variant}")
    every = [t.seconds for r in rows for t in r.searches]
    return [
        f"every variant found by every search seed within {args.max_examples} runs: "
        + ("yes" if not missed else f"no (missed by a seed: {', '.join(missed)})"),
        f"median over seeds under {TARGET_S:g} s for every variant: "
        + ("yes" if not slow else f"no ({', '.join(slow)})"),
        f"over all {len(every)} searches: median {median_s(every)}, "
        f"found {sum(s is not None for s in every)} of {len(every)}",
    ]


def median_s(values: Sequence[float | None]) -> str:
    """The median, counting a miss as longer than any find (inf)."""
    if not values:
        return "-"
    middle = statistics.median([float("inf") if v is None else v for v in values])
    return "not found by half" if middle == float("inf") else f"{middle:.1f} s"


@contextmanager
def stressed(n: int) -> Iterator[list[int]]:
    """``n`` busy loops (``chaos.stress.open_stress``) for the block's life, held by a trio
    loop on a thread of their own that lives as long as the block (their parent-death
    signal follows the thread that forked them); yields their pids. 0: none."""
    if n == 0:
        yield []
        return
    started: queue.Queue[list[int] | BaseException] = queue.Queue()
    stop = threading.Event()

    async def hold() -> None:
        async with open_stress(n) as pids:
            started.put(pids)
            await trio.to_thread.run_sync(stop.wait)

    def thread_main() -> None:
        try:
            trio.run(hold)
        except BaseException as exc:  # handed to the bench's thread
            started.put(exc)

    thread = threading.Thread(target=thread_main, name="bench-stress", daemon=True)
    thread.start()
    got = started.get()
    try:
        if isinstance(got, BaseException):
            raise got
        yield got
    finally:
        stop.set()
        thread.join()


class LoadSampler:
    """The 1-minute load average every ``every`` seconds while the bench runs."""

    def __init__(self, every: float = 15.0) -> None:
        self.every, self.samples = every, [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-load", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def line(self) -> str:
        values = self.samples
        return (
            f"1-min load average over the bench ({len(values)} samples, every "
            f"{self.every:g} s): min {min(values):.2f}, median {statistics.median(values):.2f}, "
            f"max {max(values):.2f}"
        )


def seed_range(text: str) -> list[int]:
    """``A-B`` (both included) or ``A``: the search seeds; ValueError when neither."""
    first, dash, last = text.partition("-")
    low = int(first)
    high = int(last) if dash else low
    if not 0 <= low <= high or high - low >= 100:
        raise ValueError(text)
    return list(range(low, high + 1))


class _Parser(argparse.ArgumentParser):
    """Bad input: one line on stderr, exit 2 (the project's rule), no usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"bench/search.py: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main() -> None:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="runs side by side")
    parser.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES)
    parser.add_argument("--max-shrinks", type=int, default=DEFAULT_MAX_SHRINKS)
    parser.add_argument("--sweep-seeds", type=int, default=0, help="0: no sweep baseline")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the search seed, and Hypothesis's seed (given, machine)",
    )
    parser.add_argument(
        "--search-seeds",
        default="",
        help="A-B: search each variant with each seed A..B (default: --seed)",
    )
    parser.add_argument(
        "--stress",
        action="store_true",
        help="busy loops beside the bench, one per CPU (chaos.stress)",
    )
    parser.add_argument("--sweep-from", type=int, default=0, help="the sweep's first seed")
    parser.add_argument("--packs", default="", help="comma-separated (default: every built-in)")
    parser.add_argument("--variants", default="", help="comma-separated (default: all)")
    parser.add_argument("--engines", default="search,given,machine",
                        help="comma-separated: search, given, machine")  # fmt: skip
    parser.add_argument("--given-examples", type=int, default=40)
    parser.add_argument("--machine-examples", type=int, default=25)
    parser.add_argument("--machine-steps", type=int, default=6)
    parser.add_argument("--shrink-seconds", type=float, default=120.0,
                        help="Hypothesis's shrinking time limit (its own: 300)")  # fmt: skip
    parser.add_argument("--example-cost", type=int, default=0,
                        help="also time N env.run examples, warm floor against cold")  # fmt: skip
    parser.add_argument(
        "--batches",
        action="store_true",
        help="find in batches of --jobs runs (before lanes), to compare",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    args.engines = {e for e in args.engines.split(",") if e}
    if not args.engines <= {"search", "given", "machine"}:
        parser.error("--engines takes search, given, machine")
    hypothesis_engine.MAX_SHRINKING_SECONDS = args.shrink_seconds
    packs = [p for p in args.packs.split(",") if p] or builtin_scenarios()
    wanted = {v for v in args.variants.split(",") if v}
    if not 1 <= args.jobs <= 64 or args.sweep_seeds < 0:
        parser.error("--jobs must be between 1 and 64 and --sweep-seeds >= 0")
    if not 1 <= args.max_examples <= 1000 or not 0 <= args.max_shrinks <= 500:
        parser.error("--max-examples must be 1 to 1000 and --max-shrinks 0 to 500")
    try:
        args.search_seeds = seed_range(args.search_seeds) if args.search_seeds else [args.seed]
    except ValueError:
        parser.error(f"--search-seeds takes A-B or A (0 <= A <= B, at most 100 seeds), "
                     f"got {args.search_seeds!r}")  # fmt: skip
    rows: list[Row] = []
    load = os.getloadavg()
    started = time.monotonic()
    loops = cpu_count() if args.stress else 0
    with (
        stressed(loops) as hogs,
        LoadSampler() as sampler,
        open_run_dir(prefix="chaos-bench-search-", parent=Path(tempfile.gettempdir())) as tmp,
        RunFloor() as floor,
    ):
        if args.stress:
            print(f"--stress: {loops} busy loops beside the bench (one per CPU; pids "
                  f"{' '.join(map(str, hogs))}); load average before them {load[0]:.2f} "
                  f"(1 min)", flush=True)  # fmt: skip
        if args.example_cost:
            print(example_cost(args.example_cost, tmp), flush=True)
        for pack in packs:
            scenario = load_scenario(pack)
            if scenario.images and (why := daemon_available()) is not None:
                print(f"skipped pack {pack}: its runs need Docker ({why})", flush=True)
                continue
            space = scenario.fault_space("golden")
            for variant in scenario.variants:
                if variant == "golden" or (wanted and variant not in wanted):
                    continue
                row = measure(scenario, variant, space, args, tmp, floor)
                rows.append(row)
                print(table([row], args).splitlines()[-1], flush=True)
                if len(args.search_seeds) > 1 and "search" in args.engines:
                    print(spread_table([row], args).splitlines()[-1], flush=True)
    print()
    if len(args.search_seeds) > 1 and "search" in args.engines:
        seeds = args.search_seeds
        print(
            f"search over seeds {seeds[0]}-{seeds[-1]} from each pack's golden space "
            f"(--jobs {args.jobs}, --max-examples {args.max_examples}, --max-shrinks "
            f"{args.max_shrinks}{', beside ' + str(loops) + ' busy loops' if loops else ''}): "
            f"runs/seconds to the first violation, >N/s: not found in N runs, s spent"
        )
        print(spread_table(rows, args))
        print("\n".join(spread_verdict(rows, args)))
        print()
    print(
        f"three engines from each pack's golden space (seed {args.search_seeds[0]}; search: "
        f"--jobs {args.jobs}, --max-examples {args.max_examples}, "
        f"--max-shrinks {args.max_shrinks}; given: {args.given_examples} examples; machine: "
        f"{args.machine_examples} examples of <= {args.machine_steps} steps; Hypothesis "
        f"shrinks <= {args.shrink_seconds:g} s; "
        + (
            f"sweep seeds {args.sweep_from}-{args.sweep_from + args.sweep_seeds - 1}); "
            if args.sweep_seeds
            else "no sweep); "
        )
        + "* = shrinking stopped at its budget"
    )
    print(table(rows, args))
    medians = {
        "search": [r.search.seconds for r in rows],
        "given": [r.given.seconds for r in rows],
        "machine": [r.machine.seconds for r in rows],
    }
    print(
        "median seconds to the first violation: "
        + ", ".join(f"{name} {median_s(medians[name])}" for name in medians if name in args.engines)
        + f", sweep {median_s([r.sweep_s for r in rows]) if args.sweep_seeds else 'not run'}"
    )
    sizes = [r.search.shrunk for r in rows if r.search.shrunk is not None]
    needed = all(
        t.needed.split("/")[0] == t.needed.split("/")[-1]
        for r in rows
        for t in r.searches
        if t.shrunk
    )
    if args.max_shrinks and "search" in args.engines:
        print(
            f"shrunk schedules: search {len(sizes)} of {len(rows)} found, sizes {sizes}; "
            f"all needed: {needed}"
        )
    for name in [e for e in ("given", "machine") if e in args.engines]:
        engines = [getattr(r, name) for r in rows]
        made = [e.shrunk for e in engines if e.shrunk is not None]
        print(f"shrunk: {name} {len(made)} of {len(rows)} found, sizes {made}, shrink runs "
              f"{[e.shrink_runs for e in engines if e.shrunk is not None]}")  # fmt: skip
    print(f"bench wall time {time.monotonic() - started:.0f} s; load average at the start "
          f"{load[0]:.2f}, at the end {os.getloadavg()[0]:.2f} (1 min); "
          f"{'--stress: ' + str(loops) + ' busy loops' if loops else 'no stress'}; "
          f"{cpu_count()} cpu(s)")  # fmt: skip
    print(sampler.line())


if __name__ == "__main__":
    main()
