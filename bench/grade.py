"""Benchmark: `chaos grade` on warm workers against plain `chaos sweep` runs, same seeds.

Everything is measured in one run of this script on this machine, side by side (the machine
is shared: absolute numbers are noisy, ratios less so); print the load with it:

A. plain vs graded at the same --jobs (payments golden, its bundled golden program as the
   candidate, the same seeds): runs per minute of each (a fresh executor each, so worker
   start-up is paid as a command pays it), the ratio graded/plain (target >= 0.9), and the CPU
   seconds per run of the harness (every process of ours but the candidate: the dispatcher,
   the workers, their servers and services; ``getrusage`` of this process and its reaped
   children, minus the candidate's own CPU from its report);
B. graded runs per minute at other --jobs: the best one (target >= 100 on 2 cores);
C. a 20-seed held-out grade (a key's seeds) at the best --jobs: wall seconds (target <= 20),
   the process's first (it starts ``chaos.grade``'s workers) and then another key's seeds on
   the workers it kept (a trainer's reward latency);
D. memory per warm worker: the RSS of its PostgreSQL (every backend) and nats-server;
E. the same as A for tenants and leases (leases: three candidate instances per run);
F. a trainer's loop: ``chaos.grade`` six times in one process on one kept pool of warm
   workers (``chaos.grade_pool``), 5 seeds each: grades per minute after the first;
G. plain and graded batches of --kept-seeds (48: several waves, a steady state) on workers
   kept from a warm-up batch (a grading service's steady state, without the start-up a
   command pays), at each of --kept-jobs (8,12): runs per minute, their ratio, the machine's
   CPU per run and of it the harness's (the machine's less the candidate's own);

and the older parts, on request (--parts): 2. the sandbox's cost per run in this process,
3. one grade repeated (spread of its reward, must be 0), 4. the container sandbox's cost.

Usage: python bench/grade.py [--seeds 16] [--jobs 8] [--best-jobs 4,8,12] [--parts A,...,G]
       [--pack-seeds 8] [--kept-seeds 48] [--kept-jobs 8,12] [--rounds 1] [--pairs 6]
       [--repeats 5]

``--rounds N`` repeats A's, E's and G's plain/graded pair N times, the order swapped each round
(the 1-minute load average printed at each batch's start), and prints the median ratio: on a
shared machine whose load changes between two batches, one pair's ratio says little.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import trio

from chaos.executor import LocalExecutor, RunSpec, scenario_arg
from chaos.grade_pool import close_shared_pool
from chaos.grading import grade
from chaos.run import RunOptions, RunResult, run_scenario
from chaos.sandbox.candidate import CandidateSpec, Program
from chaos.sandbox.graded import make_candidate, run_graded
from chaos.scenario import Scenario, load_scenario
from chaos.task import bundle_program

PHASES = ("setup", "workload", "settle", "check", "teardown")


def _cpu_s() -> float:
    """CPU seconds of this process and every child it (or they) reaped so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass
class Batch:
    rate: float
    wall: float
    cpu_per_run: float
    candidate_cpu: float
    held: int
    errors: int
    warm: bool | None


def batch(scenario: Scenario, seeds: list[int], jobs: int, out: Path,
          candidate: CandidateSpec | None) -> Batch:  # fmt: skip
    """One batch through a fresh local executor (as one ``chaos sweep``/``chaos grade`` does)."""
    folder = Path(tempfile.mkdtemp(dir=out))
    specs = [RunSpec(scenario_arg(scenario), s, (), folder, candidate=candidate) for s in seeds]
    executor = LocalExecutor()
    cpu, started = _cpu_s(), time.monotonic()
    outcomes = trio.run(executor, specs, jobs)
    wall, cpu = time.monotonic() - started, _cpu_s() - cpu
    held = sum(o.outcome == "held" and not (o.result or {}).get("candidate", {}).get("contained")
               for o in outcomes)  # fmt: skip
    errors = sum(o.outcome in ("error", "timeout") for o in outcomes)
    mine = [float(((o.result or {}).get("candidate") or {}).get("cpu_s") or 0.0) for o in outcomes]
    return Batch(60 * len(seeds) / wall, wall, cpu / len(seeds), sum(mine) / len(seeds), held,
                 errors, executor.used_warm)  # fmt: skip


