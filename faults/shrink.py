"""What a shrinker may change in a fault event without leaving its space: the pure half of
``chaos search``'s shrinking (the runs are the engine's).

``template_for(space, event)`` finds the template of ``space`` that admits ``event`` (its kind,
target, parameters, trigger and duration all within it). ``knobs(space, event)`` lists the
event's values that can be made simpler, each with the low end of its range in that template:
the parameters (numbers toward their minimum, choices toward the first), the trigger's number
(the ``n``-th message or connection, the byte count, the offset) and the duration. Every
value a knob offers keeps the event inside the space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from faults.model import FaultEvent
from faults.ranges import Choices, FloatRange, ParamRange
from faults.space import FaultSpace, FaultTemplate
from faults.trigger_ranges import (
    AfterBytesRange,
    AtTimeRange,
    OnConnectionRange,
    OnMessageRange,
    TriggerRange,
)
from faults.triggers import AfterBytes, AtTime, OnConnection, OnMessage, Trigger


def _within(spec: ParamRange, value: Any) -> bool:
    if isinstance(spec, Choices):
        return str(value) in spec.values
    return bool(spec.lo <= value <= spec.hi)


def _trigger_range(space: FaultSpace, template: FaultTemplate, event: FaultEvent) -> Any:
    """The trigger range of ``template`` that admits the event's trigger, or None."""
    own, trigger = event.target.name, event.trigger
    for spec in template.triggers:
        if spec.type != trigger.type:
            continue
        if isinstance(spec, AtTimeRange) and isinstance(trigger, AtTime):
            if _within(spec.offset_s or FloatRange(lo=0.0, hi=space.horizon_s), trigger.offset_s):
                return spec
        elif isinstance(spec, OnMessageRange) and isinstance(trigger, OnMessage):
            if trigger.subject in (spec.subjects or (own,)) and _within(spec.n, trigger.n):
                return spec
        elif isinstance(spec, OnConnectionRange) and isinstance(trigger, OnConnection):
            if trigger.link in (spec.links or (own,)) and _within(spec.n, trigger.n):
                return spec
        elif isinstance(spec, AfterBytesRange) and isinstance(trigger, AfterBytes):
            if trigger.link in (spec.links or (own,)) and _within(spec.n_bytes, trigger.n_bytes):
                return spec
    return None


def template_for(space: FaultSpace, event: FaultEvent) -> FaultTemplate | None:
    """The first template of ``space`` that admits ``event``, or None (not of this space)."""
    params = event.params.model_dump()
    for template in space.templates:
        if template.kind != event.kind or event.target.name not in space.targets_of(template):
            continue
        if any(not _within(spec, params[name]) for name, spec in template.params.items()):
            continue
        if _trigger_range(space, template, event) is None:
            continue
        if template.duration_s is None:
            if event.duration_s is not None:
                continue
        elif event.duration_s is None or not _within(template.duration_s, event.duration_s):
            continue
        return template
    return None


@dataclass(frozen=True)
class Knob:
    """One value of an event that can be made simpler: ``lo`` is the simplest it may be."""

    name: str
    value: int | float | str
    lo: int | float | str
    #: The event with this value set to another one of the same range.
    set: Callable[[int | float | str], FaultEvent]

    @property
    def numeric(self) -> bool:
        return not isinstance(self.value, str)


def _param_knob(event: FaultEvent, name: str, spec: ParamRange) -> Knob:
    value = getattr(event.params, name)
    lo = spec.values[0] if isinstance(spec, Choices) else spec.lo

    def set_(new: int | float | str) -> FaultEvent:
        params = event.params.model_copy(update={name: new})
        return event.model_copy(update={"params": params})

    return Knob(name, value, lo, set_)


def _trigger_knob(space: FaultSpace, event: FaultEvent, spec: TriggerRange) -> Knob:
    trigger: Trigger = event.trigger
    if isinstance(trigger, AtTime):
        field, lo = "offset_s", (spec.offset_s.lo if spec.offset_s is not None else 0.0)  # type: ignore[union-attr]
    elif isinstance(trigger, AfterBytes):
        field, lo = "n_bytes", spec.n_bytes.lo  # type: ignore[union-attr]
    else:
        field, lo = "n", spec.n.lo  # type: ignore[union-attr]

    def set_(new: int | float | str) -> FaultEvent:
        return event.model_copy(update={"trigger": trigger.model_copy(update={field: new})})

    return Knob(f"trigger.{field}", getattr(trigger, field), lo, set_)


def knobs(space: FaultSpace, event: FaultEvent) -> list[Knob]:
    """The values of ``event`` a shrinker may lower, in a fixed order: parameters (by name),
    the trigger's number, the duration. Empty when no template of ``space`` admits it."""
    template = template_for(space, event)
    if template is None:
        return []
    found = [_param_knob(event, name, template.params[name]) for name in sorted(template.params)]
    found.append(_trigger_knob(space, event, _trigger_range(space, template, event)))
    if template.duration_s is not None and event.duration_s is not None:

        def set_duration(new: int | float | str) -> FaultEvent:
            return event.model_copy(update={"duration_s": new})

        found.append(Knob("duration_s", event.duration_s, template.duration_s.lo, set_duration))
    return [knob for knob in found if knob.value != knob.lo]


__all__ = ["Knob", "knobs", "template_for"]
