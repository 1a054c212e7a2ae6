"""The payments checkers on hand-written final states: valid, each violation, malformed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from invariants import History, get, run_checkers
from scenarios.payments.checkers import (
    PACK,
    consistent_final_state,
    exactly_once,
    no_lost_messages,
)

ORDERS = {
    "o-1": ("acct-a", 100),
    "o-2": ("acct-b", 250),
    "o-10": ("acct-a", 40),
    "o-11": ("acct-b", 5),
}
EMPTY = History()


def golden() -> dict[str, Any]:
    """Every order published, charged once, recorded once, ledgered, balanced."""
    return {
        "published": list(ORDERS),
        "orders": {o: {"account": a, "amount_cents": c} for o, (a, c) in ORDERS.items()},
        "gateway_charges": [
            {"order_id": o, "idempotency_key": f"key-{o}", "amount_cents": c}
            for o, (_, c) in ORDERS.items()
        ],
        "charges": [
            {"order_id": o, "amount_cents": c, "id": i}
            for i, (o, (_, c)) in enumerate(ORDERS.items())
        ],
        "ledger": [
            {"order_id": o, "account": a, "amount_cents": c} for o, (a, c) in ORDERS.items()
        ],
        "balances": {"acct-a": 140, "acct-b": 255},
    }


def test_golden_state_holds_everywhere() -> None:
    state = golden()
    once = exactly_once.check(EMPTY, state)
    assert once.valid is True
    assert once.explanation == (
        "each of the 4 orders of the workload was charged exactly once at the gateway and "
        "once in the charges table."
    )
    assert once.evidence == {
        "orders_checked": 4,
        "orders": 4,
        "published": 4,
        "gateway": {"uncharged": [], "duplicated": {}},
        "charges_table": {"uncharged": [], "duplicated": {}},
    }
    lost = no_lost_messages.check(EMPTY, state)
    assert lost.valid is True
    assert lost.explanation == "each of the 4 orders of the workload has a charge."
    consistent = consistent_final_state.check(EMPTY, state)
    assert consistent.valid is True
    assert consistent.explanation == (
        "the balances of 2 accounts equal their ledger and charges, and the gateway and "
        "Postgres agree on 4 charged orders."
    )
    assert consistent.evidence == {
        "accounts": {"checked": 2, "mismatched": {}},
        "charged": 4,
        "gateway_only": [],
        "postgres_only": [],
        "amount_mismatch": {},
        "wrong_amount": {},
        "unknown_orders": [],
    }


def test_duplicate_gateway_charges_break_exactly_once_and_consistency() -> None:
    state = golden()
    state["gateway_charges"] += [
        {"order_id": "o-10", "idempotency_key": "retry-1", "amount_cents": 40},
        {"order_id": "o-2", "idempotency_key": "retry-2", "amount_cents": 250},
        {"order_id": "o-10", "idempotency_key": "retry-3", "amount_cents": 40},
    ]
    once = exactly_once.check(EMPTY, state)
    assert once.valid is False
    assert once.explanation == (
        "2 of 4 orders were charged more than once at the gateway: o-2 (x2), o-10 (x3)."
    )
    assert once.evidence["gateway"] == {"uncharged": [], "duplicated": {"o-2": 2, "o-10": 3}}
    assert once.evidence["charges_table"] == {"uncharged": [], "duplicated": {}}
    consistent = consistent_final_state.check(EMPTY, state)
    assert consistent.valid is False
    assert consistent.explanation == (
        "2 orders were charged different amounts: o-2 (gateway 500, Postgres 250), "
        "o-10 (gateway 120, Postgres 40)."
    )
    assert no_lost_messages.check(EMPTY, state).valid is True


def test_duplicate_rows_and_unpublished_duplicates_count() -> None:
    state = golden()
    state["published"].remove("o-11")  # its publish looked failed, but it was processed twice
    state["charges"].append({"order_id": "o-11", "amount_cents": 5})
    once = exactly_once.check(EMPTY, state)
    assert once.explanation == (
        "1 of 4 orders was charged more than once in the charges table: o-11 (x2)."
    )
    assert once.evidence["published"] == 3


def test_a_lost_message_is_missing_everywhere() -> None:
    state = golden()
    state["gateway_charges"] = [c for c in state["gateway_charges"] if c["order_id"] != "o-10"]
    state["charges"] = [c for c in state["charges"] if c["order_id"] != "o-10"]
    state["ledger"] = [e for e in state["ledger"] if e["order_id"] != "o-10"]
    state["balances"]["acct-a"] = 100
    lost = no_lost_messages.check(EMPTY, state)
    assert lost.valid is False
    assert lost.explanation == "1 of 4 orders of the workload has no charge: o-10."
    assert lost.evidence == {
        "orders": 4,
        "published": 4,
        "missing": ["o-10"],
        "gateway_only": [],
        "unpublished": [],
    }
    once = exactly_once.check(EMPTY, state)
    assert once.explanation == (
        "1 of 4 orders was never charged at the gateway: o-10; "
        "1 of 4 orders was never charged in the charges table: o-10."
    )
    assert consistent_final_state.check(EMPTY, state).valid is True


def test_orders_the_producer_never_published_are_still_due() -> None:
    """The checkers cover the workload's plan, not only what got published: a consumer
    that kept the producer from publishing (it deleted the stream, say) gains nothing."""
    state = golden()
    state["published"] = ["o-1"]
    for key in ("gateway_charges", "charges", "ledger"):
        state[key] = [c for c in state[key] if c["order_id"] == "o-1"]
    state["balances"] = {"acct-a": 100}
    lost = no_lost_messages.check(EMPTY, state)
    assert lost.valid is False
    assert lost.explanation == (
        "3 of 4 orders of the workload have no charge: o-2, o-10, o-11 (3 of them were never "
        "published: o-2, o-10, o-11)."
    )
    once = exactly_once.check(EMPTY, state)
    assert once.valid is False
    assert once.evidence["gateway"]["uncharged"] == ["o-2", "o-10", "o-11"]


def test_charged_at_the_gateway_but_never_recorded() -> None:
    state = golden()
    state["charges"] = [c for c in state["charges"] if c["order_id"] not in ("o-1", "o-2")]
    state["ledger"] = [e for e in state["ledger"] if e["order_id"] not in ("o-1", "o-2")]
    state["balances"] = {"acct-a": 40, "acct-b": 5}
    lost = no_lost_messages.check(EMPTY, state)
    assert lost.explanation == (
        "2 of 4 orders of the workload have no charge: o-1, o-2 (2 of them were charged at "
        "the gateway but not recorded: o-1, o-2)."
    )
    assert lost.evidence["gateway_only"] == ["o-1", "o-2"]
    consistent = consistent_final_state.check(EMPTY, state)
    assert consistent.explanation == (
        "2 orders were charged at the gateway but not in Postgres: o-1, o-2."
    )
    assert consistent.evidence["gateway_only"] == ["o-1", "o-2"]


def test_unbalanced_accounts_wrong_amounts_and_unknown_orders() -> None:
    state = golden()
    state["balances"]["acct-a"] = 999
    state["charges"][3]["amount_cents"] = 7  # o-11: order says 5
    state["gateway_charges"][3]["amount_cents"] = 7
    state["ledger"][3]["amount_cents"] = 7
    state["balances"]["acct-b"] = 257
    state["ledger"].append({"order_id": "o-99", "account": "acct-c", "amount_cents": 1})
    state["charges"].append({"order_id": "o-99", "amount_cents": 1})
    state["gateway_charges"].append(
        {"order_id": "o-99", "idempotency_key": None, "amount_cents": 1}
    )
    result = consistent_final_state.check(EMPTY, state)
    assert result.valid is False
    assert result.explanation == (
        "2 accounts do not balance: acct-a (balance 999, ledger 140, charges 140), "
        "acct-c (balance 0, ledger 1, charges 0); "
        "1 order was charged or in the ledger but missing from the orders table: o-99; "
        "1 order was charged a wrong amount: o-11 (order 5, charged 7)."
    )
    assert result.evidence["accounts"] == {
        "checked": 3,
        "mismatched": {
            "acct-a": {"balance": 999, "ledger": 140, "charges": 140},
            "acct-c": {"balance": 0, "ledger": 1, "charges": 0},
        },
    }
    assert result.evidence["wrong_amount"] == {"o-11": {"order": 5, "charged": [7]}}
    assert result.evidence["unknown_orders"] == ["o-99"]


def test_postgres_only_charges() -> None:
    state = golden()
    state["gateway_charges"].pop(0)
    result = consistent_final_state.check(EMPTY, state)
    assert result.explanation == ("1 order was charged in Postgres but not at the gateway: o-1.")


def test_long_lists_are_cut_with_a_count() -> None:
    state = golden()
    state["published"] = [f"o-{i}" for i in range(1, 31)]
    result = no_lost_messages.check(EMPTY, state)
    assert result.explanation == (
        "26 of 30 orders of the workload have no charge: o-3, o-4, o-5, o-6, o-7, o-8, o-9, "
        "o-12, o-13, o-14 and 16 more."
    )
    assert len(result.evidence["missing"]) == 26


@pytest.mark.parametrize(
    ("edit", "names", "explanation"),
    [
        (
            lambda s: s.pop("published"),
            {"exactly_once", "no_lost_messages"},
            "checker crashed: MalformedState: final_state has no 'published'",
        ),
        (
            lambda s: s.update(published="o-1"),
            {"exactly_once", "no_lost_messages"},
            "checker crashed: MalformedState: final_state['published'] must be a list, got 'o-1'",
        ),
        (
            lambda s: s["charges"][1].pop("amount_cents"),
            {"exactly_once", "no_lost_messages", "consistent_final_state"},
            "checker crashed: MalformedState: final_state['charges'][1] has no 'amount_cents'",
        ),
        (
            lambda s: s["gateway_charges"][0].update(amount_cents="100"),
            {"exactly_once", "no_lost_messages", "consistent_final_state"},
            "checker crashed: MalformedState: final_state['gateway_charges'][0]['amount_cents'] "
            "must be int, got '100'",
        ),
        (
            lambda s: s["balances"].update({"acct-a": True}),
            {"consistent_final_state"},
            "checker crashed: MalformedState: final_state['balances']['acct-a'] must be int, "
            "got True",
        ),
        (
            lambda s: s["orders"].update({"o-1": ["acct-a", 100]}),
            {"consistent_final_state"},
            "checker crashed: MalformedState: final_state['orders']['o-1'] must be a map, got list",
        ),
        (
            lambda s: s["ledger"].append(None),
            {"consistent_final_state"},
            "checker crashed: MalformedState: final_state['ledger'][4] must be a map, got NoneType",
        ),
    ],
)
def test_malformed_state_gives_unknown(edit: Any, names: set[str], explanation: str) -> None:
    state = golden()
    edit(state)
    all_three = ["exactly_once", "no_lost_messages", "consistent_final_state"]
    verdicts = run_checkers([get(n, pack=PACK) for n in all_three], EMPTY, state)
    unknown = {v.name for v in verdicts if v.valid == "unknown"}
    assert unknown == names
    assert {v.explanation for v in verdicts if v.valid == "unknown"} == {explanation}
    assert all(v.valid is True for v in verdicts if v.name not in names)


def test_final_state_must_be_a_map() -> None:
    (verdict,) = run_checkers([get("exactly_once", pack=PACK)], EMPTY, copy.copy([]))  # type: ignore[arg-type]
    assert (
        verdict.explanation
        == "checker crashed: MalformedState: final_state must be a map, got list"
    )


def test_checkers_are_pure() -> None:
    state = golden()
    before = copy.deepcopy(state)
    for name in ("exactly_once", "no_lost_messages", "consistent_final_state"):
        first = get(name, pack=PACK).check(EMPTY, state)
        assert get(name, pack=PACK).check(EMPTY, state) == first
    assert state == before


def test_tuples_read_like_lists() -> None:
    state = golden()
    state = {k: tuple(v) if isinstance(v, list) else v for k, v in state.items()}
    assert all(
        get(n, pack=PACK).check(EMPTY, state).valid is True
        for n in ("exactly_once", "no_lost_messages", "consistent_final_state")
    )
