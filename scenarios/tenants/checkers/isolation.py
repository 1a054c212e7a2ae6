"""tenant_isolation: no response to a tenant ever holds another tenant's row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.text import listing, natural, plural
from scenarios.tenants.checkers import state
from scenarios.tenants.checkers.state import PACK

NAME = "tenant_isolation"


def _whose(row: dict[str, Any], asker: str) -> str:
    """Whose a foreign row is: its owner, or (stored under the asker) who sent its note."""
    return row["owner"] if row["owner"] != asker else "/".join(row["sent_by"])


@register(NAME, pack=PACK)
def tenant_isolation(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """Every row of every successful response (workload and recovery probes) belongs to the
    tenant that asked: its owner in app.items, as the harness read it, is that tenant, and
    its note was not sent by another tenant only. A row that is in no table is a
    violation too: the response invented it."""
    table = state.items(final_state)
    reqs = state.requests(history)
    sent_by = state.posters(reqs)
    leaks: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    answered = 0
    for req in reqs:
        if req.outcome != "ok":
            continue
        answered += 1
        probe = req.invoke.process == state.PROBE
        foreign = []
        for row_id, body in req.rows():
            row = table.get(row_id)
            if row is None:
                unknown.append({"op": req.invoke.index, "tenant": req.tenant, "id": row_id})
                continue
            senders = sorted(sent_by.get(body, set()))
            if row.tenant != req.tenant or (senders and req.tenant not in senders):
                foreign.append({"id": row_id, "owner": row.tenant, "sent_by": senders})
        if foreign:
            leaks.append(
                {
                    "op": req.invoke.index,
                    "request": req.label(),
                    "tenant": req.tenant,
                    "probe": probe,
                    "rows": foreign,
                }
            )
    evidence = {"responses_checked": answered, "leaks": leaks, "unknown_rows": unknown}
    sentences = []
    if leaks:
        shown = []
        for leak in leaks:
            whose = natural(_whose(row, leak["tenant"]) for row in leak["rows"])
            ids = natural(row["id"] for row in leak["rows"])
            shown.append(
                f"{leak['request']} got {plural(len(ids), 'row')} of {' and '.join(whose)} "
                f"({listing(ids, 5)})"
            )
        sentences.append(
            f"{len(leaks)} of {answered} responses{state.probes_among(leaks)} held another "
            "tenant's rows: " + listing(shown, 5)
        )
    if unknown:
        ids = natural(u["id"] for u in unknown)
        sentences.append(
            f"{plural(len(ids), 'row')} in responses {'is' if len(ids) == 1 else 'are'} "
            f"in no table: {listing(ids)}"
        )
    if sentences:
        return Verdict.violated(NAME, "; ".join(sentences) + ".", **evidence)
    return Verdict.holds(
        NAME, f"each of the {answered} responses held only the asking tenant's rows.", **evidence
    )
