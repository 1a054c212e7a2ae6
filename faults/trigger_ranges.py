"""The triggers a fault template allows, with the ranges their numbers are drawn from."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from faults._validation import FrozenModel
from faults.ranges import FloatRange, IntRange
from faults.target import Name
from faults.triggers import AfterBytes, AtTime, OnConnection, OnMessage

Names = Annotated[tuple[Name, ...], Field(min_length=1)]


class AtTimeRange(FrozenModel):
    """``at_time`` with ``offset_s`` in a range; None means the whole horizon [0, horizon_s]."""

    type: Literal["at_time"] = "at_time"
    offset_s: FloatRange | None = None

    @model_validator(mode="after")
    def _in_range(self) -> Self:
        if self.offset_s is not None:
            AtTime.model_validate({"offset_s": self.offset_s.lo})
        return self


class OnConnectionRange(FrozenModel):
    """``on_connection`` on one of ``links`` (None: the fault's own link), ``n`` in a range."""

    type: Literal["on_connection"] = "on_connection"
    links: Names | None = None
    n: IntRange

    @model_validator(mode="after")
    def _in_range(self) -> Self:
        OnConnection.model_validate({"link": "x", "n": self.n.lo})
        return self


class AfterBytesRange(FrozenModel):
    """``after_bytes`` on one of ``links`` (None: the fault's own link), ``n_bytes`` in a range."""

    type: Literal["after_bytes"] = "after_bytes"
    links: Names | None = None
    n_bytes: IntRange

    @model_validator(mode="after")
    def _in_range(self) -> Self:
        AfterBytes.model_validate({"link": "x", "n_bytes": self.n_bytes.lo})
        return self


class OnMessageRange(FrozenModel):
    """``on_message`` on one of ``subjects`` (None: the fault's own subject), ``n`` in a range."""

    type: Literal["on_message"] = "on_message"
    subjects: Names | None = None
    n: IntRange

    @model_validator(mode="after")
    def _in_range(self) -> Self:
        OnMessage.model_validate({"subject": "x", "n": self.n.lo})
        return self


TriggerRange = Annotated[
    AtTimeRange | OnConnectionRange | AfterBytesRange | OnMessageRange,
    Field(discriminator="type"),
]
