"""reset_peer: on the first data, drop it, wait ``timeout`` ms, then close with a TCP RST.

The peers see ECONNRESET (SO_LINGER 0). Once it has dropped data the reset is committed, as
in the reference: removing or updating the toxic during the wait still resets the
connection when the wait ends, and never lets later data through after the dropped chunk.
Unlike the reference, a toxic that lost its toxicity draw leaves ordinary closes alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from faults.proxy._stage import Ending
from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class ResetPeerToxic(Toxic):
    type_name = "reset_peer"
    attribute_names = ("timeout",)

    async def pipe(self, stage: Stage) -> None:
        ending = stage.ending  # set if an earlier start on this direction dropped data
        if ending is None:
            await stage.receive()
            ending = Ending(reset=True, at=trio.current_time() + self.timeout / 1000)
            stage.drop(ending)
        await trio.sleep_until(ending.at)
        await stage.reset()
