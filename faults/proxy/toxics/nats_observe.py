"""nats_observe: passes every frame and reports JetStream deliveries and acks.

An extension toxic for event triggers ("after the Nth message delivered on a subject"):
each MSG/HMSG delivery (downstream) and each ack (upstream) becomes an observer event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faults.proxy.nats_protocol import Frame
from faults.proxy.toxics._frames import FrameToxic, Report

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class NatsObserveToxic(FrameToxic):
    type_name = "nats_observe"

    def on_frame(self, stage: Stage, frame: Frame, reports: list[Report]) -> list[bytes]:
        if frame.is_js_delivery:
            reports.append(
                ("nats_delivery", {"subject": frame.subject, "delivery": frame.delivery_count})
            )
        elif frame.is_js_ack:
            reports.append(("nats_ack", {"subject": frame.subject}))
        elif frame.op in (b"PUB", b"HPUB"):
            reports.append(("nats_publish", {"subject": frame.subject}))
        return [frame.raw]
