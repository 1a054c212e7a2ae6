"""exclusive_leases: no two writers wrote under leases that were valid at the same time.

A lease is a promise of the lock service: until it runs out, nobody else holds it. When the
service grants a lease while another holder's lease is still valid (its expiry was computed
from a wrong clock, say), two workers believe they run the singleton job at once. This
checker reads the trusted authority's facts and the resource's accepted writes (see
``invariants.leases``) and reports every pair of leases of different holders whose validity
overlapped by more than the evidence's ``tolerance_s`` while both were written under.

Validity comes from the authority's facts only: from a grant to its ``until``; a renewal
sets a new ``until`` (it may shorten it); a release ends it. Overlapping leases that only one
holder wrote under did no harm to the resource and are listed in the evidence, not reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from invariants.history import History
from invariants.leases import Lease, read_evidence, seconds
from invariants.registry import register
from invariants.text import listing, plural
from invariants.verdict import Verdict

NAME = "exclusive_leases"


def overlap(a: Lease, b: Lease) -> float:
    """Seconds during which both leases were valid."""
    return sum(
        max(0.0, min(end_a, end_b) - max(start_a, start_b))
        for start_a, end_a in a.validity()
        for start_b, end_b in b.validity()
    )


def _label(lease: Lease) -> str:
    token = f"{lease.lease}/{lease.token}" if lease.lease else str(lease.token)
    return f"lease {token} of {lease.holder}"


@register(NAME)
def exclusive_leases(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """No two leases of different holders were valid at the same time with writes under
    both."""
    evidence = read_evidence(history, final_state)
    tolerance = evidence.sources.tolerance_s
    written = Counter(
        (w.lease, w.token) for w in evidence.accepted() if w.token is not None and not w.problem
    )
    leases = sorted(evidence.leases.values(), key=lambda lease: lease.granted.at)
    both: list[dict[str, Any]] = []
    one_sided: list[dict[str, Any]] = []
    for i, first in enumerate(leases):
        for second in leases[i + 1 :]:
            if second.lease != first.lease or second.holder == first.holder:
                continue
            seconds_both = overlap(first, second)
            if seconds_both <= tolerance:
                continue
            writes = (written[(first.lease, first.token)], written[(second.lease, second.token)])
            entry = {
                "lease": first.lease,
                "first": {"token": first.token, "holder": first.holder, "writes": writes[0]},
                "second": {"token": second.token, "holder": second.holder, "writes": writes[1]},
                "overlap_s": round(seconds_both, 6),
                "second_granted_s": second.granted.op.time_ns / 1e9,
            }
            (both if all(writes) else one_sided).append(entry)
    evidence_data = {
        "leases": len(leases),
        "tolerance_s": tolerance,
        "overlaps": both,
        "overlaps_written_by_one": one_sided,
        "writes": sum(written.values()),
    }
    if both:
        shown = [
            f"{_label(evidence.leases[(o['lease'], o['second']['token'])])} was granted at "
            f"{seconds(o['second_granted_s'])} while "
            f"{_label(evidence.leases[(o['lease'], o['first']['token'])])} was still valid "
            f"({seconds(o['overlap_s'])} of overlap), and both were written under "
            f"({o['first']['holder']}: {plural(o['first']['writes'], 'write')}, "
            f"{o['second']['holder']}: {plural(o['second']['writes'], 'write')})"
            for o in both
        ]
        return Verdict.violated(
            NAME,
            f"{plural(len(both), 'pair')} of leases overlapped: {listing(shown)}.",
            **evidence_data,
        )
    note = ""
    if one_sided:
        note = f" ({plural(len(one_sided), 'overlap')} had writes under only one lease)"
    holders = Counter(lease.holder for lease in leases)
    return Verdict.holds(
        NAME,
        f"no lease overlapped another holder's while both were written under "
        f"({plural(len(leases), 'lease')}, {plural(len(holders), 'holder')}){note}.",
        **evidence_data,
    )


__all__ = ["exclusive_leases", "overlap"]
