"""Hypothesis strategies over a fault space, for property tests of your own (docs/faults.md).

``chaos search`` does not use them (it draws and shrinks schedules itself), and tests on real
runs take ``chaos.hypothesis.schedules`` (which draws as ``generate`` does).

``schedules(space)`` draws the same shapes as ``generate`` and shrinks toward fewer events
(a list that loses elements), the first template, and the low end of every range: shorter,
smaller, later-numbered faults. Template weights only bias ``generate``; here every template
is reachable and the first one is the simplest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from faults._draw import assemble, draw_event
from faults.model import FaultEvent, FaultSchedule
from faults.schedule import as_space
from faults.space import FaultSpace


class _HypothesisDraw:
    """The ``Draw`` primitives over Hypothesis's ``draw``."""

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(min_value=lo, max_value=hi))

    def index(self, weights: Sequence[float]) -> int:
        return self._draw(st.integers(min_value=0, max_value=len(weights) - 1))


def events(space: FaultSpace | Mapping[str, Any]) -> st.SearchStrategy[FaultEvent]:
    """Single fault events from ``space`` (id ``"f0"``)."""
    resolved = as_space(space)

    @st.composite
    def event(draw: st.DrawFn) -> FaultEvent:
        return draw_event(resolved, _HypothesisDraw(draw))

    return event()


def schedules(
    space: FaultSpace | Mapping[str, Any], seed: int = 0
) -> st.SearchStrategy[FaultSchedule]:
    """Fault schedules from ``space``, recorded under ``seed``; shrink toward fewer, smaller."""
    resolved = as_space(space)
    event = events(resolved)

    @st.composite
    def schedule(draw: st.DrawFn) -> FaultSchedule:
        # A list with min_size > 0 shrinks poorly (Hypothesis cannot delete its first element
        # when later draws depend on it), so draw from zero and top up to min_events.
        drawn = draw(st.lists(event, max_size=resolved.max_events))
        missing = resolved.min_events - len(drawn)
        if missing > 0:
            drawn += draw(st.lists(event, min_size=missing, max_size=missing))
        return assemble(resolved, seed, drawn)

    return schedule()
