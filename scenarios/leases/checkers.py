"""The leases pack's own checkers (importing this module registers them under ``leases``).

The safety checkers are generic (``invariants.fencing``, ``invariants.exclusive_leases``);
``job_recovered`` says whether the job ran at all, and ran again once the faults were gone
(a worker that never writes breaks no safety invariant: it must still fail), and
``lease_failover`` whether the lease did its job: it passed on when its holder could not
hold it, and its holder ran the job. Without it, a lease taken once and never honoured
(worker-1 writes under token 1 for the whole run, the others idle) held every safety
invariant vacuously and scored 1.0 (``tests/grading/adversaries/leases_squatter.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants import History, Verdict, register
from invariants.leases import Sources, read_evidence, seconds
from invariants.text import listing, plural

PACK = "leases"
NAME = "job_recovered"
FAILOVER = "lease_failover"
#: The nemesis phases that change the faults in force (``not_triggered`` changes nothing).
FAULT_CHANGES = ("apply", "heal")
#: A worker counts as free this many TTLs after a fault on it (or on one of its links)
#: healed: time to reconnect, to restart after a crash, to see that the lease expired.
FREE_AFTER_TTLS = 2.0


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


Interval = tuple[float, float]


def _gaps(covered: list[Interval], start: float, end: float) -> list[Interval]:
    """The parts of ``[start, end]`` no interval of ``covered`` covers."""
    out, at = [], start
    for a, b in sorted(covered):
        if a > at:
            out.append((at, min(a, end)))
        at = max(at, b)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return [(a, b) for a, b in out if b > a]


def _merged(spans: list[Interval]) -> list[Interval]:
    """``spans`` as disjoint intervals (a lease's renewals follow each other)."""
    out: list[Interval] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _faults(history: History, workers: list[str], end: float) -> dict[str, list[Interval]]:
    """Per worker, the run-time intervals during which a fault was in force on it or on one
    of its links (``service:worker-1``, ``link:worker-1-postgres``); a fault never healed
    lasts to ``end``."""
    opened: dict[str, tuple[str, float]] = {}
    out: dict[str, list[Interval]] = {w: [] for w in workers}
    for op in history.nemesis():
        value = op.value if isinstance(op.value, Mapping) else {}
        target = str(value.get("target", "")).partition(":")[2]
        whose = [w for w in workers if target == w or target.startswith(f"{w}-")]
        if not whose:
            continue
        fault = str(value.get("fault_id", op.index))
        if _phase(op) == "apply":
            opened[fault] = (whose[0], op.time_ns / 1e9)
        elif _phase(op) == "heal" and fault in opened:
            worker, since = opened.pop(fault)
            out[worker].append((since, op.time_ns / 1e9))
    for worker, since in opened.values():
        out[worker].append((since, end))
    return out


def _free(faults: dict[str, list[Interval]], start: float, end: float, lead: float) -> list[str]:
    """The workers with no fault in force from ``lead`` seconds before ``start`` to ``end``."""
    return [
        w
        for w, spans in faults.items()
        if not any(a <= end and b + lead >= start for a, b in spans)
    ]


def _window(final_state: Mapping[str, Any]) -> tuple[float, float] | None:
    """``final_state["window_s"]``: the workload's start and the final state's time (run
    seconds, the harness's own record); None when no workload ran."""
    window = final_state.get("window_s")
    if (
        isinstance(window, list | tuple)
        and len(window) == 2
        and all(isinstance(t, int | float) and not isinstance(t, bool) for t in window)
    ):
        return float(window[0]), float(window[1])
    return None


@register(FAILOVER, pack=PACK)
def lease_failover(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """From the workload's start to the final state, the lease never stood vacant (no
    lease valid, by the audit's facts) for longer than its TTL while a worker was free to
    take it (no fault on it or its links), and no worker held it for longer than the TTL
    without the store accepting a write under it while that worker was free: the lease
    passes on when its holder cannot hold it, and whoever holds it runs the job."""
    evidence = read_evidence(history, final_state)
    ttl = final_state.get("ttl_s") if isinstance(final_state, Mapping) else None
    workers = final_state.get("workers") if isinstance(final_state, Mapping) else None
    if not isinstance(ttl, int | float) or not isinstance(workers, list):
        return Verdict.unknown(FAILOVER, "final_state has no 'ttl_s' and 'workers'.")
    window = _window(final_state)
    if window is None:
        return Verdict.holds(FAILOVER, "no workload ran: nothing to judge.")
    start, end = window
    ttl, workers = float(ttl), [str(w) for w in workers]
    # the audit's and the store's times are the database's and the store's wall clock (one
    # clock); history times are the run's. Each op is recorded after it happened: the
    # smallest difference maps one onto the other, never later than the truth.
    lags = [
        op.time_ns / 1e9 - float(op.value["at"])
        for op in history
        if op.process in evidence.sources.authority + evidence.sources.resource
        and isinstance(op.value, Mapping)
        and isinstance(op.value.get("at"), int | float)
        and not isinstance(op.value.get("at"), bool)
    ]
    shift = min(lags, default=0.0)
    faults = _faults(history, workers, end)
    lead = FREE_AFTER_TTLS * ttl
    valid = [
        (a + shift, b + shift) for lease in evidence.leases.values() for a, b in lease.validity()
    ]
    vacant = []
    for a, b in _gaps(valid, start, end):
        if b - a > ttl:
            free = _free(faults, a, a + ttl, lead)
            if free:
                vacant.append({"from_s": a, "to_s": b, "free": free})
    idle = []
    for lease in evidence.leases.values():
        writes = [
            w.at + shift
            for w in evidence.accepted()
            if w.at is not None and w.lease == lease.lease and w.token == lease.token
        ]
        for a, b in _merged(lease.validity()):
            a, b = max(a + shift, start), min(b + shift, end)
            if b <= a:
                continue
            marks = [(t, t) for t in writes if a <= t <= b]
            for gap_a, gap_b in _gaps(marks, a, b):
                if gap_b - gap_a > ttl and lease.holder in _free(faults, gap_a, gap_a + ttl, lead):
                    idle.append(
                        {"holder": lease.holder, "token": lease.token, "from_s": gap_a,
                         "to_s": gap_b}
                    )  # fmt: skip
    found: dict[str, Any] = {"ttl_s": ttl, "vacant": vacant, "idle": idle}
    sentences = []
    if vacant:
        shown = [
            f"from {seconds(v['from_s'])} to {seconds(v['to_s'])} while "
            f"{listing(v['free'])} {'was' if len(v['free']) == 1 else 'were'} free to take it"
            for v in vacant
        ]
        sentences.append(
            f"the lease stood vacant for longer than its TTL ({seconds(ttl)}) "
            f"{plural(len(vacant), 'time')}: {listing(shown, 3)}"
        )
    if idle:
        shown = [
            f"{i['holder']} under token {i['token']} from {seconds(i['from_s'])} to "
            f"{seconds(i['to_s'])}"
            for i in idle
        ]
        sentences.append(
            f"a free worker held the lease for longer than its TTL with no write accepted "
            f"under it {plural(len(idle), 'time')}: {listing(shown, 3)}"
        )
    if sentences:
        return Verdict.violated(FAILOVER, "; ".join(sentences) + ".", **found)
    return Verdict.holds(
        FAILOVER,
        f"the lease passed on within its TTL whenever a worker was free to take it, and its "
        f"holders ran the job ({plural(len(evidence.leases), 'lease')}).",
        **found,
    )


def _under(token: Any) -> str:
    return "without a fencing token" if token is None else f"under token {token}"


def _phase(op: Any) -> str:
    value = op.value if isinstance(op.value, Mapping) else {}
    return str(value.get("phase", op.type))


__all__ = ["FAILOVER", "NAME", "PACK", "job_recovered", "lease_failover"]
