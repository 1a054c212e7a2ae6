"""The fault model: one ``FaultEvent`` per fault, an ordered ``FaultSchedule`` per run.

A schedule is plain data. ``to_msgpack`` is canonical (sorted keys, float64 floats), so the
same schedule gives the same bytes on every machine; ``to_dict``/``from_dict`` are the JSON
form. Every constructor raises ``ConfigError`` with a one-line message on bad input.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

import msgpack
from pydantic import Field, StringConstraints, ValidationInfo, field_validator, model_validator

from faults._canonical import packb
from faults._validation import FrozenModel
from faults.kinds import INSTANTANEOUS, LAYER, TARGET_KIND, FaultKind, FaultLayer, TargetKind
from faults.params import (
    PARAMS,
    BandwidthParams,
    ClockSkewParams,
    CrashParams,
    DuplicatePublishParams,
    FaultParams,
    LatencyParams,
    PartitionParams,
    PauseParams,
    RedeliverParams,
    ResetParams,
    SlowCloseParams,
)
from faults.target import Target
from faults.triggers import AfterBytes, AtTime, OnConnection, OnMessage, Trigger
from ground.errors import ConfigError
from ground.rng import SEED_MAX

__all__ = [
    "AfterBytes",
    "AtTime",
    "BandwidthParams",
    "ClockSkewParams",
    "CrashParams",
    "DuplicatePublishParams",
    "FaultEvent",
    "FaultKind",
    "FaultLayer",
    "FaultParams",
    "FaultSchedule",
    "LatencyParams",
    "OnConnection",
    "OnMessage",
    "PartitionParams",
    "PauseParams",
    "RedeliverParams",
    "ResetParams",
    "SlowCloseParams",
    "Target",
    "TargetKind",
    "Trigger",
]

EventId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")]


class FaultEvent(FrozenModel):
    """One fault: what, where, with which parameters, when it starts and how long it lasts.

    ``duration_s`` is seconds until the fault heals, or None: "until the workload ends" for
    lasting kinds, "not applicable" for the instantaneous ones (redeliver, duplicate_publish,
    crash), which must leave it None.
    """

    id: EventId
    kind: FaultKind
    target: Target
    params: FaultParams = Field(default_factory=dict, validate_default=True)
    trigger: Trigger
    duration_s: Annotated[float, Field(strict=True, gt=0)] | None = None

    @field_validator("params", mode="before")
    @classmethod
    def _typed_params(cls, raw: Any, info: ValidationInfo) -> Any:
        """Validate ``params`` with the model of the event's kind (defaults when omitted)."""
        kind = info.data.get("kind")
        if kind is None or isinstance(raw, FrozenModel):
            return raw  # a bad kind is reported on its own; instances are checked below
        if not isinstance(raw, dict):
            raise ValueError(f"must be a table (dict), got {raw!r}")
        return PARAMS[kind].model_validate(raw)

    @model_validator(mode="after")
    def _fits_kind(self) -> Self:
        kind = self.kind.value
        if not isinstance(self.params, PARAMS[self.kind]):
            raise ValueError(
                f"{kind} needs {PARAMS[self.kind].__name__}, got {type(self.params).__name__}"
            )
        wanted = TARGET_KIND[self.kind]
        if self.target.kind is not wanted:
            raise ValueError(f"{kind} targets a {wanted.value}, got {self.target}")
        if self.kind in INSTANTANEOUS and self.duration_s is not None:
            raise ValueError(
                f"{kind} is instantaneous: duration_s must be None, got {self.duration_s}"
            )
        return self

    @property
    def layer(self) -> FaultLayer:
        """The harness layer that applies this fault."""
        return LAYER[self.kind]


class FaultSchedule(FrozenModel):
    """The faults of one run, in order, with the seed and fault space they came from."""

    seed: Annotated[int, Field(strict=True, ge=0, le=SEED_MAX)]  # ground.rng.check_seed's range
    space_hash: str
    events: tuple[FaultEvent, ...] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> Self:
        seen: set[str] = set()
        for event in self.events:
            if event.id in seen:
                raise ValueError(f"duplicate fault event id {event.id!r}")
            seen.add(event.id)
        return self

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How Hypothesis (and IPython) print a schedule: code that builds it again, so a
        falsifying example pastes into ``@example(schedule=...)`` as printed."""
        printer.text(f"FaultSchedule.from_dict({self.to_dict()!r})")

    def to_msgpack(self) -> bytes:
        """Canonical msgpack bytes: equal schedules give equal bytes everywhere."""
        return packb(self.to_dict())

    @classmethod
    def from_msgpack(cls, data: bytes) -> FaultSchedule:
        """Read bytes written by ``to_msgpack``; ConfigError if they are not a schedule."""
        try:
            raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
            reason = str(error) or type(error).__name__
            raise ConfigError(f"fault schedule is not valid msgpack: {reason}") from error
        if not isinstance(raw, dict):
            raise ConfigError(f"fault schedule must be a map, got {type(raw).__name__}")
        return cls.from_dict(raw)
