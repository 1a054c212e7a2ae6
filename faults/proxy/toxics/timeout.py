"""timeout: drops all data; closes the connection after ``timeout`` ms without data.

With ``timeout`` 0 it holds the stream (reads nothing) until removed; removing a timeout
toxic closes the connection (as the reference does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class TimeoutToxic(Toxic):
    type_name = "timeout"
    attribute_names = ("timeout",)

    async def pipe(self, stage: Stage) -> None:
        if self.timeout == 0:
            await trio.sleep_forever()
        while True:
            with trio.move_on_after(self.timeout / 1000) as idle:
                chunk = await stage.receive()
                stage.drop()
            if idle.cancelled_caught or chunk.eof:
                await stage.abort("timeout")
