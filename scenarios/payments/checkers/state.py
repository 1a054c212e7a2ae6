"""Reading the payments scenario's final state, with a precise error for each bad shape.

Each checker reads only the keys it needs, so a malformed ``balances`` does not hide an
``exactly_once`` violation. Rows may carry extra columns (ids, timestamps): they are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

#: The registry namespace of the payments checkers (the scenario's id).
PACK = "payments"


class MalformedState(ValueError):
    """``final_state`` does not have the documented shape (see docs/invariants.md)."""


class Order(NamedTuple):
    account: str
    amount_cents: int


class GatewayCharge(NamedTuple):
    order_id: str
    idempotency_key: str | None
    amount_cents: int


class Charge(NamedTuple):
    order_id: str
    amount_cents: int


class LedgerEntry(NamedTuple):
    order_id: str
    account: str
    amount_cents: int


def _field(row: Any, where: str, name: str, kind: type, optional: bool = False) -> Any:
    if not isinstance(row, Mapping):
        raise MalformedState(f"{where} must be a map, got {type(row).__name__}")
    if name not in row:
        raise MalformedState(f"{where} has no {name!r}")
    value = row[name]
    if (value is None and optional) or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise MalformedState(f"{where}[{name!r}] must be {kind.__name__}, got {value!r}")


def _entry(final_state: Mapping[str, Any], key: str, kind: type) -> Any:
    if not isinstance(final_state, Mapping):
        raise MalformedState(f"final_state must be a map, got {type(final_state).__name__}")
    if key not in final_state:
        raise MalformedState(f"final_state has no {key!r}")
    value = final_state[key]
    if kind is list and isinstance(value, tuple):
        return list(value)
    if not isinstance(value, kind):
        raise MalformedState(f"final_state[{key!r}] must be a {kind.__name__}, got {value!r}")
    return value


def published(final_state: Mapping[str, Any]) -> list[str]:
    """The order ids the producer published (duplicates kept; callers count distinct ids)."""
    ids: list[str] = _entry(final_state, "published", list)
    for i, order_id in enumerate(ids):
        if not isinstance(order_id, str):
            raise MalformedState(f"final_state['published'][{i}] must be str, got {order_id!r}")
    return ids


def due(final_state: Mapping[str, Any]) -> set[str]:
    """The orders that must be charged: every order of the workload's plan (``orders``),
    published or not (a producer kept from publishing is no excuse), and anything
    published."""
    planned = _entry(final_state, "orders", Mapping)
    for order_id in planned:
        if not isinstance(order_id, str):
            raise MalformedState(f"final_state['orders'][{order_id!r}]: order ids must be str")
    return set(planned) | set(published(final_state))


def orders(final_state: Mapping[str, Any]) -> dict[str, Order]:
    table = _entry(final_state, "orders", Mapping)
    out = {}
    for order_id, row in table.items():
        where = f"final_state['orders'][{order_id!r}]"
        if not isinstance(order_id, str):
            raise MalformedState(f"{where}: order ids must be str")
        out[order_id] = Order(
            _field(row, where, "account", str), _field(row, where, "amount_cents", int)
        )
    return out


def gateway_charges(final_state: Mapping[str, Any]) -> list[GatewayCharge]:
    rows = _entry(final_state, "gateway_charges", list)
    out = []
    for i, row in enumerate(rows):
        where = f"final_state['gateway_charges'][{i}]"
        out.append(
            GatewayCharge(
                _field(row, where, "order_id", str),
                _field(row, where, "idempotency_key", str, optional=True),
                _field(row, where, "amount_cents", int),
            )
        )
    return out


def charges(final_state: Mapping[str, Any]) -> list[Charge]:
    rows = _entry(final_state, "charges", list)
    return [
        Charge(
            _field(row, f"final_state['charges'][{i}]", "order_id", str),
            _field(row, f"final_state['charges'][{i}]", "amount_cents", int),
        )
        for i, row in enumerate(rows)
    ]


def ledger(final_state: Mapping[str, Any]) -> list[LedgerEntry]:
    rows = _entry(final_state, "ledger", list)
    out = []
    for i, row in enumerate(rows):
        where = f"final_state['ledger'][{i}]"
        out.append(
            LedgerEntry(
                _field(row, where, "order_id", str),
                _field(row, where, "account", str),
                _field(row, where, "amount_cents", int),
            )
        )
    return out


def balances(final_state: Mapping[str, Any]) -> dict[str, int]:
    table = _entry(final_state, "balances", Mapping)
    out = {}
    for account, balance in table.items():
        if not isinstance(account, str):
            raise MalformedState(f"final_state['balances'][{account!r}]: accounts must be str")
        if not isinstance(balance, int) or isinstance(balance, bool):
            raise MalformedState(
                f"final_state['balances'][{account!r}] must be int, got {balance!r}"
            )
        out[account] = balance
    return out
