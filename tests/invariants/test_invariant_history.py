"""Ops and histories: validation, pairing invocations with completions, filters."""

from __future__ import annotations

from typing import Any

import pytest

from ground.errors import ConfigError
from invariants.history import NEMESIS, History, Op, Pair


def op(index: int, process: str, type_: str, f: str = "publish", **kw: Any) -> dict[str, Any]:
    return {
        "index": index,
        "time_ns": index * 1000,
        "process": process,
        "type": type_,
        "f": f,
        **kw,
    }


HISTORY = History(
    [
        op(0, "p0", "invoke", value="o-1"),
        op(1, "p1", "invoke", value="o-2"),
        op(2, NEMESIS, "invoke", f="partition", value={"id": "f0"}),
        op(3, "p0", "ok", value="o-1"),
        op(4, NEMESIS, "info", f="partition", value={"id": "f0"}),
        op(5, "p1", "info", value="o-2", error="timeout"),
        op(6, "p0", "invoke", value="o-3"),
        op(7, "p0", "fail", value="o-3", error="nack"),
        op(8, "p0", "invoke", f="read"),
    ]
)


def test_pairs_match_each_invocation_with_its_process_completion() -> None:
    pairs = HISTORY.pairs()
    assert [(p.invoke.index, p.completion and p.completion.index) for p in pairs] == [
        (0, 3),
        (1, 5),
        (2, 4),
        (6, 7),
        (8, None),
    ]
    assert [p.outcome for p in pairs] == ["ok", "info", "info", "fail", "pending"]
    assert pairs[1].completion is not None
    assert pairs[1].completion.error == "timeout"


def test_completed_filters_by_f_and_outcome() -> None:
    assert [p.invoke.value for p in HISTORY.completed("publish")] == ["o-1"]
    assert [p.invoke.value for p in HISTORY.completed("publish", "info")] == ["o-2"]
    assert [p.invoke.f for p in HISTORY.completed(outcome="info")] == ["publish", "partition"]
    assert HISTORY.completed("read") == ()
    assert HISTORY.completed("read", "pending")[0] == Pair(HISTORY[8], None)


def test_filters_and_sequence_behaviour() -> None:
    assert [o.index for o in HISTORY.nemesis()] == [2, 4]
    assert [o.index for o in HISTORY.by_f("read")] == [8]
    assert len(HISTORY.client()) == 7
    assert [o.index for o in HISTORY.by_process("p1")] == [1, 5]
    assert isinstance(HISTORY[1:3], History)
    assert [o.index for o in HISTORY[1:3]] == [1, 2]
    assert History(HISTORY.to_list()).to_list() == HISTORY.to_list()
    assert repr(HISTORY) == "History(9 ops)"


def test_op_round_trips_through_a_dict() -> None:
    first = HISTORY[5]
    assert Op.from_dict(first.to_dict()) == first
    assert first.to_dict() == op(5, "p1", "info", value="o-2", error="timeout")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {**op(0, "p", "ok"), "type": "done"},
            "op type must be one of invoke, ok, fail, info, got 'done'",
        ),
        ({**op(0, "p", "ok"), "index": -1}, "op index must be an integer >= 0, got -1"),
        ({**op(0, "p", "ok"), "time_ns": 1.5}, "op time_ns must be an integer >= 0, got 1.5"),
        ({**op(0, "p", "ok"), "process": 3}, "op 0: process and f must be strings"),
        ({**op(0, "p", "ok"), "error": 3}, "op 0: error must be a string or None"),
        ({**op(0, "p", "ok"), "extra": 1, "more": 2}, "op has unknown field(s): extra, more"),
        ({"index": 0, "type": "ok"}, "op is missing time_ns, process, f"),
    ],
)
def test_bad_ops_raise_config_error(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Op.from_dict(data)
    assert str(caught.value) == message


def test_history_rejects_unordered_indices() -> None:
    with pytest.raises(ConfigError, match=r"^history indices must increase: 1 after 1$"):
        History([op(0, "a", "invoke"), op(1, "a", "ok"), op(1, "b", "invoke")])


def test_pairs_reject_completions_of_nothing_and_double_invocations() -> None:
    with pytest.raises(ConfigError, match=r"^op 1: ok 'publish' by 'p9' completes no invocation$"):
        History([op(0, "p0", "invoke"), op(1, "p9", "ok")]).pairs()
    with pytest.raises(
        ConfigError, match=r"^op 1: process 'p0' invoked 'publish' while op 0 is open$"
    ):
        History([op(0, "p0", "invoke"), op(1, "p0", "invoke")]).pairs()


def test_happened_says_what_each_outcome_means() -> None:
    pairs = HISTORY.pairs()
    # ok: it happened; info: it may or may not have; fail: it did not; pending: unknown
    assert [p.happened for p in pairs] == [True, None, None, False, None]


def test_a_pairs_value_is_its_completions_when_the_completion_has_one() -> None:
    read = History(
        [
            op(0, "p0", "invoke", f="read"),
            op(1, "p0", "ok", f="read", value=[1, 2]),
            op(2, "p0", "invoke", f="write", value=3),
            op(3, "p0", "info", f="write", error="timeout"),
        ]
    ).pairs()
    assert [p.value for p in read] == [[1, 2], 3]


def test_a_completion_must_complete_the_operation_its_process_invoked() -> None:
    with pytest.raises(
        ConfigError, match=r"^op 1: ok 'read' by 'p0' completes 'publish' \(op 0\)$"
    ):
        History([op(0, "p0", "invoke"), op(1, "p0", "ok", f="read")]).pairs()


def test_processes_pair_independently_however_their_ops_interleave() -> None:
    history = History(
        [
            op(0, "p0", "invoke", value="a"),
            op(1, "p1", "invoke", value="b"),
            op(2, "p2", "invoke", value="c"),
            op(3, "p1", "fail", value="b"),
            op(4, "p1", "invoke", value="d"),
            op(5, "p2", "info", value="c"),
            op(6, "p0", "ok", value="a"),
            op(7, "p2", "invoke", value="e"),
        ]
    )
    assert [(p.invoke.value, p.outcome) for p in history.pairs()] == [
        ("a", "ok"),
        ("b", "fail"),
        ("c", "info"),
        ("d", "pending"),
        ("e", "pending"),
    ]
