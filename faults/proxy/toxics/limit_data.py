"""limit_data: forwards up to ``bytes`` per connection and direction, then closes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from faults.proxy._chunk import Chunk
from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class LimitDataToxic(Toxic):
    type_name = "limit_data"
    attribute_names = ("bytes",)

    async def pipe(self, stage: Stage) -> None:
        sent = int(stage.state.get("sent", 0))
        while True:
            if sent >= self.bytes:
                await stage.close()
            chunk = await stage.receive()
            if chunk.eof:
                await stage.close()
            room = self.bytes - sent
            if len(chunk.data) > room:
                await stage.emit(Chunk(chunk.data[:room], chunk.stamp))
                stage.drop()
                sent += room
            else:
                await stage.forward()
                sent += len(chunk.data)
            stage.state["sent"] = sent
