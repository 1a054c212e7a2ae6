"""read_your_writes: creates are acknowledged, and a tenant's lists show what it wrote."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.text import listing, plural, were
from scenarios.tenants.checkers import state
from scenarios.tenants.checkers.state import PACK

NAME = "read_your_writes"


@register(NAME, pack=PACK)
def read_your_writes(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """Every create is acknowledged in the end (the client retries with the same key), and
    every list of the workload served; every successful list of a tenant holds each note
    acknowledged to that tenant before the list was asked for; and after the faults heal
    every tenant's list is served (a ``probe`` list succeeds for each tenant)."""
    reqs = state.requests(history)
    unacknowledged = [req.label() for req in reqs if req.f == "create" and req.outcome != "ok"]
    # a list refused (4xx, 501) or never answered is one nothing was checked on: a program
    # that refused every list while its database was flaky hid whatever its lists got wrong
    unserved = [
        req.label()
        for req in reqs
        if req.f == "list" and req.invoke.process != state.PROBE and req.outcome != "ok"
    ]
    acked: list[tuple[int, str, str]] = []  # (completion index, tenant, note)
    short: list[dict[str, Any]] = []
    lists = 0
    recovered: set[str] = set()
    for req in sorted(reqs, key=lambda r: r.invoke.index):
        if req.outcome != "ok" or req.completion is None:
            continue
        if req.f == "create":
            acked.append((req.completion.index, req.tenant, req.body))
            continue
        lists += 1
        if req.invoke.process == state.PROBE:
            recovered.add(req.tenant)
        seen = {body for _, body in req.rows()}
        due = [note for done, who, note in acked if who == req.tenant and done < req.invoke.index]
        lost = [note for note in due if note not in seen]
        if lost:
            short.append(
                {
                    "op": req.invoke.index,
                    "request": req.label(),
                    "probe": req.invoke.process == state.PROBE,
                    "missing": lost,
                }
            )
    never = [t for t in state.tenants(final_state) if t not in recovered]
    evidence = {
        "lists_checked": lists,
        "acknowledged": len(acked),
        "unacknowledged": unacknowledged,
        "unserved_lists": unserved,
        "short_lists": short,
        "not_recovered": never,
    }
    sentences = []
    if unacknowledged:
        count = len(unacknowledged)
        sentences.append(
            f"{plural(count, 'create')} {were(count)} never acknowledged: "
            f"{listing(unacknowledged, 5)}"
        )
    if unserved:
        count = len(unserved)
        sentences.append(
            f"{plural(count, 'list')} of the workload {were(count)} never served: "
            f"{listing(unserved, 5)}"
        )
    if short:
        shown = [f"{s['request']} lacked {plural(len(s['missing']), 'note')}" for s in short]
        sentences.append(
            f"{len(short)} of {lists} lists{state.probes_among(short)} lacked notes "
            "acknowledged before them: " + listing(shown, 5)
        )
    if never:
        sentences.append(f"after the faults healed, no list was served to {listing(never)}")
    if sentences:
        return Verdict.violated(NAME, "; ".join(sentences) + ".", **evidence)
    return Verdict.holds(
        NAME,
        f"all {len(acked)} creates were acknowledged and each of the {lists} lists held every "
        "note acknowledged to its tenant before it.",
        **evidence,
    )
