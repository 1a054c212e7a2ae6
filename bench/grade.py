"""Benchmark: `chaos grade PACK` (payments by default) with its golden implementation.

Three measurements, each against a baseline taken in the same run (the machine is shared:
absolute numbers are noisy, ratios less so):

1. graded runs per minute at --jobs 1, 2 and 4 (one grade of the same seeds each);
2. the sandbox's cost per run: the same seeds run plainly (`chaos run`, the harness's own
   consumer) and graded (`chaos run --impl`, the same code as a sandboxed candidate),
   alternately; target <= 10 % of a run's wall time;
3. one grade repeated five times (the golden and the no-idempotency variant): the spread
   of its reward, which must be 0;
4. the container sandbox's cost per run (``--sandbox docker``): the same seeds graded in the
   process sandbox and in a container, alternately (needs a Docker daemon; skipped without).

Usage: python bench/grade.py [--scenario payments|tenants|leases] [--seeds 8] [--pairs 6]
       [--repeats 5] [--skip 1,2,3,4]
(part 3's defective variant is payments' no-idempotency: other packs repeat the golden only)
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

from chaos.grading import grade
from chaos.run import RunOptions, RunResult, run_scenario
from chaos.sandbox.graded import make_candidate, run_graded
from chaos.scenario import Scenario, load_scenario
from chaos.task import bundle_program

PHASES = ("setup", "workload", "settle", "check", "teardown")


def throughput(scenario: Scenario, golden: Path, seeds: list[int], out: Path) -> None:
    print(f"1. graded runs per minute, golden candidate, seeds {seeds[0]}..{seeds[-1]}")
    base = None
    for jobs in (1, 2, 4):
        started = time.monotonic()
        result = grade(scenario, golden, seeds=seeds, jobs=jobs, out_dir=out)
        wall = time.monotonic() - started
        rate = 60 * len(seeds) / wall
        base = base or rate
        print(
            f"   --jobs {jobs}: {rate:5.1f} runs/min ({wall:5.1f} s for {len(seeds)} runs, "
            f"x{rate / base:.2f} of --jobs 1), reward {result.reward}"
        )


def _plain(scenario: Scenario, seed: int, trace: Path) -> RunResult:
    return trio.run(run_scenario, RunOptions(scenario, seed, out=trace))


def _graded(
    scenario: Scenario, golden: Path, seed: int, trace: Path, sandbox: str | None = None
) -> RunResult:
    candidate = make_candidate(scenario, golden, sandbox_kind=sandbox)
    graded = trio.run(run_graded, RunOptions(scenario, seed, out=trace, candidate=candidate))
    assert graded.result is not None
    return graded.result


def overhead(scenario: Scenario, golden: Path, seeds: list[int], out: Path) -> None:
    print(f"2. sandbox cost per run: {len(seeds)} seeds, each run plainly then graded")
    walls: dict[str, list[float]] = {"plain": [], "graded": []}
    phases: dict[str, dict[str, list[float]]] = {k: {p: [] for p in PHASES} for k in walls}
    held = {"plain": 0, "graded": 0}
    for seed in seeds:
        for kind in ("plain", "graded"):
            trace = out / f"{kind}-{seed}.trace"
            started = time.monotonic()
            result = (
                _plain(scenario, seed, trace)
                if kind == "plain"
                else _graded(scenario, golden, seed, trace)
            )
            walls[kind].append(time.monotonic() - started)
            held[kind] += result.held
            for phase in PHASES:
                phases[kind][phase].append(result.timings.get(phase, 0.0))
    print(f"   {'':10} {'plain':>8} {'graded':>8} {'graded - plain':>15}")
    rows = [("wall", walls["plain"], walls["graded"])]
    rows += [(p, phases["plain"][p], phases["graded"][p]) for p in PHASES]
    for name, plain, graded in rows:
        a, b = statistics.median(plain), statistics.median(graded)
        print(f"   {name:10} {a:7.2f}s {b:7.2f}s {b - a:+14.2f}s")
    fixed = [
        sum(phases[k][p][i] for p in ("setup", "check", "teardown"))
        for k in ("plain", "graded")
        for i in range(len(seeds))
    ]
    n = len(seeds)
    extra = statistics.median(fixed[n:]) - statistics.median(fixed[:n])
    wall = statistics.median(walls["plain"])
    print(
        f"   sandbox overhead (setup+check+teardown, medians): {extra:+.2f} s per run = "
        f"{100 * extra / wall:+.1f} % of a plain run's {wall:.2f} s (target <= 10 %); "
        f"whole runs: {100 * (statistics.median(walls['graded']) / wall - 1):+.1f} %"
    )
    print(f"   held: plain {held['plain']}/{n}, graded {held['graded']}/{n}")


def docker_overhead(scenario: Scenario, golden: Path, seeds: list[int], out: Path) -> None:
    from chaos.services.images import daemon_available

    why = daemon_available()
    print(f"4. container sandbox cost per run: {len(seeds)} seeds, each graded in the process "
          "sandbox then in a container")  # fmt: skip
    if why is not None:
        print(f"   skipped: {why}")
        return
    make_candidate(scenario, golden, sandbox_kind="docker")  # builds its images first
    kinds = ("process", "docker")
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    phases: dict[str, dict[str, list[float]]] = {k: {p: [] for p in PHASES} for k in kinds}
    held = dict.fromkeys(kinds, 0)
    for seed in seeds:
        for kind in kinds:
            started = time.monotonic()
            result = _graded(scenario, golden, seed, out / f"{kind}-{seed}.trace", kind)
            walls[kind].append(time.monotonic() - started)
            held[kind] += result.held
            for phase in PHASES:
                phases[kind][phase].append(result.timings.get(phase, 0.0))
    print(f"   {'':10} {'process':>8} {'docker':>8} {'docker - process':>17}")
    rows = [("wall", walls["process"], walls["docker"])]
    rows += [(p, phases["process"][p], phases["docker"][p]) for p in PHASES]
    for name, a_values, b_values in rows:
        a, b = statistics.median(a_values), statistics.median(b_values)
        print(f"   {name:10} {a:7.2f}s {b:7.2f}s {b - a:+16.2f}s")
    fixed = {
        k: statistics.median(
            sum(phases[k][p][i] for p in ("setup", "teardown")) for i in range(len(seeds))
        )
        for k in kinds
    }
    wall = statistics.median(walls["process"])
    extra = fixed["docker"] - fixed["process"]
    print(
        f"   container overhead (setup+teardown, medians): {extra:+.2f} s per run = "
        f"{100 * extra / wall:+.1f} % of a process-sandboxed run's {wall:.2f} s; whole runs: "
        f"{100 * (statistics.median(walls['docker']) / wall - 1):+.1f} %"
    )
    n = len(seeds)
    print(f"   held: process {held['process']}/{n}, docker {held['docker']}/{n}")


def repeats(
    scenario: Scenario, programs: dict[str, Path], seeds: list[int], times: int, out: Path
) -> None:
    print(f"3. one grade repeated {times} times on seeds {seeds}")
    for name, program in programs.items():
        rewards = [
            grade(scenario, program, seeds=seeds, jobs=2, out_dir=out).reward for _ in range(times)
        ]
        print(
            f"   {name:15} rewards {rewards}  spread {max(rewards) - min(rewards):.4f}  "
            f"mean {statistics.mean(rewards):.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip", default="", help="parts to skip, e.g. 1,3")
    parser.add_argument("--scenario", default="payments", help="the pack to grade")
    args = parser.parse_args()
    skip = {int(p) for p in args.skip.split(",") if p}
    scenario = load_scenario(args.scenario)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        golden = bundle_program(scenario, work / "golden")
        variant = bundle_program(
            scenario, work / "no-idempotency", env_defaults={"VARIANT": "no-idempotency"}
        )
        first = args.first_seed
        if 1 not in skip:
            throughput(scenario, golden, list(range(first, first + args.seeds)), work)
        if 2 not in skip:
            overhead(scenario, golden, list(range(first, first + args.pairs)), work)
        if 3 not in skip:
            programs = {"golden": golden}
            if scenario.id == "payments":
                programs["no-idempotency"] = variant
            repeats(scenario, programs, [1, 2, 3, 4], args.repeats, work)
        if 4 not in skip:
            docker_overhead(scenario, golden, list(range(first, first + args.pairs)), work)


if __name__ == "__main__":
    main()
