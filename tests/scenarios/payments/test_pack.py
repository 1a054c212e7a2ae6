"""The payments pack: its checkers register when it loads."""

from __future__ import annotations

import invariants
from chaos.scenario import load_scenario

NAMES = ("exactly_once", "no_lost_messages", "consistent_final_state")


def test_loading_the_pack_registers_its_checkers_under_its_name() -> None:
    payments = load_scenario("payments")
    assert set(NAMES) <= set(invariants.REGISTRY["payments"])
    assert not set(NAMES) & set(invariants.REGISTRY[None])  # the generic layer knows none
    assert [c.name for c in payments.checkers()] == list(NAMES)
