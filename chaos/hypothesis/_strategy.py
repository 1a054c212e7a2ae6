"""``schedules(...)``: the draw of ``generate`` (``chaos run``'s, ``chaos search``'s) as a
Hypothesis strategy.

Hypothesis's own integers are drawn small first (docs/search.md measured it: for a range of
0 to 9999 a mean near 2500), and it has no weighted choice; ``generate`` draws uniformly and
by template weight, and that is the draw the packs' spaces are written and measured for. So
every number here is built from **fair bits** (``st.booleans()``, which Hypothesis draws as
fair coins), and the structure is laid out for Hypothesis's shrinker::

    schedule = events(0)
    events(k) = stop coin (16 bits), then, unless it says stop: one event, then events(k + 1)
                (each events(k) one span of one label, nested in the one before)
                at k < min_events the coin is read but never stops
                at k >= min_events it stops with probability 1 / (max_events - k + 1)
                (at max_events always: every schedule ends with a stop coin)
    event    = draw_event(space, ...) (faults/_draw.py: template, target, parameters,
               trigger, duration, in that order), each number one span:
    integer in [lo, hi] = bit_length(hi - lo) fair bits, most significant first,
               drawn again while the number is past hi - lo
    index by weight     = 16 fair bits u: the template where u / 2**16 * sum(weights) falls

Drawn from fresh random bits this is ``generate``'s distribution: the count uniform in
``[min_events, max_events]`` (the stop coins multiply out to it), templates by weight, every
range uniform (a 16-bit coin or index is within 2**-16 of ``generate``'s float). Hypothesis's
engine adds its own steps around the draw: its first example is all zero bits, and its first
few (``max_examples // 10``) extend a random prefix with zero bits; stored failures and
``@example`` come first; mutations copy spans between examples.

Shrinking: all-zero bits are the simplest value of everything: every coin past
``min_events`` stops, the first template and target, the low end of each range (the
golden-space minimum); a bit cleared never raises a number. Hypothesis deletes event ``k``
by putting the span ``events(k + 1)`` in the place of ``events(k)`` (its pass to a
descendant, made for recursive strategies; it deletes at most five choices at a time
otherwise, and an event is a hundred): the events after it move one place down, where their
coin is at least as likely to continue; the final stop coin, once the shrinker has zeroed it
(an early, cheap step: it changes nothing), stops wherever it lands. A coin has a fixed
width, so moving events never shifts the bits of the ones after them. Changing a template
re-reads the bits after it as another kind of event (Hypothesis tries it, and keeps it when
it still fails). Numbers shrink bit by bit, most significant first: to a value whose every
set bit is needed, at most twice the least value that still fails, not always to it
(Hypothesis has no numeric pass over a run of booleans).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from chaos.scenario import Scenario, load_scenario
from faults._draw import assemble, draw_event
from faults.model import FaultEvent, FaultSchedule
from faults.schedule import as_space
from faults.space import FaultSpace
from ground.errors import ConfigError
from ground.rng import check_seed

#: Bits of a stop coin and of a weighted index (their resolution: 2**-16).
COIN_BITS = 16
#: The most events a drawn schedule may hold (each a nested span of some hundred choices;
#: Hypothesis gives up on examples of more than 8192 choices).
MAX_NESTED = 50
SPACES = ("variant", "golden")


class BitsDraw:
    """``faults._draw.Draw`` over a source of fair bits: uniform integers (redrawn past the
    range), indexes by weight; all-zero bits give the low end and the first option."""

    def __init__(self, bit: Callable[[], bool]) -> None:
        self._bit = bit

    def number(self, width: int) -> int:
        """``width`` bits, most significant first."""
        value = 0
        for _ in range(width):
            value = value << 1 | int(self._bit())
        return value

    def integer(self, lo: int, hi: int) -> int:
        span = hi - lo
        while (value := self.number(span.bit_length())) > span:
            pass
        return lo + value

    def index(self, weights: Sequence[float]) -> int:
        point = self.number(COIN_BITS) / 2**COIN_BITS * sum(weights)
        for i, weight in enumerate(weights):
            point -= weight
            if point < 0:
                return i
        return len(weights) - 1

    def stops(self, k: int, space: FaultSpace) -> bool:
        """The stop coin of element ``k`` (its bits are read whether it may stop or not:
        below ``min_events`` it never stops, at ``max_events`` it always does)."""
        coin = self.number(COIN_BITS)
        if k < space.min_events:
            return False
        return k >= space.max_events or coin < stop_threshold(k, space.max_events)


def stop_threshold(k: int, max_events: int) -> int:
    """Coins below this stop at element ``k``: probability 1 / (max_events - k + 1)."""
    return round((1 << COIN_BITS) / (max_events - k + 1))


def draw_schedule(space: FaultSpace, seed: int, draw: BitsDraw) -> FaultSchedule:
    """One schedule from ``draw``'s bits, laid out as the strategy lays it out (the pure
    form: tests feed it seeded bits to compare with ``generate``)."""
    events: list[FaultEvent] = []
    while not draw.stops(len(events), space):
        events.append(draw_event(space, draw))
    return assemble(space, seed, events)


# -- as Hypothesis strategies -----------------------------------------------------------------


@st.composite
def _bits(draw: st.DrawFn, width: int) -> int:
    """``width`` fair bits as one span, most significant first."""
    value = 0
    for _ in range(width):
        value = value << 1 | int(draw(st.booleans()))
    return value


class _SpanDraw(BitsDraw):
    """``BitsDraw`` over Hypothesis: each number, integer and index is a span of its own."""

    def __init__(self, draw: st.DrawFn) -> None:
        super().__init__(lambda: draw(st.booleans()))
        self._draw = draw

    def number(self, width: int) -> int:
        value: int = self._draw(_bits(width))
        return value

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(uniform_integers(lo, hi))

    def index(self, weights: Sequence[float]) -> int:
        return self._draw(_weighted_index(tuple(weights)))


@st.composite
def uniform_integers(draw: st.DrawFn, lo: int, hi: int) -> int:
    """Integers uniform in ``[lo, hi]`` (``generate``'s draw) that shrink toward ``lo``."""
    return BitsDraw.integer(_SpanDraw(draw), lo, hi)


@st.composite
def _weighted_index(draw: st.DrawFn, weights: tuple[float, ...]) -> int:
    return BitsDraw.index(_SpanDraw(draw), weights)


def uniform_seconds(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Seconds uniform in ``[lo, hi]`` on the millisecond grid, shrinking toward ``lo``."""
    return uniform_integers(round(lo * 1000), round(hi * 1000)).map(
        lambda millis: min(max(millis / 1000, lo), hi)
    )


@st.composite
def _events(draw: st.DrawFn, space: FaultSpace, k: int) -> list[FaultEvent]:
    """Events ``k``, ``k + 1``, ...: a stop coin, then an event and the events after it, each
    one span of this same label, nested: Hypothesis's shrinker deletes event ``k`` by putting
    the span of the events after it in place of this one (its pass to a descendant)."""
    bits = _SpanDraw(draw)
    if bits.stops(k, space):
        return []
    event = draw_event(space, bits)
    return [event, *draw(_events(space, k + 1))]


def space_schedules(space: FaultSpace, seed: int = 0) -> st.SearchStrategy[FaultSchedule]:
    """Schedules of ``space`` recorded under ``seed``, drawn as ``generate`` draws them."""
    check_seed(seed)
    if space.max_events > MAX_NESTED:
        raise ConfigError(
            f"schedules() draws at most {MAX_NESTED} events, the space allows "
            f"{space.max_events} (max_events)"
        )
    return _events(space, 0).map(lambda events: assemble(space, seed, events))


def resolve_space(
    scenario: Scenario | str | Path | FaultSpace | Mapping[str, Any],
    variant: str = "golden",
    space: str = "variant",
) -> tuple[Scenario | None, FaultSpace]:
    """The scenario (when one is named) and the fault space ``schedules`` draws from:
    the variant's own table (``space="variant"``) or the pack's golden one."""
    if isinstance(scenario, FaultSpace | Mapping):
        return None, as_space(scenario)
    if space not in SPACES:
        raise ConfigError(f"space must be one of {', '.join(SPACES)}, got {space!r}")
    loaded = scenario if isinstance(scenario, Scenario) else load_scenario(str(scenario))
    loaded.check_variant(variant)
    return loaded, loaded.fault_space("golden" if space == "golden" else variant)


def schedules(
    scenario: Scenario | str | Path | FaultSpace | Mapping[str, Any],
    *,
    variant: str = "golden",
    space: str = "variant",
    seed: int = 0,
) -> st.SearchStrategy[FaultSchedule]:
    """Fault schedules for a scenario's ``variant``, drawn from its fault space as ``chaos
    run`` and ``chaos search`` draw them (``space``: ``variant``, the variant's own table, or
    ``golden``, the pack's neutral one; or pass a ``FaultSpace`` instead of a scenario),
    recorded under run seed ``seed``. Bad input raises ``ConfigError`` at once."""
    _, resolved = resolve_space(scenario, variant, space)
    return space_schedules(resolved, seed)


__all__ = [
    "BitsDraw",
    "draw_schedule",
    "resolve_space",
    "schedules",
    "space_schedules",
    "uniform_integers",
    "uniform_seconds",
]
