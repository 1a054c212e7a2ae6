"""no_lost_messages: every order of the workload ends up with a row in the charges table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.text import listing, natural, plural, were
from scenarios.payments.checkers import state
from scenarios.payments.checkers.state import PACK

NAME = "no_lost_messages"


@register(NAME, pack=PACK)
def no_lost_messages(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """Each order of the workload (planned, and published) has a charge in Postgres (the
    system of record)."""
    due = state.due(final_state)
    published = set(state.published(final_state))
    recorded = {c.order_id for c in state.charges(final_state)}
    at_gateway = {c.order_id for c in state.gateway_charges(final_state)}
    missing = natural(due - recorded)
    gateway_only = natural(set(missing) & at_gateway)
    unpublished = natural(set(missing) - published)
    evidence = {
        "orders": len(due),
        "published": len(published),
        "missing": missing,
        "gateway_only": gateway_only,
        "unpublished": unpublished,
    }
    if not missing:
        return Verdict.holds(
            NAME, f"each of the {len(due)} orders of the workload has a charge.", **evidence
        )
    explanation = (
        f"{len(missing)} of {plural(len(due), 'order')} of the workload "
        f"{'has' if len(missing) == 1 else 'have'} no charge: {listing(missing)}"
    )
    notes = []
    if gateway_only:
        notes.append(
            f"{len(gateway_only)} of them {were(len(gateway_only))} charged at the gateway "
            f"but not recorded: {listing(gateway_only)}"
        )
    if unpublished:
        notes.append(
            f"{len(unpublished)} of them {were(len(unpublished))} never published: "
            f"{listing(unpublished)}"
        )
    if notes:
        explanation += f" ({'; '.join(notes)})"
    return Verdict.violated(NAME, explanation + ".", **evidence)
