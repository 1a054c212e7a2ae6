"""``generate(space, seed)``: the fault schedule of a run, a pure function of its inputs.

Every choice comes from a named stream under the seed: ``("schedule", "count")`` for the number
of events and ``("schedule", "event", i)`` for event ``i``, so adding an event never changes
the ones before it. Seconds are drawn on a millisecond grid, integers as integers, so the
canonical msgpack bytes are the same on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from faults._draw import assemble, draw_event
from faults.model import FaultSchedule
from faults.space import FaultSpace
from ground.rng import check_seed, derive_rng


class RngDraw:
    """The ``Draw`` primitives over a seeded ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)

    def index(self, weights: Sequence[float]) -> int:
        point = self._rng.random() * sum(weights)
        for i, weight in enumerate(weights):
            point -= weight
            if point < 0:
                return i
        return len(weights) - 1


def as_space(space: FaultSpace | Mapping[str, Any]) -> FaultSpace:
    """A validated ``FaultSpace`` from a space or its plain-data form."""
    return space if isinstance(space, FaultSpace) else FaultSpace.from_dict(space)


def generate(space: FaultSpace | Mapping[str, Any], seed: int) -> FaultSchedule:
    """The schedule for ``seed`` in ``space``: same inputs, byte-identical ``to_msgpack()``."""
    check_seed(seed)
    space = as_space(space)
    count = derive_rng(seed, "schedule", "count").randint(space.min_events, space.max_events)
    events = [
        draw_event(space, RngDraw(derive_rng(seed, "schedule", "event", i))) for i in range(count)
    ]
    return assemble(space, seed, events)
