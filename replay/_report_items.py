"""What the report's timeline draws: fault bars and point markers, and their text."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._fmt import atom

_NOT_PARAMS = frozenset({"phase", "fault_id", "target", "link", "service", "stream", "proxy"})


@dataclass(frozen=True)
class FaultBar:
    """One applied fault: ``end_ns`` None means never healed, ``start_ns`` None: apply missing."""

    target: str
    kind: str
    fault_id: str
    start_ns: int | None
    end_ns: int | None
    params: str


@dataclass(frozen=True)
class Marker:
    """A point on a lane: ``style`` picks its shape and colour, ``detail`` is its tooltip."""

    lane: str
    time_ns: int
    label: str
    style: str
    detail: str
    fault_id: str = ""


def params_text(value: object) -> str:
    """A nemesis or service value as "k=v k=v", without phase, fault id and target."""
    if not isinstance(value, Mapping):
        return "" if value is None else atom(value)
    return " ".join(f"{atom(k)}={atom(v)}" for k, v in value.items() if k not in _NOT_PARAMS)
