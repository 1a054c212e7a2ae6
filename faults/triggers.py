"""What starts a fault: a time offset, or an event the harness observes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from faults._validation import FrozenModel
from faults.target import Name

Seconds = Annotated[float, Field(strict=True, ge=0)]
Nth = Annotated[int, Field(strict=True, ge=1)]


class AtTime(FrozenModel):
    """``offset_s`` seconds after the workload starts."""

    type: Literal["at_time"] = "at_time"
    offset_s: Seconds


class OnConnection(FrozenModel):
    """When the ``n``-th connection (1-based) is accepted on ``link``."""

    type: Literal["on_connection"] = "on_connection"
    link: Name
    n: Nth


class AfterBytes(FrozenModel):
    """Once ``n_bytes`` bytes (both directions together) have passed through ``link``."""

    type: Literal["after_bytes"] = "after_bytes"
    link: Name
    n_bytes: Nth


class OnMessage(FrozenModel):
    """When the ``n``-th message (1-based) is delivered on ``subject``."""

    type: Literal["on_message"] = "on_message"
    subject: Name
    n: Nth


Trigger = Annotated[AtTime | OnConnection | AfterBytes | OnMessage, Field(discriminator="type")]

TRIGGER_TYPES: tuple[str, ...] = ("at_time", "on_connection", "after_bytes", "on_message")


def trigger_sort_key(trigger: AtTime | OnConnection | AfterBytes | OnMessage) -> tuple[int, float]:
    """Orders triggers by type, then by when they fire within that type."""
    rank = TRIGGER_TYPES.index(trigger.type)
    if isinstance(trigger, AtTime):
        return rank, trigger.offset_s
    if isinstance(trigger, AfterBytes):
        return rank, float(trigger.n_bytes)
    return rank, float(trigger.n)
