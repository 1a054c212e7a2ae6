"""A fault space: which faults a scenario allows, where, with which parameter ranges.

A scenario keeps its space as plain data (TOML or a dict) and loads it with
``FaultSpace.from_dict``. ``content_hash()`` identifies the effective space (after defaults
and normalisation), so a schedule records which space it was drawn from.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Annotated, Any, Self

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from faults._canonical import packb
from faults._validation import FrozenModel, relocate
from faults.kinds import INSTANTANEOUS, TARGET_KIND, FaultKind, TargetKind
from faults.params import PARAMS, ParamShapes, param_shapes
from faults.ranges import Choices, FloatRange, IntRange, ParamRange
from faults.target import Name
from faults.trigger_ranges import AtTimeRange, TriggerRange

MAX_EVENTS = 1000


class FaultTemplate(FrozenModel):
    """One kind of fault the space allows: targets, parameter ranges, triggers, durations.

    ``targets`` None means every declared name of the kind's target type. A parameter not in
    ``params`` keeps its default. ``duration_s`` None means "until the workload ends" (and is
    the only value allowed for instantaneous kinds). ``weight`` biases ``generate``'s choice.
    """

    kind: FaultKind
    targets: Annotated[tuple[Name, ...], Field(min_length=1)] | None = None
    params: dict[str, ParamRange] = Field(default_factory=dict, validate_default=True)
    triggers: Annotated[tuple[TriggerRange, ...], Field(min_length=1)] = (AtTimeRange(),)
    duration_s: FloatRange | None = None
    weight: Annotated[float, Field(strict=True, gt=0)] = 1.0

    @field_validator("params", mode="before")
    @classmethod
    def _shaped(cls, raw: Any, info: ValidationInfo) -> Any:
        """Read each range with the shape of its parameter (int, float or choices)."""
        kind = info.data.get("kind")
        if kind is None or not isinstance(raw, dict):
            return raw
        shapes = param_shapes(kind)
        shaped = {name: _shaped_range(kind, shapes, name, spec) for name, spec in raw.items()}
        ends = [{name: _end(spec, i) for name, spec in shaped.items()} for i in (0, -1)]
        for values in ends:  # constraints are bounds, so checking both ends checks the range
            PARAMS[kind].model_validate(values)
        return shaped

    @model_validator(mode="after")
    def _duration_fits(self) -> Self:
        if self.duration_s is None:
            return self
        if self.kind in INSTANTANEOUS:
            raise ValueError(f"{self.kind.value} is instantaneous: duration_s does not apply")
        if self.duration_s.lo <= 0:
            raise ValueError(f"duration_s must be > 0, got min {self.duration_s.lo}")
        return self


def _shaped_range(kind: FaultKind, shapes: ParamShapes, name: str, spec: Any) -> ParamRange:
    """One parameter's range, read with the shape of that parameter."""
    shape = shapes.get(name)
    if shape is None:
        known = ", ".join(shapes) or "none"
        raise ValueError(f"{kind.value} has no parameter {name!r} (it has: {known})")
    try:
        if shape is int:
            return IntRange.model_validate(spec)
        if shape is float:
            return FloatRange.model_validate(spec)
        choices = Choices.model_validate(spec)
    except ValidationError as error:
        raise relocate(error, name) from None
    assert isinstance(shape, tuple)
    for value in choices.values:
        if value not in shape:
            raise ValueError(f"{name} must be one of {', '.join(shape)}, got {value!r}")
    return choices


def _end(spec: ParamRange, index: int) -> int | float | str:
    return spec.values[index] if isinstance(spec, Choices) else (spec.lo, spec.hi)[index]


class FaultSpace(FrozenModel):
    """Everything a scenario lets a schedule contain, and how many events it may hold."""

    horizon_s: Annotated[float, Field(strict=True, gt=0)]
    min_events: Annotated[int, Field(strict=True, ge=0)] = 0
    max_events: Annotated[int, Field(strict=True, ge=0, le=MAX_EVENTS)] = 4
    links: tuple[Name, ...] = ()
    services: tuple[Name, ...] = ()
    subjects: tuple[Name, ...] = ()
    templates: tuple[FaultTemplate, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.templates:
            raise ValueError("fault space has no templates")
        if self.min_events > self.max_events:
            raise ValueError(f"min_events ({self.min_events}) > max_events ({self.max_events})")
        for index, template in enumerate(self.templates):
            self._check_template(f"templates[{index}] ({template.kind.value})", template)
        return self

    def declared(self, kind: TargetKind) -> tuple[str, ...]:
        """The names the space declares for a target type."""
        by_kind = {TargetKind.LINK: self.links, TargetKind.SERVICE: self.services}
        return by_kind.get(kind, self.subjects)

    def targets_of(self, template: FaultTemplate) -> tuple[str, ...]:
        """The target names a template may draw from."""
        return template.targets or self.declared(TARGET_KIND[template.kind])

    def _check_template(self, where: str, template: FaultTemplate) -> None:
        own = TARGET_KIND[template.kind]
        if not self.targets_of(template):
            raise ValueError(f"{where}: no targets: the space declares no {own.value}s")
        self._check_names(where, "target", own, template.targets or ())
        for trigger in template.triggers:
            if trigger.type == "at_time":
                if trigger.offset_s is not None and trigger.offset_s.hi > self.horizon_s:
                    raise ValueError(
                        f"{where}: at_time offset_s max {trigger.offset_s.hi} is past "
                        f"horizon_s {self.horizon_s}"
                    )
                continue
            wanted = TargetKind.SUBJECT if trigger.type == "on_message" else TargetKind.LINK
            names = trigger.subjects if trigger.type == "on_message" else trigger.links
            if names is None and own is not wanted:
                raise ValueError(
                    f"{where}: {trigger.type} trigger needs {wanted.value}s: "
                    f"the fault does not target a {wanted.value}"
                )
            self._check_names(where, f"{trigger.type} trigger {wanted.value}", wanted, names or ())

    def _check_names(self, where: str, what: str, kind: TargetKind, names: tuple[str, ...]) -> None:
        declared = self.declared(kind)
        for name in names:
            if name not in declared:
                listed = ", ".join(declared) or "none"
                raise ValueError(
                    f"{where}: {what} {name!r} is not a declared {kind.value} (declared: {listed})"
                )

    def content_hash(self) -> str:
        """SHA-256 (hex) of the canonical msgpack of the normalised space."""
        return self._hash

    @cached_property
    def _hash(self) -> str:
        return hashlib.sha256(packb(self.to_dict())).hexdigest()
