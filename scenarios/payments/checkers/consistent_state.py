"""consistent_final_state: balances, ledger, charges and the gateway all tell the same story."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.text import listing, natural, plural, were
from scenarios.payments.checkers import state
from scenarios.payments.checkers.state import PACK

NAME = "consistent_final_state"


def _totals(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for key, amount in pairs:
        totals[key] += amount
    return dict(totals)


def _accounts(final_state: Mapping[str, Any], orders: dict[str, state.Order]) -> dict[str, Any]:
    """Per account: balance, ledger sum and charges sum, for every account that disagrees."""
    balances = state.balances(final_state)
    ledger = _totals((e.account, e.amount_cents) for e in state.ledger(final_state))
    charged = _totals(
        (orders[c.order_id].account, c.amount_cents)
        for c in state.charges(final_state)
        if c.order_id in orders
    )
    accounts = natural([*balances, *ledger, *charged])
    sums = {a: (balances.get(a, 0), ledger.get(a, 0), charged.get(a, 0)) for a in accounts}
    return {
        "checked": len(accounts),
        "mismatched": {
            a: {"balance": b, "ledger": led, "charges": c}
            for a, (b, led, c) in sums.items()
            if not b == led == c
        },
    }


def _orders(final_state: Mapping[str, Any], orders: dict[str, state.Order]) -> dict[str, Any]:
    """Gateway vs Postgres per order, charge amounts vs order amounts, unknown order ids."""
    gateway = _totals((c.order_id, c.amount_cents) for c in state.gateway_charges(final_state))
    rows = state.charges(final_state)
    postgres = _totals((c.order_id, c.amount_cents) for c in rows)
    both = set(gateway) & set(postgres)
    ledger_ids = {e.order_id for e in state.ledger(final_state)}
    wrong: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        if row.order_id in orders and row.amount_cents != orders[row.order_id].amount_cents:
            wrong[row.order_id].append(row.amount_cents)
    return {
        "charged": len(set(gateway) | set(postgres)),
        "gateway_only": natural(set(gateway) - set(postgres)),
        "postgres_only": natural(set(postgres) - set(gateway)),
        "amount_mismatch": {
            o: {"gateway": gateway[o], "postgres": postgres[o]}
            for o in natural(both)
            if gateway[o] != postgres[o]
        },
        "wrong_amount": {
            o: {"order": orders[o].amount_cents, "charged": wrong[o]} for o in natural(wrong)
        },
        "unknown_orders": natural((set(gateway) | set(postgres) | ledger_ids) - set(orders)),
    }


def _sentences(accounts: dict[str, Any], found: dict[str, Any]) -> list[str]:
    out = []
    bad = accounts["mismatched"]
    if bad:
        shown = [
            f"{a} (balance {v['balance']}, ledger {v['ledger']}, charges {v['charges']})"
            for a, v in bad.items()
        ]
        out.append(f"{plural(len(bad), 'account')} do not balance: {listing(shown)}")
    for key, what in (
        ("gateway_only", "charged at the gateway but not in Postgres"),
        ("postgres_only", "charged in Postgres but not at the gateway"),
        ("unknown_orders", "charged or in the ledger but missing from the orders table"),
    ):
        if found[key]:
            n = len(found[key])
            out.append(f"{plural(n, 'order')} {were(n)} {what}: {listing(found[key])}")
    if found["amount_mismatch"]:
        shown = [
            f"{o} (gateway {v['gateway']}, Postgres {v['postgres']})"
            for o, v in found["amount_mismatch"].items()
        ]
        n = len(shown)
        out.append(f"{plural(n, 'order')} {were(n)} charged different amounts: {listing(shown)}")
    if found["wrong_amount"]:
        shown = [
            f"{o} (order {v['order']}, charged {', '.join(map(str, v['charged']))})"
            for o, v in found["wrong_amount"].items()
        ]
        n = len(shown)
        out.append(f"{plural(n, 'order')} {were(n)} charged a wrong amount: {listing(shown)}")
    return out


@register(NAME, pack=PACK)
def consistent_final_state(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """For every account, balance == ledger sum == charges sum; gateway and Postgres charges
    agree per order; charged amounts equal order amounts; every id is a known order."""
    orders = state.orders(final_state)
    accounts = _accounts(final_state, orders)
    found = _orders(final_state, orders)
    evidence = {"accounts": accounts, **found}
    sentences = _sentences(accounts, found)
    if sentences:
        return Verdict.violated(NAME, "; ".join(sentences) + ".", **evidence)
    n_accounts, n_orders = plural(accounts["checked"], "account"), found["charged"]
    return Verdict.holds(
        NAME,
        f"the balances of {n_accounts} equal their ledger and charges, and the gateway and "
        f"Postgres agree on {plural(n_orders, 'charged order')}.",
        **evidence,
    )
