"""Benchmark: `chaos run payments` for K seeds: runs per minute and where the time goes.

Prints each phase's mean (setup, workload, settle, check, teardown) and the harness
overhead per run: everything but the workload and settling, which belong to the system
under test. Target here: overhead <= 1 s per run. Usage:

    python bench/run.py [--seeds 5] [--variant golden]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import trio

from chaos.run import RunOptions, run_scenario
from chaos.scenario import load_scenario

PHASES = ("setup", "workload", "settle", "check", "teardown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--variant", default="golden")
    parser.add_argument("--scenario", default="payments")
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)
    timings: dict[str, list[float]] = {p: [] for p in PHASES}
    walls, held = [], 0
    with tempfile.TemporaryDirectory() as out:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            start = time.monotonic()
            result = trio.run(
                run_scenario,
                RunOptions(scenario, seed, variant=args.variant, out=Path(out) / f"{seed}.trace"),
            )
            walls.append(time.monotonic() - start)
            held += result.held
            for phase in PHASES:
                timings[phase].append(result.timings.get(phase, 0.0))
    mean = {p: statistics.mean(v) for p, v in timings.items()}
    overhead = [
        w - wl - st for w, wl, st in zip(walls, timings["workload"], timings["settle"], strict=True)
    ]
    print(f"{args.scenario} {args.variant}: {args.seeds} runs, {held} held")
    print(f"  runs per minute      {60 / statistics.mean(walls):6.1f}")
    print(f"  wall per run         {statistics.mean(walls):6.2f} s")
    for phase in PHASES:
        print(f"  {phase:<20} {mean[phase]:6.2f} s")
    print(
        f"  harness overhead     {statistics.mean(overhead):6.2f} s per run "
        f"(max {max(overhead):.2f}; target <= 1.00): everything but workload and settle"
    )


if __name__ == "__main__":
    main()
