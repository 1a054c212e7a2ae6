"""latency: each chunk leaves ``latency`` ms (+ jitter) after it was read."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class LatencyToxic(Toxic):
    """Delay = ``latency`` + a uniform integer in [-jitter, +jitter) ms, drawn per chunk.

    The delay counts from the chunk's read time, so delays do not add up across chunks.
    """

    type_name = "latency"
    attribute_names = ("latency", "jitter")

    async def pipe(self, stage: Stage) -> None:
        latency, jitter = self.latency, self.jitter
        rng = stage.rng("jitter") if jitter else None
        while True:
            chunk = await stage.receive()
            if not chunk.eof:
                delay = latency
                if rng is not None:
                    offset = rng.randrange(-jitter, jitter)
                    stage.record("jitter", offset)
                    delay += offset
                await trio.sleep_until(chunk.stamp + max(delay, 0) / 1000)
            await stage.forward()
