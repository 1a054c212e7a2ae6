"""NETWORK faults: Toxiproxy toxics on the target link.

::

    partition   timeout 0 on upstream, downstream or both   (nothing passes; closes on heal)
    latency     latency + jitter on downstream
    bandwidth   bandwidth (KB/s) on downstream
    reset_peer  reset_peer after timeout ms on downstream
    slow_close  slow_close delay ms on downstream
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaos.nemesis._toxics import add_toxics
from chaos.nemesis.applier import Applied, params_of
from chaos.nemesis.protocol import Link, NemesisContext
from faults.kinds import FaultKind
from faults.model import FaultEvent

#: (toxic type, stream, attributes) for each toxic a kind adds, from its parameters.
Toxics = list[tuple[str, str, dict[str, Any]]]

_STREAMS = {
    "both": ("upstream", "downstream"),
    "upstream": ("upstream",),
    "downstream": ("downstream",),
}

TOXICS: dict[FaultKind, Callable[[dict[str, Any]], Toxics]] = {
    FaultKind.PARTITION: lambda p: [
        ("timeout", stream, {"timeout": 0}) for stream in _STREAMS[p["direction"]]
    ],
    FaultKind.LATENCY: lambda p: [
        ("latency", "downstream", {"latency": p["latency_ms"], "jitter": p["jitter_ms"]})
    ],
    FaultKind.BANDWIDTH: lambda p: [("bandwidth", "downstream", {"rate": p["rate_kbps"]})],
    FaultKind.RESET_PEER: lambda p: [("reset_peer", "downstream", {"timeout": p["timeout_ms"]})],
    FaultKind.SLOW_CLOSE: lambda p: [("slow_close", "downstream", {"delay": p["delay_ms"]})],
}


class NetworkApplier:
    """Adds the kind's toxics to the link; the heal removes them."""

    kinds = frozenset(TOXICS)

    async def apply(self, ctx: NemesisContext, event: FaultEvent, target: Link) -> Applied:
        toxics = TOXICS[event.kind](params_of(event))
        plans = [(target, type_, stream, attrs) for type_, stream, attrs in toxics]
        return Applied(add_toxics(event.id, plans))
