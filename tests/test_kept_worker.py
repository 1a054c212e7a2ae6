"""``chaos.warm_pool.KeptWorker``: a warm worker driven without trio, kept between calls that
are each their own ``trio.run`` (what a Ray worker process does between its tasks; real
``python -m chaos.warm_worker`` children, a tiny pack's runs): it answers run after run from
one process, a request interrupted mid-way never has its answer read by the next, and one
that was killed answers None with how it ended."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
import trio

from chaos.executor import RunSpec, warm_outcome, warm_request
from chaos.warm_pool import KeptWorker
from ground.errors import EXIT_HARNESS, EXIT_HELD
from replay.trace import read_trace
from tests.ray.packs import WAIT_SEED, write_tiny_pack

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_one_kept_worker_answers_run_after_run_then_stops_when_let_go(tmp_path: Path) -> None:
    tiny = write_tiny_pack(tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    worker = KeptWorker()
    try:
        pids = set()
        for seed in (0, 3, 4):
            spec = RunSpec(str(tiny), seed, (), out)
            answer = worker.run(warm_request(spec))
            assert answer is not None
            assert answer["exit_code"] == EXIT_HELD, answer
            pids.add(answer["pid"])
            outcome = warm_outcome(spec, answer, "", 0.0, 0.0)
            assert outcome.outcome == "held"
            assert read_trace(spec.trace).header["seed"] == seed
            trio.run(trio.sleep, 0)  # each call between its own trio.run, or none
        assert pids == {worker.pid}
        assert worker.alive
    finally:
        worker.close()
    assert not worker.alive
    assert worker.reap(timeout=60)  # stdin closed: it stops its servers and exits
    assert worker.popen.returncode == 0
    assert worker.run(warm_request(RunSpec(str(tiny), 0, (), out))) is None


def test_a_killed_kept_worker_answers_none_and_says_how_it_ended(tmp_path: Path) -> None:
    tiny = write_tiny_pack(tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    worker = KeptWorker()
    spec = RunSpec(str(tiny), 0, (), out)
    assert (worker.run(warm_request(spec)) or {}).get("exit_code") == EXIT_HELD
    os.kill(worker.pid, signal.SIGKILL)
    answer = worker.run(warm_request(spec))
    assert answer is None
    assert not worker.alive
    gone = worker.gone_message()
    assert gone.startswith("the warm worker ended (exit code -9)"), gone
    outcome = warm_outcome(spec, None, gone, 0.0, 0.0)
    assert (outcome.exit_code, outcome.lost_worker) == (EXIT_HARNESS, gone)
    worker.close()


def test_an_interrupted_request_retires_the_worker(tmp_path: Path) -> None:
    """A request cut short by an exception (a task interrupted mid-run): the worker is let go,
    so its late answer is never read as the next request's."""
    tiny = write_tiny_pack(tmp_path / "tiny")
    (tiny / "control").mkdir(exist_ok=True)
    out = tmp_path / "out"
    out.mkdir()
    worker = KeptWorker()
    spec = RunSpec(str(tiny), WAIT_SEED, (), out)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 3.0)  # the run waits for control/release
        with pytest.raises(KeyboardInterrupt):
            worker.run(warm_request(spec))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        (tiny / "control" / "release").touch()
    assert not worker.alive
    assert worker.run(warm_request(RunSpec(str(tiny), 0, (), out))) is None
    assert worker.reap(timeout=60)  # it finishes the run it had, then sees its stdin closed
    assert _gone(worker.pid)
