"""fencing_tokens: the resource accepted writes in strictly increasing fencing-token order.

A fencing token is the number a lease service hands out with each lease, one higher every
time. A resource that checks it refuses a write carrying a lower token than one it has
already accepted, so a holder whose lease passed to another (it was paused, its packets were
late) cannot write over its successor. This checker reads the history of the trusted
authority and resource (see ``invariants.leases``) and asks, from that evidence only:

1. every grant carried a higher token than all grants before it (of the same lease);
2. every accepted write went under a lease its writer was granted: the token it carried was
   granted to it (not to another worker, not later, not never); a write without a token is
   attributed to its writer's latest lease;
3. in the order the resource accepted them, the writes' tokens never go down: a token
   passes from one writer to the next only upwards.

Writes of unknown outcome (``info``, or still pending) prove nothing and are only counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants.history import History
from invariants.leases import Fact, Write, read_evidence, seconds
from invariants.registry import register
from invariants.text import listing, plural
from invariants.verdict import Verdict

NAME = "fencing_tokens"


def _label(lease: str, token: int) -> str:
    return f"{lease}/{token}" if lease else str(token)


def _grant_order(grants: list[Fact]) -> list[dict[str, Any]]:
    """Grants whose token was not above every earlier grant's (of the same lease)."""
    highest: dict[str, Fact] = {}
    bad = []
    for grant in sorted(grants, key=lambda g: g.at):
        before = highest.get(grant.lease)
        if before is not None and grant.token <= before.token:
            bad.append(
                {
                    "lease": grant.lease,
                    "token": grant.token,
                    "holder": grant.actor,
                    "after_token": before.token,
                    "after_holder": before.actor,
                    "time_s": grant.op.time_ns / 1e9,
                }
            )
        if before is None or grant.token > before.token:
            highest[grant.lease] = grant
    return bad


def _stale(writes: list[Write]) -> list[tuple[Write, Write]]:
    """Accepted writes under a lower token than one the resource had already accepted,
    each with the write that carried that higher token."""
    highest: dict[str, Write] = {}
    out = []
    for write in writes:
        if write.token is None:
            continue
        before = highest.get(write.lease)
        if before is not None and before.token is not None and write.token < before.token:
            out.append((write, before))
        elif before is None or (before.token is not None and write.token > before.token):
            highest[write.lease] = write
    return out


def _write_data(write: Write) -> dict[str, Any]:
    return {
        "writer": write.writer,
        "lease": write.lease,
        "token": write.token,
        "sent": write.sent,
        "at": write.at,
        "time_s": write.time_s,
        "index": (write.pair.completion or write.pair.invoke).index,
    }


def _how(write: Write) -> str:
    return "" if write.sent is not None else " (sent no token: its latest lease)"


def _when(writes: list[Write]) -> str:
    """``at 7.012 s`` for one write, ``from 7.012 s to 9.500 s`` for several."""
    if len(writes) == 1:
        return f"at {seconds(writes[0].time_s)}"
    return f"from {seconds(writes[0].time_s)} to {seconds(writes[-1].time_s)}"


def _whose(writer: str, writes: list[Write]) -> str:
    """``worker-1's write`` or ``worker-1's 3 writes``."""
    return f"{writer}'s write" if len(writes) == 1 else f"{writer}'s {len(writes)} writes"


def _grouped(items: list[Any], key: Any) -> list[list[Any]]:
    """``items`` in runs that share ``key(item)``, in order of each key's first item."""
    groups: dict[Any, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def _sentences(
    found: dict[str, Any], stale: list[tuple[Write, Write]], foreign: list[Write]
) -> list[str]:
    out = []
    if found["grant_order"]:
        shown = [
            f"token {_label(g['lease'], g['token'])} to {g['holder']} at "
            f"{seconds(g['time_s'])} after token {g['after_token']} to {g['after_holder']}"
            for g in found["grant_order"]
        ]
        n = len(shown)
        out.append(f"{plural(n, 'grant')} did not raise the fencing token: {listing(shown)}")
    if foreign:
        shown = []
        for group in _grouped(foreign, lambda w: (w.writer, w.lease, w.sent, w.problem)):
            w = group[0]
            under = (
                f" under token {_label(w.lease, w.sent)} ({w.problem})"
                if w.sent is not None
                else f" {w.problem}"
            )
            shown.append(f"{_whose(w.writer, group)}{under} {_when(group)}")
        n = len(foreign)
        out.append(
            f"{plural(n, 'accepted write')} did not go under a lease of "
            f"{'its' if n == 1 else 'their'} writer: {listing(shown)}"
        )
    if stale:
        shown = []
        for group in _grouped(
            stale, lambda pair: (pair[0].writer, pair[0].lease, pair[0].token, id(pair[1]))
        ):
            writes = [w for w, _ in group]
            w, b = group[0]
            shown.append(
                f"{_whose(w.writer, writes)} under token {_label(w.lease, w.token or 0)} "
                f"{_when(writes)}{_how(w)} after {b.writer}'s under token "
                f"{_label(b.lease, b.token or 0)} at {seconds(b.time_s)}"
            )
        n = len(stale)
        out.append(
            f"the resource accepted {plural(n, 'write')} under an older lease after a newer "
            f"one had written: {listing(shown)}"
        )
    return out


@register(NAME)
def fencing_tokens(history: History, final_state: Mapping[str, Any]) -> Verdict:
    """Grants raise the fencing token; every accepted write goes under a lease its writer
    holds; the resource never accepts a lower token after a higher one."""
    evidence = read_evidence(history, final_state)
    accepted = evidence.accepted()
    foreign = [w for w in accepted if w.problem is not None]
    stale = _stale([w for w in accepted if w.problem is None])
    unknown, rejected = evidence.unknown(), evidence.rejected()
    found: dict[str, Any] = {
        "grants": len(evidence.grants),
        "accepted": len(accepted),
        "rejected": len(rejected),
        "unknown": len(unknown),
        "grant_order": _grant_order(evidence.grants),
        "foreign": [{**_write_data(w), "problem": w.problem} for w in foreign],
        "stale": [{"write": _write_data(w), "after": _write_data(b)} for w, b in stale],
    }
    sentences = _sentences(found, stale, foreign)
    tail = []
    if rejected:
        tail.append(f"it rejected {plural(len(rejected), 'write')}")
    if unknown:
        tail.append(f"{plural(len(unknown), 'write')} had an unknown outcome (not counted)")
    suffix = f" ({'; '.join(tail)})" if tail else ""
    if sentences:
        return Verdict.violated(NAME, "; ".join(sentences) + suffix + ".", **found)
    tokens = sorted({w.token for w in accepted if w.token is not None})
    under = f"{plural(len(tokens), 'lease')}" + (
        f" ({'token' if len(tokens) == 1 else 'tokens'} {listing([str(t) for t in tokens])})"
        if tokens
        else ""
    )
    return Verdict.holds(
        NAME,
        f"the resource accepted {plural(len(accepted), 'write')} in fencing-token order under "
        f"{under}, each under a lease granted to its writer{suffix}.",
        **found,
    )


__all__ = ["fencing_tokens"]
