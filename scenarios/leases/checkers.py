"""The leases pack's own checker (importing this module registers it under ``leases``).

The safety checkers are generic (``invariants.fencing``, ``invariants.exclusive_leases``);
this one says whether the job ran at all, and ran again once the faults were gone. A worker
that never writes breaks no safety invariant: it must still fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.leases import Sources, seconds
from invariants.text import plural

PACK = "leases"
NAME = "job_recovered"
#: The nemesis phases that change the faults in force (``not_triggered`` changes nothing).
FAULT_CHANGES = ("apply", "heal")


@register(NAME, pack=PACK)
def job_recovered(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """The store accepted writes, and accepted one after the last fault was applied or
    healed (a fault that never triggered changed nothing): the singleton job runs again
    once the faults are gone."""
    sources = Sources.from_state(final_state)
    accepted = [
        op
        for op in history
        if op.process in sources.resource and op.f == "write" and op.type == "ok"
    ]
    faults = [op for op in history.nemesis() if _phase(op) in FAULT_CHANGES]
    last = faults[-1] if faults else None
    after = [op for op in accepted if last is None or op.index > last.index]
    evidence: dict[str, Any] = {
        "accepted": len(accepted),
        "last_fault_s": None if last is None else last.time_ns / 1e9,
        "accepted_after": len(after),
    }
    if not accepted:
        return Verdict.violated(NAME, "the store accepted no write: the job never ran.", **evidence)
    if last is not None and not after:
        return Verdict.violated(
            NAME,
            f"the job did not recover: the store accepted {plural(len(accepted), 'write')}, "
            f"none after the last fault event ({last.f} {_phase(last)} at "
            f"{seconds(last.time_ns / 1e9)}).",
            **evidence,
        )
    first = after[0]
    value = first.value if isinstance(first.value, Mapping) else {}
    if last is None:
        return Verdict.holds(
            NAME, f"the job ran: the store accepted {plural(len(accepted), 'write')}.", **evidence
        )
    return Verdict.holds(
        NAME,
        f"the job recovered: after the last fault event ({last.f} {_phase(last)} at "
        f"{seconds(last.time_ns / 1e9)}) the store accepted {plural(len(after), 'write')}, the "
        f"first by {value.get('writer')} {_under(value.get('token'))} at "
        f"{seconds(first.time_ns / 1e9)}.",
        **evidence,
    )


def _under(token: Any) -> str:
    return "without a fencing token" if token is None else f"under token {token}"


def _phase(op: Any) -> str:
    value = op.value if isinstance(op.value, Mapping) else {}
    return str(value.get("phase", op.type))


__all__ = ["NAME", "PACK", "job_recovered"]
