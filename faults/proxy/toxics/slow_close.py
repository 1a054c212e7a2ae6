"""slow_close: data passes; the close after EOF is delayed by ``delay`` ms."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class SlowCloseToxic(Toxic):
    type_name = "slow_close"
    attribute_names = ("delay",)

    async def pipe(self, stage: Stage) -> None:
        while True:
            chunk = await stage.receive()
            if chunk.eof:
                await trio.sleep(self.delay / 1000)
            await stage.forward()
