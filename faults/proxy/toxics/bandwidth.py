"""bandwidth: paces data to ``rate`` KB/s (1 KB = 1000 B); rate 0 stalls all data."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from faults.proxy._chunk import Chunk
from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage

#: Data is released in slices of at most this much time's worth at the rate.
_SLICE_S = 0.1


class BandwidthToxic(Toxic):
    type_name = "bandwidth"
    attribute_names = ("rate",)

    async def pipe(self, stage: Stage) -> None:
        rate = self.rate * 1000  # bytes per second
        if rate == 0:
            await trio.sleep_forever()
        piece = max(1, int(rate * _SLICE_S))
        next_free = trio.current_time()
        while True:
            chunk = await stage.receive()
            while not chunk.eof and chunk.data:
                head, rest = chunk.data[:piece], chunk.data[piece:]
                next_free = max(next_free, trio.current_time()) + len(head) / rate
                await trio.sleep_until(next_free)
                await stage.emit(Chunk(head, chunk.stamp))
                chunk = Chunk(rest, chunk.stamp)
                stage.pending[0] = chunk
                if not rest:
                    stage.release()
                    break
            else:
                await stage.forward()
