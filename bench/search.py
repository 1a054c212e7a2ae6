"""Benchmark: `chaos search` from each pack's golden fault space against a plain seed sweep.

For every defective variant of every built-in pack (read from the registry, so a variant or
pack added later is measured too), in one run:

- search: ``search_schedules`` over the pack's **golden** space (not the variant's own),
  counting only the invariant the pack says catches the variant (``Scenario.catches``; any
  invariant when it declares none): runs and seconds until the first violation, then the
  shrunk schedule's size and whether shrinking ended at a fixed point or at its budget;
- necessity: each event left in the shrunk schedule is run once more without it; it is
  needed when that run holds (an irrelevant event would still violate without it);
- sweep: ``chaos run``'s own draw, ``generate(golden, seed)`` for seeds 0, 1, 2, ... with the
  run seed equal to the schedule seed, until the first violation of the same invariant.

Targets (docs/search.md): median seconds to the first violation < 60, shrunk schedules of at
most 2 events, every event left needed. Numbers depend on the machine's load: say so when
quoting them. Usage:

    python bench/search.py [--max-examples 12] [--max-shrinks 12] [--sweep-seeds 12]
                           [--packs payments,leases] [--variants no-fencing] [--seed 0]
                           [--sweep-from 0]
"""

from __future__ import annotations

import argparse
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
from chaos.run import RunOptions, run_scenario
from chaos.scenario import Scenario, builtin_scenarios, load_scenario
from chaos.search import Outcome, _ScenarioRuns, applied_faults, search_schedules, violations
from chaos.services import open_run_dir
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


class TimedRuns:
    """A search's run function that also keeps each run's wall time."""

    def __init__(self, inner: _ScenarioRuns) -> None:
        self.inner = inner
        self.seconds: list[float] = []

    def __call__(self, schedule: FaultSchedule) -> Outcome:
        start = time.monotonic()
        try:
            return self.inner(schedule)
        finally:
            self.seconds.append(time.monotonic() - start)


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
    scenario: Scenario, variant: str, space: FaultSpace, args: argparse.Namespace, tmp: Path
) -> Row:
    tmp = tmp / f"{scenario.id}-{variant}"
    tmp.mkdir()
    invariant = scenario.catches.get(variant)
    row = Row(scenario.id, variant, invariant or "any")
    progress = print if args.verbose else (lambda _message: None)
    timed = TimedRuns(_ScenarioRuns(scenario, variant, args.seed, tmp, progress))
    result = search_schedules(
        space,
        timed,
        seed=args.seed,
        invariant=invariant,
        max_examples=args.max_examples,
        max_shrinks=args.max_shrinks,
        progress=progress,
    )
    if result.found and result.schedule is not None:
        row.search_runs = result.runs_to_find
        row.search_s = sum(timed.seconds[: result.runs_to_find])
        row.shrunk = len(result.schedule.events)
        row.shrink_runs = result.shrink_runs
        row.complete = result.shrink_complete
        row.schedule = describe(result.schedule)
        needed = 0
        events = list(result.schedule.events)
        for index in range(len(events)):
            rest = assemble(space, result.schedule.seed, events[:index] + events[index + 1 :])
            outcome, _ = one_run(scenario, variant, rest, tmp / f"without-{index}.trace")
            needed += not violations(outcome.verdicts, invariant)
        row.needed = f"{needed}/{len(events)}"
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
    miss_search, miss_sweep = f">{args.max_examples}", f">{args.sweep_seeds}"
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
    parser.add_argument("--max-examples", type=int, default=12)
    parser.add_argument("--max-shrinks", type=int, default=12)
    parser.add_argument("--sweep-seeds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0, help="the search seed")
    parser.add_argument("--sweep-from", type=int, default=0, help="the sweep's first seed")
    parser.add_argument("--packs", default="", help="comma-separated (default: every built-in)")
    parser.add_argument("--variants", default="", help="comma-separated (default: all)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    packs = [p for p in args.packs.split(",") if p] or builtin_scenarios()
    wanted = {v for v in args.variants.split(",") if v}
    rows: list[Row] = []
    started = time.monotonic()
    with open_run_dir(prefix="chaos-bench-search-", parent=Path(tempfile.gettempdir())) as tmp:
        for pack in packs:
            scenario = load_scenario(pack)
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
        f"--max-examples {args.max_examples}, --max-shrinks {args.max_shrinks}, "
        f"sweep seeds {args.sweep_from}-{args.sweep_from + args.sweep_seeds - 1}); "
        "* = shrinking stopped at its budget"
    )
    print(table(rows, args))
    print(
        f"median seconds to the first violation: search {median_s([r.search_s for r in rows])}, "
        f"sweep {median_s([r.sweep_s for r in rows])}"
    )
    sizes = [r.shrunk for r in rows if r.shrunk is not None]
    needed = all(r.needed.split("/")[0] == r.needed.split("/")[-1] for r in rows if r.shrunk)
    print(
        f"shrunk schedules: {len(sizes)} of {len(rows)} found, sizes {sizes}; all needed: {needed}"
    )
    print(f"bench wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
