"""slicer: splits chunks into pieces of ``average_size`` +- ``size_variation`` bytes,
pausing ``delay`` microseconds between pieces. Bytes are never changed or lost."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from faults.proxy._chunk import Chunk
from faults.proxy.errors import BadRequest
from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class SlicerToxic(Toxic):
    type_name = "slicer"
    attribute_names = ("average_size", "size_variation", "delay")

    def check(self) -> None:
        super().check()
        if self.average_size <= 0:
            raise BadRequest(f"average_size must be > 0, got {self.average_size}")
        if self.size_variation > self.average_size:
            raise BadRequest(
                f"size_variation must be <= average_size ({self.average_size}), "
                f"got {self.size_variation}"
            )

    async def pipe(self, stage: Stage) -> None:
        avg, var = self.average_size, self.size_variation
        rng = stage.rng("slice")
        while True:
            chunk = await stage.receive()
            if chunk.eof:
                await stage.forward()
                continue
            data = chunk.data
            while data:
                size = max(1, avg + (rng.randint(-var, var) if var else 0))
                head, data = data[:size], data[size:]
                await stage.emit(Chunk(head, chunk.stamp))
                if data:
                    stage.pending[0] = Chunk(data, chunk.stamp)
                    if self.delay:
                        await trio.sleep(self.delay / 1_000_000)
            stage.release()
