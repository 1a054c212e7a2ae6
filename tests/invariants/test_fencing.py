"""fencing_tokens on hand-written histories: exact verdicts and explanations."""

from __future__ import annotations

from typing import Any

import pytest

from ground.errors import ConfigError
from invariants import get, run_checkers
from invariants.fencing import fencing_tokens
from invariants.history import History
from invariants.leases import MalformedEvidence
from tests.invariants.lease_histories import STATE, grant, release, renew, story, write


def test_writes_in_token_order_hold_and_rejected_stale_writes_are_not_violations() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        write("worker-1", 1, 0.2),
        renew(1, "worker-1", 0.5),
        write("worker-1", 1, 0.7),
        grant(2, "worker-2", 2.6),
        write("worker-2", 2, 2.8),
        write("worker-1", 1, 4.0, outcome="fail"),  # the paused holder, fenced
        write("worker-2", 2, 4.1),
    )
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is True
    assert verdict.explanation == (
        "the resource accepted 4 writes in fencing-token order under 2 leases (tokens 1, 2), "
        "each under a lease granted to its writer (it rejected 1 write)."
    )
    assert verdict.evidence["stale"] == []
    assert verdict.evidence["accepted"] == 4


def test_a_paused_holder_writing_without_a_token_after_its_successor_is_stale() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        write("worker-1", None, 0.2),
        grant(2, "worker-2", 2.6),
        write("worker-2", None, 2.8),
        write("worker-1", None, 4.0),  # woke up: still believes it holds lease 1
    )
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is False
    assert verdict.explanation == (
        "the resource accepted 1 write under an older lease after a newer one had written: "
        "worker-1's write under token 1 at 4.000 s (sent no token: its latest lease) after "
        "worker-2's under token 2 at 2.800 s."
    )
    [stale] = verdict.evidence["stale"]
    assert (stale["write"]["writer"], stale["write"]["token"], stale["write"]["sent"]) == (
        "worker-1",
        1,
        None,
    )
    assert (stale["after"]["writer"], stale["after"]["token"]) == ("worker-2", 2)


def test_a_token_granted_to_another_worker_is_not_the_writers_lease() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        write("worker-1", 1, 0.2),
        grant(2, "worker-2", 2.6),
        write("worker-2", 2, 2.8),
        renew(2, "worker-1", 3.9),  # renewed without checking it still held the lease
        write("worker-1", 2, 4.0),
        write("worker-2", 2, 4.1),
        write("worker-1", 2, 4.2),
    )
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is False
    assert verdict.explanation == (
        "2 accepted writes did not go under a lease of their writer: worker-1's 2 writes "
        "under token 2 (granted to worker-2) from 4.000 s to 4.200 s."
    )
    assert [w["problem"] for w in verdict.evidence["foreign"]] == ["granted to worker-2"] * 2


@pytest.mark.parametrize(
    ("steps", "sentence"),
    [
        (
            [write("worker-3", 7, 1.0)],
            "worker-3's write under token 7 (a token never granted) at 1.000 s",
        ),
        (
            [write("worker-1", 2, 1.0), grant(2, "worker-1", 3.0)],
            "worker-1's write under token 2 (before it was granted) at 1.000 s",
        ),
        (
            [write("worker-3", None, 1.0)],
            "worker-3's write without ever having been granted a lease at 1.000 s",
        ),
    ],
)
def test_writes_under_no_lease_of_their_writer(steps: list[Any], sentence: str) -> None:
    verdict = fencing_tokens.check(story(grant(1, "worker-1", 0.0), *steps), STATE)
    assert verdict.valid is False
    assert verdict.explanation == (
        f"1 accepted write did not go under a lease of its writer: {sentence}."
    )


def test_grants_must_raise_the_token() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        grant(3, "worker-2", 3.0),
        grant(3, "worker-3", 6.0),
        grant(2, "worker-1", 9.0),
    )
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is False
    assert verdict.explanation == (
        "2 grants did not raise the fencing token: token 3 to worker-3 at 6.000 s after "
        "token 3 to worker-2, token 2 to worker-1 at 9.000 s after token 3 to worker-2."
    )


