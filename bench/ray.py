"""Benchmark: the cost of running a sweep's runs as Ray tasks, against local worker processes.

In one process, alternately (the machine is shared: absolute numbers are noisy, ratios less
so), the same seeds of a scenario are swept

- locally: ``LocalExecutor``, ``--jobs J`` worker processes;
- on Ray: ``RayExecutor`` on the local Ray instance ``--ray`` starts (all CPUs, workers at
  nice 0; ``--ray-niceness 15`` for Ray's own default), one CPU per run (on 2 cores both run
  2 at a time), started once before the first round (its start-up is reported apart); or on
  an existing cluster (``--address HOST:PORT``, what ``--ray ADDRESS`` does), or on a
  multi-node cluster started here for the bench (``--cluster N``: a head and N-1 worker
  nodes on 127.0.0.1, one CPU each, ``tests/ray/cluster.py``; workers at nice 0 unless
  ``--ray-niceness``);

and it prints runs per minute for each, the ratio Ray / local per round and overall, and the
per-run overhead in seconds ((Ray wall - local wall) / runs). Two workloads: ``tiny`` (a pack
without services: a run is almost only the ``chaos run`` process, so the overhead shows) and
``payments`` golden (a real run).

Usage: python bench/ray.py [--seeds 6] [--jobs 2] [--rounds 3] [--skip payments]
                          [--ray-niceness 15] [--address HOST:PORT | --cluster N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from chaos.executor import Executor, LocalExecutor
from chaos.sweep import SweepReport, sweep
from tests.ray.packs import write_tiny_pack


def _sweep(scenario: str, seeds: list[int], jobs: int, out: Path, ex: Executor) -> SweepReport:
    out.mkdir(parents=True, exist_ok=True)
    return trio.run(lambda: sweep(scenario, "golden", seeds, jobs=jobs, out_dir=out, executor=ex))


def compare(name: str, scenario: str, seeds: list[int], jobs: int, rounds: int, root: Path) -> None:
    from chaos.executor_ray import RayExecutor

    print(f"{name}: {len(seeds)} seeds, {jobs} at a time, {rounds} round(s) (local, then ray)")
    totals = {"local": 0.0, "ray": 0.0}
    for number in range(1, rounds + 1):
        walls = {}
        for kind, executor in (("local", LocalExecutor()), ("ray", RayExecutor(cpus=1))):
            report = _sweep(scenario, seeds, jobs, root / f"{name}-{kind}-{number}", executor)
            bad = report.counts["error"] + report.counts["timeout"]
            walls[kind] = report.wall_s
            totals[kind] += report.wall_s
            inner = statistics.mean(r.wall_s for r in report.results)
            print(
                f"   round {number} {kind:5}: {60 * len(seeds) / report.wall_s:6.1f} runs/min "
                f"({report.wall_s:5.1f} s; a run {inner:4.1f} s in its worker; "
                f"{report.counts['held']} held, {bad} errors)"
            )
        print(f"   round {number} ray/local wall: x{walls['ray'] / walls['local']:.2f}")
    runs = len(seeds) * rounds
    print(
        f"   overall: ray/local wall x{totals['ray'] / totals['local']:.2f}; "
        f"{(totals['ray'] - totals['local']) / runs:+.2f} s per run"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated: tiny, payments")
    parser.add_argument(
        "--ray-niceness",
        type=int,
        default=None,
        help="the workers' niceness (default: what --ray sets, 0)",
    )
    parser.add_argument("--address", default=None, help="an existing Ray cluster's address")
    parser.add_argument(
        "--cluster", type=int, default=0, help="start a cluster of N nodes here (1 CPU each)"
    )
    args = parser.parse_args()
    skip = set(args.skip.split(",")) - {""}
    if args.address and args.cluster:
        parser.error("--address or --cluster, not both")

    import ray

    from chaos.executor_ray import connect, disconnect

    started = time.monotonic()
    if args.ray_niceness is not None:  # Ray's own default is 15; --ray's local instance: 0
        os.environ["RAY_worker_niceness"] = str(args.ray_niceness)
    with contextlib.ExitStack() as stack:
        address, what = args.address or "local", "local Ray instance"
        if args.address:
            what = f"the Ray cluster at {address}"
        if args.cluster:
            from tests.ray.cluster import local_cluster

            os.environ.setdefault("RAY_worker_niceness", "0")  # as --ray's local instance
            running = stack.enter_context(local_cluster(workers=args.cluster - 1))
            address = running.address
            what = f"a {args.cluster}-node Ray cluster on this machine at {address}"
        connect(address)  # what --ray [ADDRESS] does
        stack.callback(disconnect)  # (before the cluster stops)
        nodes = sum(1 for node in ray.nodes() if node["Alive"])
        cpus = int(ray.cluster_resources().get("CPU", 0))
        print(f"{what} ({nodes} node(s), {cpus} CPUs) ready in {time.monotonic() - started:.1f} s")
        if cpus != args.jobs:
            print(f"   note: Ray runs {cpus} at a time, local --jobs {args.jobs}")
        _bench(args, cpus, skip)


def _bench(args: argparse.Namespace, cpus: int, skip: set[str]) -> None:
    from chaos.executor_ray import RayExecutor

    seeds = list(range(args.seeds))
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        # Ray starts its worker processes on first use: one untimed round warms them.
        started = time.monotonic()
        warm = write_tiny_pack(root / "warm")
        _sweep(str(warm), [10 + n for n in range(cpus)], cpus, root / "warm-out",
               RayExecutor(cpus=1))  # fmt: skip
        print(f"first {cpus} Ray tasks (worker start-up): {time.monotonic() - started:.1f} s")
        if "tiny" not in skip:
            tiny = write_tiny_pack(root / "tiny")
            # seeds 1 and 2 of the tiny pack hang or wait: use others
            tiny_seeds = [s + 10 for s in seeds]
            compare("tiny", str(tiny), tiny_seeds, args.jobs, args.rounds, root)
        if "payments" not in skip:
            compare("payments", "payments", seeds, args.jobs, args.rounds, root)


if __name__ == "__main__":
    main()
