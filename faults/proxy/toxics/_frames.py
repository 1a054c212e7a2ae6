"""Base of the protocol-aware toxics: act on whole NATS frames, not on bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from faults.proxy._chunk import Chunk
from faults.proxy.nats_protocol import Frame, NotNats, split_frames
from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


#: What a frame toxic reports once its frames are sent: an event name and its fields.
Report = tuple[str, dict[str, object]]


class FrameToxic(Toxic):
    """Splits the stream into frames and asks ``on_frame`` what to send for each.

    An incomplete frame stays in ``stage.pending`` (as the unparsed rest), so a chain change
    loses nothing. Bytes that are not NATS pass through untouched from then on.
    """

    def on_frame(self, stage: Stage, frame: Frame, reports: list[Report]) -> list[bytes]:
        """The bytes to send for ``frame``; append what to report to ``reports``."""
        return [frame.raw]

    async def pipe(self, stage: Stage) -> None:
        while True:
            chunk = await stage.receive()
            if stage.state.get("not_nats") or chunk.eof:
                await self._flush_raw(stage)
                continue
            buffer = b"".join(c.data for c in stage.pending)
            try:
                frames, rest = split_frames(buffer)
            except NotNats:
                stage.state["not_nats"] = True
                await self._flush_raw(stage)
                continue
            # Decide, send, then commit: a send cut short by a chain change undoes the
            # decisions, so the frames are decided again (once) by the next chain.
            snapshot = dict(stage.state)
            reports: list[Report] = []
            out = b"".join(piece for f in frames for piece in self.on_frame(stage, f, reports))
            try:
                if out:
                    await stage.emit(Chunk(out, chunk.stamp))
            except BaseException:
                stage.state.clear()
                stage.state.update(snapshot)
                raise
            for event, fields in reports:
                stage.report(event, **fields)
            stage.pending.clear()
            if rest:
                stage.pending.append(Chunk(rest, chunk.stamp))

    async def _flush_raw(self, stage: Stage) -> None:
        while stage.pending:
            await stage.forward()
