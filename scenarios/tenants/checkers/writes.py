"""no_cross_tenant_writes: every stored note is in the partition of the tenant that sent it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.text import listing, natural, plural, were
from scenarios.tenants.checkers import state
from scenarios.tenants.checkers.state import PACK

NAME = "no_cross_tenant_writes"


@register(NAME, pack=PACK)
def no_cross_tenant_writes(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """In app.items as the harness read it: each row's note was sent by a create request of
    the row's owner (not only by another tenant, and not by nobody), and each note a tenant
    got acknowledged is stored in that tenant's rows."""
    table = state.items(final_state)
    reqs = state.requests(history)
    sent_by = state.posters(reqs)
    misplaced: dict[str, dict[str, Any]] = {}
    unasked: list[str] = []
    for row_id, row in table.items():
        senders = sent_by.get(row.body)
        if not senders:
            unasked.append(row_id)
        elif row.tenant not in senders:
            misplaced[row_id] = {"owner": row.tenant, "sent_by": sorted(senders)}
    stored = {(row.tenant, row.body) for row in table.values()}
    missing: list[dict[str, Any]] = [
        {"op": req.invoke.index, "request": req.label(), "tenant": req.tenant}
        for req in reqs
        if req.f == "create" and req.outcome == "ok" and (req.tenant, req.body) not in stored
    ]
    evidence: dict[str, Any] = {
        "rows_checked": len(table),
        "misplaced": misplaced,
        "unasked": natural(unasked),
        "acknowledged_missing": missing,
    }
    sentences = []
    if misplaced:
        shown = [
            f"{rid} (owner {misplaced[rid]['owner']}, sent by "
            f"{'/'.join(misplaced[rid]['sent_by'])})"
            for rid in natural(misplaced)
        ]
        sentences.append(
            f"{plural(len(misplaced), 'row')} {were(len(misplaced))} written into another "
            f"tenant's partition: {listing(shown, 5)}"
        )
    if unasked:
        sentences.append(
            f"{plural(len(unasked), 'row')} hold{'s' if len(unasked) == 1 else ''} a note no "
            f"request sent: {listing(natural(unasked))}"
        )
    if missing:
        sentences.append(
            f"{plural(len(missing), 'acknowledged create')} {'is' if len(missing) == 1 else 'are'}"
            f" not stored under its tenant: {listing([m['request'] for m in missing], 5)}"
        )
    if sentences:
        return Verdict.violated(NAME, "; ".join(sentences) + ".", **evidence)
    return Verdict.holds(
        NAME,
        f"each of the {len(table)} stored notes is in the partition of the tenant that sent "
        f"it, and every acknowledged create is stored.",
        **evidence,
    )
