"""Drawing fault events from a space, shared by ``generate`` (seeded) and the Hypothesis strategy.

Both callers supply a ``Draw``: two primitives (an integer in a closed range, an index by
weight). Everything else (templates, targets, parameters, triggers, durations) is built here,
in one fixed order, so a seed and a Hypothesis example walk the same decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from faults._canonical import packb
from faults.kinds import TARGET_KIND
from faults.model import FaultEvent, FaultSchedule
from faults.ranges import Choices, FloatRange, IntRange, ParamRange
from faults.space import FaultSpace
from faults.trigger_ranges import AtTimeRange, OnConnectionRange, OnMessageRange, TriggerRange
from faults.triggers import trigger_sort_key


class Draw(Protocol):
    """The two random primitives every draw is built from."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]``; shrinks (in Hypothesis) toward ``lo``."""
        ...

    def index(self, weights: Sequence[float]) -> int:
        """An index into ``weights``, chosen in proportion to them."""
        ...


def _pick(draw: Draw, options: Sequence[Any]) -> Any:
    return options[draw.index([1.0] * len(options))]


def draw_seconds(draw: Draw, bounds: FloatRange) -> float:
    """A number of seconds in ``bounds``, on a millisecond grid (clamped to the bounds)."""
    millis = draw.integer(round(bounds.lo * 1000), round(bounds.hi * 1000))
    return min(max(millis / 1000, bounds.lo), bounds.hi)


def _draw_param(draw: Draw, spec: ParamRange) -> int | float | str:
    if isinstance(spec, Choices):
        return str(_pick(draw, spec.values))
    if isinstance(spec, IntRange):
        return draw.integer(spec.lo, spec.hi)
    return draw_seconds(draw, spec)


def _draw_trigger(draw: Draw, spec: TriggerRange, horizon_s: float, own: str) -> dict[str, Any]:
    if isinstance(spec, AtTimeRange):
        return {
            "type": "at_time",
            "offset_s": draw_seconds(draw, spec.offset_s or FloatRange(lo=0.0, hi=horizon_s)),
        }
    if isinstance(spec, OnMessageRange):
        subject = _pick(draw, spec.subjects) if spec.subjects else own
        return {"type": "on_message", "subject": subject, "n": draw.integer(spec.n.lo, spec.n.hi)}
    link = _pick(draw, spec.links) if spec.links else own
    if isinstance(spec, OnConnectionRange):
        return {"type": "on_connection", "link": link, "n": draw.integer(spec.n.lo, spec.n.hi)}
    return {
        "type": "after_bytes",
        "link": link,
        "n_bytes": draw.integer(spec.n_bytes.lo, spec.n_bytes.hi),
    }


def draw_event(space: FaultSpace, draw: Draw) -> FaultEvent:
    """One event (id ``"f0"`` until ``assemble`` numbers it) drawn from ``space``."""
    template = space.templates[draw.index([t.weight for t in space.templates])]
    target = _pick(draw, space.targets_of(template))
    params = {name: _draw_param(draw, template.params[name]) for name in sorted(template.params)}
    trigger = _draw_trigger(draw, _pick(draw, template.triggers), space.horizon_s, target)
    duration = None if template.duration_s is None else draw_seconds(draw, template.duration_s)
    return FaultEvent.from_dict(
        {
            "id": "f0",
            "kind": template.kind,
            "target": {"kind": TARGET_KIND[template.kind], "name": target},
            "params": params,
            "trigger": trigger,
            "duration_s": duration,
        }
    )


def _order(event: FaultEvent) -> tuple[tuple[int, float], bytes]:
    content = event.to_dict()
    del content["id"]
    return trigger_sort_key(event.trigger), packb(content)


def assemble(space: FaultSpace, seed: int, events: Sequence[FaultEvent]) -> FaultSchedule:
    """The schedule of ``events`` in a deterministic order, numbered ``f0``, ``f1``, ..."""
    ordered = sorted(events, key=_order)
    numbered = tuple(e.model_copy(update={"id": f"f{i}"}) for i, e in enumerate(ordered))
    return FaultSchedule(seed=seed, space_hash=space.content_hash(), events=numbered)
