"""The Ray executor on a real local Ray instance (one per module; not mocked): the same
verdicts and schedules as a local sweep, a worker killed mid-run is retried (warm and
cold), a hanging run times out with what it recorded, the CLI reaches an existing cluster
by its address, graded runs go to the warm workers Ray's workers keep with nothing of one
reaching the next, and no Ray process is left when the module ends."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest
import trio

from chaos.executor import OnOutcome, RunOutcome, RunSpec, executor_replay, executor_run
from chaos.grading import GradeOptions, choose_seeds, run_grade
from chaos.sandbox.candidate import Program
from chaos.sandbox.process import default_isolation
from chaos.sweep import sweep
from chaos.task import bundle_program
from replay.trace import read_trace
from tests.grading.conftest import CANDIDATES, PAYMENTS, leftovers
from tests.grading.test_warm_graded import ADVERSARIES, _lines
from tests.ray.packs import HANG_SEED, WAIT_SEED, write_tiny_pack

ray = pytest.importorskip("ray")

from chaos.executor_ray import RayExecutor, connect, disconnect  # noqa: E402

pytestmark = pytest.mark.slow


def _ray_processes() -> list[psutil.Process]:
    """This test process's descendants (the local instance's GCS, raylet, workers...)."""
    return psutil.Process().children(recursive=True)


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[str]:
    """One local Ray instance for the module (``chaos.executor_ray.connect``); its GCS
    address. Torn down at the end, and every process it started must be gone."""
    assert not ray.is_initialized()
    assert connect("local")
    started = _ray_processes()
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        disconnect()
        _gone, alive = psutil.wait_procs(started, timeout=30)
        for process in alive:
            process.kill()
        assert alive == [], f"Ray left {[p.pid for p in alive]} running"


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_pack(tmp_path / "tiny")


def _same_run(outcome: RunOutcome) -> tuple[str, list[object], dict[str, object]]:
    result = outcome.result or {}
    verdicts = {v["name"]: v["valid"] for v in result.get("verdicts", [])}
    return outcome.outcome, result.get("schedule") or [], verdicts


async def test_a_ray_sweep_gives_the_local_verdicts_and_schedules(
    ray_instance: str, tmp_path: Path
) -> None:
    seeds = list(range(10))
    here, there = tmp_path / "local", tmp_path / "ray"
    here.mkdir()
    there.mkdir()
    local = await sweep("payments", "golden", seeds, jobs=2, out_dir=here)
    remote = await sweep(
        "payments", "golden", seeds, jobs=2, out_dir=there, executor=RayExecutor(cpus=1)
    )
    assert [r.seed for r in remote.results] == seeds
    assert [_same_run(r) for r in remote.results] == [_same_run(r) for r in local.results]
    assert any(_same_run(r)[1] for r in remote.results)  # some seed drew faults
    for result in remote.results:
        assert result.trace == there / f"golden-seed{result.seed}.trace"
        assert result.verdict is not None
        assert result.verdict["trace"] == str(result.trace)
        assert read_trace(result.trace).header["seed"] == result.seed
        assert result.verdict["timings"]["workload"] > 0
    assert remote.executor["kind"] == "ray"
    assert remote.executor["warm"] is True  # each Ray worker kept a warm worker
    assert all("warm worker pid" in r.worker for r in remote.results)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ray_worker_of(started: Path) -> psutil.Process | None:
    """The Ray worker whose task runs the run that wrote ``started`` (its pid: the ``chaos
    run`` child, or the kept warm worker, of that Ray worker)."""
    run = psutil.Process(int(started.read_text()))
    return run.parent()


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
async def test_a_task_killed_mid_run_is_retried(ray_instance: str, tiny: Path, warm: bool) -> None:
    control, out = tiny / "control", tiny.parent / "out"
    out.mkdir()
    spec = RunSpec(str(tiny), WAIT_SEED, (), out)
    done: list[RunOutcome] = []
    executor = RayExecutor(warm=warm)

    async def run() -> None:
        done.extend(await executor([spec], 1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(120):
            while not (control / f"started-{WAIT_SEED}").exists():
                await trio.sleep(0.05)
        worker = _ray_worker_of(control / f"started-{WAIT_SEED}")
        assert worker is not None
        assert "ray" in " ".join(worker.cmdline()).lower()
        # its chaos run, or its kept warm worker (running the run), which get SIGTERM
        orphans = [p.pid for p in worker.children()]
        assert orphans
        if warm:
            assert any("chaos.warm_worker" in " ".join(p.cmdline()) for p in worker.children())
        os.kill(worker.pid, signal.SIGKILL)
        (control / f"started-{WAIT_SEED}").unlink()
        (control / "release").touch()
    [outcome] = done
    assert outcome.outcome == "held"
    assert outcome.attempts == 2
    assert len(outcome.lost) == 1
    assert "the worker was lost" in outcome.lost[0]
    assert executor.describe()["warm"] is warm
    assert ("warm worker pid" in outcome.worker) is warm
    assert outcome.trace == spec.trace
    assert read_trace(spec.trace).end is not None
    # The killed worker's temp dir is reaped by the next task, once its run has exited.
    left = Path(tempfile.gettempdir()) / f"chaos-ray-{worker.pid}-"
    with trio.fail_after(120):
        while any(_running(pid) for pid in orphans):
            await trio.sleep(0.1)
    await RayExecutor()([RunSpec(str(tiny), 0, (), out)], 1)
    assert not list(left.parent.glob(left.name + "*"))


async def test_a_spec_with_a_schedule_runs_that_schedule_on_a_ray_worker(
    ray_instance: str, tiny: Path
) -> None:
    # a space_hash no draw gives: the trace has it only if the spec's schedule was run
    schedule = {"seed": 0, "space_hash": "sent-with-the-spec", "events": []}
    out = tiny.parent / "out"
    spec = RunSpec(str(tiny), 0, (), out, schedule=schedule)
    [outcome] = await RayExecutor()([spec], 1)
    assert outcome.outcome == "held", outcome.error
    assert outcome.result is not None
    assert outcome.result["schedule"] == schedule
    assert read_trace(spec.trace).schedule == schedule


async def test_a_hanging_run_times_out_with_a_partial_trace(ray_instance: str, tiny: Path) -> None:
    out = tiny.parent / "out"
    out.mkdir()
    spec = RunSpec(str(tiny), HANG_SEED, (), out)
    [outcome] = await RayExecutor(run_timeout=3.0)([spec], 1)
    assert (outcome.outcome, outcome.attempts, outcome.lost) == ("timeout", 1, [])
    assert outcome.error == "timed out after 3 s"
    assert outcome.trace is not None
    assert outcome.trace.parent == out  # written here, from the bytes the task sent back
    trace = read_trace(outcome.trace)
    assert [e["f"] for e in trace.events if e["process"] == "workload"] == ["step"]
    assert trace.verdicts == []


async def test_validate_runs_through_ray(ray_instance: str, tiny: Path) -> None:
    out = tiny.parent / "out"
    out.mkdir()
    run = executor_run(RayExecutor(), str(tiny))
    held = await run("golden", 0, out / "golden-seed0.trace")
    assert (held.error, held.verdicts, held.settled) == (None, {}, True)
    assert held.trace == out / "golden-seed0.trace"
    run = executor_run(RayExecutor(run_timeout=3.0), str(tiny))
    hung = await run("golden", HANG_SEED, out / f"golden-seed{HANG_SEED}.trace")
    assert hung.error == "timed out after 3 s"


def test_the_cli_sweeps_on_an_existing_cluster(ray_instance: str, tiny: Path) -> None:
    out = tiny.parent / "out"
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "sweep", str(tiny), "--seeds", "0,3", "--json",
         "--out-dir", str(out), "--ray", ray_instance, "--run-timeout", "600"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["runs"], summary["held"], summary["timeouts"]) == (2, 2, 0)
    assert summary["executor"]["address"] == ray_instance
    for row in summary["seeds"]:
        assert Path(row["trace"]).parent == out
        assert Path(row["trace"]).is_file()
    assert "2/2" in done.stderr  # the progress bar


async def test_validate_replays_through_ray(ray_instance: str, tmp_path: Path) -> None:
    # (replay finds a pack by the id its trace names: a built-in one)
    executor = RayExecutor()
    held = await executor_run(executor, "payments")("golden", 3, tmp_path / "golden-seed3.trace")
    assert held.error is None
    replay = executor_replay(executor)
    assert replay is not None
    [again] = await replay(held.trace, 1)
    assert again.error is None
    assert again.trace == tmp_path / "golden-seed3.replay-1.trace"
    assert again.verdicts == held.verdicts
    assert read_trace(again.trace).header["seed"] == 3


@pytest.mark.skipif(default_isolation() != "root", reason="the sandbox runs at root isolation")
async def test_graded_runs_on_ray_keep_warm_workers_and_nothing_reaches_the_next_run(
    ray_instance: str, tmp_path: Path
) -> None:
    """A grade through Ray, one task at a time: its runs go to the warm workers the Ray
    workers keep (kept PostgreSQL and nats-server, one used again by a later run), and
    nothing of one graded run reaches the next (``leave_behind`` leaves a file in every
    folder it may write, a table, a detached process; it prints what it finds of an earlier
    one, its roles' oids and its clock)."""
    program = tmp_path / "leave-behind"
    program.mkdir()
    shutil.copyfile(CANDIDATES / "leave_behind.py", program / "main.py")
    shutil.copyfile(ADVERSARIES / "_probe.py", program / "_probe.py")
    bundle_program(PAYMENTS, program / "golden")
    executor = RayExecutor(max_in_flight=1)
    outcomes: list[RunOutcome] = []

    async def execute(
        specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
    ) -> list[RunOutcome]:
        done = await executor(specs, jobs, progress)
        outcomes.extend(done)
        return done

    seeds = (2, 3, 4, 5)
    (tmp_path / "traces").mkdir()
    options = GradeOptions(
        PAYMENTS, Program.from_path(program), choose_seeds(PAYMENTS, seeds=seeds),
        jobs=1, out_dir=tmp_path / "traces", executor=execute,
    )  # fmt: skip
    grade = await run_grade(options)
    why = [(s.seed, s.outcome, s.error, s.contained) for s in grade.seeds]
    assert (grade.reward, grade.errors) == (1.0, 0), why
    assert executor.describe()["warm"] is True
    kept = [o.worker.rsplit("warm worker pid ", 1)[-1] for o in outcomes]
    assert all("warm worker pid" in o.worker for o in outcomes), [o.worker for o in outcomes]
    assert len(set(kept)) < len(seeds), kept  # a kept worker served a later run again
    by_seed = {s.seed: s for s in grade.seeds}
    roles: list[set[str]] = []
    for seed in seeds:
        trace = by_seed[seed].trace
        seen = _lines(trace, "SEEN ")  # its first start's (a crash restarts it)
        assert seen[:1] == ["nothing"], (seed, seen)
        roles.append(set(_lines(trace, "ROLES ")[0].split(",")) - {""})
        assert roles[-1], "the candidate saw no role of its own"
    for earlier, later in itertools.pairwise(roles):
        oids = {r.split("=")[1] for r in earlier} & {r.split("=")[1] for r in later}
        assert oids == set(), (earlier, later)
    assert leftovers() == []