def _load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def side_by_side(
    scenario: Scenario, golden: Path, seeds: list[int], jobs: int, out: Path, label: str,
    rounds: int = 1,
) -> tuple[Batch, Batch]:  # fmt: skip
    """Plain then graded batches of the same seeds; with ``rounds`` > 1, again and again,
    the order swapped each round (plain first, then graded first: a machine whose load
    changes meanwhile favours neither), each pair's ratio printed and their median."""
    task = scenario.task
    assert task is not None
    spec = CandidateSpec(Program.from_path(golden), task.limits, hidden=(out.resolve(),))
    n = len(seeds)
    print(f"{label} {scenario.id}, seeds {seeds[0]}..{seeds[-1]}, --jobs {jobs}"
          + (f", {rounds} rounds" if rounds > 1 else ""))  # fmt: skip
    pairs: list[tuple[Batch, Batch]] = []
    for r in range(rounds):
        got: dict[str, Batch] = {}
        loads: dict[str, str] = {}
        for kind in ("plain", "graded") if r % 2 == 0 else ("graded", "plain"):
            loads[kind] = _load1()
            got[kind] = batch(scenario, seeds, jobs, out, spec if kind == "graded" else None)
        plain, graded = got["plain"], got["graded"]
        pairs.append((plain, graded))
        for name, b in (("plain ", plain), ("graded", graded)):
            harness = b.cpu_per_run - b.candidate_cpu
            print(f"   {name} {b.rate:6.1f} runs/min ({b.wall:5.1f} s for {n} runs, "
                  f"warm={b.warm}), held {b.held}/{n}, errors {b.errors}; CPU per run "
                  f"{b.cpu_per_run:.2f} s, of it the candidate {b.candidate_cpu:.2f} s: "
                  f"harness {harness:.2f} s"
                  + (f" (load {loads[name.strip()]})" if rounds > 1 else ""))  # fmt: skip
        print(f"   graded/plain: x{graded.rate / plain.rate:.2f} runs/min (target >= 0.9); harness "
              f"CPU per run graded/plain: x{(graded.cpu_per_run - graded.candidate_cpu) / plain.cpu_per_run:.2f}")  # fmt: skip  # noqa: E501
    if rounds == 1:
        return pairs[0]
    ratios = [g.rate / p.rate for p, g in pairs]
    harness_x = [(g.cpu_per_run - g.candidate_cpu) / p.cpu_per_run for p, g in pairs]
    print(f"   median of {rounds} rounds: graded/plain x{statistics.median(ratios):.2f} runs/min "
          f"(target >= 0.9), harness CPU per run x{statistics.median(harness_x):.2f}; plain "
          f"{statistics.median(p.rate for p, _ in pairs):.1f}, graded "
          f"{statistics.median(g.rate for _, g in pairs):.1f} runs/min")  # fmt: skip
    middle = sorted(range(rounds), key=lambda i: ratios[i])[rounds // 2]
    return pairs[middle]


def best_jobs(scenario: Scenario, golden: Path, seeds: list[int], jobs: list[int], out: Path,
              done: dict[int, float]) -> int:  # fmt: skip
    print(f"B. graded runs per minute by --jobs, {scenario.id} golden, {len(seeds)} seeds")
    task = scenario.task
    assert task is not None
    spec = CandidateSpec(Program.from_path(golden), task.limits, hidden=(out.resolve(),))
    rates = dict(done)
    for j in jobs:
        if j not in rates:
            b = batch(scenario, seeds, j, out, spec)
            rates[j] = b.rate
            if b.held != len(seeds):
                print(f"   --jobs {j}: held {b.held}/{len(seeds)}, errors {b.errors}")
    for j in sorted(rates):
        print(f"   --jobs {j:2}: {rates[j]:6.1f} graded runs/min")
    best = max(rates, key=lambda j: rates[j])
    print(f"   best: --jobs {best}, {rates[best]:.1f} graded runs/min (target >= 100)")
    return best


def heldout(scenario: Scenario, golden: Path, jobs: int, out: Path, count: int = 20) -> None:
    """C. The process's first held-out grade (it starts ``chaos.grade``'s workers), then one of
    other held-out seeds (another key) on the workers it kept: a trainer's reward latency."""
    walls = []
    for key in (b"bench-heldout-key-0123456789abcdef", b"bench-heldout-key-fedcba9876543210"):
        started = time.monotonic()
        result = grade(scenario, golden, heldout_key=key, heldout=count, jobs=jobs, out_dir=out)
        walls.append(time.monotonic() - started)
        print(f"C. a {count}-seed held-out grade, --jobs {jobs}, "
              f"{'first in the process' if len(walls) == 1 else 'on the kept workers'}: "
              f"{walls[-1]:.1f} s wall (target <= 20 s), reward {result.reward}, "
              f"errors {result.errors}")  # fmt: skip
    close_shared_pool()  # chaos.grade's kept workers


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def _rss_kb(pid: int) -> tuple[str, int]:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "", 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return name, int(line.split()[1])
    return name, 0


def _worker_rss() -> dict[str, int]:
    """KiB of RSS of each warm worker of this process, its servers and the rest, summed."""
    me = os.getpid()
    workers = [
        p for p in _tree(me)
        if p != me and b"chaos.warm_worker" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]  # fmt: skip
    sums: dict[str, int] = {"workers": len(workers)}
    for worker in workers:
        for p in _tree(worker):
            name, kb = _rss_kb(p)
            key = name if name in ("postgres", "nats-server") else "worker (python)"
            key = key if p == worker or key != "worker (python)" else "other"
            sums[key] = sums.get(key, 0) + kb
    return sums


def memory(scenario: Scenario, out: Path) -> None:
    """One worker, one run: then the RSS of its kept servers and of the worker itself."""
    spec = RunSpec(scenario_arg(scenario), 1, (), Path(tempfile.mkdtemp(dir=out)))

    async def measure() -> dict[str, int]:
        async with LocalExecutor(warm=True).session(1, warm_pool=True) as run_batch:
            await run_batch([spec], None)
            return _worker_rss()

    sums = trio.run(measure)
    n = sums.pop("workers")
    assert n == 1, f"{n} warm workers alive: want the one this measure started"
    kept = sums.get("postgres", 0) + sums.get("nats-server", 0)
    print(f"D. memory per warm worker ({scenario.id}, after one run): PostgreSQL "
          f"{sums.get('postgres', 0) / 1024:.0f} MiB + nats-server "
          f"{sums.get('nats-server', 0) / 1024:.0f} MiB = {kept / 1024:.0f} MiB kept; the worker "
          f"itself {sums.get('worker (python)', 0) / 1024:.0f} MiB (RSS, shared pages counted "
          "in each process)")  # fmt: skip


def trainer(scenario: Scenario, golden: Path, out: Path, grades: int = 6, seeds: int = 5) -> None:
    """A trainer's loop: ``chaos.grade`` again and again in one process, 5 seeds each."""
    from chaos.grade_pool import GradePool

    print(f"F. a trainer's loop: {grades} grades of {seeds} seeds each, one process, "
          f"--jobs {seeds}")  # fmt: skip
    walls = []
    with GradePool() as pool:
        for index in range(grades):
            first = 1000 + index * seeds
            started = time.monotonic()
            result = grade(scenario, golden, seeds=list(range(first, first + seeds)),
                           jobs=seeds, out_dir=out, executor=pool)  # fmt: skip
            walls.append(time.monotonic() - started)
            print(f"   grade {index + 1}: {walls[-1]:5.1f} s, reward {result.reward}, "
                  f"workers started so far {pool.workers}")  # fmt: skip
    later = walls[1:]
    print(f"   first grade {walls[0]:.1f} s (starts the workers); the next ones "
          f"{statistics.mean(later):.1f} s on average: {60 / statistics.mean(later):.1f} "
          f"grades/min of {seeds} seeds")  # fmt: skip


def _machine_cpu_s() -> float:
    """CPU seconds this machine spent so far (every process: /proc/stat's busy jiffies)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def kept_pool(
    scenario: Scenario, golden: Path, seeds: list[int], jobs: int, out: Path, rounds: int = 1
) -> None:
    """G. Plain and graded runs on workers kept from an earlier batch (``LocalExecutor.session``
    with its warm pool, as a trainer's grading service or ``chaos.grade``'s pool runs them):
    a warm-up batch of ``jobs`` runs starts the workers, then the measured batch. Without the
    workers' start-up (paid once per command in A and B), this is the rate a grading service
    keeps up. CPU is the machine's (every process, this bench's included), per run."""
    task = scenario.task
    assert task is not None
    spec = CandidateSpec(Program.from_path(golden), task.limits, hidden=(out.resolve(),))
    n = len(seeds)
    print(f"G. on kept workers (started by a warm-up batch of {jobs}), {scenario.id}, seeds "
          f"{seeds[0]}..{seeds[-1]}, --jobs {jobs}" + (f", {rounds} rounds" if rounds > 1 else ""))  # fmt: skip  # noqa: E501

    def one(candidate: CandidateSpec | None) -> tuple[float, float, int, float]:
        folder = Path(tempfile.mkdtemp(dir=out))

        def specs(which: list[int]) -> list[RunSpec]:
            return [RunSpec(scenario_arg(scenario), s, (), folder, candidate=candidate)
                    for s in which]  # fmt: skip

        async def go() -> tuple[float, float, int, float]:
            executor = LocalExecutor()
            async with executor.session(jobs, warm_pool=True) as run_batch:
                await run_batch(specs(list(range(9000, 9000 + jobs))), None)
                cpu, started = _machine_cpu_s(), time.monotonic()
                outcomes = await run_batch(specs(seeds), None)
                wall, cpu = time.monotonic() - started, _machine_cpu_s() - cpu
            held = sum(o.outcome == "held" for o in outcomes)
            mine = sum(float(((o.result or {}).get("candidate") or {}).get("cpu_s") or 0.0)
                       for o in outcomes)  # fmt: skip
            return 60 * n / wall, cpu / n, held, mine / n

        return trio.run(go)

    ratios = []
    for r in range(rounds):
        got = {}
        for kind in ("plain", "graded") if r % 2 == 0 else ("graded", "plain"):
            got[kind] = one(spec if kind == "graded" else None)
        for kind in ("plain", "graded"):
            rate, cpu, held, mine = got[kind]
            print(f"   {kind:6} {rate:6.1f} runs/min, held {held}/{n}, machine CPU per run "
                  f"{cpu:.2f} s, of it the candidate {mine:.2f} s: harness {cpu - mine:.2f} s")  # fmt: skip  # noqa: E501
        ratios.append(got["graded"][0] / got["plain"][0])
        print(f"   graded/plain: x{ratios[-1]:.2f} runs/min (target >= 0.9); graded "
              f"{got['graded'][0]:.1f} runs/min (target >= 100)")  # fmt: skip
    if rounds > 1:
        print(f"   median of {rounds} rounds: graded/plain x{statistics.median(ratios):.2f}")


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


def _jobs_list(text: str) -> list[int]:
    """``8,12``: --jobs values, each at least 1 (argparse turns the error into one line)."""
    try:
        jobs = [int(j) for j in text.split(",") if j.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want comma-separated numbers") from None
    if not jobs or min(jobs) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: want at least one --jobs value, each >= 1")
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--best-jobs", type=_jobs_list, default="4,12")
    parser.add_argument("--pack-seeds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1,
                        help="plain/graded pairs of A, E and G, order swapped")  # fmt: skip
    parser.add_argument("--kept-seeds", type=int, default=48,
                        help="G's batch: several waves of --jobs, a steady state")  # fmt: skip
    parser.add_argument("--kept-jobs", type=_jobs_list, default="8,12",
                        help="G's --jobs, each in turn")  # fmt: skip
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parts", default="A,B,C,D,E,F,G", help="A-G, and 1-4 (older parts)")
    parser.add_argument("--scenario", default="payments", help="the pack of A-D and 1-4")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    scenario = load_scenario(args.scenario)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average at start: {' '.join(load)} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        golden = bundle_program(scenario, work / "golden")
        variant = bundle_program(
            scenario, work / "no-idempotency", env_defaults={"VARIANT": "no-idempotency"}
        )
        first = args.first_seed
        seeds = list(range(first, first + args.seeds))
        best = args.jobs
        if "A" in parts:
            _, graded = side_by_side(scenario, golden, seeds, args.jobs, work, "A.", args.rounds)
        if "B" in parts:
            done = {args.jobs: graded.rate} if "A" in parts else {}
            more = args.best_jobs
            best = best_jobs(scenario, golden, seeds, [args.jobs, *more], work, done)
        if "C" in parts:
            heldout(scenario, golden, best, work)
        if "D" in parts:
            memory(scenario, work)
        if "E" in parts:
            for pack in ("tenants", "leases"):
                other = load_scenario(pack)
                program = bundle_program(other, work / f"golden-{pack}")
                pack_seeds = list(range(first, first + args.pack_seeds))
                side_by_side(other, program, pack_seeds, args.jobs, work, "E.", args.rounds)
        if "F" in parts:
            trainer(scenario, golden, work)
        if "G" in parts:
            kept = list(range(first, first + args.kept_seeds))
            for jobs in dict.fromkeys(args.kept_jobs):
                kept_pool(scenario, golden, kept, jobs, work, args.rounds)
        if "1" in parts:
            throughput(scenario, golden, list(range(first, first + 8)), work)
        if "2" in parts:
            overhead(scenario, golden, list(range(first, first + args.pairs)), work)
        if "3" in parts:
            programs = {"golden": golden}
            if scenario.id == "payments":
                programs["no-idempotency"] = variant
            repeats(scenario, programs, [1, 2, 3, 4], args.repeats, work)
        if "4" in parts:
            docker_overhead(scenario, golden, list(range(first, first + args.pairs)), work)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average at the end: {' '.join(load)}")


if __name__ == "__main__":
    main()
