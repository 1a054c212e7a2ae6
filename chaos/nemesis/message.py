"""MESSAGE faults: NATS-aware toxics on a subject's links.

::

    redeliver          nats_drop_ack on the consume link, upstream: the broker never hears
                       ``count`` acks of one message, so it delivers that message again
    duplicate_publish  nats_duplicate_publish on the publish link, upstream: ``count`` extra
                       copies of one publish, as a producer's retry would send

Their toxics spend their own count, so they stay until the run ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaos.nemesis._toxics import add_toxics
from chaos.nemesis.applier import Applied, params_of
from chaos.nemesis.protocol import NemesisContext, Subject
from faults.kinds import FaultKind
from faults.model import FaultEvent

#: (link name, toxic type, stream, attributes) from the subject and the parameters.
Toxic = tuple[str, str, str, dict[str, Any]]

TOXICS: dict[FaultKind, Callable[[Subject, dict[str, Any]], Toxic]] = {
    FaultKind.REDELIVER: lambda s, p: (
        s.consume_link,
        "nats_drop_ack",
        "upstream",
        {"count": p["count"], "stream": s.stream, "same_message": 1},
    ),
    FaultKind.DUPLICATE_PUBLISH: lambda s, p: (
        s.publish_link,
        "nats_duplicate_publish",
        "upstream",
        {"count": p["count"], "subject": s.nats_subject},
    ),
}


class MessageApplier:
    """Adds the kind's NATS toxic to the subject's link; it stays until the run ends."""

    kinds = frozenset(TOXICS)

    async def apply(self, ctx: NemesisContext, event: FaultEvent, target: Subject) -> Applied:
        link, type_, stream, attrs = TOXICS[event.kind](target, params_of(event))
        heal = add_toxics(event.id, [(ctx.link(link), type_, stream, attrs)])
        return Applied(heal, until_run_end=True)