def test_writes_of_unknown_outcome_prove_nothing() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        grant(2, "worker-2", 2.6),
        write("worker-2", 2, 2.8),
        write("worker-1", None, 4.0, outcome="info"),  # may or may not have happened
        write("worker-1", None, 4.5, outcome="pending"),  # never completed
    )
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is True
    assert verdict.explanation == (
        "the resource accepted 1 write in fencing-token order under 1 lease (token 2), each "
        "under a lease granted to its writer (2 writes had an unknown outcome (not counted))."
    )
    assert verdict.evidence["unknown"] == 2


def test_only_the_trusted_processes_are_evidence() -> None:
    """A worker printing history ops can neither hide a violation nor grant itself a lease."""
    forged = [
        {
            "process": "worker-3",
            "type": "invoke",
            "f": "grant",
            "at": 0.5,
            "value": {"token": 9, "holder": "worker-3", "at": 0.5, "until": 9.0},
        },
        {
            "process": "worker-3",
            "type": "ok",
            "f": "grant",
            "at": 0.5,
            "value": {"token": 9, "holder": "worker-3", "at": 0.5, "until": 9.0},
        },
    ]
    history = story(grant(1, "worker-1", 0.0), forged, write("worker-3", 9, 1.0))
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is False
    assert "worker-3's write under token 9 (a token never granted) at 1.000 s" in (
        verdict.explanation
    )


def test_leases_of_different_names_are_fenced_independently() -> None:
    history = story(
        grant(5, "worker-1", 0.0, lease="a"),
        grant(1, "worker-2", 0.1, lease="b"),
        write("worker-1", 5, 0.2, lease="a"),
        write("worker-2", 1, 0.3, lease="b"),
    )
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is True, verdict.explanation


def test_release_and_regrant_to_the_same_writer_raise_the_token() -> None:
    history = story(
        grant(1, "worker-1", 0.0),
        write("worker-1", None, 0.2),
        release(1, "worker-1", 0.3),
        grant(2, "worker-1", 1.0),
        write("worker-1", None, 1.2),
    )
    verdict = fencing_tokens.check(history, STATE)
    assert verdict.valid is True
    assert verdict.evidence["grants"] == 2


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({}, "final_state has no 'lease_evidence' naming the trusted processes"),
        (
            {"lease_evidence": {"authority": "a"}},
            "final_state['lease_evidence']['resource'] must name a process (or a list of them), "
            "got None",
        ),
        (
            {"lease_evidence": {"authority": "a", "resource": "r", "tolerance_s": -1}},
            "final_state['lease_evidence']['tolerance_s'] must be a number >= 0, got -1",
        ),
    ],
)
def test_missing_or_bad_evidence_config_is_malformed(state: dict[str, Any], message: str) -> None:
    with pytest.raises(MalformedEvidence) as caught:
        fencing_tokens.check(story(grant(1, "worker-1", 0.0)), state)
    assert str(caught.value).startswith(message)


def test_malformed_evidence_is_unknown_never_a_verdict() -> None:
    no_time = story(grant(1, "worker-1", 0.0), write("worker-1", 1, 1.0))
    ops = no_time.to_list()
    ops[-1]["value"] = {"writer": "worker-1", "token": 1}
    ops[-2]["value"] = {"writer": "worker-1", "token": 1}
    bad_token = story(grant(1, "worker-1", 0.0), write("worker-1", 1, 1.0)).to_list()
    bad_token[-2]["value"] = {**bad_token[-2]["value"], "token": "1"}
    orphan = story(grant(1, "worker-1", 0.0), write("worker-1", 1, 1.0)).to_list()
    del orphan[-2]
    checker = get("fencing_tokens")
    verdicts = [run_checkers([checker], History(h), STATE)[0] for h in (ops, bad_token, orphan)]
    assert [v.valid for v in verdicts] == ["unknown"] * 3
    assert [v.explanation for v in verdicts] == [
        "checker crashed: MalformedEvidence: op 3 (store ok write): an accepted write needs "
        "'at', got None",
        "checker crashed: MalformedEvidence: op 2 (store invoke write): 'token' must be an "
        "integer or null, got '1'",
        "checker crashed: ConfigError: op 3: ok 'write' by 'store' completes no invocation",
    ]
    with pytest.raises(ConfigError):
        fencing_tokens.check(History(orphan), STATE)
