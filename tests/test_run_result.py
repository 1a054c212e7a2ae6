"""What a run reports besides its verdicts: phase timings (wall clock, frozen here with
freezegun) and the JSON object `chaos run --json` prints and `chaos sweep` reads."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from freezegun import freeze_time

from chaos.run import PhaseClock, RunResult
from faults.model import FaultSchedule
from invariants import Verdict


def test_phase_clock_times_each_phase_and_reports_each_start() -> None:
    timings: dict[str, float] = {}
    said: list[str] = []
    with freeze_time("2024-05-01 12:00:00") as frozen:
        clock = PhaseClock(timings, said.append)
        clock.enter("setup")
        frozen.tick(datetime.timedelta(seconds=2.5))
        clock.enter("workload")
        frozen.tick(datetime.timedelta(seconds=1.25))
        clock.enter("settle")
        frozen.tick(datetime.timedelta(seconds=0.5))
        clock.enter("done")
    assert timings == {"setup": 2.5, "workload": 1.25, "settle": 0.5}
    assert said == ["setup", "workload", "settle"]  # "done" is not a phase to report


def test_run_json_is_one_object_with_short_verdicts(tmp_path: Path) -> None:
    verdicts = [
        Verdict.holds("no_lost_messages", "all there.", published=3),
        Verdict.violated("exactly_once", "o-2 charged twice.", duplicated={"o-2": 2}),
    ]
    result = RunResult(
        "payments",
        "golden",
        7,
        FaultSchedule(seed=7, space_hash="h"),
        verdicts,
        tmp_path / "x.trace",
        True,
        {"setup": 1.23456},
    )
    data = json.loads(json.dumps(result.to_json()))
    assert data == {
        "scenario": "payments",
        "variant": "golden",
        "seed": 7,
        "schedule": {"seed": 7, "space_hash": "h", "events": []},
        "verdicts": [
            {
                "name": "no_lost_messages",
                "valid": True,
                "verdict": "held",
                "explanation": "all there.",
            },
            {
                "name": "exactly_once",
                "valid": False,
                "verdict": "VIOLATED",
                "explanation": "o-2 charged twice.",
            },
        ],
        "held": False,
        "settled": True,
        "trace": str(tmp_path / "x.trace"),
        "timings": {"setup": 1.235},
    }
    assert result.exit_code == 1
    assert verdicts[1].to_dict()["evidence"] == {"duplicated": {"o-2": 2}}  # traces keep it
