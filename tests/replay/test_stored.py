"""A trace recorded by an older release (0.1.0, before the modules moved) still replays.

``stored/payments-golden-seed3-0.1.0.trace`` is a golden payments run (seed 3) written by
chaos-harness 0.1.0. Reading it needs no service; replaying it is a real run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from chaos.replay import prepare_replay, run_replays
from chaos.run import RunOptions, RunResult
from ground.errors import ChaosError

STORED = Path(__file__).parent / "stored" / "payments-golden-seed3-0.1.0.trace"


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    copy = tmp_path / STORED.name  # replays are written beside the trace
    shutil.copyfile(STORED, copy)
    return copy


def test_an_older_trace_is_read_with_its_schedule_and_its_drift_said(stored: Path) -> None:
    plan = prepare_replay(stored)
    assert (plan.scenario.id, plan.variant, plan.seed) == ("payments", "golden", 3)
    assert [e.kind.value for e in plan.schedule.events] == ["latency", "crash"]
    assert plan.trace.header["harness_version"] == "0.1.0"
    assert "chaos-harness: recorded 0.1.0, installed 0.2.0" in plan.drift


def test_the_engine_runs_each_replay_with_the_runner_it_is_handed(stored: Path) -> None:
    seen: list[RunOptions] = []

    async def runner(options: RunOptions) -> RunResult:
        seen.append(options)
        raise ChaosError("the fake runner runs nothing")

    report = trio.run(lambda: run_replays(prepare_replay(stored), 2, runner=runner))
    assert [o.seed for o in seen] == [3, 3]
    assert all(o.schedule is not None and len(o.schedule.events) == 2 for o in seen)
    assert [r.error for r in report.replays] == ["the fake runner runs nothing"] * 2
    assert report.fidelity == 0


@pytest.mark.slow
def test_an_older_trace_replays_with_its_recorded_verdicts(stored: Path) -> None:
    report = trio.run(lambda: run_replays(prepare_replay(stored), 1))
    assert report.replays[0].error is None
    assert report.replays[0].matched, report.replays[0].mismatched
