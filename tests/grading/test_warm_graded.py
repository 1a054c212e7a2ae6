"""Graded runs on warm workers: nothing of one graded run reaches the next on the same worker.

The candidate ``candidates/leave_behind.py`` leaves a file in every folder it may write, a
table, a detached process, and prints its roles' oids and its clock against the database's;
graded on two seeds at ``jobs=1`` both runs go to one warm worker (kept PostgreSQL and
nats-server), one after the other. The second must see nothing of the first; both hold; and
after the grade nothing of either is left on the host. Streams: a candidate cannot make one
(``payments_nats_abuse`` in the red-team corpus), and the worker checks before every run that
no stream, consumer, message, NATS user, role, database or connection is left
(``WarmServices.check_clean``): ``test_the_worker_is_clean_between_graded_runs`` reads it.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from chaos.executor import LocalExecutor, OnOutcome, RunOutcome, RunSpec
from chaos.grade_pool import GradePool
from chaos.grading import Grade, GradeOptions, choose_seeds, grade, run_grade
from chaos.sandbox.candidate import Program
from chaos.sandbox.process import default_isolation
from chaos.task import bundle_program
from replay.trace import read_trace
from tests.grading.conftest import CANDIDATES, PAYMENTS, leftovers

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(default_isolation() != "root", reason="the sandbox runs at root isolation"),
]

ADVERSARIES = Path(__file__).resolve().parent / "adversaries"


class Recording:
    """A local executor on warm workers that keeps every outcome."""

    def __init__(self) -> None:
        self.executor = LocalExecutor(warm=True)
        self.outcomes: list[RunOutcome] = []
        self.warm: list[bool | None] = []

    async def __call__(
        self, specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
    ) -> list[RunOutcome]:
        assert all(s.candidate is not None and not s.args for s in specs)
        outcomes = await self.executor(specs, jobs, progress)
        self.warm.append(self.executor.used_warm)
        self.outcomes += outcomes
        return outcomes


def _lines(trace: str | None, prefix: str) -> list[str]:
    assert trace is not None
    return [
        str(e["value"])[len(prefix) :]
        for e in read_trace(Path(trace)).events
        if e.get("f") == "log" and str(e.get("value", "")).startswith(prefix)
    ]


def test_nothing_of_one_graded_run_reaches_the_next_on_a_warm_worker(tmp_path: Path) -> None:
    program = tmp_path / "leave-behind"
    program.mkdir()
    shutil.copyfile(CANDIDATES / "leave_behind.py", program / "main.py")
    shutil.copyfile(ADVERSARIES / "_probe.py", program / "_probe.py")
    bundle_program(PAYMENTS, program / "golden")
    execute = Recording()
    seeds = (2, 3, 4)
    options = GradeOptions(
        PAYMENTS, Program.from_path(program), choose_seeds(PAYMENTS, seeds=seeds),
        jobs=1, out_dir=tmp_path / "traces", executor=execute,
    )  # fmt: skip
    (tmp_path / "traces").mkdir()
    grade = trio.run(run_grade, options)

    why = [(s.seed, s.outcome, s.error, s.contained) for s in grade.seeds]
    assert (grade.reward, grade.errors) == (1.0, 0), why
    assert execute.warm == [True]
    workers = {o.worker for o in execute.outcomes}
    assert len(workers) == 1
    assert "warm worker pid" in workers.pop()
    by_seed = {s.seed: s for s in grade.seeds}
    roles: list[set[str]] = []
    for seed in seeds:
        trace = by_seed[seed].trace
        # its first start (a crash fault may restart it: a later start sees its own run's)
        seen = _lines(trace, "SEEN ")
        assert seen[:1] == ["nothing"], (seed, seen)
        clock = _lines(trace, "CLOCK ")
        assert clock, "the candidate printed no CLOCK line"
        assert abs(float(clock[0])) < 5.0, clock
        roles.append(set(_lines(trace, "ROLES ")[0].split(",")) - {""})
        assert roles[-1], "the candidate saw no role of its own"
    for earlier, later in itertools.pairwise(roles):
        oids = {r.split("=")[1] for r in earlier} & {r.split("=")[1] for r in later}
        assert oids == set(), (earlier, later)  # every role of a run is dropped with it
    assert leftovers() == []
    assert not Path("/tmp/chaos-leftover").exists()
    assert not Path("/dev/shm/chaos-leftover").exists()


def test_concurrent_grades_share_one_kept_pool_and_never_mix(
    tmp_path: Path, golden: Path, starter: Path
) -> None:
    """Two candidates graded at once (two threads, as a batch of rollouts) on one pool: each
    gets its own reward, every seed's run is its own candidate's (its hash, its grade's trace
    folder); a third grade afterwards starts no worker: the kept ones serve it."""
    programs = {"golden": golden, "starter": starter}
    grades: dict[str, Grade] = {}
    failures: list[BaseException] = []
    with GradePool() as pool:

        def one(name: str) -> None:
            try:
                grades[name] = grade(
                    PAYMENTS, programs[name], seeds=[1, 2], jobs=2, out_dir=tmp_path / name,
                    executor=pool,
                )  # fmt: skip
            except BaseException as exc:  # raised again below, in the test's thread
                failures.append(exc)

        threads = [threading.Thread(target=one, args=(name,)) for name in programs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        started = pool.workers
        assert 1 <= started <= 4
        again = grade(PAYMENTS, golden, seeds=[3], out_dir=tmp_path / "again", executor=pool)
        assert (again.reward, again.errors) == (1.0, 0)
        assert pool.workers == started  # the kept workers served it
    assert (grades["golden"].reward, grades["golden"].errors) == (1.0, 0)
    assert (grades["starter"].reward, grades["starter"].errors) == (0.0, 0)
    for name, result in grades.items():
        sha = Program.from_path(programs[name]).sha256
        for seed in result.seeds:
            assert seed.trace is not None
            assert Path(seed.trace).is_relative_to(tmp_path / name)
            header = read_trace(Path(seed.trace)).header
            assert sha in str(header), (name, seed.seed)
    assert leftovers() == []
