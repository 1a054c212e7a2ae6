"""Invariants by name, and the package's public surface."""

from __future__ import annotations

import pytest

import invariants
from chaos.errors import ConfigError
from invariants.registry import REGISTRY, get, register
from invariants.verdict import Verdict

PAYMENTS = {"exactly_once", "no_lost_messages", "consistent_final_state"}


def test_payments_checkers_are_registered_by_name() -> None:
    assert PAYMENTS <= set(REGISTRY)
    for name in PAYMENTS:
        assert get(name).name == name
    assert invariants.get("exactly_once") is invariants.payments.exactly_once


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        get("exactly_twice")
    assert str(caught.value).startswith("unknown invariant 'exactly_twice' (known: ")
    assert "consistent_final_state, exactly_once" in str(caught.value)


def test_register_refuses_a_taken_name() -> None:
    with pytest.raises(ConfigError, match=r"^invariant 'exactly_once' is already registered$"):
        register("exactly_once")(lambda history, state: Verdict.holds("x", ""))


def test_register_and_describe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("invariants.registry.REGISTRY", dict(REGISTRY))

    @register("always")
    def always(history: invariants.History, final_state: object) -> Verdict:
        """Always holds."""
        return Verdict.holds("always", "fine.")

    assert get("always") is always
    assert always.description == "Always holds."
    assert "always" not in REGISTRY


def test_public_surface() -> None:
    assert set(invariants.__all__) == {
        "NEMESIS",
        "REGISTRY",
        "FunctionInvariant",
        "History",
        "Invariant",
        "Op",
        "OpType",
        "Pair",
        "Validity",
        "Verdict",
        "get",
        "payments",
        "register",
        "run_checkers",
    }
    assert set(invariants.payments.__all__) == {
        "MalformedState",
        "consistent_final_state",
        "exactly_once",
        "no_lost_messages",
    }
