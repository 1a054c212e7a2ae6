"""Benchmark: replay fidelity of violating traces, and replay wall time against the original's.

Records `chaos run payments --variant no-idempotency` for a few seeds, keeps the traces that
violate an invariant (the "shipped" violating traces), replays each N times with the schedule
taken from the trace, and prints per trace: fidelity k/N, how many replays' logical histories
diverged from the recording (informational), and the mean replay wall time over the original
run's. Target: fidelity >= 95% overall. Usage:

    python bench/replay.py [--seeds 1,2,3] [--times 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This file is named replay.py: keep its folder off the path so `replay` is the package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import trio

from chaos.replay import prepare_replay, run_replays
from chaos.run import RunOptions, run_scenario
from chaos.scenario import load_scenario

TARGET = 0.95


async def bench(scenario_id: str, variant: str, seeds: list[int], times: int, out: Path) -> None:
    scenario = load_scenario(scenario_id)
    matched = total = 0
    ratios: list[float] = []
    print(f"{scenario_id} {variant}: seeds {seeds}, {times} replays per violating trace")
    print(f"  {'seed':>4}  {'violated':<14}  {'fidelity':>8}  {'diverged':>8}  "
          f"{'orig s':>6}  {'replay s':>8}  {'ratio':>5}")  # fmt: skip
    for seed in seeds:
        path = out / f"{scenario_id}-{variant}-seed{seed}.trace"
        started = time.monotonic()
        result = await run_scenario(RunOptions(scenario, seed, variant=variant, out=path))
        original = time.monotonic() - started
        violated = [v.name for v in result.verdicts if v.valid is False]
        if not violated:
            print(f"  {seed:>4}  {'(held: skipped)':<14}")
            continue
        report = await run_replays(prepare_replay(path), times)
        walls = [r.wall_s for r in report.replays]
        diverged = sum(r.first_divergence is not None for r in report.replays)
        ratio = statistics.mean(walls) / original
        ratios.append(ratio)
        matched, total = matched + report.matched, total + report.times
        print(
            f"  {seed:>4}  {','.join(violated):<14}  {report.matched:>4}/{report.times:<3}  "
            f"{diverged:>4}/{report.times:<3}  {original:6.2f}  {statistics.mean(walls):8.2f}  "
            f"{ratio:5.2f}"
        )
        for r in report.replays:
            if not r.matched:
                print(f"        replay {r.number}: {r.mismatched or r.error}")
    if not total:
        print("no violating trace among these seeds")
        return
    fidelity = matched / total
    verdict = "meets" if fidelity >= TARGET else "MISSES"
    print(
        f"overall fidelity {matched}/{total} = {fidelity:.1%} ({verdict} the {TARGET:.0%} target); "
        f"replay wall / original wall: mean {statistics.mean(ratios):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated run seeds")
    parser.add_argument("--times", type=int, default=5, help="replays per violating trace")
    parser.add_argument("--variant", default="no-idempotency")
    parser.add_argument("--scenario", default="payments")
    parser.add_argument("--keep", type=Path, help="write the traces here and keep them")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        trio.run(bench, args.scenario, args.variant, seeds, args.times, args.keep)
        return
    with tempfile.TemporaryDirectory(prefix="chaos-bench-replay-") as out:
        trio.run(bench, args.scenario, args.variant, seeds, args.times, Path(out))


if __name__ == "__main__":
    main()
