"""run_checkers never raises: crashes and wrong return values become unknown verdicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ground.errors import ConfigError
from invariants.base import FunctionInvariant, Invariant, run_checkers
from invariants.history import History
from invariants.verdict import Verdict


def holds(history: History, final_state: Mapping[str, Any]) -> Verdict:
    return Verdict.holds("holds", f"{len(history)} ops, {len(final_state)} keys")


def crashes(history: History, final_state: Mapping[str, Any]) -> Verdict:
    return Verdict.holds("crashes", str(final_state["missing"]))


def returns_none(history: History, final_state: Mapping[str, Any]) -> Any:
    return None


class Interrupt(BaseException):
    pass


def interrupts(history: History, final_state: Mapping[str, Any]) -> Verdict:
    raise Interrupt


def test_crashes_and_bad_returns_become_unknown_in_order() -> None:
    checkers = [
        FunctionInvariant("holds", holds),
        FunctionInvariant("crashes", crashes),
        FunctionInvariant("returns_none", returns_none),
    ]
    verdicts = run_checkers(checkers, History(), {"a": 1})
    assert [v.name for v in verdicts] == ["holds", "crashes", "returns_none"]
    assert verdicts[0] == Verdict("holds", True, "0 ops, 1 keys", {})
    assert verdicts[1] == Verdict(
        "crashes", "unknown", "checker crashed: KeyError: 'missing'", {"error_type": "KeyError"}
    )
    assert verdicts[2] == Verdict(
        "returns_none", "unknown", "checker returned NoneType, not a Verdict"
    )


def test_base_exceptions_such_as_cancellation_propagate() -> None:
    with pytest.raises(Interrupt):
        run_checkers([FunctionInvariant("interrupts", interrupts)], History(), {})


def test_function_invariant_is_an_invariant() -> None:
    assert isinstance(FunctionInvariant("holds", holds), Invariant)


def test_verdict_round_trip_and_validation() -> None:
    verdict = Verdict.violated("x", "it broke.", ids=["o-1"])
    assert verdict.valid is False
    assert Verdict.from_dict(verdict.to_dict()) == verdict
    assert Verdict.unknown("x", "?").valid == "unknown"
    with pytest.raises(
        ConfigError, match=r"^verdict valid must be True, False or 'unknown', got 1$"
    ):
        Verdict("x", 1, "")  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError, match=r"^verdict valid must be True, False or 'unknown', got 'maybe'$"
    ):
        Verdict.from_dict({"name": "x", "valid": "maybe", "explanation": ""})
    with pytest.raises(ConfigError, match=r"^verdict is missing 'explanation'$"):
        Verdict.from_dict({"name": "x", "valid": True})
    with pytest.raises(ConfigError, match=r"^verdict evidence must be a map, got list$"):
        Verdict.from_dict({"name": "x", "valid": True, "explanation": "", "evidence": []})
