"""job_recovered on hand-written histories: the job ran, and ran again after the last fault."""

from __future__ import annotations

from typing import Any

import scenarios.leases.checkers  # noqa: F401  (registers job_recovered under leases)
from invariants import get
from invariants.history import NEMESIS
from tests.invariants.lease_histories import STATE, grant, story, write

job_recovered = get("job_recovered", pack="leases")


def fault(phase: str, at: float, kind: str = "pause") -> list[dict[str, Any]]:
    return [
        {
            "process": NEMESIS,
            "type": "info",
            "f": kind,
            "value": {"phase": phase, "fault_id": "f0", "target": "service:worker-1"},
            "at": at,
        }
    ]


def test_a_job_that_never_wrote_did_not_run() -> None:
    verdict = job_recovered.check(story(grant(1, "worker-1", 0.0)), STATE)
    assert verdict.valid is False
    assert verdict.explanation == "the store accepted no write: the job never ran."


def test_without_faults_any_accepted_write_is_enough() -> None:
    history = story(grant(1, "worker-1", 0.0), write("worker-1", 1, 0.2), write("worker-1", 1, 0.4))
    verdict = job_recovered.check(history, STATE)
    assert verdict.valid is True
    assert verdict.explanation == "the job ran: the store accepted 2 writes."


def test_the_job_must_write_again_after_the_last_fault_event() -> None:
    before = [
        grant(1, "worker-1", 0.0),
        write("worker-1", 1, 0.2),
        fault("apply", 1.0),
        write("worker-1", 1, 1.5, outcome="fail"),  # a rejected write is no progress
        fault("heal", 4.0),
    ]
    verdict = job_recovered.check(story(*before), STATE)
    assert verdict.valid is False
    assert verdict.explanation == (
        "the job did not recover: the store accepted 1 write, none after the last fault event "
        "(pause heal at 4.000 s)."
    )
    untriggered = fault("not_triggered", 9.0, kind="crash")  # at the run's end: no change
    verdict = job_recovered.check(story(*before, write("worker-2", None, 4.5), untriggered), STATE)
    assert verdict.valid is True
    assert verdict.explanation == (
        "the job recovered: after the last fault event (pause heal at 4.000 s) the store "
        "accepted 1 write, the first by worker-2 without a fencing token at 4.500 s."
    )
    assert verdict.evidence == {"accepted": 2, "last_fault_s": 4.0, "accepted_after": 1}
