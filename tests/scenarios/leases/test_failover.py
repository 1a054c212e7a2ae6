"""lease_failover on hand-written histories: the lease passes on when its holder cannot hold
it, and whoever holds it runs the job (the vacuous candidates it fails are graded in
``tests/grading/adversaries/leases_squatter.py`` and ``leases_lone_holder.py``)."""

from __future__ import annotations

from typing import Any

import scenarios.leases.checkers  # noqa: F401  (registers lease_failover under leases)
from invariants import get
from invariants.history import NEMESIS
from tests.invariants.lease_histories import STATE, grant, renew, story, write

lease_failover = get("lease_failover", pack="leases")
WORKERS = ["worker-1", "worker-2", "worker-3"]


def state(start: float, end: float) -> dict[str, Any]:
    return {**STATE, "ttl_s": 2.0, "workers": WORKERS, "window_s": [start, end]}


def fault(phase: str, at: float, target: str, fault_id: str = "f0") -> list[dict[str, Any]]:
    value = {"phase": phase, "fault_id": fault_id, "target": target}
    return [{"process": NEMESIS, "type": "info", "f": "pause", "value": value, "at": at}]


def held(worker: str, token: int, start: float, end: float) -> list[list[dict[str, Any]]]:
    """``worker`` renews lease ``token`` every 0.5 s and writes every 0.2 s in [start, end)."""
    steps = [renew(token, worker, start + i * 0.5) for i in range(1, int((end - start) / 0.5))]
    steps += [write(worker, token, start + i * 0.2) for i in range(1, int((end - start) / 0.2))]
    return sorted(steps, key=lambda s: s[0]["at"])


def test_a_lease_taken_once_and_never_renewed_stands_vacant_while_others_are_free() -> None:
    # the squatter: token 1 at 0 s, writes under it for ever, nobody takes it over
    writes = [write("worker-1", 1, 0.2 * i) for i in range(1, 50)]
    verdict = lease_failover.check(story(grant(1, "worker-1", 0.0), *writes), state(1.0, 10.0))
    assert verdict.valid is False
    assert verdict.explanation == (
        "the lease stood vacant for longer than its TTL (2.000 s) 1 time: from 2.000 s to "
        "10.000 s while worker-1, worker-2, worker-3 were free to take it."
    )


def test_a_lease_handed_over_within_the_ttl_holds() -> None:
    steps = [
        grant(1, "worker-1", 0.0),
        *held("worker-1", 1, 0.0, 3.0),
        fault("apply", 3.0, "service:worker-1"),  # paused: its last renewal at 2.5 s
        grant(2, "worker-2", 4.7),  # 0.2 s after the lease ran out
        *held("worker-2", 2, 4.7, 10.0),
        fault("heal", 7.5, "service:worker-1"),
    ]
    verdict = lease_failover.check(story(*sorted(steps, key=lambda s: s[0]["at"])), state(1, 10))
    assert verdict.valid is True, verdict.explanation


def test_a_holder_that_waits_out_its_own_pause_fails_while_others_were_free() -> None:
    # the lone holder: worker-1 renews its expired lease once the pause ends
    steps = [
        grant(1, "worker-1", 0.0),
        *held("worker-1", 1, 0.0, 3.0),
        fault("apply", 3.0, "service:worker-1"),
        fault("heal", 7.5, "service:worker-1"),
        *held("worker-1", 1, 7.0, 10.0),
    ]
    verdict = lease_failover.check(story(*sorted(steps, key=lambda s: s[0]["at"])), state(1, 10))
    assert verdict.valid is False
    assert "from 4.500 s to 7.500 s while worker-2, worker-3 were free" in verdict.explanation


def test_a_vacancy_is_excused_when_no_worker_was_free() -> None:
    steps = [
        grant(1, "worker-1", 0.0),
        *held("worker-1", 1, 0.0, 3.0),
        fault("apply", 3.0, "service:worker-1", "f0"),
        fault("apply", 3.2, "link:worker-2-postgres", "f1"),
        fault("apply", 3.4, "service:worker-3", "f2"),
        fault("heal", 7.5, "service:worker-1", "f0"),
        fault("heal", 7.5, "link:worker-2-postgres", "f1"),
        fault("heal", 7.5, "service:worker-3", "f2"),
        *held("worker-1", 1, 7.0, 10.0),
    ]
    verdict = lease_failover.check(story(*sorted(steps, key=lambda s: s[0]["at"])), state(1, 10))
    assert verdict.valid is True, verdict.explanation


def test_a_free_holder_that_stops_running_the_job_fails() -> None:
    # worker-2 takes the lease over and keeps it, renewing, without writing
    steps = [
        grant(1, "worker-1", 0.0),
        *held("worker-1", 1, 0.0, 3.0),
        fault("apply", 3.0, "service:worker-1"),
        grant(2, "worker-2", 4.6),
        *[renew(2, "worker-2", 4.6 + 0.5 * i) for i in range(1, 11)],
        fault("heal", 7.5, "service:worker-1"),
    ]
    verdict = lease_failover.check(story(*sorted(steps, key=lambda s: s[0]["at"])), state(1, 10))
    assert verdict.valid is False
    assert verdict.explanation.startswith(
        "a free worker held the lease for longer than its TTL with no write accepted under it "
        "1 time: worker-2 under token 2 from 4.600 s to"
    ), verdict.explanation


def test_without_a_workload_there_is_nothing_to_judge() -> None:
    verdict = lease_failover.check(story(grant(1, "worker-1", 0.0)), {**STATE, "ttl_s": 2.0,
                                   "workers": WORKERS, "window_s": [None, 3.0]})  # fmt: skip
    assert verdict.valid is True
