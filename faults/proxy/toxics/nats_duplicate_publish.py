"""nats_duplicate_publish: a publish goes to the broker twice, as a producer retry would.

An extension toxic (upstream: client to server). Duplicates ``count`` PUB/HPUB frames
whose subject starts with ``subject`` (any when empty), after letting ``skip`` pass. The
copy carries the same headers: with a ``Nats-Msg-Id`` JetStream de-duplicates it, without
one it is stored twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faults.proxy.nats_protocol import Frame
from faults.proxy.toxics._frames import FrameToxic, Report

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class NatsDuplicatePublishToxic(FrameToxic):
    type_name = "nats_duplicate_publish"
    attribute_names = ("count", "skip")
    string_attribute_names = ("subject",)

    def on_frame(self, stage: Stage, frame: Frame, reports: list[Report]) -> list[bytes]:
        if frame.op not in (b"PUB", b"HPUB") or frame.subject.startswith(("$JS.ACK.", "_INBOX.")):
            return [frame.raw]
        if not frame.subject.startswith(self.text("subject")):
            return [frame.raw]
        seen = int(stage.state.get("seen", 0))
        copied = int(stage.state.get("copied", 0))
        stage.state["seen"] = seen + 1
        if seen < self.skip or (self.count and copied >= self.count):
            return [frame.raw]
        stage.state["copied"] = copied + 1
        reports.append(("frame_duplicated", {"op": "publish", "subject": frame.subject}))
        return [frame.raw, frame.raw]
