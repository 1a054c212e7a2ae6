"""reset_peer: on the first data, wait ``timeout`` ms, then close with a TCP RST.

The peers see ECONNRESET (SO_LINGER 0). Unlike the reference, a toxic that lost its
toxicity draw leaves ordinary closes alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class ResetPeerToxic(Toxic):
    type_name = "reset_peer"
    attribute_names = ("timeout",)

    async def pipe(self, stage: Stage) -> None:
        await stage.receive()
        stage.drop()
        await trio.sleep(self.timeout / 1000)
        await stage.reset()
