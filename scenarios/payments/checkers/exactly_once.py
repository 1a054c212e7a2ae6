"""exactly_once: every order of the workload is charged once at the gateway and once in Postgres."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.text import listing, natural, were
from scenarios.payments.checkers import state
from scenarios.payments.checkers.state import PACK

NAME = "exactly_once"
_PLACES = (("gateway", "at the gateway"), ("charges_table", "in the charges table"))


def _problems(counts: Counter[str], due: set[str]) -> dict[str, Any]:
    """Orders of the workload never charged, and orders charged more than once, at one
    place."""
    duplicated = {oid: counts[oid] for oid in natural(counts) if counts[oid] > 1}
    return {"uncharged": natural(due - set(counts)), "duplicated": duplicated}


def _sentences(problems: dict[str, Any], place: str, total: int) -> list[str]:
    out = []
    if problems["duplicated"]:
        dup = problems["duplicated"]
        ids = [f"{oid} (x{n})" for oid, n in dup.items()]
        out.append(
            f"{len(dup)} of {total} orders {were(len(dup))} charged more than once "
            f"{place}: {listing(ids)}"
        )
    if problems["uncharged"]:
        missing = problems["uncharged"]
        out.append(
            f"{len(missing)} of {total} orders {were(len(missing))} never charged "
            f"{place}: {listing(missing)}"
        )
    return out


@register(NAME, pack=PACK)
def exactly_once(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """Each order of the workload (planned, and published) has exactly one gateway charge
    and one charges row; no order (of the workload or not) is charged twice anywhere."""
    due = state.due(final_state)
    published = set(state.published(final_state))
    counts = {
        "gateway": Counter(c.order_id for c in state.gateway_charges(final_state)),
        "charges_table": Counter(c.order_id for c in state.charges(final_state)),
    }
    checked = due | set(counts["gateway"]) | set(counts["charges_table"])
    evidence: dict[str, Any] = {
        "orders_checked": len(checked),
        "orders": len(due),
        "published": len(published),
    }
    sentences: list[str] = []
    for key, place in _PLACES:
        evidence[key] = _problems(counts[key], due)
        sentences += _sentences(evidence[key], place, len(checked))
    if sentences:
        return Verdict.violated(NAME, "; ".join(sentences) + ".", **evidence)
    return Verdict.holds(
        NAME,
        f"each of the {len(due)} orders of the workload was charged exactly once at the "
        "gateway and once in the charges table.",
        **evidence,
    )
