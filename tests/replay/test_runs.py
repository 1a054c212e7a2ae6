"""Replays of real payments runs (real PostgreSQL, NATS, services): fidelity, schedule, drift."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.replay import replay_path, replay_trace
from chaos.scenario import load_scenario
from faults.schedule import generate
from replay.divergence import stream_divergences
from replay.trace import TraceWriter, read_trace

pytestmark = pytest.mark.slow


def chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=180
    )


def record(path: Path, seed: int, variant: str) -> Path:
    done = chaos("run", "payments", "--seed", str(seed), "--variant", variant, "--out", str(path))
    assert done.returncode in (0, 1), done.stderr
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replay-runs")


@pytest.fixture(scope="module")
def golden(traces: Path) -> Path:
    return record(traces / "payments-golden-seed7.trace", 7, "golden")


@pytest.fixture(scope="module")
def violating(traces: Path) -> Path:
    return record(traces / "payments-no-idempotency-seed2.trace", 2, "no-idempotency")


async def test_a_golden_trace_replays_with_fidelity_1(golden: Path) -> None:
    recorded = read_trace(golden)
    report = await replay_trace(golden, 1)
    assert report.fidelity == 1.0
    assert report.reproduced
    assert report.exit_code == 0
    assert report.drift == []
    (replay,) = report.replays
    assert replay.trace == replay_path(golden, 1)
    assert [(v["name"], v["valid"]) for v in replay.verdicts] == [
        (v["name"], v["valid"]) for v in recorded.verdicts
    ]
    replayed = read_trace(replay.trace)
    assert not replayed.partial
    assert replayed.schedule == recorded.schedule
    assert (replayed.header["seed"], replayed.header["variant"]) == (7, "golden")


def test_a_violation_comes_back_on_replay(violating: Path) -> None:
    recorded = read_trace(violating)
    assert {v["name"]: v["valid"] for v in recorded.verdicts}["exactly_once"] is False
    done = chaos("replay", str(violating), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["reproduced"], report["times"], report["fidelity"]) == (True, 1, 1.0)
    (replay,) = report["replays"]
    assert replay["matched"] is True
    assert {v["name"]: v["valid"] for v in replay["verdicts"]}["exactly_once"] is False
    assert "first_divergence" in replay
    assert read_trace(replay["trace"]).schedule == recorded.schedule


def test_drift_warns_and_the_schedule_is_the_traces_own(golden: Path, traces: Path) -> None:
    """A copy whose scenario hash was altered and whose schedule holds no faults."""
    recorded = read_trace(golden)
    assert recorded.schedule is not None
    assert recorded.schedule["events"], "seed 7 should draw faults"
    no_faults = {**recorded.schedule, "events": []}
    copy = traces / "altered.trace"
    with TraceWriter(copy, {**recorded.header, "scenario_hash": "f" * 64}) as writer:
        writer.write_schedule(no_faults)
        for event in recorded.events:
            writer.write_event(event)
        for verdict in recorded.verdicts:
            writer.write_verdict(verdict)
        writer.write_end("held", 0, 5.0)

    strict = chaos("replay", str(copy), "--strict")
    assert strict.returncode == 2
    assert "--strict" in strict.stderr
    assert not replay_path(copy, 1).exists()

    done = chaos("replay", str(copy))
    assert done.returncode == 0, done.stderr
    assert "chaos: warning: drift: scenario payments changed" in done.stderr
    assert "replay fidelity: 1/1" in done.stdout
    assert "first divergence: " in done.stdout
    replayed = read_trace(replay_path(copy, 1))
    # the recording applied faults, the replay (no faults) did not: a nemesis stream diverges
    # (whether it is the *first* divergence depends on timing: a consumer stream may come first)
    diverged = {d.stream for d in stream_divergences(recorded.events, replayed.events)}
    assert any(stream.startswith("nemesis f") for stream in diverged), diverged
    assert replayed.schedule == no_faults
    scenario = load_scenario("payments")
    assert replayed.schedule != generate(scenario.fault_space("golden"), 7).to_dict()
