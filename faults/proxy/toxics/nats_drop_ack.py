"""nats_drop_ack: the consumer's JetStream ack never reaches the broker, so it redelivers.

An extension toxic (upstream: client to server). It drops ``count`` ack frames (a PUB to a
``$JS.ACK.`` subject with an empty or ``+ACK`` body) after letting ``skip`` pass; ``count``
0 drops every ack. ``stream`` limits it to acks of that JetStream stream (read from either
ack-subject layout, see ``faults.proxy.nats_protocol.AckSubject``). With
``same_message`` 1 it pins the first message whose ack it drops and drops only that
message's acks: one message is then delivered ``count + 1`` times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faults.proxy.nats_protocol import Frame
from faults.proxy.toxics._frames import FrameToxic, Report

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class NatsDropAckToxic(FrameToxic):
    type_name = "nats_drop_ack"
    attribute_names = ("count", "skip", "same_message")
    string_attribute_names = ("stream",)

    def on_frame(self, stage: Stage, frame: Frame, reports: list[Report]) -> list[bytes]:
        if not frame.is_js_ack:
            return [frame.raw]
        ack = frame.ack
        stream = self.text("stream")
        if stream and (ack is None or ack.stream != stream):
            return [frame.raw]
        sequence = ack.stream_sequence if ack else 0
        seen = int(stage.state.get("seen", 0))
        dropped = int(stage.state.get("dropped", 0))
        stage.state["seen"] = seen + 1
        if seen < self.skip or (self.count and dropped >= self.count):
            return [frame.raw]
        if self.same_message:
            pinned = stage.state.setdefault("message", sequence)
            if pinned != sequence:
                return [frame.raw]
        stage.state["dropped"] = dropped + 1
        fields = {"op": "ack", "subject": frame.subject, "stream_sequence": sequence}
        reports.append(("frame_dropped", fields))
        return []
