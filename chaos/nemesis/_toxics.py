"""Adding a fault's toxics to links, and the heal that removes them (network and message)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaos.nemesis.applier import Heal
from chaos.nemesis.protocol import Link

#: (link, toxic type, stream, attributes)
ToxicPlan = tuple[Link, str, str, dict[str, Any]]


def add_toxics(fault_id: str, plans: Sequence[ToxicPlan]) -> Heal:
    """Add each toxic (named ``<fault id>-<stream>``); the heal removes those still there."""
    added: list[tuple[Link, str]] = []
    for link, type_, stream, attributes in plans:
        toxic = link.add_toxic(
            type_, name=f"{fault_id}-{stream}", stream=stream, attributes=attributes
        )
        added.append((link, toxic.name))

    async def heal() -> None:
        for link, name in added:
            if any(t.name == name for t in link.toxics()):
                link.remove_toxic(name)

    return heal
