"""exclusive_leases on hand-written histories: validity from the authority's facts only."""

from __future__ import annotations

import pytest

from invariants.exclusive_leases import exclusive_leases, overlap
from invariants.leases import read_evidence
from tests.invariants.lease_histories import STATE, grant, release, renew, story, write


def test_handovers_after_expiry_hold() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        write("worker-1", 1, 0.2),
        renew(1, "worker-1", 0.5),  # valid until 2.5
        grant(2, "worker-2", 2.6),
        write("worker-2", 2, 2.8),
    )
    verdict = exclusive_leases.check(history, STATE)
    assert verdict.valid is True
    assert verdict.explanation == (
        "no lease overlapped another holder's while both were written under (2 leases, 2 holders)."
    )
    assert verdict.evidence["writes"] == 2


def test_a_lease_granted_before_the_previous_ran_out_with_writes_under_both() -> None:
    """The wall-clock bug: worker-2's clock ran ahead, so it took a lease still valid."""
    history = story(
        grant(1, "worker-1", 0.0),
        write("worker-1", 1, 0.2),
        renew(1, "worker-1", 0.5),  # valid until 2.5 by the authority's clock
        grant(2, "worker-2", 1.0),
        write("worker-1", 1, 1.05),
        write("worker-2", 2, 1.1),
        write("worker-2", 2, 1.3),
    )
    verdict = exclusive_leases.check(history, STATE)
    assert verdict.valid is False
    assert verdict.explanation == (
        "1 pair of leases overlapped: lease 2 of worker-2 was granted at 1.000 s while lease "
        "1 of worker-1 was still valid (1.500 s of overlap), and both were written under "
        "(worker-1: 2 writes, worker-2: 2 writes)."
    )
    [found] = verdict.evidence["overlaps"]
    assert found["first"] == {"token": 1, "holder": "worker-1", "writes": 2}
    assert found["second"] == {"token": 2, "holder": "worker-2", "writes": 2}
    assert found["overlap_s"] == pytest.approx(1.5)


def test_an_overlap_only_one_holder_wrote_under_is_listed_not_reported() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        grant(2, "worker-2", 1.0),
        write("worker-2", 2, 1.1),
        write("worker-1", 1, 1.2, outcome="fail"),  # rejected writes are no writes
        write("worker-1", 1, 1.3, outcome="info"),  # nor are unknown ones
    )
    verdict = exclusive_leases.check(history, STATE)
    assert verdict.valid is True
    assert verdict.explanation.endswith(
        "(2 leases, 2 holders) (1 overlap had writes under only one lease)."
    )
    assert [o["overlap_s"] for o in verdict.evidence["overlaps_written_by_one"]] == [1.0]


def test_validity_follows_renewals_releases_and_shortened_expiries() -> None:
    history = story(
        grant(1, "worker-1", 0.0),  # [0, 2)
        renew(1, "worker-1", 1.0, ttl=0.5),  # shortened: [1, 1.5)
        grant(2, "worker-2", 1.6),  # [1.6, 3.6)
        release(2, "worker-2", 2.0),  # ends at 2.0
        grant(3, "worker-3", 2.1),
        renew(3, "worker-1", 2.5, ttl=10.0),  # renewed by someone else: still lease 3
    )
    leases = read_evidence(history, STATE).leases
    assert leases[("", 1)].validity() == [(0.0, 1.0), (1.0, 1.5)]
    assert leases[("", 2)].validity() == [(1.6, 2.0)]
    assert leases[("", 3)].validity() == [(2.1, 2.5), (2.5, 12.5)]
    assert [f.actor for f in leases[("", 3)].foreign_renewals()] == ["worker-1"]
    assert overlap(leases[("", 1)], leases[("", 2)]) == 0.0
    assert overlap(leases[("", 2)], leases[("", 3)]) == 0.0


def test_overlaps_within_the_tolerance_and_with_oneself_are_not_violations() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        write("worker-1", 1, 0.1),
        grant(2, "worker-2", 1.99),  # 10 ms before lease 1 runs out
        write("worker-2", 2, 2.1),
        grant(3, "worker-2", 2.5),  # worker-2 overlaps its own lease: one writer
        write("worker-2", 3, 2.6),
    )
    state = {"lease_evidence": {**STATE["lease_evidence"], "tolerance_s": 0.05}}
    assert exclusive_leases.check(history, state).valid is True
    strict = exclusive_leases.check(history, STATE)
    assert strict.valid is False
    assert "(0.010 s of overlap)" in strict.explanation


def test_writes_under_a_token_of_another_holder_count_for_no_lease() -> None:
    """Those are fencing_tokens' to report; they say nothing about which lease was valid."""
    history = story(
        grant(1, "worker-1", 0.0),
        grant(2, "worker-2", 1.0),
        write("worker-2", 1, 1.1),  # worker-2 under worker-1's token
        write("worker-2", 2, 1.2),
    )
    verdict = exclusive_leases.check(history, STATE)
    assert verdict.valid is True
    assert verdict.evidence["overlaps_written_by_one"][0]["first"]["writes"] == 0
