"""Benchmark: the golden never fails: held/violated/error counts over many seeds, under load.

Issue 9's measurement. Two sweeps of the golden (``chaos sweep``'s engine, one ``chaos run``
worker per seed):

1. ``--seeds`` seeds (default 1000, from ``--first-seed``) at ``--jobs`` (default 8) runs at
   once: on a 2-core machine that is four runs per core, the load a user's sweep makes;
2. ``--hog-seeds`` seeds (default 200, from ``--hog-first-seed``) at ``--hog-jobs`` beside
   ``--hog`` busy-loop processes (default one per CPU; ``chaos.stress``), a CPU-hog
   neighbour.

For each it prints held, violated and error counts, runs per minute and the elapsed time,
and the seed, outcome and trace of every run that did not hold (their traces are kept in
``--keep``; the held ones are removed). The target is 0 violated and 0 errors in both; the
exit code is 0 when that holds, 1 otherwise. A full run (1,200 runs) takes about 25-30
minutes on an idle 2-core machine (about 55 runs per minute at --jobs 8); run it at a quiet
time. Small counts prove it works:

    python bench/validity.py --seeds 8 --hog-seeds 4
    python bench/validity.py --seeds 1000 --jobs 8 --hog-seeds 200      # the full measurement
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import trio

from chaos.stress import cpu_count, load_snapshot, open_stress
from chaos.sweep import SeedResult, SweepReport, sweep


def _progress(label: str, total: int) -> tuple[dict[str, int], Callable[[SeedResult], None]]:
    counts = {"done": 0, "bad": 0}

    def progress(result: SeedResult) -> None:
        counts["done"] += 1
        counts["bad"] += result.outcome != "held"
        if counts["done"] % 25 == 0 or counts["done"] == total or result.outcome != "held":
            print(
                f"  [{label}] {counts['done']}/{total} runs, {counts['bad']} not held"
                + ("" if result.outcome == "held" else f" (seed {result.seed}: {result.outcome})"),
                flush=True,
            )

    return counts, progress


async def _measure(
    label: str,
    scenario: str,
    variant: str,
    seeds: list[int],
    jobs: int,
    hog: int,
    out_dir: Path,
) -> SweepReport:
    _, progress = _progress(label, len(seeds))
    if hog:
        async with open_stress(hog):
            return await sweep(
                scenario, variant, seeds, jobs=jobs, out_dir=out_dir, progress=progress
            )
    return await sweep(scenario, variant, seeds, jobs=jobs, out_dir=out_dir, progress=progress)


def _report(label: str, report: SweepReport, keep: Path, out_dir: Path) -> bool:
    counts = report.counts
    rate = 60 * len(report.results) / report.wall_s if report.wall_s else 0.0
    print(
        f"{label}: {len(report.results)} runs: {counts['held']} held, "
        f"{counts['violated']} violated, {counts['error']} errors; "
        f"{rate:.1f} runs/min; elapsed {report.wall_s:.0f} s"
    )
    bad = [r for r in report.results if r.outcome != "held"]
    for r in bad:
        trace = out_dir / f"{report.variant}-seed{r.seed}.trace"
        kept = keep / trace.name
        if trace.is_file():
            keep.mkdir(parents=True, exist_ok=True)
            shutil.move(str(trace), kept)
        what = ", ".join(r.violated()) or (r.error.strip().splitlines() or ["?"])[-1]
        print(f"  seed {r.seed}: {r.outcome} ({what}); trace {kept}")
    return not bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="payments")
    parser.add_argument("--variant", default="golden")
    parser.add_argument("--seeds", type=int, default=1000, help="seeds of the --jobs sweep")
    parser.add_argument("--first-seed", type=int, default=10000)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--hog-seeds", type=int, default=200, help="seeds beside the CPU hog")
    parser.add_argument("--hog-first-seed", type=int, default=20000)
    parser.add_argument("--hog-jobs", type=int, default=max(1, cpu_count() // 2))
    parser.add_argument("--hog", type=int, default=cpu_count(), help="busy loops of the hog")
    parser.add_argument("--keep", type=Path, default=Path("traces/validity"))
    args = parser.parse_args()
    for name in ("seeds", "hog_seeds"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0")
    for name in ("jobs", "hog_jobs", "hog"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    print(f"machine: {load_snapshot()}", flush=True)
    started = time.monotonic()
    ok = True
    plans = [
        (f"--jobs {args.jobs}", args.first_seed, args.seeds, args.jobs, 0),
        (
            f"--jobs {args.hog_jobs} beside {args.hog} busy loop(s)",
            args.hog_first_seed,
            args.hog_seeds,
            args.hog_jobs,
            args.hog,
        ),
    ]
    for label, first, count, jobs, hog in plans:
        if count == 0:
            continue
        seeds = list(range(first, first + count))
        with tempfile.TemporaryDirectory(prefix="chaos-validity-") as tmp:
            out_dir = Path(tmp)
            report = trio.run(
                _measure, label, args.scenario, args.variant, seeds, jobs, hog, out_dir
            )
            ok &= _report(f"{args.scenario} {args.variant} {label}", report, args.keep, out_dir)
    print(f"total elapsed {time.monotonic() - started:.0f} s; {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
