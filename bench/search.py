"""Benchmark: `chaos search` from each pack's golden fault space against a plain seed sweep.

For every defective variant of every built-in pack (read from the registry, so a variant or
pack added later is measured too), in one run:

- search: ``search_schedules`` over the pack's **golden** space (not the variant's own),
  counting only the invariant the pack says catches the variant (``Scenario.catches``; any
  invariant when it declares none), ``--jobs`` runs at a time on warm workers as ``chaos
  search`` runs them: runs and wall seconds until the first violation (every batch up to
  and including the one that found it, the workers' start included), then the shrunk
  schedule's size and whether shrinking ended at a fixed point or at its budget;
- necessity: each event left in the shrunk schedule is run once more without it (one
  batch); it is needed when that run holds (an irrelevant event would still violate);
- sweep (``--sweep-seeds 0`` skips it): ``chaos run``'s own draw, ``generate(golden, seed)``
  for seeds 0, 1, 2, ... with the run seed equal to the schedule seed, one at a time in this
  process, until the first violation of the same invariant.

Targets (docs/search.md): median seconds to the first violation < 60, shrunk schedules of at
most 2 events, every event left needed. Numbers depend on the machine's load: say so when
quoting them. Usage:

    python bench/search.py [--jobs 8] [--max-examples 200] [--max-shrinks 40]
                           [--sweep-seeds 0] [--packs payments,leases]
                           [--variants no-fencing] [--seed 0] [--sweep-from 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

from chaos import _signals
from chaos.executor import BatchFn
from chaos.run import RunOptions, run_scenario
from chaos.scenario import Scenario, builtin_scenarios, load_scenario
from chaos.search import (
    DEFAULT_JOBS,
    DEFAULT_MAX_EXAMPLES,
    DEFAULT_MAX_SHRINKS,
    Outcome,
    _from_trio,
    _on_executor,
    _ScenarioRuns,
    applied_faults,
    search_schedules,
    violations,
)
from chaos.services import open_run_dir
from chaos.services.images import daemon_available
from faults._draw import assemble
from faults.model import FaultSchedule
from faults.schedule import generate
from faults.space import FaultSpace


@dataclass
class Row:
    pack: str
    variant: str
    invariant: str
    search_runs: int | None = None
    search_s: float | None = None
    shrunk: int | None = None
    shrink_runs: int = 0
    complete: bool = True
    needed: str = "-"
    sweep_runs: int | None = None
    sweep_s: float | None = None
    schedule: str = ""


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


def find_seconds(runs: _ScenarioRuns, runs_to_find: int) -> float:
    """Wall seconds of the batches up to the one that found (``runs_to_find`` runs)."""
    spent, counted = 0.0, 0
    for size, seconds in zip(runs.batch_sizes, runs.batch_seconds, strict=True):
        if counted >= runs_to_find:
            break
        spent, counted = spent + seconds, counted + size
    return spent


def measure(
    scenario: Scenario, variant: str, space: FaultSpace, args: argparse.Namespace, tmp: Path
) -> Row:
    tmp = tmp / f"{scenario.id}-{variant}"
    tmp.mkdir()
    invariant = scenario.catches.get(variant)
    row = Row(scenario.id, variant, invariant or "any")
    progress = print if args.verbose else (lambda _message: None)

    def body(run_batch: BatchFn) -> None:
        said = _from_trio(progress)
        runs = _ScenarioRuns(scenario, variant, args.seed, tmp, progress, run_batch)
        result = search_schedules(
            space,
            seed=args.seed,
            invariant=invariant,
            max_examples=args.max_examples,
            max_shrinks=args.max_shrinks,
            progress=said,
            jobs=args.jobs,
            run_many=runs,
        )
        if not result.found or result.schedule is None:
            return
        row.search_runs = result.runs_to_find
        row.search_s = find_seconds(runs, result.runs_to_find)
        row.shrunk = len(result.schedule.events)
        row.shrink_runs = result.shrink_runs
        row.complete = result.shrink_complete
        row.schedule = describe(result.schedule)
        events = list(result.schedule.events)
        without = [
            assemble(space, result.schedule.seed, events[:index] + events[index + 1 :])
            for index in range(len(events))
        ]
        outcomes = runs(without)
        needed = sum(not violations(o.verdicts, invariant) for o in outcomes)
        row.needed = f"{needed}/{len(events)}"

    _on_executor(scenario, args.jobs, body)
    spent = 0.0
    for count, seed in enumerate(range(args.sweep_from, args.sweep_from + args.sweep_seeds), 1):
        schedule = generate(space, seed)
        outcome, seconds = one_run(scenario, variant, schedule, tmp / f"sweep-{seed}.trace")
        spent += seconds
        if violations(outcome.verdicts, invariant):
            row.sweep_runs, row.sweep_s = count, spent
            break
    return row


def fmt(value: float | int | None, width: int, miss: str) -> str:
    if value is None:
        return f"{miss:>{width}}"
    if isinstance(value, float):
        return f"{value:>{width}.1f}"
    return f"{value:>{width}}"


def table(rows: Sequence[Row], args: argparse.Namespace) -> str:
    miss_search = f">{args.max_examples}"
    miss_sweep = f">{args.sweep_seeds}" if args.sweep_seeds else "-"
    head = (
        f"{'pack':<9} {'variant':<26} {'invariant':<17} {'runs':>5} {'s':>6} {'shrunk':>6} "
        f"{'shrink':>6} {'needed':>6} | {'sweep':>5} {'s':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        shrunk = "-" if r.shrunk is None else f"{r.shrunk}{'' if r.complete else '*'}"
        lines.append(
            f"{r.pack:<9} {r.variant:<26} {r.invariant:<17} {fmt(r.search_runs, 5, miss_search)} "
            f"{fmt(r.search_s, 6, '-')} {shrunk:>6} {r.shrink_runs:>6} {r.needed:>6} | "
            f"{fmt(r.sweep_runs, 5, miss_sweep)} {fmt(r.sweep_s, 6, '-')}"
        )
    return "\n".join(lines)


def median_s(values: Sequence[float | None]) -> str:
    """The median, counting a miss as longer than any find (inf)."""
    if not values:
        return "-"
    middle = statistics.median([float("inf") if v is None else v for v in values])
    return "not found by half" if middle == float("inf") else f"{middle:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="runs side by side")
    parser.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES)
    parser.add_argument("--max-shrinks", type=int, default=DEFAULT_MAX_SHRINKS)
    parser.add_argument("--sweep-seeds", type=int, default=0, help="0: no sweep baseline")
    parser.add_argument("--seed", type=int, default=0, help="the search seed")
    parser.add_argument("--sweep-from", type=int, default=0, help="the sweep's first seed")
    parser.add_argument("--packs", default="", help="comma-separated (default: every built-in)")
    parser.add_argument("--variants", default="", help="comma-separated (default: all)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    packs = [p for p in args.packs.split(",") if p] or builtin_scenarios()
    wanted = {v for v in args.variants.split(",") if v}
    if not 1 <= args.jobs <= 64 or args.sweep_seeds < 0:
        parser.error("--jobs must be between 1 and 64 and --sweep-seeds >= 0")
    rows: list[Row] = []
    load = os.getloadavg()
    started = time.monotonic()
    with open_run_dir(prefix="chaos-bench-search-", parent=Path(tempfile.gettempdir())) as tmp:
        for pack in packs:
            scenario = load_scenario(pack)
            if scenario.images and (why := daemon_available()) is not None:
                print(f"skipped pack {pack}: its runs need Docker ({why})", flush=True)
                continue
            space = scenario.fault_space("golden")
            for variant in scenario.variants:
                if variant == "golden" or (wanted and variant not in wanted):
                    continue
                row = measure(scenario, variant, space, args, tmp)
                rows.append(row)
                print(table([row], args).splitlines()[-1], f"  [{row.schedule}]", flush=True)
    print()
    print(
        f"search vs seed sweep from each pack's golden space (search seed {args.seed}, "
        f"--jobs {args.jobs}, --max-examples {args.max_examples}, "
        f"--max-shrinks {args.max_shrinks}, "
        + (
            f"sweep seeds {args.sweep_from}-{args.sweep_from + args.sweep_seeds - 1}); "
            if args.sweep_seeds
            else "no sweep); "
        )
        + "* = shrinking stopped at its budget"
    )
    print(table(rows, args))
    print(
        f"median seconds to the first violation: search {median_s([r.search_s for r in rows])}, "
        f"sweep {median_s([r.sweep_s for r in rows]) if args.sweep_seeds else 'not run'}"
    )
    sizes = [r.shrunk for r in rows if r.shrunk is not None]
    needed = all(r.needed.split("/")[0] == r.needed.split("/")[-1] for r in rows if r.shrunk)
    print(
        f"shrunk schedules: {len(sizes)} of {len(rows)} found, sizes {sizes}; all needed: {needed}"
    )
    print(f"bench wall time {time.monotonic() - started:.0f} s; load average at the start "
          f"{load[0]:.2f}, at the end {os.getloadavg()[0]:.2f} (1 min)")  # fmt: skip


if __name__ == "__main__":
    main()
