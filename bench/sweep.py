"""Benchmark: seed sweeps of payments golden, with the speed levers against the cold baseline.

Both are measured in the same run, on the same seeds:

- **baseline**: no levers: one cold ``chaos run`` process per seed (``CHAOS_WARM=0``), its own
  PostgreSQL and nats-server, and the former settle detector (``CHAOS_SETTLE=poll``: the
  check every 200 ms until it holds twice in a row);
- **levers**: warm workers (``chaos.warm``: one interpreter, PostgreSQL and nats-server per
  job, a fresh database and stream per run) and settle detection driven by events.

For each ``--jobs`` it prints runs per minute, CPU seconds per run (every process of the
sweep: the dispatcher, the workers, their servers and services, from ``getrusage``), the
golden's false positives (runs that violated an invariant: the golden must hold every time)
and harness errors, and the ratios levers/baseline. ``--breakdown N`` first runs N seeds in
this process, cold and warm, and prints where a run's wall time (per phase) and CPU time
(per program, from ``os.wait4``) go. ``--against no-zygote`` takes warm workers without the
zygote (``CHAOS_ZYGOTE=0``: every service exec'd) as the baseline instead of cold runs, to
measure the zygote alone (chaos.services.zygote). Usage:

    python bench/sweep.py [--seeds 20] [--jobs 1,2,4,8] [--breakdown 5] [--against no-zygote]

Numbers depend on what else runs on the machine: CPU seconds per run are the steadier figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import trio

from chaos.executor import LocalExecutor
from chaos.run import RunOptions, run_scenario
from chaos.scenario import load_scenario
from chaos.services import open_run_dir
from chaos.sweep import sweep
from chaos.warm import open_warm_services

_spec = importlib.util.spec_from_file_location("_cpu", Path(__file__).with_name("_cpu.py"))
assert _spec is not None
assert _spec.loader is not None
_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cpu)

PHASES = ("setup", "workload", "settle", "check", "teardown")


def _cpu_now() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _set_baseline(on: bool) -> None:
    for name, value in (("CHAOS_WARM", "0"), ("CHAOS_SETTLE", "poll")):
        if on:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)


def measure_sweep(
    seeds: list[int], jobs: int, baseline: bool, out: Path, zygote: bool = True
) -> dict[str, Any]:
    _set_baseline(baseline)
    os.environ["CHAOS_ZYGOTE"] = "1" if zygote else "0"
    try:
        cpu0, wall0 = _cpu_now(), time.monotonic()
        report = trio.run(
            lambda: sweep(
                "payments",
                "golden",
                seeds,
                jobs=jobs,
                out_dir=out,
                executor=LocalExecutor(warm=not baseline),
            )
        )
        wall, cpu = time.monotonic() - wall0, _cpu_now() - cpu0
    finally:
        _set_baseline(False)
        os.environ.pop("CHAOS_ZYGOTE", None)
    counts = report.counts
    return {
        "runs_per_min": 60 * len(seeds) / wall,
        "cpu_per_run": cpu / len(seeds),
        "false_positives": counts["violated"],
        "errors": counts["error"],
        "runs": len(seeds),
    }


async def _in_process(seeds: list[int], warm: bool, out: Path) -> list[dict[str, float]]:
    scenario = load_scenario("payments")
    timings: list[dict[str, float]] = []

    async def runs(services: Any) -> None:
        for seed in seeds:
            if services is not None:
                await services.check_clean()
            result = await run_scenario(
                RunOptions(scenario, seed, out=out / f"b{seed}.trace", warm=services)
            )
            timings.append(result.timings)

    if warm:
        with open_run_dir(prefix="chaos-warm-") as run_dir:
            async with open_warm_services(run_dir) as services:
                await runs(services)
    else:
        await runs(None)
    return timings


def breakdown(seeds: list[int], out: Path) -> None:
    print(f"where a run goes ({len(seeds)} runs in this process after one warm-up; per run)")
    trio.run(_in_process, seeds[:1], False, out)  # imports, template cache
    rows: dict[str, dict[str, float]] = {}
    cpus: dict[str, Any] = {}
    for label, warm in (("cold", False), ("warm", True)):
        _set_baseline(not warm)
        try:
            with _cpu.ChildCpu() as cpu:
                timings = trio.run(_in_process, seeds, warm, out)
        finally:
            _set_baseline(False)
        rows[label] = {p: statistics.mean(t.get(p, 0.0) for t in timings) for p in PHASES}
        cpus[label] = cpu
    n = len(seeds)
    print(f"  {'wall (s)':<26}{'cold':>8}{'warm':>8}")
    for phase in PHASES:
        print(f"  {phase:<26}{rows['cold'][phase]:8.3f}{rows['warm'][phase]:8.3f}")
    print(f"  {'CPU (s)':<26}{'cold':>8}{'warm':>8}")
    names = sorted(set(cpus["cold"].by_program) | set(cpus["warm"].by_program))
    print(f"  {'harness (this process)':<26}{cpus['cold'].self_s / n:8.3f}"
          f"{cpus['warm'].self_s / n:8.3f}")  # fmt: skip
    for name in sorted(names, key=lambda k: -cpus["cold"].by_program.get(k, 0.0)):
        cold = cpus["cold"].by_program.get(name, 0.0) / n
        warm = cpus["warm"].by_program.get(name, 0.0) / n
        print(f"  {name:<26}{cold:8.3f}{warm:8.3f}")
    total = {k: (c.self_s + c.children_s) / n for k, c in cpus.items()}
    print(f"  {'total':<26}{total['cold']:8.3f}{total['warm']:8.3f}")
    print("  (warm: the kept postgres and nats-server are counted when they stop, spread over")
    print("   the runs; a cold `chaos run` also pays an interpreter and the harness's imports)")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=24,
                        help="seeds per sweep (at least 4 per job: a warm worker's start-up "
                        "is paid once per sweep)")  # fmt: skip
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--jobs", default="1,2,4,8", help="comma-separated --jobs values")
    parser.add_argument("--breakdown", type=int, default=0, metavar="N",
                        help="first, N runs in-process, cold and warm: phases and CPU")  # fmt: skip
    parser.add_argument("--against", choices=("cold", "no-zygote"), default="cold",
                        help="baseline: cold runs, or warm workers without a zygote")  # fmt: skip
    args = parser.parse_args()
    cold_base = args.against == "cold"
    jobs_list = [int(j) for j in args.jobs.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if args.breakdown:
            breakdown(list(range(args.first_seed, args.first_seed + args.breakdown)), out)
        print(f"payments golden, max({args.seeds}, 4 x jobs) seeds per sweep, "
              f"{os.cpu_count()} CPUs; base: "
              f"{'cold runs' if cold_base else 'warm, CHAOS_ZYGOTE=0'}")  # fmt: skip
        header = (f"{'jobs':>4} | {'runs/min':>8} {'base':>6} {'ratio':>5} | "
                  f"{'CPU-s/run':>9} {'base':>6} {'ratio':>5} | {'FP':>3} {'base':>4} | "
                  f"{'err':>3} {'base':>4}")  # fmt: skip
        print(header)
        print("-" * len(header))
        false_positives = runs = 0
        for jobs in jobs_list:
            seeds = list(range(args.first_seed, args.first_seed + max(args.seeds, 4 * jobs)))
            runs += 2 * len(seeds)
            base = measure_sweep(seeds, jobs, cold_base, out, zygote=cold_base)
            lever = measure_sweep(seeds, jobs, False, out)
            false_positives += lever["false_positives"] + base["false_positives"]
            print(
                f"{jobs:>4} | {lever['runs_per_min']:8.1f} {base['runs_per_min']:6.1f} "
                f"{lever['runs_per_min'] / base['runs_per_min']:5.2f} | "
                f"{lever['cpu_per_run']:9.2f} {base['cpu_per_run']:6.2f} "
                f"{lever['cpu_per_run'] / base['cpu_per_run']:5.2f} | "
                f"{lever['false_positives']:>3} {base['false_positives']:>4} | "
                f"{lever['errors']:>3} {base['errors']:>4}",
                flush=True,
            )
        print(f"golden false positives: {false_positives} in {runs} runs (target 0)")
        print("targets: >= 100 runs/min, <= 1.1 CPU-s/run (levers)")


if __name__ == "__main__":
    main()
