"""A graded run that fails says so, and says whether its candidate had started: the worker's
JSON (exit 3) carries ``error`` and ``candidate_started``, and the grade counts the seed 0
(and calls the machine broken only when the candidate never ran). Real runs of a tiny
folder pack whose harness side fails on purpose, before or after the candidate starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.grading import grade
from chaos.sandbox.process import default_isolation
from ground.errors import EXIT_HARNESS, EXIT_VIOLATED

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(default_isolation() != "root", reason="graded runs need root isolation"),
]

PACK = """
import os
import sys

import trio

from chaos.context import RunContext
from ground.errors import ServiceError
from chaos.scenario import Scenario, TaskSpec


class Breaks(Scenario):
    id = "breaks"
    task = TaskSpec(service="svc", summary="a service", env=())

    async def setup(self, ctx: RunContext) -> None:
        if os.environ["BREAK"] == "before":
            raise ServiceError("the server never started")
        if os.environ["BREAK"] == "store":  # a store of the harness's own that dies
            store = "import time; print('ready', flush=True); time.sleep(0.5); raise SystemExit(1)"
            await ctx.start_service("store", [sys.executable, "-c", store], ready_line="ready")
        await ctx.start_service("svc", [sys.executable, "-c", "print('ready')"], ready_line="ready")

    async def workload(self, ctx: RunContext) -> None:
        if os.environ["BREAK"] in ("store", "check"):
            await trio.sleep(1.5)
            return
        raise ServiceError("a service of the harness's own died")

    async def settled(self, ctx: RunContext) -> bool:
        return True

    async def final_state(self, ctx: RunContext) -> dict:
        if os.environ["BREAK"] in ("store", "check"):  # as reading the store's state would
            raise ConnectionRefusedError("the store is not there")
        return {}


SCENARIO = Breaks()
"""
SPACE = """
[golden]
horizon_s = 1.0
min_events = 0
max_events = 0
links = ["svc-link"]

[[golden.templates]]
kind = "latency"
params = { latency_ms = [10, 20] }
duration_s = [0.5, 1.0]
"""


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    folder = tmp_path / "breaks"
    folder.mkdir()
    (folder / "scenario.py").write_text(PACK)
    (folder / "faults.toml").write_text(SPACE)
    (folder / "TASK.md").write_text("print ready\n")
    program = tmp_path / "candidate.py"
    program.write_text("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    return folder


@pytest.mark.parametrize(("when", "started"), [("before", False), ("after", True)])
def test_the_worker_reports_its_error_and_whether_the_candidate_started(
    pack: Path, tmp_path: Path, when: str, started: bool
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", str(pack), "--seed", "1", "--impl",
         str(tmp_path / "candidate.py"), "--out", str(tmp_path / "t.trace"), "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "BREAK": when},
    )  # fmt: skip
    assert done.returncode == EXIT_HARNESS, done.stderr
    report = json.loads(done.stdout)
    assert report["candidate_started"] is started
    assert report["held"] is False
    expected = "never started" if when == "before" else "of the harness's own died"
    assert expected in report["error"]


@pytest.mark.parametrize(
    ("when", "exit_code", "harness_errors"),
    [("before", EXIT_HARNESS, 1), ("after", EXIT_VIOLATED, 0)],
)
def test_a_seed_in_error_twice_counts_0(
    pack: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    when: str,
    exit_code: int,
    harness_errors: int,
) -> None:
    monkeypatch.setenv("BREAK", when)
    result = grade(str(pack), tmp_path / "candidate.py", seeds=[1], out_dir=tmp_path / "traces")
    (seed,) = result.seeds
    assert (seed.outcome, seed.candidate_started) == ("error", when == "after")
    assert (result.reward, result.graded, result.errors) == (0.0, 1, 1)
    assert result.harness_errors == harness_errors
    assert result.exit_code == exit_code


@pytest.mark.parametrize(("when", "outcome"), [("store", "error"), ("check", "violated")])
def test_a_final_state_that_fails_because_the_harness_died_is_an_error(
    pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str, outcome: str
) -> None:
    """Reading the final state fails both times; when a service of the harness's own had
    died (``store``) the seed is a harness error, run again (then counted 0), never the
    candidate's ``unreadable``; with every harness service alive (``check``) the failure is
    the candidate's: ``unreadable``, not run again."""
    monkeypatch.setenv("BREAK", when)
    result = grade(str(pack), tmp_path / "candidate.py", seeds=[1], out_dir=tmp_path / "traces")
    (seed,) = result.seeds
    assert seed.outcome == outcome, seed
    assert result.reward == 0.0
    if when == "store":
        assert seed.unreadable is None
        assert seed.error is not None
        assert "store exited with code 1" in seed.error, seed.error
        assert "a failure of the harness's own" in seed.error
        assert (result.errors, result.harness_errors) == (1, 0)
    else:
        assert seed.error is None
        assert seed.unreadable is not None
        assert "the store is not there" in seed.unreadable
        assert result.errors == 0
