"""ReplayReport: fidelity, reproduced and the exit code from hand-made replay outcomes."""

from __future__ import annotations

from pathlib import Path

from chaos.replay import replay_path
from replay.outcome import ReplayOutcome, ReplayReport

HELD = {"name": "exactly_once", "valid": True, "explanation": "ok"}
VIOLATED = {"name": "exactly_once", "valid": False, "explanation": "o-1 charged twice"}


def report(*outcomes: ReplayOutcome) -> ReplayReport:
    result = ReplayReport(Path("t.trace"), "payments", "golden", 7, [VIOLATED])
    result.replays.extend(outcomes)
    return result


def outcome(number: int, matched: bool, error: str | None = None) -> ReplayOutcome:
    return ReplayOutcome(number, replay_path(Path("t.trace"), number), matched=matched, error=error)


def test_fidelity_counts_the_replays_that_reproduced() -> None:
    two_of_three = report(outcome(1, True), outcome(2, False), outcome(3, True))
    assert (two_of_three.matched, two_of_three.times) == (2, 3)
    assert two_of_three.fidelity == 2 / 3
    assert not two_of_three.reproduced
    assert two_of_three.exit_code == 1
    every = report(outcome(1, True), outcome(2, True))
    assert every.reproduced
    assert every.exit_code == 0


def test_no_replays_is_fidelity_0_and_a_harness_error_is_exit_3() -> None:
    assert report().fidelity == 0.0
    assert not report().reproduced
    assert report(outcome(1, True), outcome(2, False, error="postgres died")).exit_code == 3


def test_json_carries_each_replay() -> None:
    data = report(outcome(1, True)).to_json()
    assert data["fidelity"] == 1.0
    assert data["replays"][0]["trace"] == "t.replay-1.trace"
    assert data["recorded"] == [{**VIOLATED, "verdict": "VIOLATED"}]
