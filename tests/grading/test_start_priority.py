"""A candidate's start runs at a higher CPU priority, which nothing of it keeps or passes on.

Root isolation gives the candidate's main thread ``START_NICE`` while it starts (its start
is the graded run's critical path) with SCHED_RESET_ON_FORK: a thread or a process it
creates starts at nice 0; it can neither clear the flag, raise its priority nor run
real-time (RLIMIT_NICE and RLIMIT_RTPRIO are 0); the harness sets it back to 0 once its
ready line shows, or when the start is given up without one. A probe
(candidates/priority_probe.py) reports all of this from inside a real grade.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.grading import grade
from chaos.sandbox._site_setup import START_NICE
from chaos.sandbox.process import default_isolation
from chaos.scenario import Scenario
from replay.trace import read_trace
from tests.grading.conftest import CANDIDATES, leftovers


def _reports(trace: str | None) -> dict[str, dict[str, Any]]:
    assert trace is not None
    found: dict[str, dict[str, Any]] = {}
    for event in read_trace(Path(trace)).events:
        value = str(event.get("value", ""))
        if event.get("f") == "log" and value.startswith("PRIO "):
            report = json.loads(value[len("PRIO ") :])
            found[report["what"]] = report
    return found


@pytest.fixture(autouse=True)
def _root() -> None:
    if default_isolation() != "root":
        pytest.skip("the start's priority needs root isolation (CI has it)")


def test_the_start_is_boosted_and_nothing_keeps_the_boost(
    payments: Scenario, key_file: Path, tmp_path: Path
) -> None:
    assert START_NICE < 0
    result = grade(payments, CANDIDATES / "priority_probe.py", heldout_key=key_file, heldout=1,
                   out_dir=tmp_path / "traces")  # fmt: skip
    (seed,) = result.seeds
    seen = _reports(seed.trace)
    assert seen["start"] == {"what": "start", "nice": START_NICE, "reset_on_fork": True}
    assert seen["thread"]["nice"] == 0
    assert seen["child"]["nice"] == 0
    assert seen["refused"] == {
        "what": "refused",
        "clear_flag": True,
        "raise_priority": True,
        "realtime": True,
        "limits": [[0, 0], [0, 0]],
    }
    after = seen["after_ready"]
    assert after["nice"] == 0, after
    assert after["waited_s"] < 5, after  # the ready line ends it (or the next monitor tick)
    assert leftovers() == []


def test_a_start_without_its_ready_line_loses_the_boost_when_given_up(
    payments: Scenario, key_file: Path, tmp_path: Path
) -> None:
    silent = tmp_path / "silent.py"
    text = (CANDIDATES / "priority_probe.py").read_text()
    silent.write_text(text.replace('print("consumer ready", flush=True)', "pass"))
    result = grade(payments, silent, heldout_key=key_file, heldout=1,
                   limits={"ready_s": 2.0}, out_dir=tmp_path / "traces")  # fmt: skip
    (seed,) = result.seeds
    seen = _reports(seed.trace)
    assert seen["start"]["nice"] == START_NICE
    after = seen["after_ready"]
    assert after["nice"] == 0, after  # not left at START_NICE for the run
    assert after["waited_s"] < 8, after
    assert leftovers() == []
